import math
import os
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from fedasr_tff import models
from fedasr_tff import privacy
from fedasr_tff.program import cohorts
from fedasr_tff.program import federated_training
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger


class CohortsTest(absltest.TestCase):

  def test_cohort_is_a_function_of_seed_and_round(self):
    ids = [f's{i}' for i in range(50)]
    first = cohorts.sample_cohort(ids, 8, secret=3, round_num=7)
    self.assertLen(set(first), 8)
    self.assertLessEqual(set(first), set(ids))
    self.assertEqual(first, cohorts.sample_cohort(list(reversed(ids)), 8, 3, 7))
    self.assertNotEqual(first, cohorts.sample_cohort(ids, 8, 3, 8))
    self.assertNotEqual(first, cohorts.sample_cohort(ids, 8, 4, 7))
    with self.assertRaisesRegex(ValueError, 'cohort_size'):
      cohorts.sample_cohort(ids, 51, 0, 1)

  def test_every_client_is_drawn_at_rate_s_over_k(self):
    ids = [str(i) for i in range(20)]
    counts = np.zeros(20)
    for r in range(2000):
      for c in cohorts.sample_cohort(ids, 5, 0, r):
        counts[int(c)] += 1
    np.testing.assert_allclose(counts / 2000, 0.25, atol=0.04)

  def test_poisson_cohorts_join_independently_at_rate_s_over_k(self):
    ids = [str(i) for i in range(20)]
    secret = cohorts.new_run_secret()
    counts = np.zeros(20)
    sizes = []
    for r in range(4000):
      cohort = cohorts.sample_cohort(ids, 5, secret, r, 'poisson')
      self.assertEqual(cohort, cohorts.sample_cohort(ids, 5, secret, r, 'poisson'))
      sizes.append(len(cohort))
      for c in cohort:
        counts[int(c)] += 1
    np.testing.assert_allclose(counts / 4000, 0.25, atol=0.03)
    # Binomial(20, 0.25) sizes: mean 5, variance 3.75, and rounds with no client at all.
    self.assertAlmostEqual(np.mean(sizes), 5.0, delta=0.15)
    self.assertAlmostEqual(np.var(sizes), 3.75, delta=0.4)
    self.assertIn(0, sizes)
    self.assertNotEqual(cohorts.sample_cohort(ids, 5, secret, 1, 'poisson'),
                        cohorts.sample_cohort(ids, 5, secret + 1, 1, 'poisson'))
    with self.assertRaisesRegex(ValueError, 'sampling'):
      cohorts.sample_cohort(ids, 5, secret, 1, 'shuffle')

  def test_run_secret_is_fresh_and_survives_a_checkpoint(self):
    secrets = {cohorts.new_run_secret() for _ in range(20)}
    self.assertLen(secrets, 20)
    for secret in list(secrets) + [0, 7, 2**126 - 1]:
      words = cohorts.secret_to_words(secret)
      self.assertEqual(words.dtype, np.int64)
      self.assertEqual(cohorts.secret_from_words(words), secret)
    with self.assertRaisesRegex(ValueError, 'secret'):
      cohorts.secret_to_words(2**126)

  def test_client_seeds_differ_by_client_and_round(self):
    seeds = {cohorts.client_seed(0, r, c) for r in range(5) for c in ('a', 'b', 'c')}
    self.assertLen(seeds, 15)
    self.assertEqual(cohorts.client_seed(0, 1, 'a'), cohorts.client_seed(0, 1, 'a'))
    self.assertTrue(all(0 <= s < 2**63 for s in seeds))


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
        sampling_seed_known=True, noise_placement='client',
        client_statistics=('client/train/*',), pseudo_clients=True))
    self.assertIn('voids the amplification', disclosed)
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


class ModelIoTest(absltest.TestCase):

  def test_round_trip_and_mismatch(self):
    path = os.path.join(tempfile.mkdtemp(), 'model.npz')
    tiny = models.build_ctc_transformer('tiny', 29)
    weights = model_io.model_weights(tiny)
    model_io.save_weights(path, tiny, weights)
    loaded = model_io.load_weights(path, models.build_ctc_transformer('tiny', 29))
    for a, b in zip(weights.trainable, loaded.trainable, strict=True):
      np.testing.assert_array_equal(a, b)
    mismatch = r'--seed_model .*conv/conv/kernel.*shape \(7, 80, 192\)'
    with self.assertRaisesRegex(ValueError, mismatch):
      model_io.load_weights(path, models.build_ctc_transformer('small', 29), '--seed_model')
    with self.assertRaisesRegex(ValueError, 'does not exist'):
      model_io.load_weights(path + '.missing', tiny)


if __name__ == '__main__':
  absltest.main()
