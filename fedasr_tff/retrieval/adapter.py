"""The soft-embedding adapter: one trainable square matrix on every token embedding.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025, Sec. 3.1: a
"square transformation matrix" between the token embeddings and the first transformer block.
"""

import tensorflow as tf


class EmbeddingAdapter(tf.keras.layers.Layer):
  """e' = W_a e on the last axis of [..., d] token embeddings; W_a (`kernel`) starts at I.

  `kernel[i, j]` is W_a[i, j], i.e. e'_i = sum_j W_a[i, j] e_j. W_a starts at the identity, so
  that at initialisation the model is the frozen language model. The paper does not mention a
  bias; this adapter has none, so it has exactly d^2 parameters.
  """

  def build(self, input_shape):
    """Creates W_a = I.

    Args:
      input_shape: the input's shape; its last axis d (which must be known) sizes W_a, d x d.

    Raises:
      ValueError: if d is unknown.
    """
    dim = input_shape[-1]
    if dim is None:
      raise ValueError('The last axis of the adapter input (d) must be known.')
    self.kernel = self.add_weight(name='kernel', shape=[dim, dim], dtype=self.dtype,
                                  initializer=tf.keras.initializers.Identity(), trainable=True)
    super().build(input_shape)

  def call(self, token_embeddings):
    """Applies the adapter.

    Args:
      token_embeddings: [..., d].

    Returns:
      W_a e for every token embedding e, [..., d].
    """
    # One [N, d] x [d, d] product over all N tokens. Not einsum('...j,ij->...i'): TF's gradient
    # of that einsum forms the [..., d, d] outer product of every token before summing it
    # (151 MB for a batch of 4 texts of 64 tokens at d = 384), a large share of an adapter-mode
    # step (docs/retrieval.md).
    return tf.tensordot(token_embeddings, self.kernel, axes=[[-1], [1]])
