"""The direct clipping check: canaries below the clip, concentrated in one leaf, at the total
clip in every group, and non-finite. Correct mechanisms pass; a NaN that skips the clip and a
fast path that skips it for groups within the total clip are a VIOLATION (neither is caught by
an ε lower bound)."""

from absl import logging
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.audit import clipping_check
from fedasr_tff.program import dp_config
from tests.audit import planted_bugs

_Z = 2.0
_COHORT = 100
_SHAPES = planted_bugs.SMALL_LEAF_SHAPES
_ROUNDS = 200


def _production_query(cohort_size, **dp):
  """The query of the aggregator the runner builds (`DPConfig.aggregator`)."""
  config = dp_config.DPConfig(clip=1.0, noise_multiplier=_Z, noise_seed=11, delta=1e-6, **dp)
  factory = config.aggregator(_Z, cohort_size, planted_bugs.LEAF_NAMES, diagnostics=False,
                               weighted_leaf=planted_bugs.is_mlp_tensor)
  value_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(shape, tf.float32) for shape in _SHAPES])
  return factory.build_query(value_type)


def _check(query, cohort_size=_COHORT, **kwargs):
  results = clipping_check.audit(query, _SHAPES, planted_bugs.LEAF_NAMES,
                                 clients_per_round=cohort_size, **kwargs)
  for result in results:
    logging.info('%s %s', result.summary(), dict(result.details))
  return {result.method: result for result in results}


class ClippingCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(*planted_bugs.CORRECT_DP_FLAGS)
  def test_correct_mechanism_passes(self, dp):
    results = _check(_production_query(_COHORT, **dp), rounds=_ROUNDS,
                     normalize=dp.get('normalize', False))
    self.assertEqual(list(results), [f'clipping/{kind}' for kind in clipping_check.CANARIES])
    for result in results.values():
      self.assertEqual(result.verdict, 'consistent', result.finding)
    # A canary below the clip passes unclipped (norm C / 2); the non-finite one is zeroed.
    self.assertAlmostEqual(results['clipping/below_clip'].details['expected_norm'], 0.5,
                           places=5)
    self.assertBetween(results['clipping/non_finite'].details['contribution_along_canary'],
                       -0.5, 0.5)

  def test_client_side_noise_passes(self):
    query = _production_query(4, clipping='dim', noise_placement='client')
    for result in _check(query, cohort_size=4, rounds=100, zero_updates=True).values():
      self.assertEqual(result.verdict, 'consistent', result.finding)

  @parameterized.named_parameters(
      ('non_finite_skips_clip', planted_bugs.NonFiniteSkipsClip, 'clipping/non_finite'),
      ('within_clip_fast_path', planted_bugs.WithinClipFastPath, 'clipping/at_total_clip'))
  def test_planted_bug_is_caught(self, bug, check):
    query = planted_bugs.query(bug, _Z, _COHORT, leaf_shapes=_SHAPES)
    results = _check(query, rounds=_ROUNDS)
    self.assertEqual(results[check].verdict, 'VIOLATION')
    self.assertIn('above the sensitivity C', results[check].finding)
    # The other canaries are handled correctly: the bug is in one structure only.
    self.assertEqual([m for m, r in results.items() if r.verdict == 'VIOLATION'], [check])

  def test_non_finite_canary_moves_the_bug_by_its_finite_norm(self):
    query = planted_bugs.query(planted_bugs.NonFiniteSkipsClip, _Z, _COHORT,
                               leaf_shapes=_SHAPES)
    result = _check(query, rounds=20)['clipping/non_finite']
    # Five leaves of norm 1,000 C pass unclipped: 1,000 sqrt(5) C = 2,236 C.
    self.assertBetween(result.details['contribution_along_canary'], 2200, 2240)

  def test_canary_leaf_norms(self):
    groups, clips = [0, 1, 1, 2], [0.6, 0.48, 0.64]
    np.testing.assert_allclose(clipping_check.canary_leaf_norms('below_clip', groups, clips),
                               [0.3, 0.24 / np.sqrt(2), 0.24 / np.sqrt(2), 0.32])
    np.testing.assert_allclose(clipping_check.canary_leaf_norms('at_total_clip', groups, clips),
                               [1.0, 1 / np.sqrt(2), 1 / np.sqrt(2), 1.0])
    np.testing.assert_allclose(clipping_check.canary_leaf_norms('one_leaf', groups, clips),
                               [0, 1e3, 0, 0])
    with self.assertRaisesRegex(ValueError, '`kind`'):
      clipping_check.canary_leaf_norms('huge', groups, clips)

  def test_bad_arguments_are_named(self):
    query = _production_query(_COHORT)
    with self.assertRaisesRegex(ValueError, '`rounds`'):
      _check(query, rounds=5)
    with self.assertRaisesRegex(ValueError, '`clients_per_round`'):
      _check(query, cohort_size=0)


if __name__ == '__main__':
  absltest.main()
