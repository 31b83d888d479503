"""Readers for the published corpus layouts and a plain manifest.

LibriSpeech and Common Voice, the corpora of Pelikan et al., "Enabling Differentially Private
Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 4. Readers list utterances (metadata only; no
audio is decoded). Problems with single utterances (a missing `.trans.txt`, an audio file
without a transcript line or the reverse, an empty transcript) are skipped and counted in a
`ReadReport` naming each file, or raised at once with `strict=True`. A missing TSV column is
always an error naming the file and column.
"""

import collections
import csv
import dataclasses
import glob
import os
from typing import List
from typing import Optional
from typing import Tuple


@dataclasses.dataclass(frozen=True)
class Utterance:
  """One utterance of a corpus.

  Attributes:
    path: its audio file.
    transcript: its transcript, as the corpus gives it.
    speaker: its speaker (the federated client).
  """
  path: str
  transcript: str
  speaker: str


@dataclasses.dataclass
class ReadReport:
  """What a reader (or the feature pipeline) skipped, and why, file by file.

  Attributes:
    problems: (file or `file:line`, reason) pairs, in the order met.
  """
  problems: List[Tuple[str, str]] = dataclasses.field(default_factory=list)

  def add(self, path: str, reason: str, strict: bool) -> None:
    """Records a problem, or raises it.

    Args:
      path: the file (or `file:line`) concerned.
      reason: what is wrong with it.
      strict: raise instead of recording.

    Raises:
      ValueError: `path: reason`, if `strict`.
    """
    if strict:
      raise ValueError(f'{path}: {reason}')
    self.problems.append((path, reason))

  @property
  def counts(self) -> collections.Counter:
    """The number of problems by reason."""
    return collections.Counter(reason for _, reason in self.problems)

  def __str__(self) -> str:
    if not self.problems:
      return 'no problems'
    return '; '.join(f'{n} x {reason}' for reason, n in self.counts.most_common())


def read_librispeech(root: str, split: str, strict: bool = False,
                     report: Optional[ReadReport] = None) -> List[Utterance]:
  """Utterances of a split in the LibriSpeech layout.

  `ROOT/SPLIT/SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac` with one `SPEAKER-CHAPTER.trans.txt` per
  chapter (lines `SPEAKER-CHAPTER-UTT TRANSCRIPT`).

  Args:
    root: ROOT.
    split: SPLIT, such as `train-clean-100`.
    strict: raise at the first problem instead of skipping it.
    report: where to count skipped utterances; default a new one.

  Returns:
    The utterances, chapter by chapter.

  Raises:
    ValueError: if the split folder does not exist, or at a problem with `strict`.
  """
  report = ReadReport() if report is None else report
  split_dir = os.path.join(root, split)
  if not os.path.isdir(split_dir):
    raise ValueError(f'{split_dir}: no such LibriSpeech split folder.')
  utterances = []
  for chapter_dir in sorted(glob.glob(os.path.join(split_dir, '*', '*'))):
    if not os.path.isdir(chapter_dir):
      continue
    speaker = os.path.basename(os.path.dirname(chapter_dir))
    chapter = os.path.basename(chapter_dir)
    audio = {os.path.splitext(os.path.basename(p))[0]: p
             for p in glob.glob(os.path.join(chapter_dir, '*.flac'))}
    transcript_path = os.path.join(chapter_dir, f'{speaker}-{chapter}.trans.txt')
    if not os.path.isfile(transcript_path):
      for path in sorted(audio.values()):
        report.add(path, 'missing .trans.txt', strict)
      continue
    with open(transcript_path, encoding='utf-8') as f:
      for line_number, line in enumerate(f, start=1):
        utterance_id, _, text = line.strip().partition(' ')
        if not utterance_id:
          continue
        where = f'{transcript_path}:{line_number}'
        if not text.strip():
          report.add(where, 'empty transcript', strict)
        elif utterance_id not in audio:
          report.add(where, 'transcript without audio file', strict)
        else:
          utterances.append(Utterance(audio.pop(utterance_id), text.strip(), speaker))
    for path in sorted(audio.values()):
      report.add(path, 'audio file without transcript', strict)
  return utterances


def _read_tsv(path: str, required: Tuple[str, ...]):
  try:
    with open(path, newline='', encoding='utf-8') as f:
      reader = csv.DictReader(f, delimiter='\t', quoting=csv.QUOTE_NONE)
      columns = reader.fieldnames or []
      missing = [c for c in required if c not in columns]
      if missing:
        raise ValueError(f'{path}: missing column(s) {", ".join(missing)} '
                         f'(found: {", ".join(columns) or "no header"}).')
      return [(reader.line_num, row) for row in reader]
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise ValueError(f'{path}: cannot read TSV: {e}') from e


def _utterances_from_tsv(tsv: str, audio_dir: str, columns: Tuple[str, str, str], strict: bool,
                         report: ReadReport) -> List[Utterance]:
  """Rows of a TSV with (audio path, transcript, speaker) `columns` -> utterances."""
  path_column, transcript_column, speaker_column = columns
  utterances = []
  for line, row in _read_tsv(tsv, columns):
    where = f'{tsv}:{line}'
    audio = os.path.join(audio_dir, row[path_column] or '')
    transcript = (row[transcript_column] or '').strip()
    if not transcript:
      report.add(where, 'empty transcript', strict)
    elif not row[speaker_column]:
      report.add(where, f'empty {speaker_column}', strict)
    elif not os.path.isfile(audio):
      report.add(audio, 'missing audio file', strict)
    else:
      utterances.append(Utterance(audio, transcript, row[speaker_column]))
  return utterances


