"""The embedding adapter: identity at start, e' = W_a e, d^2 parameters, no bias."""

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff import retrieval


class EmbeddingAdapterTest(absltest.TestCase):

  def test_identity_at_initialisation_is_bit_exact(self):
    embeddings = np.random.default_rng(0).normal(size=[2, 5, 8]).astype(np.float32)
    adapter = retrieval.EmbeddingAdapter()
    np.testing.assert_array_equal(adapter(embeddings).numpy(), embeddings)
    np.testing.assert_array_equal(adapter.kernel.numpy(), np.eye(8, dtype=np.float32))

  def test_applies_the_matrix_to_every_token(self):
    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=[2, 3, 4]).astype(np.float32)
    matrix = rng.normal(size=[4, 4]).astype(np.float32)
    adapter = retrieval.EmbeddingAdapter()
    adapter.build([None, None, 4])
    adapter.kernel.assign(matrix)
    expected = np.einsum('ij,btj->bti', matrix, embeddings)  # e'_k = W_a e_k
    np.testing.assert_allclose(adapter(embeddings).numpy(), expected, rtol=1e-5, atol=1e-6)

  def test_only_parameters_are_the_square_matrix(self):
    adapter = retrieval.EmbeddingAdapter()
    adapter.build([None, None, 6])
    self.assertEqual([v.shape for v in adapter.trainable_variables], [tf.TensorShape([6, 6])])

  def test_unknown_dimension_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'last axis'):
      retrieval.EmbeddingAdapter().build([None, None, None])


if __name__ == '__main__':
  absltest.main()
