"""The one-run audit through the TFF process: correct mechanisms pass, planted bugs are caught.

Every configuration runs m = 1,000 canaries for T = 2 rounds at z = 2.1 (a claimed ε of 3.13,
PLD, at δ = 1e-6), k = 100 guesses each way, which can show at most ε = 3.98 (the tripled
sensitivity: m = 3,000, k = 150). All seeds are fixed (the noise, the sampling secret, the
canaries), so a run is reproducible up to the summation order in TFF's runtime.
"""

from absl import logging
from absl.testing import absltest
from absl.testing import parameterized
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff import runtime
from fedasr_tff.audit import mechanism
from fedasr_tff.audit import one_run
from fedasr_tff.program import dp_config
from tests.audit import planted_bugs

_CANARIES = 1000
_ROUNDS = 2
_Z = 2.1
_DELTA = 1e-6


def _audit(aggregator, *, canaries=_CANARIES, cohort_size=None, guesses=100, **kwargs):
  result = one_run.audit(aggregator, planted_bugs.LEAF_SHAPES, planted_bugs.LEAF_NAMES,
                         canaries=canaries, rounds=_ROUNDS,
                         cohort_size=cohort_size or canaries, canary_norm=1e3, delta=_DELTA,
                         guesses=guesses, audit_seed=3, sampling_secret=7, **kwargs)
  logging.info('%s %s', result.summary(), dict(result.details))
  return result


def _production_aggregator(cohort_size, **dp):
  """The aggregator the runner builds (`DPConfig.aggregator`) for these DP flags."""
  config = dp_config.DPConfig(clip=1.0, noise_multiplier=_Z, noise_seed=11, delta=_DELTA, **dp)
  return config.aggregator(_Z, cohort_size, planted_bugs.LEAF_NAMES, diagnostics=False,
                           weighted_leaf=planted_bugs.is_mlp_tensor)


class OneRunAuditTest(parameterized.TestCase):
  """The audits run as the audit binary runs them, in process (--engine's default)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_inprocess_execution_context()

  @classmethod
  def tearDownClass(cls):
    runtime.set_local_cpp_execution_context()  # pytest's default for the other modules
    super().tearDownClass()

  def test_the_verdict_and_bound_are_the_workers(self):
    aggregator = _production_aggregator(200, clipping='dim')
    runtime.set_inprocess_execution_context()  # a new context: its worker not yet started
    in_process = _audit(aggregator, canaries=200, guesses=20)
    # Every computation of the audit ran in this process: none needed the worker.
    self.assertFalse(tff.framework.get_context_stack().current.fallback_started)
    runtime.set_local_cpp_execution_context()
    try:
      on_worker = _audit(aggregator, canaries=200, guesses=20)
    finally:
      runtime.set_inprocess_execution_context()
    self.assertEqual(in_process.verdict, on_worker.verdict)
    self.assertEqual(in_process.lower_bound, on_worker.lower_bound)
    self.assertEqual(in_process.details, on_worker.details)

  @parameterized.named_parameters(*planted_bugs.CORRECT_DP_FLAGS)
  def test_correct_mechanism_stays_below_its_claim(self, dp):
    result = _audit(_production_aggregator(_CANARIES, **dp), normalize=dp.get('normalize', False))
    self.assertLess(result.lower_bound, result.claimed_epsilon)
    self.assertEqual(result.verdict, 'consistent')
    # The claim is the ledger's for this run: T rounds of z at q = S/K = 1.
    self.assertAlmostEqual(result.claimed['pld'],
                           privacy.compute_epsilon(_Z, 1.0, _ROUNDS, _DELTA, 'pld'), places=6)
    self.assertEqual(result.details['guesses'], 200)

  def test_poisson_sampled_cohorts_stay_below_their_amplified_claim(self):
    result = _audit(_production_aggregator(_CANARIES // 2), cohort_size=_CANARIES // 2)
    self.assertAlmostEqual(result.claimed['pld'],
                           privacy.compute_epsilon(_Z, 0.5, _ROUNDS, _DELTA, 'pld'), places=6)
    # Each present canary trains in about half the rounds.
    self.assertBetween(result.details['canary_trainings'] / result.details['present'], 0.9, 1.1)
    self.assertLess(result.lower_bound, result.claimed_epsilon)

  def test_client_side_noise_stays_below_its_claim(self):
    # Client noise needs exactly S clients: fixed cohorts of the whole population, absent
    # canaries reporting zero updates.
    aggregator = _production_aggregator(_CANARIES, clipping='dim', noise_placement='client')
    result = _audit(aggregator, sampling='fixed', absent_as_zero_update=True)
    self.assertLess(result.lower_bound, result.claimed_epsilon)

  @parameterized.named_parameters(
      ('tenth_noise', 'tenth_noise', _CANARIES, 100),
      ('first_group_noise_only', 'first_group_noise_only', _CANARIES, 100),
      ('replayed_noise', 'replayed_noise', _CANARIES, 100),
      # Three times the sensitivity is the subtlest bug: three times the canaries, the top and
      # bottom 5% guessed (298 of 300 right; 3.71 against the claimed 3.13).
      ('triple_bounds', 'triple_bounds', 3 * _CANARIES, 150),
  )
  def test_planted_bug_is_caught(self, bug, canaries, guesses):
    aggregator = planted_bugs.factory(planted_bugs.BUGS[bug], _Z, canaries)
    result = _audit(aggregator, canaries=canaries, guesses=guesses)
    self.assertGreater(result.lower_bound, result.claimed_epsilon)
    self.assertEqual(result.verdict, 'VIOLATION')
    # The claim is that of the correct mechanism: the bug reports the same event.
    self.assertAlmostEqual(result.claimed['pld'],
                           privacy.compute_epsilon(_Z, 1.0, _ROUNDS, _DELTA, 'pld'), places=6)
    if bug == 'replayed_noise':
      # Repeated noise looks fresh to the sum score; differencing releases removes it.
      self.assertLess(result.details['lower_bound_sum'], result.claimed_epsilon)
      self.assertGreater(result.details['correct_difference'], 195)

  def test_bad_arguments_are_named(self):
    aggregator = _production_aggregator(10)
    with self.assertRaisesRegex(ValueError, '`guesses`'):
      one_run.audit(aggregator, planted_bugs.LEAF_SHAPES, planted_bugs.LEAF_NAMES, canaries=10,
                    rounds=1, cohort_size=10, canary_norm=1e3, guesses=6)
    with self.assertRaisesRegex(ValueError, 'sampling="fixed"'):
      one_run.audit(aggregator, planted_bugs.LEAF_SHAPES, planted_bugs.LEAF_NAMES, canaries=10,
                    rounds=1, cohort_size=5, canary_norm=1e3, sampling='fixed')
    with self.assertRaisesRegex(ValueError, '`sigma_dp`'):
      mechanism.audit_mechanism(dp_config.DPConfig(clipping='dim'), 0.0,
                                mechanism.AuditConfig(canaries=10), planted_bugs.LEAF_SHAPES,
                                planted_bugs.LEAF_NAMES, rounds=1, cohort_size=10,
                                sampling='poisson')
    with self.assertRaisesRegex(ValueError, '`guesses`'):
      mechanism.AuditConfig(guesses=0)
    with self.assertRaisesRegex(ValueError, 'per-group clips'):
      one_run.audit(None, planted_bugs.LEAF_SHAPES, planted_bugs.LEAF_NAMES, canaries=10,
                    rounds=1, cohort_size=10, canary_norm=1e3)


if __name__ == '__main__':
  absltest.main()
