"""The many-run distinguishing audit of one round of the DP query: correct mechanisms pass,
planted bugs are caught.

Every configuration runs 20,000 rounds (10,000 scored) at z = 2 (a claimed ε of 2.25, PLD, at
δ = 1e-6) with fixed seeds (the noise, the canary and the coins), so a run is reproducible; only
client-side noise comes from TensorFlow's stateful generator.
"""

from absl import logging
from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff.audit import distinguishing
from fedasr_tff.program import dp_config
from tests.audit import planted_bugs

_TRIALS = 20000
_Z = 2.0
_DELTA = 1e-6
_SHAPES = planted_bugs.SMALL_LEAF_SHAPES
# The expected cohort S only divides the sum (the adaptive clips' count noise defaults to 0.05 S).
_COHORT = 100
# Correct mechanisms audited here: global, dim and adaptive dim clipping; the one-run audit
# (one_run_test.py) audits every configuration of planted_bugs.CORRECT_DP_FLAGS (CI's time).
_CORRECT = [case for case in planted_bugs.CORRECT_DP_FLAGS
            if case[0] in ('global', 'dim', 'dim_adaptive')]


def _audit(query, **kwargs):
  result = distinguishing.audit(query, _SHAPES, trials=_TRIALS,
                                canary_norm=1e3, delta=_DELTA, audit_seed=5, **kwargs)
  logging.info('%s %s', result.summary(), dict(result.details))
  return result


def _production_query(cohort_size, **dp):
  """The query of the aggregator the runner builds (`DPConfig.aggregator`)."""
  config = dp_config.DPConfig(clip=1.0, noise_multiplier=_Z, noise_seed=11, delta=_DELTA, **dp)
  factory = config.aggregator(_Z, cohort_size, planted_bugs.LEAF_NAMES, diagnostics=False,
                               weighted_leaf=planted_bugs.is_mlp_tensor)
  value_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(shape, tf.float32) for shape in _SHAPES])
  return factory.build_query(value_type)


class DistinguishingAuditTest(parameterized.TestCase):

  @parameterized.named_parameters(*_CORRECT)
  def test_correct_mechanism_stays_below_its_claim(self, dp):
    result = _audit(_production_query(_COHORT, **dp))
    self.assertLess(result.lower_bound, result.claimed_epsilon)
    # The claim is one round of z without sampling.
    self.assertAlmostEqual(result.claimed['pld'],
                           privacy.compute_epsilon(_Z, 1.0, 1, _DELTA, 'pld'), places=6)
    self.assertEqual(result.details['scored_trials'], _TRIALS // 2)

  def test_client_side_noise_stays_below_its_claim(self):
    query = _production_query(2, clipping='dim', noise_placement='client')
    result = _audit(query, cohort_size=2, zero_updates=True)
    self.assertLess(result.lower_bound, result.claimed_epsilon)

  @parameterized.named_parameters(*[(name, name) for name in planted_bugs.BUGS])
  def test_planted_bug_is_caught(self, bug):
    result = _audit(planted_bugs.query(planted_bugs.BUGS[bug], _Z, _COHORT, leaf_shapes=_SHAPES))
    self.assertGreater(result.lower_bound, result.claimed_epsilon)

  def test_bad_arguments_are_named(self):
    query = _production_query(_COHORT)
    with self.assertRaisesRegex(ValueError, '`trials`'):
      distinguishing.audit(query, _SHAPES, trials=50, canary_norm=1e3)
    with self.assertRaisesRegex(ValueError, '`canary_norm`'):
      distinguishing.audit(query, _SHAPES, trials=200, canary_norm=0.0)


if __name__ == '__main__':
  absltest.main()