def read_common_voice(root: str, split: str, strict: bool = False,
                      report: Optional[ReadReport] = None) -> List[Utterance]:
  """Utterances of a split in the Common Voice layout.

  `ROOT/clips/*.mp3` with `ROOT/{train,dev,test}.tsv` (columns `client_id`, `path`, `sentence`;
  the speaker is `client_id`).

  Args:
    root: ROOT.
    split: the TSV's name without `.tsv`, such as `train`.
    strict: raise at the first problem instead of skipping it.
    report: where to count skipped utterances; default a new one.

  Returns:
    The utterances, in the TSV's order.

  Raises:
    ValueError: if the TSV cannot be read or lacks a column, or at a problem with `strict`.
  """
  return _utterances_from_tsv(os.path.join(root, f'{split}.tsv'), os.path.join(root, 'clips'),
                              ('path', 'sentence', 'client_id'), strict,
                              ReadReport() if report is None else report)


def read_manifest(path: str, strict: bool = False,
                  report: Optional[ReadReport] = None) -> List[Utterance]:
  """Utterances of a TSV manifest.

  A header and columns `path`, `transcript`, `speaker`; paths are relative to the manifest's
  folder unless absolute.

  Args:
    path: the manifest.
    strict: raise at the first problem instead of skipping it.
    report: where to count skipped utterances; default a new one.

  Returns:
    The utterances, in the manifest's order.

  Raises:
    ValueError: if the manifest cannot be read or lacks a column, or at a problem with
      `strict`.
  """
  return _utterances_from_tsv(path, os.path.dirname(os.path.abspath(path)),
                              ('path', 'transcript', 'speaker'), strict,
                              ReadReport() if report is None else report)


@dataclasses.dataclass(frozen=True)
class AudioListEntry:
  """A file to transcribe.

  Attributes:
    path: the audio file.
    where: where it was listed, `FILE:LINE`.
    reference: its reference transcript, if given.
  """
  path: str
  where: str
  reference: Optional[str] = None


def read_audio_list(path: str) -> List[AudioListEntry]:
  """The entries of an audio list (files to transcribe), in order.

  Either a corpus manifest (`read_manifest`'s format, read by the same TSV reader), told by its
  header line naming a `path` column: the `transcript` column, if there is one, is the reference
  and other columns (`speaker`) are ignored. Or a simple list: one audio path per line,
  optionally followed by a tab and its reference transcript, no header. Blank lines are
  skipped, paths relative to the list's folder unless absolute. Either every entry has a
  reference or none has. Audio files are not opened here.

  Args:
    path: the list.

  Returns:
    Its entries.

  Raises:
    ValueError: naming `path:line` for a line with an empty path, an empty reference, more than
      two tab-separated fields without a header, or a reference where earlier lines have none
      (or the reverse); naming `path` if it cannot be read or lists no file.
  """
  try:
    with open(path, encoding='utf-8') as f:
      lines = f.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f'{path}: cannot read the audio list: {e}') from e
  folder = os.path.dirname(os.path.abspath(path))
  header = next((line.split('\t') for line in lines if line.strip()), [])
  if 'path' in [column.strip() for column in header]:
    return _audio_list_from_manifest(path, folder)
  entries = []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    where = f'{path}:{number}'
    fields = line.split('\t')
    if len(fields) > 2:
      raise ValueError(f'{where}: expected "AUDIO_PATH" or "AUDIO_PATH<TAB>REFERENCE", got '
                       f'{len(fields)} tab-separated fields (a manifest starts with a header '
                       'line naming its columns: path, transcript, speaker).')
    audio = fields[0].strip()
    if not audio:
      raise ValueError(f'{where}: empty audio path.')
    reference = fields[1].strip() if len(fields) == 2 else None
    if reference == '':
      raise ValueError(f'{where}: empty reference transcript after the tab.')
    if entries and (reference is None) != (entries[0].reference is None):
      raise ValueError(f'{where}: {"no" if reference is None else "a"} reference transcript, '
                       f'unlike {entries[0].where}; give references on every line or on none.')
    entries.append(AudioListEntry(os.path.join(folder, audio), where, reference))
  if not entries:
    raise ValueError(f'{path}: the audio list names no file.')
  return entries


def _audio_list_from_manifest(path: str, folder: str) -> List[AudioListEntry]:
  """The entries of a manifest (`read_audio_list`): its paths, its transcripts as references."""
  entries = []
  for line, row in _read_tsv(path, ('path',)):
    where = f'{path}:{line}'
    audio = (row['path'] or '').strip()
    if not audio:
      raise ValueError(f'{where}: empty path.')
    reference = None
    if 'transcript' in row:
      reference = (row['transcript'] or '').strip()
      if not reference:
        raise ValueError(f'{where}: empty transcript (the reference).')
    entries.append(AudioListEntry(os.path.join(folder, audio), where, reference))
  if not entries:
    raise ValueError(f'{path}: the manifest names no file.')
  return entries
