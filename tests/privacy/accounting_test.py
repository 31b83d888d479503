import math

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting

from fedasr_tff import privacy

DELTA = 1e-9


class ComputeEpsilonTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # Pelikan et al. 2025 (arXiv:2310.00098), Tables 1 and 18: minimum over the published
      # order grid (7.22 at alpha = 4 for the first row is our finding).
      ('cv_en_headline', 0.6144, 204800 / 69506000, 2034, 7.22, 4.0),
      ('cv_en_large_cohort', 2.048, 204800 / 6950600, 2006, 4.44, 9.0),
      ('cv_fr_headline', 0.768, 256000 / 46282500, 1991, 5.47, 5.0),
  )
  def test_headline_points_on_published_grid(self, z, q, steps, epsilon, order):
    got, got_order = privacy.compute_epsilon_and_order(
        z, q, steps, DELTA, orders=privacy.PUBLISHED_RDP_ORDERS)
    self.assertAlmostEqual(got / epsilon, 1.0, delta=0.005)
    self.assertEqual(got_order, order)

  def test_without_replacement_accounts_replace_one_with_sensitivity_2c(self):
    # Fixed-size cohorts: dp-accounting's RDP analysis of sampling without replacement, with the
    # sum's replace-one sensitivity 2C, i.e. multiplier z/2 in that relation.
    got = privacy.compute_epsilon_without_replacement(1.0, 54, 8, 40, DELTA)
    accountant = dp_accounting.rdp.RdpAccountant(
        orders=list(privacy.DEFAULT_RDP_ORDERS),
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(54, 8, dp_accounting.GaussianDpEvent(0.5)),
        40))
    self.assertAlmostEqual(got, accountant.get_epsilon(DELTA))
    # Weaker than ignoring the factor 2, stronger with more noise, 0 before any round.
    self.assertGreater(got, privacy.compute_epsilon_without_replacement(2.0, 54, 8, 40, DELTA))
    self.assertEqual(privacy.compute_epsilon_without_replacement(1.0, 54, 8, 0, DELTA), 0.0)
    # Everyone every round is the plain Gaussian mechanism with multiplier z/2.
    full = privacy.compute_epsilon_without_replacement(1.0, 8, 8, 10, DELTA)
    self.assertAlmostEqual(full, privacy.compute_epsilon(0.5, 1.0, 10, DELTA), delta=1e-6 * full)
    with self.assertRaisesRegex(ValueError, 'cohort_size'):
      privacy.compute_epsilon_without_replacement(1.0, 5, 8, 10, DELTA)

  def test_improved_conversion_not_classic(self):
    # Pelikan et al. 2025, Table 1 (z = 1.536, epsilon 6.5 at order 7): the improved conversion
    # gives 6.51 at alpha = 7, the classic one 6.99 (our finding).
    got = privacy.compute_epsilon(1.536, 51200 / 1737650, 2006, DELTA, orders=[7.0])
    self.assertAlmostEqual(got, 6.51, delta=0.01)

  def test_default_grid_never_worse_than_published_grid(self):
    for z, q, steps in [(0.3072, 0.0295, 2006), (2.048, 0.00295, 2006), (1.024, 0.0295, 2006)]:
      coarse = privacy.compute_epsilon(z, q, steps, DELTA, orders=privacy.PUBLISHED_RDP_ORDERS)
      fine = privacy.compute_epsilon(z, q, steps, DELTA)
      self.assertLessEqual(fine, coarse)
    # Pelikan et al. 2025, Table 17: the row capped at alpha = 25 (0.75) reaches ~0.46 near
    # alpha = 48 (our computation).
    self.assertAlmostEqual(privacy.compute_epsilon(2.048, 204800 / 69506000, 2006, DELTA), 0.46,
                           delta=0.01)

  def test_explicit_orders_restrict_the_minimum(self):
    got, order = privacy.compute_epsilon_and_order(1.024, 0.0295, 2006, DELTA, orders=[3.0, 10.0])
    self.assertIn(order, (3.0, 10.0))
    self.assertGreater(got, privacy.compute_epsilon(1.024, 0.0295, 2006, DELTA))

  def test_pld_tighter_than_rdp(self):
    rdp = privacy.compute_epsilon(1.024, 0.0295, 2006, DELTA)
    pld = privacy.compute_epsilon(1.024, 0.0295, 2006, DELTA, accountant='pld')
    self.assertLess(pld, rdp)
    self.assertGreater(pld, 0.8 * rdp)

  def test_pld_handles_very_weak_noise(self):
    # dp-accounting's connect-the-dots PLD fails numerically here; we still return a bound.
    rdp = privacy.compute_epsilon(0.0006144, 0.0295, 2006, DELTA)
    pld = privacy.compute_epsilon(0.0006144, 0.0295, 2006, DELTA, accountant='pld')
    self.assertTrue(math.isfinite(pld))
    self.assertGreater(pld, 0)
    self.assertLessEqual(pld, rdp)

  def test_monotone_in_noise_rate_and_steps(self):
    base = privacy.compute_epsilon(1.0, 0.01, 1000, DELTA)
    self.assertLess(privacy.compute_epsilon(1.5, 0.01, 1000, DELTA), base)
    self.assertLess(privacy.compute_epsilon(1.0, 0.005, 1000, DELTA), base)
    self.assertGreater(privacy.compute_epsilon(1.0, 0.01, 2000, DELTA), base)

  def test_zero_steps_is_free(self):
    self.assertEqual(privacy.compute_epsilon(1.0, 0.01, 0, DELTA), 0.0)
    self.assertEqual(privacy.compute_epsilon(1.0, 0.01, 0, DELTA, accountant='pld'), 0.0)

  def test_full_participation(self):
    # q = 1 is the plain Gaussian mechanism composed T times.
    rdp = dp_accounting.rdp.RdpAccountant(orders=list(privacy.DEFAULT_RDP_ORDERS))
    rdp.compose(dp_accounting.GaussianDpEvent(10.0), 50)
    self.assertAlmostEqual(privacy.compute_epsilon(10.0, 1.0, 50, 1e-5), rdp.get_epsilon(1e-5))

  def test_dp_event_composes_to_same_epsilon(self):
    event = privacy.dp_event(1.024, 0.0295, 1)
    rdp = dp_accounting.rdp.RdpAccountant(orders=list(privacy.DEFAULT_RDP_ORDERS))
    rdp.compose(event, 2006)
    self.assertAlmostEqual(rdp.get_epsilon(DELTA),
                           privacy.compute_epsilon(1.024, 0.0295, 2006, DELTA), places=9)

  @parameterized.named_parameters(
      ('zero_noise', dict(noise_multiplier=0.0), 'noise_multiplier'),
      ('negative_noise', dict(noise_multiplier=-1.0), 'noise_multiplier'),
      ('zero_rate', dict(sampling_rate=0.0), 'sampling_rate'),
      ('rate_above_one', dict(sampling_rate=1.5), 'sampling_rate'),
      ('delta_zero', dict(delta=0.0), 'delta'),
      ('delta_one', dict(delta=1.0), 'delta'),
      ('fractional_steps', dict(steps=10.5), 'steps'),
      ('float_steps', dict(steps=10.0), 'steps'),
      ('negative_steps', dict(steps=-1), 'steps'),
      ('unknown_accountant', dict(accountant='moments'), 'accountant'),
      ('bad_order', dict(orders=[0.5, 2.0]), 'orders'),
      ('empty_orders', dict(orders=[]), 'orders'),
      ('orders_with_pld', dict(accountant='pld', orders=[2.0]), 'orders'),
  )
  def test_bad_input_names_argument(self, override, name):
    kwargs = dict(noise_multiplier=1.0, sampling_rate=0.01, steps=10, delta=1e-5)
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      privacy.compute_epsilon(**kwargs)


class NoiseMultiplierForEpsilonTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('rdp_cv_en', 8.0, 204800 / 69506000, 2034, 'rdp'),
      ('rdp_small_eps', 1.0, 0.0295, 2006, 'rdp'),
      ('rdp_large_eps', 100.0, 0.0295, 2006, 'rdp'),
      ('pld', 6.0, 0.0295, 500, 'pld'),
  )
  def test_round_trip(self, target, q, steps, accountant):
    z = privacy.noise_multiplier_for_epsilon(target, q, steps, DELTA, accountant=accountant)
    epsilon = privacy.compute_epsilon(z, q, steps, DELTA, accountant=accountant)
    self.assertLessEqual(epsilon, target)
    self.assertGreaterEqual(epsilon, 0.99 * target)
    # Smallest: a slightly smaller multiplier misses the target.
    self.assertGreater(privacy.compute_epsilon(0.99 * z, q, steps, DELTA, accountant=accountant),
                       target)

  @parameterized.named_parameters(
      ('rdp', 'rdp'),
      ('pld', 'pld'),
  )
  def test_within_tolerance_of_boundary(self, accountant):
    # The documented tolerance: z meets the target, z less 0.01% does not.
    q, steps, target = 8 / 54, 10, 4.0
    z = privacy.noise_multiplier_for_epsilon(target, q, steps, DELTA, accountant=accountant)
    self.assertLessEqual(privacy.compute_epsilon(z, q, steps, DELTA, accountant=accountant),
                         target)
    self.assertGreater(
        privacy.compute_epsilon(z * (1 - 1e-4), q, steps, DELTA, accountant=accountant), target)

  @parameterized.named_parameters(
      ('rdp', 'rdp'),
      ('pld', 'pld'),
  )
  def test_unreachable_target_names_target_epsilon(self, accountant):
    # No z up to 1e6 brings 10 full-participation rounds down to ε = 1e-6.
    with self.assertRaisesRegex(ValueError, 'target_epsilon.*above 1e\\+06'):
      privacy.noise_multiplier_for_epsilon(1e-6, 1.0, 10, DELTA, accountant=accountant)

  def test_target_met_at_smallest_multiplier_searched(self):
    epsilon = privacy.compute_epsilon(1e-4, 0.01, 10, DELTA)
    self.assertEqual(privacy.noise_multiplier_for_epsilon(2 * epsilon, 0.01, 10, DELTA), 1e-4)

  @parameterized.named_parameters(
      ('zero_target', dict(target_epsilon=0.0), 'target_epsilon'),
      ('bad_rate', dict(sampling_rate=0.0), 'sampling_rate'),
      ('zero_steps', dict(steps=0), 'steps'),
      ('bad_delta', dict(delta=2.0), 'delta'),
      ('bad_accountant', dict(accountant='x'), 'accountant'),
  )
  def test_bad_input_names_argument(self, override, name):
    kwargs = dict(target_epsilon=1.0, sampling_rate=0.01, steps=10, delta=1e-5)
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      privacy.noise_multiplier_for_epsilon(**kwargs)


if __name__ == '__main__':
  absltest.main()
