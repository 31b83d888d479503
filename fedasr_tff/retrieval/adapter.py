"""The soft-embedding adapter: one trainable square matrix on every token embedding.

e'_k = W_a e_k for each token embedding e_k in R^d, with W_a in R^{d x d} initialised to the
identity, so that at initialisation the model is the frozen language model (Fofonjka, Zehtabi,
Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions: The Case of
Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025: a "square
transformation matrix" between the token embeddings and the first transformer block). The paper
does not mention a bias; this adapter has none, so it has exactly d^2 parameters.
"""

import tensorflow as tf


class EmbeddingAdapter(tf.keras.layers.Layer):
  """e' = W_a e on the last axis of [..., d] token embeddings; W_a (`kernel`) starts at I.

  `kernel[i, j]` is W_a[i, j], i.e. e'_i = sum_j W_a[i, j] e_j. d is taken from the input shape
  when the layer is built.
  """

  def build(self, input_shape):
    dim = input_shape[-1]
    if dim is None:
      raise ValueError('The last axis of the adapter input (d) must be known.')
    self.kernel = self.add_weight(name='kernel', shape=[dim, dim], dtype=self.dtype,
                                  initializer=tf.keras.initializers.Identity(), trainable=True)
    super().build(input_shape)

  def call(self, token_embeddings):
    return tf.einsum('...j,ij->...i', token_embeddings, self.kernel)
