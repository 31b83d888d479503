from absl.testing import absltest
from absl.testing import parameterized

from fedasr_tff import privacy

DELTA = 1e-9


class ExtrapolationTest(parameterized.TestCase):

  def test_reproduces_the_paper_headline_extrapolation(self):
    # Trained: sigma_DP = 3e-6, S = 1024, K = 34753. Scaled by 200 (q fixed), then K by 10 at
    # fixed S, accounted for 2034 steps: z = 0.6144, eps ~ 7.2 (Pelikan et al., NeurIPS 2025,
    # arXiv:2310.00098, Table 1).
    result = privacy.extrapolate(3e-6, 1024, 34753, 2006, DELTA, cohort_scale=200,
                                 population_scale=10, extrapolated_steps=2034)
    self.assertEqual(result.cohort_size, 204800)
    self.assertEqual(result.population, 69506000)
    self.assertAlmostEqual(result.noise_multiplier, 0.6144, places=9)
    self.assertAlmostEqual(result.epsilon, 7.22, delta=0.01)

  def test_joint_scaling_keeps_q_and_multiplies_z(self):
    base = privacy.privacy_of_configuration(1e-5, 1024, 34753, 2006, DELTA)
    scaled = privacy.extrapolate(1e-5, 1024, 34753, 2006, DELTA, cohort_scale=100)
    self.assertAlmostEqual(scaled.sampling_rate, base.sampling_rate, places=12)
    self.assertAlmostEqual(scaled.noise_multiplier, 100 * base.noise_multiplier, places=9)
    self.assertLess(scaled.epsilon, base.epsilon)

  def test_epsilon_depends_only_on_q_z_t(self):
    # Two configurations with equal (q, z, T) have equal epsilon (Pelikan et al. 2025, Theorem 1:
    # the accountant sees only q, z and T).
    a = privacy.privacy_of_configuration(2e-6, 1000, 50000, 100, DELTA)
    b = privacy.privacy_of_configuration(1e-6, 2000, 100000, 100, DELTA)
    self.assertAlmostEqual(a.epsilon, b.epsilon, places=9)

  def test_pld_accountant(self):
    result = privacy.extrapolate(3e-6, 1024, 34753, 2006, DELTA, cohort_scale=200,
                                 population_scale=10, extrapolated_steps=2034, accountant='pld')
    self.assertEqual(result.accountant, 'pld')
    self.assertLess(result.epsilon, 7.22)

  @parameterized.named_parameters(
      ('shrinking_cohort', dict(cohort_scale=0.5), 'cohort_scale'),
      ('shrinking_population', dict(population_scale=0.5), 'population_scale'),
      ('zero_sigma', dict(sigma_dp=0.0), 'sigma_dp'),
      ('cohort_above_population', dict(cohort_size=100, population=10), 'cohort_size'),
  )
  def test_bad_input_names_argument(self, override, name):
    kwargs = dict(sigma_dp=1e-5, cohort_size=10, population=100, steps=10, delta=DELTA)
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      privacy.extrapolate(**kwargs)


if __name__ == '__main__':
  absltest.main()
