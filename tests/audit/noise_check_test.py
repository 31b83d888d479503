"""The direct noise check: correct mechanisms pass, noise too small in one tensor or shared
between tensors is a VIOLATION (neither is caught by an ε lower bound)."""

from absl import logging
from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.audit import noise_check
from fedasr_tff.program import dp_config
from tests.audit import planted_bugs

_Z = 2.0
_COHORT = 100
_SHAPES = planted_bugs.SMALL_LEAF_SHAPES
_RELEASES = 200


def _production_query(cohort_size, noise_seed=11, **dp):
  """The query of the aggregator the runner builds (`DPConfig.aggregator`)."""
  config = dp_config.DPConfig(clip=1.0, noise_multiplier=_Z, noise_seed=noise_seed, delta=1e-6,
                               **dp)
  factory = config.aggregator(_Z, cohort_size, planted_bugs.LEAF_NAMES, diagnostics=False,
                               weighted_leaf=planted_bugs.is_mlp_tensor)
  value_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(shape, tf.float32) for shape in _SHAPES])
  return factory.build_query(value_type)


def _check(query, cohort_size=_COHORT, releases=_RELEASES, **kwargs):
  result = noise_check.audit(query, _SHAPES, planted_bugs.LEAF_NAMES,
                             clients_per_round=cohort_size, releases=releases, **kwargs)
  logging.info('%s %s', result.summary(), dict(result.details))
  return result


class NoiseCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(*planted_bugs.CORRECT_DP_FLAGS)
  def test_correct_mechanism_passes(self, dp):
    result = _check(_production_query(_COHORT, **dp))
    self.assertEqual(result.verdict, 'consistent', result.finding)
    # Every tensor's noise is z C / S, also where its own clip C_h is far below C (the adaptive
    # query adds more, z_v > z, for its clipped counts).
    for estimate in result.details['effective_noise_multiplier'].values():
      self.assertBetween(estimate, 0.95 * _Z, 1.15 * _Z)

  def test_client_side_noise_passes(self):
    query = _production_query(4, clipping='dim', noise_placement='client')
    result = _check(query, cohort_size=4, releases=50, zero_updates=True)
    self.assertEqual(result.verdict, 'consistent', result.finding)

  def test_correct_mechanism_passes_for_every_noise_seed(self):
    # The false-alarm probability is at most 1e-3 a check: 8 fresh noise streams pass.
    for seed in range(8):
      result = _check(_production_query(_COHORT, noise_seed=100 + seed), releases=50)
      self.assertEqual(result.verdict, 'consistent', (seed, result.finding))

  def test_noise_calibrated_to_a_group_clip_is_caught(self):
    # w1/kernel holds 512 of 1,088 parameters: z C_h = 2 sqrt(512 / 1088) C = 1.37 C.
    query = planted_bugs.query(planted_bugs.GroupClipNoise, _Z, _COHORT, leaf_shapes=_SHAPES)
    result = _check(query)
    self.assertEqual(result.verdict, 'VIOLATION')
    self.assertIn('block_00/w1/kernel has effective noise multiplier', result.finding)
    self.assertLess(result.details['effective_noise_multiplier_upper']['block_00/w1/kernel'],
                    1.5)

  def test_noise_from_one_seed_is_caught(self):
    query = planted_bugs.query(planted_bugs.SharedNoiseSeed, _Z, _COHORT, leaf_shapes=_SHAPES)
    result = _check(query)
    self.assertEqual(result.verdict, 'VIOLATION')
    self.assertIn('correlated noise', result.finding)
    # Identical noise: |r| = 1, so |r| sqrt(n) = sqrt(n), far above the threshold.
    self.assertGreater(result.details['correlation_score'],
                       10 * result.details['correlation_threshold'])

  def test_bad_arguments_are_named(self):
    query = _production_query(_COHORT)
    with self.assertRaisesRegex(ValueError, '`releases`'):
      _check(query, releases=0)
    with self.assertRaisesRegex(ValueError, '`significance`'):
      _check(query, significance=1.0)
    with self.assertRaisesRegex(ValueError, '`leaf_names`'):
      noise_check.audit(query, _SHAPES, ['a'], clients_per_round=_COHORT)


if __name__ == '__main__':
  absltest.main()
