"""The run's privacy accounting and statement (`fedasr_tff.program.privacy_ledger`)."""

import dataclasses
import math

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff import runtime
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import privacy_ledger
from fedasr_tff.speech import config as config_lib


class PrivacyLedgerTest(absltest.TestCase):

  def _ledger(self, sigma_dp=3e-6):
    return privacy_ledger.PrivacyLedger(
        noise_multiplier=sigma_dp * 8, cohort_size=8, population=54,
        declared_noise_multiplier=sigma_dp * 1024, declared_cohort_size=1024,
        declared_population=34753, planned_rounds=2006, delta=1e-9)

  def test_declared_population_uses_sigma_dp_times_declared_cohort(self):
    ledger = self._ledger()
    self.assertAlmostEqual(ledger.declared_noise_multiplier, 3e-6 * 1024)
    self.assertAlmostEqual(ledger.noise_multiplier, 3e-6 * 8)
    want = privacy.compute_epsilon(3e-6 * 1024, 1024 / 34753, 1000, 1e-9)
    self.assertAlmostEqual(ledger.epsilon(1000), want)
    metrics = ledger.metrics(1000)
    self.assertAlmostEqual(metrics['projected_epsilon_declared_rdp'],
                           privacy.compute_epsilon(3e-6 * 1024, 1024 / 34753, 2006, 1e-9))
    self.assertLessEqual(metrics['epsilon_declared_pld'], metrics['epsilon_declared_rdp'] * 1.01)
    self.assertGreater(metrics['epsilon_run_rdp'], metrics['epsilon_declared_rdp'])
    self.assertAlmostEqual(metrics['epsilon_run_rdp'],
                           privacy.compute_epsilon(3e-6 * 8, 8 / 54, 1000, 1e-9))
    self.assertIn('| declared population (`epsilon_declared_*`) | 1024 | 34753 |',
                  ledger.statement(1000))

  def test_every_epsilon_is_named_by_what_it_covers(self):
    poisson = self._ledger(0.05)
    names = set(poisson.metrics(10))
    self.assertEqual(names, {f'{kind}epsilon_{population}_{accountant}'
                             for kind in ('', 'projected_')
                             for population in ('run', 'declared')
                             for accountant in ('rdp', 'pld')})
    line = poisson.summary_line(10)
    self.assertIn('epsilon_run', line)
    self.assertIn('epsilon_declared', line)
    self.assertIn('sigma_dp only', line)
    statement = poisson.statement(10)
    self.assertIn('this run (`epsilon_run_*`)', statement)
    self.assertIn('depends on σ_DP only', statement)

  def test_fixed_cohorts_also_report_sampling_without_replacement(self):
    ledger = privacy_ledger.PrivacyLedger(
        noise_multiplier=0.8, cohort_size=8, population=54, declared_noise_multiplier=102.4,
        declared_cohort_size=1024, declared_population=34753, planned_rounds=100, delta=1e-9,
        sampling='fixed')
    metrics = ledger.metrics(40)
    self.assertAlmostEqual(metrics['epsilon_run_wor_rdp'],
                           privacy.compute_epsilon_without_replacement(0.8, 54, 8, 40, 1e-9))
    self.assertIn('epsilon_declared_wor_rdp', metrics)
    self.assertNotIn('epsilon_run_wor_rdp', self._ledger(0.1).metrics(40))
    statement = ledger.statement(40)
    self.assertIn('without replacement, replace-one', statement)
    self.assertIn('not comparable', statement)

  def test_sampling_with_replacement_is_refused_with_noise(self):
    kwargs = dict(cohort_size=8, population=54, declared_noise_multiplier=0.0,
                  declared_cohort_size=8, declared_population=54, planned_rounds=10,
                  delta=1e-9, sampling='with_replacement')
    with self.assertRaisesRegex(ValueError, 'with_replacement'):
      privacy_ledger.PrivacyLedger(noise_multiplier=0.5, **kwargs)
    ledger = privacy_ledger.PrivacyLedger(noise_multiplier=0.0, **kwargs)
    self.assertIn('not** differentially private', ledger.statement(10))

  def test_small_and_exactly_zero_epsilons_keep_their_meaning_in_print(self):
    # z = 10 on a cohort of 1 in a million for one round: RDP's conversion clamps ε at exactly 0.
    ledger = privacy_ledger.PrivacyLedger(
        noise_multiplier=10.0, cohort_size=1, population=1_000_000,
        declared_noise_multiplier=10.0, declared_cohort_size=1,
        declared_population=1_000_000, planned_rounds=1, delta=1e-9)
    self.assertEqual(ledger.metrics(1)['epsilon_run_rdp'], 0.0)
    line, statement = ledger.summary_line(1), ledger.statement(1)
    self.assertIn('epsilon_run RDP exactly 0 / PLD 9.75e-05', line)
    self.assertIn('| exactly 0 | 9.75e-05 |', statement)
    for text in (line, statement):
      self.assertNotRegex(text, r'\b0\.0+\b')

  def test_statement_names_what_lies_outside_the_guarantee(self):
    ledger = self._ledger(0.05)
    plain = ledger.statement(10)
    self.assertIn('No un-noised client statistic is released', plain)
    self.assertIn('secret drawn from OS entropy', plain)
    self.assertIn('side channel', plain)
    self.assertIn('K is treated as public', plain)
    self.assertIn('compose', plain)
    self.assertIn('as private as the raw data', plain)
    disclosed = ledger.statement(10, privacy_ledger.Disclosures(
        sampling_seed_known=True, noise_seed_known=True, noise_placement='client',
        client_statistics=('client/train/*',), pseudo_clients=True))
    self.assertIn('voids the amplification', disclosed)
    self.assertIn('subtract it. The run then has **no** DP guarantee', disclosed)
    self.assertNotIn('--noise_seed', plain)
    self.assertIn('secure aggregation', disclosed)
    self.assertIn('Outside the guarantee', disclosed)
    self.assertIn('`client/train/*`', disclosed)
    self.assertIn('per pseudo-client', disclosed)

  def test_the_ledger_accounts_the_noise_the_runners_aggregator_applies(self):
    # The ledger reads z from the aggregator's state (TFF's DP event), fixed and adaptive
    # clipping, so the printed epsilon describes the noise the run adds.
    value_type = tff.types.to_type([tff.TensorType(np.float32, [3]),
                                    tff.TensorType(np.float32, [2, 2])])
    for adaptive in (False, True):
      config = fields_lib.from_flat(config_lib.FederatedConfig, dict(
          rounds=10, cohort_size=8, sigma_dp=0.05, clip=0.5, adaptive_clipping=adaptive))
      noise = config.noise_level(54)
      factory = config.dp.aggregator(noise.noise_multiplier, config.run.cohort_size, ['a', 'b'],
                                     diagnostics=config.client_diagnostics)
      process = factory.create(value_type)
      initial = process.initialize()
      ledger = privacy_ledger.PrivacyLedger(
          noise_multiplier=privacy_ledger.applied_noise_multiplier(initial),
          cohort_size=config.run.cohort_size, population=54,
          declared_noise_multiplier=noise.declared_noise_multiplier,
          declared_cohort_size=config.declared_cohort_size, declared_population=54,
          planned_rounds=config.run.rounds, delta=config.dp.delta,
          sampling=config.effective_sampling)
      deltas = [[np.full([3], 0.1, np.float32), np.full([2, 2], 0.1, np.float32)]] * 8
      state = process.next(initial, deltas).state
      event = tff.aggregators.differential_privacy.extract_dp_event_from_state(state)
      self.assertAlmostEqual(event.noise_multiplier, 0.05 * 8, places=5, msg=adaptive)
      self.assertEqual(event.noise_multiplier, ledger.noise_multiplier)
      ledger.check_round(state)   # The round ran the accounted mechanism.
      other = dataclasses.replace(ledger, noise_multiplier=0.41)
      with self.assertRaisesRegex(RuntimeError, 'applied noise multiplier'):
        other.check_round(state)

  def test_a_plain_mean_adds_no_noise(self):
    process = tff.aggregators.UnweightedMeanFactory().create(tff.TensorType(np.float32, [2]))
    self.assertEqual(privacy_ledger.applied_noise_multiplier(process.initialize()), 0.0)

  def test_no_noise_is_not_private(self):
    ledger = self._ledger(0.0)
    self.assertEqual(ledger.epsilon(10), math.inf)
    self.assertEqual(ledger.epsilon(0), 0.0)
    self.assertIn('not', ledger.statement(10))

  def test_cohorts_must_fit_their_populations(self):
    kw = dict(noise_multiplier=0.8, declared_noise_multiplier=1.0, planned_rounds=10,
              delta=1e-9)
    with self.assertRaisesRegex(ValueError, 'cohort'):
      privacy_ledger.PrivacyLedger(cohort_size=10, population=5, declared_cohort_size=10,
                                   declared_population=100, **kw)
    with self.assertRaisesRegex(ValueError, 'population'):
      privacy_ledger.PrivacyLedger(cohort_size=2, population=5, declared_cohort_size=2,
                                   declared_population=4, **kw)
    with self.assertRaisesRegex(ValueError, 'population_cohort_size'):
      privacy_ledger.PrivacyLedger(cohort_size=2, population=5, declared_cohort_size=200,
                                   declared_population=100, **kw)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
