"""Transcripts of CTC logits: greedy or beam-search candidates (`decode`), and restriction to a
word list (`WordList.restrict`).
"""

import collections
import dataclasses
from typing import List
from typing import Optional
from typing import Sequence

import numpy as np
import tensorflow as tf

from fedasr_tff import reading
from fedasr_tff.speech.data import text as text_lib
from fedasr_tff.speech.models import ctc

DECODERS = ('greedy', 'beam')


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One decoded transcript and its log-probability (`decode`).

  Attributes:
    text: the transcript.
    log_probability: its log-probability.
  """
  text: str
  log_probability: float


def check_decoder(decoder: str, beam_width: int = 16, top_paths: int = 1) -> None:
  """Checks `decode`'s decoding arguments, before any audio is read.

  Args:
    decoder: one of `DECODERS`.
    beam_width: prefixes kept per frame by beam search.
    top_paths: candidates per utterance.

  Raises:
    ValueError: naming the argument, for an unknown decoder, `top_paths` != 1 with greedy
      decoding, or a beam width or `top_paths` out of range.
  """
  if decoder not in DECODERS:
    raise ValueError(f'`decoder` must be one of {DECODERS}, got {decoder!r}.')
  if decoder == 'greedy' and top_paths != 1:
    raise ValueError(f'`top_paths` must be 1 with `decoder`=greedy, got {top_paths!r}.')
  ctc.check_beam_arguments(beam_width, top_paths)


def decode(logits: tf.Tensor, logit_lengths: tf.Tensor, tokens: Sequence[str],
           decoder: str = 'greedy', beam_width: int = 16,
           top_paths: int = 1) -> List[List[Candidate]]:
  """The candidate transcripts of every utterance of a batch, best first.

  * `greedy`: one candidate, the best path (`models.greedy_decode`); its score is the best
    path's log-probability Σ_t max_k log softmax(logits_t)_k, not that of its label sequence (a
    lower bound of it).
  * `beam`: the `top_paths` label sequences of TF's prefix beam search with `beam_width`
    prefixes (`models.beam_search_decode`), with log p(y | logits) as the beam summed it.

  Args:
    logits: [B, T, V + 1] unnormalised scores, the CTC blank at id 0.
    logit_lengths: [B] valid frames.
    tokens: the V tokens of ids 1..V (`data.Vocabulary.tokens`).
    decoder: one of `DECODERS`.
    beam_width: prefixes kept per frame by beam search.
    top_paths: candidates per utterance from beam search (1 for greedy decoding).

  Returns:
    For every utterance, its `Candidate`s (those the beam found, with a finite score).

  Raises:
    ValueError: for an unknown decoder, `top_paths` != 1 with greedy decoding, or a beam width
      or `top_paths` out of range.
  """
  check_decoder(decoder, beam_width, top_paths)
  log_probs = tf.nn.log_softmax(tf.convert_to_tensor(logits, tf.float32), axis=-1)
  if decoder == 'greedy':
    # Ids from the logits themselves, so they equal `models.greedy_decode`'s bit for bit.
    _, scores = ctc.greedy_decode_with_scores(log_probs, logit_lengths)
    paths, scores = [ctc.greedy_decode(logits, logit_lengths)], scores[:, tf.newaxis]
  else:
    paths, scores = ctc.beam_search_decode(log_probs, logit_lengths, beam_width, top_paths)
  texts = np.stack([ctc.ids_to_texts(p, tokens).numpy() for p in paths], axis=1)
  scores = scores.numpy()
  return [[Candidate(t.decode('utf-8'), float(s))
           for t, s in zip(texts[b], scores[b], strict=True) if np.isfinite(s)]
          for b in range(texts.shape[0])]


class WordList:
  """The words transcripts are restricted to (`restrict`)."""

  def __init__(self, words: Sequence[str]):
    """Initializes the list.

    Args:
      words: normalised words (no spaces), in order of preference for ties; repeats are merged.

    Raises:
      ValueError: for an empty list or an entry that is not one word.
    """
    self.words = tuple(dict.fromkeys(words))
    if not self.words:
      raise ValueError('The word list is empty.')
    for word in self.words:
      if not word or text_lib.WORD_BOUNDARY in word:
        raise ValueError(f'Word list entries must be single words, got {word!r}.')
    self._set = frozenset(self.words)
    self._listed = tf.strings.unicode_split(tf.constant(self.words), 'UTF-8').to_sparse()
    self._nearest = {}

  @classmethod
  def from_file(cls, path: str, vocabulary: text_lib.Vocabulary,
                report: Optional[reading.ReadReport] = None) -> 'WordList':
    """Reads a word list: one word per line, normalised as transcripts are.

    Args:
      path: the file (UTF-8); blank lines are skipped, and a word that repeats an earlier one
        after normalisation is merged into it, both counted in `report`.
      vocabulary: the model's vocabulary, which every word must fit.
      report: where the file's lines are counted; default a new one.

    Returns:
      The `WordList`.

    Raises:
      ValueError: naming `path:line` for a line that is not one word of `vocabulary`'s
        characters after normalisation, or `path` if it cannot be read or lists no word.
    """
    report = reading.ReadReport() if report is None else report
    account = report.account(path)
    try:
      lines = reading.split_lines(reading.read_text(path))
    except ValueError as e:
      raise ValueError(f'{e} (the word list)') from e
    account.lines += len(lines)
    words = {}
    for number, line in enumerate(lines, start=1):
      if not line.strip():
        account.blank += 1
        continue
      account.records += 1
      account.record_lines += 1
      word = text_lib.normalize_transcript(line, vocabulary.language)
      if not word or text_lib.WORD_BOUNDARY in word:
        raise ValueError(f'{path}:{number}: expected one word, got {line.strip()!r} (normalised '
                         f'{word!r}).')
      _, unknown = vocabulary.encode(word)
      if unknown:
        raise ValueError(f'{path}:{number}: {line.strip()!r} has characters outside the '
                         f'{vocabulary.language!r} vocabulary: {"".join(sorted(unknown))!r}.')
      if word in words:
        report.skip(path, number, 'repeats an earlier word (merged)', strict=False,
                    where=f'{path}:{number} (as line {words[word]})')
        continue
      words[word] = number
      report.keep(path)
    account.check(path)
    if not words:
      raise ValueError(f'{path}: the word list has no words.')
    return cls(list(words))

  @classmethod
  def from_transcripts(cls, transcripts: Sequence[str],
                       vocabulary: text_lib.Vocabulary) -> 'WordList':
    """The words of some transcripts (such as the seed speakers', the server's own data), the
    most frequent first (`restrict` prefers earlier words on ties).

    Args:
      transcripts: transcripts, normalised here as training normalises them.
      vocabulary: the model's vocabulary; a word with characters outside it is left out (the
        model cannot spell it).

    Returns:
      The `WordList`.

    Raises:
      ValueError: if the transcripts have no word the vocabulary can spell.
    """
    counts = collections.Counter()
    for transcript in transcripts:
      counts.update(text_lib.normalize_transcript(transcript, vocabulary.language).split())
    # Counter.most_common keeps first-seen order among equal counts.
    words = [word for word, _ in counts.most_common() if not vocabulary.encode(word)[1]]
    if not words:
      raise ValueError('The transcripts have no word the vocabulary can spell.')
    return cls(words)

  def __contains__(self, word: str) -> bool:
    return word in self._set

  def nearest(self, word: str) -> str:
    """The listed word nearest to a word.

    Args:
      word: a word.

    Returns:
      The listed word at the smallest character edit distance (Levenshtein, `tf.edit_distance`)
      from `word`; the first listed on ties.
    """
    if word not in self._nearest:
      hypothesis = tf.strings.unicode_split(tf.fill([len(self.words)], word), 'UTF-8')
      distances = tf.edit_distance(hypothesis.to_sparse(), self._listed, normalize=False)
      self._nearest[word] = self.words[int(np.argmin(distances.numpy()))]
    return self._nearest[word]

  def restrict(self, candidates: Sequence[str]) -> str:
    """Restricts a decoder's candidates to the list.

    TF's CTC beam search has no lexicon constraint, so the list is applied to the decoder's
    output, in two steps:

    1. the first candidate (best first) whose words are all in the list is the transcript;
    2. if no candidate is, the best candidate with every word not in the list replaced by the
       listed word nearest to it (`nearest`).

    Limits: step 1 can only choose among the candidates the beam kept, so it helps with beam
    search and `top_paths` > 1 (greedy decoding gives one candidate, so only step 2 applies).
    Step 2 looks at spelling only, not at the audio or at neighbouring words, and keeps the
    decoder's word boundaries: a word split in two or two words run together are mapped piece
    by piece. It is not a lexicon-constrained search (such as a WFST decoder), which could find
    a listed word sequence the beam pruned. An empty candidate (no words) counts as in the list.

    Args:
      candidates: the candidate texts, best first.

    Returns:
      The transcript.

    Raises:
      ValueError: for no candidates.
    """
    if not candidates:
      raise ValueError('`candidates` is empty.')
    for candidate in candidates:
      if all(word in self for word in candidate.split()):
        return candidate
    return ' '.join(w if w in self else self.nearest(w) for w in candidates[0].split())
