"""Corpus-level word and character error rates, with TensorFlow's `tf.edit_distance`.

    WER = Σ_u edits(ref_u, hyp_u) / Σ_u |ref_u|          over words
    CER = the same over characters, spaces between words included

where edits is the Levenshtein distance (substitutions + deletions + insertions). Texts are
compared as given: normalise them first (lower case, punctuation) with the data pipeline's text
normaliser.
"""

from typing import Sequence

import tensorflow as tf


def _error_rate(references: Sequence[str], hypotheses: Sequence[str], split) -> float:
  references, hypotheses = list(references), list(hypotheses)
  if len(references) != len(hypotheses):
    raise ValueError(f'`references` and `hypotheses` must have the same length, got '
                     f'{len(references)} and {len(hypotheses)}.')
  if not references:
    raise ValueError('`references` is empty.')
  ref_tokens = split(tf.constant(references))
  hyp_tokens = split(tf.constant(hypotheses))
  total = int(tf.reduce_sum(ref_tokens.row_lengths()))
  if total == 0:
    raise ValueError('`references` contain no tokens to score against.')
  edits = tf.edit_distance(hyp_tokens.to_sparse(), ref_tokens.to_sparse(), normalize=False)
  return float(tf.reduce_sum(edits)) / total


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
  """Total word edits over total reference words (whitespace-separated words)."""
  return _error_rate(references, hypotheses, tf.strings.split)


def character_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
  """Total character edits over total reference characters, spaces included.

  Runs of whitespace count as one space and leading/trailing whitespace is dropped, so only the
  spaces between words are scored.
  """

  def characters(texts):
    joined = tf.strings.reduce_join(tf.strings.split(texts), axis=-1, separator=' ')
    return tf.strings.unicode_split(joined, 'UTF-8')

  return _error_rate(references, hypotheses, characters)
