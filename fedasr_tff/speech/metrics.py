"""Corpus-level word and character error rates, with TensorFlow's `tf.edit_distance`.

    WER = Σ_u edits(ref_u, hyp_u) / Σ_u |ref_u|          over words
    CER = the same over characters, spaces between words included

where edits is the Levenshtein distance (substitutions + deletions + insertions). Texts are
compared as given: normalise them first (`fedasr_tff.speech.data.normalize_transcript`).
"""

from typing import Sequence
from typing import Tuple

import tensorflow as tf

UNITS = ('word', 'char')


def _tokens(texts: tf.Tensor, unit: str) -> tf.RaggedTensor:
  words = tf.strings.split(texts)
  if unit == 'word':
    return words
  # Runs of whitespace count as one space; only the spaces between words are scored.
  return tf.strings.unicode_split(tf.strings.reduce_join(words, axis=-1, separator=' '), 'UTF-8')


def error_counts(references: tf.Tensor, hypotheses: tf.Tensor,
                 unit: str) -> Tuple[tf.Tensor, tf.Tensor]:
  """The two sums of an error rate, for metrics accumulated inside TF (the TFF model).

  Args:
    references: [B] reference strings.
    hypotheses: [B] hypothesis strings.
    unit: "word" or "char" (`UNITS`).

  Returns:
    (total edits, total reference tokens), float32 scalars.

  Raises:
    ValueError: for an unknown unit.
  """
  if unit not in UNITS:
    raise ValueError(f'`unit` must be one of {UNITS}, got {unit!r}.')
  ref_tokens = _tokens(references, unit)
  hyp_tokens = _tokens(hypotheses, unit)
  edits = tf.edit_distance(hyp_tokens.to_sparse(), ref_tokens.to_sparse(), normalize=False)
  return (tf.reduce_sum(edits),
          tf.cast(tf.reduce_sum(ref_tokens.row_lengths()), tf.float32))


def _error_rate(references: Sequence[str], hypotheses: Sequence[str], unit: str) -> float:
  references, hypotheses = list(references), list(hypotheses)
  if len(references) != len(hypotheses):
    raise ValueError(f'`references` and `hypotheses` must have the same length, got '
                     f'{len(references)} and {len(hypotheses)}.')
  if not references:
    raise ValueError('`references` is empty.')
  edits, total = error_counts(tf.constant(references), tf.constant(hypotheses), unit)
  if float(total) == 0:
    raise ValueError('`references` contain no tokens to score against.')
  return float(edits) / float(total)


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
  """Total word edits over total reference words (whitespace-separated words).

  Args:
    references: the reference texts.
    hypotheses: the hypotheses, one per reference.

  Returns:
    The WER.

  Raises:
    ValueError: for lists of different lengths, no references or no reference word.
  """
  return _error_rate(references, hypotheses, 'word')


def character_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
  """Total character edits over total reference characters, spaces between words included.

  Args:
    references: the reference texts.
    hypotheses: the hypotheses, one per reference.

  Returns:
    The CER.

  Raises:
    ValueError: for lists of different lengths, no references or no reference character.
  """
  return _error_rate(references, hypotheses, 'char')
