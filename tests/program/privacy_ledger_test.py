"""The run's privacy accounting and statement (`fedasr_tff.program.privacy_ledger`)."""

import math

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff.program import federated_training
from fedasr_tff.program import privacy_ledger


class PrivacyLedgerTest(absltest.TestCase):

  def _ledger(self, sigma_dp=3e-6):
    return privacy_ledger.PrivacyLedger(
        sigma_dp=sigma_dp, cohort_size=8, population=54, declared_cohort_size=1024,
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
        sigma_dp=0.1, cohort_size=8, population=54, declared_cohort_size=1024,
        declared_population=34753, planned_rounds=100, delta=1e-9, sampling='fixed')
    metrics = ledger.metrics(40)
    self.assertAlmostEqual(metrics['epsilon_run_wor_rdp'],
                           privacy.compute_epsilon_without_replacement(0.8, 54, 8, 40, 1e-9))
    self.assertIn('epsilon_declared_wor_rdp', metrics)
    self.assertNotIn('epsilon_run_wor_rdp', self._ledger(0.1).metrics(40))
    statement = ledger.statement(40)
    self.assertIn('without replacement, replace-one', statement)
    self.assertIn('not comparable', statement)

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

  def test_runner_aggregator_adds_the_noise_the_ledger_accounts(self):
    # The aggregator `federated_training.train` builds must carry the ledger's z in its DP event
    # (fixed and adaptive clipping), or the printed epsilon would not describe the run.
    value_type = tff.types.to_type([tff.TensorType(np.float32, [3]),
                                    tff.TensorType(np.float32, [2, 2])])
    for adaptive in (False, True):
      config = federated_training.FederatedConfig(
          rounds=10, cohort_size=8, sigma_dp=0.05, clip=0.5, adaptive_clipping=adaptive)
      ledger = privacy_ledger.PrivacyLedger(
          sigma_dp=config.sigma_dp, cohort_size=config.cohort_size, population=54,
          declared_cohort_size=config.declared_cohort_size, declared_population=54,
          planned_rounds=config.rounds, delta=config.delta, sampling=config.effective_sampling)
      factory = federated_training.build_aggregator(config, ['a', 'b'], ledger.noise_multiplier)
      process = factory.create(value_type)
      deltas = [[np.full([3], 0.1, np.float32), np.full([2, 2], 0.1, np.float32)]] * 8
      state = process.next(process.initialize(), deltas).state
      event = tff.aggregators.differential_privacy.extract_dp_event_from_state(state)
      self.assertAlmostEqual(event.noise_multiplier, 0.05 * 8, places=5, msg=adaptive)
      self.assertAlmostEqual(event.noise_multiplier, ledger.noise_multiplier, places=5)

  def test_no_noise_is_not_private(self):
    ledger = self._ledger(0.0)
    self.assertEqual(ledger.epsilon(10), math.inf)
    self.assertEqual(ledger.epsilon(0), 0.0)
    self.assertIn('not', ledger.statement(10))

  def test_noise_given_three_ways(self):
    kw = dict(cohort_size=8, declared_cohort_size=100, declared_population=10**5,
              planned_rounds=50, delta=1e-9)
    self.assertEqual(privacy_ledger.resolve_sigma_dp(
        sigma_dp=0.01, noise_multiplier=None, target_epsilon=None, **kw), 0.01)
    self.assertAlmostEqual(privacy_ledger.resolve_sigma_dp(
        sigma_dp=None, noise_multiplier=0.8, target_epsilon=None, **kw), 0.1)
    sigma = privacy_ledger.resolve_sigma_dp(sigma_dp=None, noise_multiplier=None,
                                            target_epsilon=2.0, **kw)
    epsilon = privacy.compute_epsilon(sigma * 100, 100 / 10**5, 50, 1e-9)
    self.assertLessEqual(epsilon, 2.0)
    self.assertGreater(epsilon, 1.9)
    with self.assertRaisesRegex(ValueError, 'one way only'):
      privacy_ledger.resolve_sigma_dp(sigma_dp=0.1, noise_multiplier=1.0, target_epsilon=None,
                                      **kw)
    with self.assertRaisesRegex(ValueError, 'cohort'):
      privacy_ledger.PrivacyLedger(0.1, 10, 5, 10, 100, 10, 1e-9)


if __name__ == '__main__':
  absltest.main()
