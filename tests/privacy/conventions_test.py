import csv
import math

from absl.testing import absltest
from absl.testing import parameterized

from fedasr_tff import privacy


class ConventionsTest(parameterized.TestCase):

  def test_paper_worked_example(self):
    # Pelikan et al. 2025 (arXiv:2310.00098), Table 1 and App. H.1: sigma_DP = 3e-6 and
    # S = 1024 give z = 0.003072; at C = 0.01 the client std is
    # 9.6e-7 and the std on the sum is z*C = 3.072e-5.
    z = privacy.noise_multiplier_from_sigma_dp(3e-6, 1024)
    self.assertAlmostEqual(z, 0.003072, places=12)
    self.assertAlmostEqual(z * 0.01, 3.072e-5, places=14)
    client = privacy.client_noise_stddev_from_sigma_dp(3e-6, 1024)
    self.assertAlmostEqual(client * 0.01, 9.6e-7, places=15)

  def test_client_noise_sums_to_noise_on_sum(self):
    # S independent client draws of std sigma_client add up to std z on the sum.
    sigma_dp, cohort = 7e-5, 512
    client = privacy.client_noise_stddev_from_sigma_dp(sigma_dp, cohort)
    z = privacy.noise_multiplier_from_sigma_dp(sigma_dp, cohort)
    self.assertAlmostEqual(math.sqrt(cohort) * client, z, places=12)

  def test_round_trips(self):
    self.assertAlmostEqual(
        privacy.sigma_dp_from_noise_multiplier(privacy.noise_multiplier_from_sigma_dp(2e-5, 300),
                                               300), 2e-5, places=15)
    self.assertAlmostEqual(
        privacy.sigma_dp_from_client_noise_stddev(
            privacy.client_noise_stddev_from_sigma_dp(2e-5, 300), 300), 2e-5, places=15)

  def test_every_published_row_has_z_equal_sigma_dp_times_s(self):
    # Pelikan et al. 2025, Theorem 1: z = sigma_DP * S on every row of Tables 1, 17, 18, 20
    # (Table 17's sigma = 0.625 rows were computed with 0.6: our finding).
    rows = privacy.read_privacy_table()
    self.assertNotEmpty(rows)
    with open(privacy.PUBLISHED_TABLES_CSV) as f:
      sigmas = [float(r['sigma_dp_1e-6']) for r in csv.DictReader(f)]
    for row, sigma_dp in zip(rows, sigmas, strict=True):
      sigma_dp = 1e-6 * (0.6 if sigma_dp == 0.625 else sigma_dp)
      self.assertAlmostEqual(
          privacy.noise_multiplier_from_sigma_dp(sigma_dp, row.cohort_size) / row.noise_multiplier,
          1.0, places=9, msg=f'line {row.line}')

  @parameterized.parameters(
      (privacy.noise_multiplier_from_sigma_dp, -1.0, 10, 'sigma_dp'),
      (privacy.noise_multiplier_from_sigma_dp, 1.0, 0, 'cohort_size'),
      (privacy.noise_multiplier_from_sigma_dp, 1.0, 2.5, 'cohort_size'),
      (privacy.sigma_dp_from_noise_multiplier, float('nan'), 10, 'noise_multiplier'),
      (privacy.client_noise_stddev_from_sigma_dp, 1.0, -3, 'cohort_size'),
  )
  def test_bad_input_names_argument(self, fn, value, cohort, name):
    with self.assertRaisesRegex(ValueError, name):
      fn(value, cohort)


if __name__ == '__main__':
  absltest.main()
