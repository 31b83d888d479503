"""The noise seed left unset for a cached process and filled per process (`noise_seeds`)."""

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff.aggregators import noise_seeds

_SHAPES = [(50,), (10000,), (20, 5), (300,)]


def _noised_sum(query, delta):
  """One record through `query` and its noised sum, from the query's initial state."""
  state = query.initial_global_state()
  params = query.derive_sample_params(state)
  record = query.preprocess_record(params, [tf.constant(x) for x in delta])
  return query.get_noised_result(record, state)


class UnsetNoiseSeedTest(absltest.TestCase):
  """A query built inside `unset_noise_seeds` holds no seed and refuses to start a round until
  one is filled in (`fedasr_tff.runtime.process_cache`)."""

  def _noisy_query(self, **kwargs):
    sizes = [int(np.prod(s)) for s in _SHAPES]
    return aggregators.PerLayerClipGaussianSumQuery(
        [0] * len(_SHAPES), aggregators.group_clips(1.0, sizes, 'global'), 1.0, 1, **kwargs)

  def test_inside_the_context_the_default_seed_is_unset_and_refused(self):
    with noise_seeds.unset_noise_seeds():
      unset = self._noisy_query()
      given = self._noisy_query(noise_seed=5)
    delta = [np.ones(shape, np.float32) for shape in _SHAPES]
    np.testing.assert_array_equal(unset.initial_global_state().noise_seed, [0, -1])
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'noise seed was never set'):
      _noised_sum(unset, delta)
    # A seed the caller gives is kept; outside the context the default draws OS entropy.
    np.testing.assert_array_equal(given.initial_global_state().noise_seed, [0, 5])
    _noised_sum(given, delta)
    self.assertGreaterEqual(self._noisy_query().initial_global_state().noise_seed[1], 0)

  def test_bounded_weight_query_refuses_an_unset_seed_too(self):
    with noise_seeds.unset_noise_seeds():
      query = aggregators.BoundedWeightDPFactory.gaussian_fixed(
          1.0, 3, 1.0, 0.1).build_query(tff.types.to_type(
              [tff.TensorType(np.float32, s) for s in _SHAPES]))
    state = query.initial_global_state()
    self.assertTrue(bool(noise_seeds.is_unset_seed_state(state.noise_seed)))
    # Only the weight noise's seed unset: the query checks its own too.
    state = state._replace(value_state=noise_seeds.fill_unset_noise_seeds(state.value_state))
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'noise seed was never set'):
      query.derive_sample_params(state)
    query.derive_sample_params(noise_seeds.fill_unset_noise_seeds(state))

  def test_fill_replaces_every_unset_seed_with_its_own_and_nothing_else(self):
    unset = tf.constant([0, noise_seeds.UNSET_NOISE_SEED], tf.int64)
    state = {'a': unset, 'b': (unset, tf.constant([0, 7], tf.int64)),
             'c': tf.constant([0, -1], tf.int32), 'd': tf.constant([[0, -1]], tf.int64)}
    filled = noise_seeds.fill_unset_noise_seeds(state)
    np.testing.assert_array_equal(filled['b'][1], [0, 7])
    np.testing.assert_array_equal(filled['c'], [0, -1])  # not int64 [2]: not a seed
    np.testing.assert_array_equal(filled['d'], [[0, -1]])
    seeds = [int(filled['a'][1]), int(filled['b'][0][1])]
    self.assertEqual([int(filled['a'][0]), int(filled['b'][0][0])], [0, 0])
    self.assertNotEqual(seeds[0], seeds[1])
    self.assertTrue(all(0 <= seed < 2**63 for seed in seeds))
    # Filled, the query noises.
    with noise_seeds.unset_noise_seeds():
      query = self._noisy_query()
    state = noise_seeds.fill_unset_noise_seeds(query.initial_global_state())
    params = query.derive_sample_params(state)
    delta = [np.ones(shape, np.float32) for shape in _SHAPES]
    record = query.preprocess_record(params, [tf.constant(x) for x in delta])
    noised, _, _ = query.get_noised_result(record, state)
    self.assertGreater(float(tf.linalg.global_norm(noised)), 0.0)


if __name__ == '__main__':
  absltest.main()
