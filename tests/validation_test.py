"""Argument checks shared by the library (`fedasr_tff.validation`)."""

from absl.testing import absltest

from fedasr_tff import privacy
from fedasr_tff import validation
from fedasr_tff.program import privacy_ledger


class CohortWithinPopulationTest(absltest.TestCase):

  def test_a_cohort_up_to_the_population_passes(self):
    validation.check_cohort_within_population(1, 1)
    validation.check_cohort_within_population(3, 10)

  def test_errors_name_the_argument_and_the_population(self):
    with self.assertRaisesRegex(ValueError, r'^`cohort_size` \(11\) exceeds `population` \(10\)'):
      validation.check_cohort_within_population(11, 10)
    with self.assertRaisesRegex(ValueError, r'^`population_cohort_size` \(4\) exceeds the '
                                r'declared population\.$'):
      validation.check_cohort_within_population(
          4, 3, cohort_name='population_cohort_size',
          population_description='the declared population')
    for cohort, population, named in ((0, 3, 'cohort_size'), (2, 0, 'population'),
                                      (2.0, 3, 'cohort_size'), (2, True, 'population')):
      with self.assertRaisesRegex(ValueError, f'`{named}` must be an integer >= 1'):
        validation.check_cohort_within_population(cohort, population)

  def test_every_boundary_that_takes_a_cohort_and_population_uses_it(self):
    with self.assertRaisesRegex(ValueError, r'`cohort_size` \(6\) exceeds `population` \(5\)'):
      privacy.compute_epsilon_without_replacement(1.0, 5, 6, 10, 1e-5)
    with self.assertRaisesRegex(ValueError, r'`cohort_size` \(6\) exceeds `population` \(5\)'):
      privacy.privacy_of_configuration(0.1, 6, 5, 10, 1e-5)
    with self.assertRaisesRegex(ValueError, r'`cohort_size` \(6\) exceeds the population of 5 '
                                'training clients'):
      privacy_ledger.PrivacyLedger(noise_multiplier=1.0, cohort_size=6, population=5,
                                   declared_noise_multiplier=1.0, declared_cohort_size=6,
                                   declared_population=5, planned_rounds=10, delta=1e-5)
    with self.assertRaisesRegex(ValueError, r'`population_cohort_size` \(6\) exceeds the '
                                r'declared `population` \(5\)'):
      privacy_ledger.PrivacyLedger(noise_multiplier=1.0, cohort_size=2, population=5,
                                   declared_noise_multiplier=1.0, declared_cohort_size=6,
                                   declared_population=5, planned_rounds=10, delta=1e-5)


if __name__ == '__main__':
  absltest.main()
