"""Pooling token states [B, T, d] into one vector per sequence, masking padding (`pool`)."""

import tensorflow as tf

POOLINGS = ('mean', 'last')


def check_pooling(pooling: str) -> None:
  """Checks a pooling's name.

  Args:
    pooling: the name.

  Raises:
    ValueError: unless `pooling` is one of `POOLINGS`.
  """
  if pooling not in POOLINGS:
    raise ValueError(f'`pooling` must be one of {POOLINGS}, got {pooling!r}.')


def pool(hidden_states, mask, pooling: str) -> tf.Tensor:
  """Pools token states into one vector per sequence.

  - `mean`: h = Σ_k m_k x_k / max(Σ_k m_k, 1), the average over non-padding tokens (m_k = 1 for
    a token, 0 for padding), which suits an encoder: Reimers and Gurevych, "Sentence-BERT:
    Sentence Embeddings using Siamese BERT-Networks", EMNLP 2019, arXiv:1908.10084, Sec. 3 (the
    pooling of all-MiniLM-L6-v2). It is invariant to extra padding given a correct mask. A
    sequence with no token pools to zeros.
  - `last`: h = x_j with j = max{k : m_k = 1}, the last non-padding token, which suits a decoder
    whose last (EOS) token has attended to the whole sequence. Taking the largest unmasked index
    serves right and left padding alike. A sequence with no token pools to x_0.

  Args:
    hidden_states: [B, T, d] token states.
    mask: [B, T], 1 for a token, 0 for padding.
    pooling: one of `POOLINGS`.

  Returns:
    [B, d] pooled states.

  Raises:
    ValueError: for an unknown pooling.
  """
  check_pooling(pooling)
  hidden_states = tf.convert_to_tensor(hidden_states)
  mask = tf.cast(mask, hidden_states.dtype)
  if pooling == 'mean':
    total = tf.einsum('btd,bt->bd', hidden_states, mask)
    count = tf.reduce_sum(mask, axis=1, keepdims=True)
    return total / tf.maximum(count, 1.0)
  positions = tf.range(tf.shape(mask)[1])[tf.newaxis, :]
  last = tf.reduce_max(tf.where(mask > 0, positions, -1), axis=1)
  return tf.gather(hidden_states, tf.maximum(last, 0), axis=1, batch_dims=1)
