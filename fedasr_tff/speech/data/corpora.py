"""Readers for the published corpus layouts and a plain manifest.

LibriSpeech and Common Voice, the corpora of Pelikan et al., "Enabling Differentially Private
Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 4. Readers list utterances (metadata only; no
audio is decoded) and count what became of every line they read in a `ReadReport`
(`fedasr_tff.reading`). Problems with single utterances (a missing `.trans.txt`, an audio file
without a transcript line or the reverse, an empty transcript) are skipped and counted naming
each file, or raised at once with `strict=True`. TSVs are read without quoting (a transcript may
start with `"`); a missing column, a row with another number of fields than the header and a
file that is not UTF-8 are always errors naming the file (and line).
"""

import dataclasses
import glob
import os
from typing import List
from typing import Optional
from typing import Tuple

from fedasr_tff import reading

# Where readers count what they read (the feature pipeline counts unusable audio in it too).
ReadReport = reading.ReadReport


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


def read_librispeech(root: str, split: str, strict: bool = False,
                     report: Optional[ReadReport] = None) -> List[Utterance]:
  """Utterances of a split in the LibriSpeech layout.

  `ROOT/SPLIT/SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac` with one `SPEAKER-CHAPTER.trans.txt` per
  chapter (lines `SPEAKER-CHAPTER-UTT TRANSCRIPT`). The lines of all the split's transcript files
  are counted in one account, `report.files[ROOT/SPLIT]`; each problem names its file.

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
  # One account for the split's transcript files: named by file, they would name the speakers,
  # the clients (`clients.json` is kept owner-only for that reason).
  account = report.account(split_dir)
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
    lines = reading.split_lines(reading.read_text(transcript_path))
    account.lines += len(lines)
    for line_number, line in enumerate(lines, start=1):
      utterance_id, _, text = line.strip().partition(' ')
      if not utterance_id:
        account.blank += 1
        continue
      account.records += 1
      account.record_lines += 1
      where = f'{transcript_path}:{line_number}'
      if not text.strip():
        report.skip(split_dir, line_number, 'empty transcript', strict, where=where)
      elif utterance_id not in audio:
        report.skip(split_dir, line_number, 'transcript without audio file', strict, where=where)
      else:
        report.keep(split_dir)
        utterances.append(Utterance(audio.pop(utterance_id), text.strip(), speaker))
    for path in sorted(audio.values()):
      report.add(path, 'audio file without transcript', strict)
  account.check(split_dir)
  return utterances


def _utterances_from_tsv(tsv: str, audio_dir: str, columns: Tuple[str, str, str], strict: bool,
                         report: ReadReport) -> List[Utterance]:
  """Rows of a TSV with (audio path, transcript, speaker) `columns` -> utterances."""
  path_column, transcript_column, speaker_column = columns
  table = reading.read_table(tsv, report, required=columns)
  utterances = []
  for line, row in table.rows:
    audio = os.path.join(audio_dir, table.field(row, path_column))
    transcript = table.field(row, transcript_column).strip()
    speaker = table.field(row, speaker_column)  # as written: it names the client
    if not transcript:
      report.skip(tsv, line, 'empty transcript', strict)
    elif not speaker:
      report.skip(tsv, line, f'empty {speaker_column}', strict)
    elif not os.path.isfile(audio):
      report.skip(tsv, line, 'missing audio file', strict, where=audio)
    else:
      report.keep(tsv)
      utterances.append(Utterance(audio, transcript, speaker))
  report.account(tsv).check(tsv)
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


def read_audio_list(path: str, report: Optional[ReadReport] = None) -> List[AudioListEntry]:
  """The entries of an audio list (files to transcribe), in order.

  Either a corpus manifest (`read_manifest`'s format, read by the same TSV reader), told by its
  header line naming a `path` column: the `transcript` column, if there is one, is the reference
  and other columns (`speaker`) are ignored. Or a simple list: one audio path per line,
  optionally followed by a tab and its reference transcript, no header. Blank lines are
  skipped (and counted), paths relative to the list's folder unless absolute. Either every entry
  has a reference or none has. Audio files are not opened here.

  Args:
    path: the list.
    report: where the list's lines are counted; default a new one.

  Returns:
    Its entries.

  Raises:
    ValueError: naming `path:line` for a line with an empty path, an empty reference, more than
      two tab-separated fields without a header (another number than the header's with one),
      or a reference where earlier lines have none (or the reverse); naming `path` if it cannot
      be read, is not UTF-8 or lists no file.
  """
  report = ReadReport() if report is None else report
  lines = reading.split_lines(reading.read_text(path))
  folder = os.path.dirname(os.path.abspath(path))
  header = next((line.split('\t') for line in lines if line.strip()), [])
  if 'path' in [column.strip() for column in header]:
    return _audio_list_from_manifest(path, folder, report)
  account = report.account(path)
  account.lines += len(lines)
  entries = []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      account.blank += 1
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
    account.records += 1
    account.record_lines += 1
    report.keep(path)
    entries.append(AudioListEntry(os.path.join(folder, audio), where, reference))
  if not entries:
    raise ValueError(f'{path}: the audio list names no file.')
  return entries


def _audio_list_from_manifest(path: str, folder: str,
                              report: ReadReport) -> List[AudioListEntry]:
  """The entries of a manifest (`read_audio_list`): its paths, its transcripts as references."""
  table = reading.read_table(path, report, required=('path',))
  entries = []
  for line, row in table.rows:
    where = f'{path}:{line}'
    audio = table.field(row, 'path').strip()
    if not audio:
      raise ValueError(f'{where}: empty path.')
    reference = None
    if 'transcript' in table.columns:
      reference = table.field(row, 'transcript').strip()
      if not reference:
        raise ValueError(f'{where}: empty transcript (the reference).')
    report.keep(path)
    entries.append(AudioListEntry(os.path.join(folder, audio), where, reference))
  if not entries:
    raise ValueError(f'{path}: the manifest names no file.')
  return entries
