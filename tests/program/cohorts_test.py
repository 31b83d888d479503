"""Cohort sampling and the run secret (`fedasr_tff.program.cohorts`)."""

from absl.testing import absltest
import numpy as np

from fedasr_tff.program import cohorts


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

  def test_sampling_with_replacement_draws_uniformly_and_repeats_clients(self):
    ids = [str(i) for i in range(10)]
    counts = np.zeros(10)
    repeats = 0
    for r in range(3000):
      cohort = cohorts.sample_cohort(ids, 6, 5, r, 'with_replacement')
      self.assertLen(cohort, 6)
      self.assertEqual(cohort, cohorts.sample_cohort(ids, 6, 5, r, 'with_replacement'))
      repeats += len(cohort) > len(set(cohort))
      for c in cohort:
        counts[int(c)] += 1
    # Each draw is uniform: 6 draws of 1/10 each, 0.6 a round per client.
    np.testing.assert_allclose(counts / 3000, 0.6, atol=0.05)
    # P(some client twice among 6 draws of 10) = 1 - 10!/(4! 10^6) = 0.8488.
    self.assertAlmostEqual(repeats / 3000, 0.8488, delta=0.03)

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


if __name__ == '__main__':
  absltest.main()
