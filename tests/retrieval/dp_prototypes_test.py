"""Class prototypes released through the central DP aggregator (`dp_prototypes`)."""

import math

from absl.testing import absltest
import numpy as np

from fedasr_tff import runtime
from fedasr_tff.program import dp_config
from fedasr_tff.retrieval import dp_prototypes


def _release(features, labels, clients, *, noise_multiplier, clip=2.0, noise_seed=5):
  dp = dp_config.DPConfig(clipping='global', clip=clip, noise_multiplier=noise_multiplier,
                          noise_seed=noise_seed)
  release = dp_prototypes.build_prototype_release(
      features.shape[1], 3, dp.aggregator(noise_multiplier, len(clients), None,
                                          diagnostics=False))
  prototypes, _, _ = release(dp_prototypes.client_datasets(features, labels, clients))
  return np.asarray(prototypes)


class ClientSumsTest(absltest.TestCase):

  def test_each_example_adds_a_unit_vector_to_its_class_row(self):
    features = np.array([[3.0, 4.0], [0.0, 2.0], [np.nan, 1.0], [0.0, 0.0]], np.float32)
    sums = dp_prototypes.client_prototype_sums(features, np.array([0, 0, 2, 2]), 3).numpy()
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(sums, [[0.6 * r, 1.8 * r, 2 * r], [0, 0, 0], [0, 0, 2 * r]],
                               atol=1e-6)
    # Non-finite and zero features count but add no direction; each row's norm is the count's.
    self.assertTrue(np.isfinite(sums).all())


class ReleaseTest(absltest.TestCase):

  def test_a_client_is_clipped_to_the_prototype_clip_whatever_its_size(self):
    rng = np.random.default_rng(0)
    features = rng.normal(size=[101, 4]).astype(np.float32) * 1e6
    labels = np.zeros(101, np.int32)
    # Client 0: 100 examples of class 0 (||P_0|| ≈ 100), client 1: one example.
    clients = [np.arange(100), np.array([100])]
    prototypes = _release(features, labels, clients, noise_multiplier=0.0, clip=2.0)
    # The mean over 2 clients of a client clipped to 2 and one of norm 1: at most 1.5.
    self.assertLessEqual(np.linalg.norm(prototypes), 1.5 + 1e-5)
    self.assertGreater(np.linalg.norm(prototypes), 0.5)

  def test_the_noise_is_seeded_apart_from_the_rounds(self):
    features = np.zeros([2, 4], np.float32)
    labels = np.zeros(2, np.int32)
    clients = [np.array([0]), np.array([1])]

    def noise(seed):
      return _release(features, labels, clients, noise_multiplier=1.0, noise_seed=seed)

    np.testing.assert_array_equal(noise(5), noise(5))   # Replayed, the same release.
    secret = dp_prototypes.release_secret(5)
    self.assertEqual(secret, dp_prototypes.release_secret(5))
    self.assertNotEqual(secret, 5)
    # The rounds' aggregator starts from the run's seed: the release must not share it.
    self.assertGreater(np.abs(noise(5) - noise(secret % 2**63)).max(), 0.1)
    # Noise of std z·C / S = 1 per coordinate of the mean over S = 2 clients, clip 2.
    self.assertAlmostEqual(float(np.std(noise(secret % 2**63))), 1.0, delta=0.3)


class LinearHeadTest(absltest.TestCase):

  def test_columns_are_the_scaled_directions_of_the_class_sums(self):
    prototypes = np.array([[3.0, 4.0, 9.0], [0.0, 0.0, 1.0]])
    kernel, bias = dp_prototypes.linear_head_weights(prototypes, scale=2.0)
    np.testing.assert_allclose(kernel, [[1.2, 0.0], [1.6, 0.0]], atol=1e-6)
    np.testing.assert_array_equal(bias, [0.0, 0.0])
    with self.assertRaisesRegex(ValueError, 'scale'):
      dp_prototypes.linear_head_weights(prototypes, scale=0.0)


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
