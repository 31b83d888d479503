"""Top-K retrieval, top-K accuracy and the MIPS prototype baseline."""

from absl.testing import absltest
import numpy as np

from fedasr_tff import retrieval


class TopKTest(absltest.TestCase):

  def test_distinct_non_increasing_and_first_is_argmax(self):
    # Property: K distinct indices in non-increasing score order, top-1 = argmax (with ties).
    logits = np.random.default_rng(0).normal(size=[20, 9]).astype(np.float32)
    logits[0, [2, 5]] = 10.0  # a tie at the top
    for k in range(1, 10):
      indices = retrieval.top_k(logits, k).numpy()
      self.assertEqual(indices.shape, (20, k))
      for row, index in zip(logits, indices, strict=True):
        self.assertLen(set(index.tolist()), k)
        self.assertTrue(np.all(np.diff(row[index]) <= 0))
        self.assertEqual(index[0], np.argmax(row))
        # The k retrieved scores are the k largest.
        np.testing.assert_array_equal(np.sort(row[index]), np.sort(row)[-k:])

  def test_k_out_of_range_is_named(self):
    logits = np.zeros([2, 4], np.float32)
    for k in (0, 5, 1.0):
      with self.assertRaisesRegex(ValueError, '`k`'):
        retrieval.top_k(logits, k)

  def test_accuracy(self):
    logits = np.array([[3., 2., 1.], [1., 3., 2.], [1., 2., 3.], [3., 1., 2.]], np.float32)
    labels = np.array([0, 2, 1, 1])
    self.assertAlmostEqual(float(retrieval.top_k_accuracy(logits, labels, 1)), 0.25)
    self.assertAlmostEqual(float(retrieval.top_k_accuracy(logits, labels, 2)), 0.75)
    self.assertAlmostEqual(float(retrieval.top_k_accuracy(logits, labels, 3)), 1.0)


class MipsTest(absltest.TestCase):

  def test_prototypes_are_class_means_and_retrieve_separable_queries(self):
    rng = np.random.default_rng(0)
    centres = 5.0 * np.eye(3, 4, dtype=np.float32)
    labels = np.repeat(np.arange(3), 10)
    features = (centres[labels] + 0.3 * rng.normal(size=[30, 4])).astype(np.float32)
    prototypes = retrieval.class_prototypes(features, labels, 3).numpy()
    expected = np.stack([features[labels == c].mean(0) for c in range(3)])
    np.testing.assert_allclose(prototypes, expected, rtol=1e-5, atol=1e-6)
    queries = (centres[[2, 0, 1]] + 0.3 * rng.normal(size=[3, 4])).astype(np.float32)
    scores = retrieval.mips_scores(queries, prototypes).numpy()
    np.testing.assert_allclose(scores, queries @ prototypes.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(retrieval.top_k(scores, 1).numpy()[:, 0], [2, 0, 1])

  def test_class_without_examples_is_an_error(self):
    features = np.ones([3, 2], np.float32)
    with self.assertRaisesRegex(ValueError, r'`labels` has no example of classes \[1, 3\]'):
      retrieval.class_prototypes(features, [0, 2, 2], 4)

  def test_label_out_of_range_or_count_mismatch_is_an_error(self):
    features = np.ones([3, 2], np.float32)
    with self.assertRaisesRegex(ValueError, '`labels` must lie'):
      retrieval.class_prototypes(features, [0, 1, 3], 3)
    with self.assertRaisesRegex(ValueError, '`labels` must hold one label'):
      retrieval.class_prototypes(features, [0, 1], 2)
    with self.assertRaisesRegex(ValueError, '`num_classes`'):
      retrieval.class_prototypes(features, [0, 0, 0], 0)


if __name__ == '__main__':
  absltest.main()
