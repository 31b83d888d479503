"""The audit statistics against closed forms, an independent transcription and simulations of
mechanisms whose ε is known (randomized response): a valid bound exceeds the true ε in at most
a β fraction of runs."""

import math

from absl.testing import absltest
import numpy as np

from fedasr_tff.audit import bounds


def _tail(r, p, v):
  """P[Binomial(r, p) >= v], summed term by term."""
  return sum(math.comb(r, j) * p**j * (1 - p)**(r - j) for j in range(max(v, 0), r + 1))


class OneRunBoundTest(absltest.TestCase):

  def test_p_value_is_the_theorem_transcribed_independently(self):
    m, r, v, eps, delta = 500, 60, 45, 0.8, 1e-4
    p = math.exp(eps) / (1 + math.exp(eps))
    slack = max((_tail(r, p, v - i) - _tail(r, p, v)) / i for i in range(1, v + 1))
    want = _tail(r, p, v) + 2 * m * delta * slack
    self.assertAlmostEqual(bounds.one_run_p_value(m, r, v, eps, delta), want, places=12)
    self.assertAlmostEqual(bounds.one_run_p_value(m, r, v, eps, 0.0), _tail(r, p, v), places=12)

  def test_every_guess_right_gives_the_closed_form(self):
    # With v = r and δ = 0 the p-value is p^r, so the bound is logit(β^(1/r)).
    for r in (10, 100, 400):
      want = math.log(0.05**(1 / r) / (1 - 0.05**(1 / r)))
      self.assertAlmostEqual(bounds.one_run_epsilon_lower_bound(1000, r, r, 0.0, 0.95), want,
                             places=4)

  def test_monotone_and_zero_at_chance(self):
    self.assertEqual(bounds.one_run_epsilon_lower_bound(1000, 200, 100, 1e-6), 0.0)
    lows = [bounds.one_run_epsilon_lower_bound(1000, 200, v, 1e-6) for v in (130, 160, 190, 200)]
    self.assertEqual(lows, sorted(lows))
    self.assertGreater(lows[0], 0)
    # A larger δ or a higher confidence can only lower the bound.
    self.assertLess(bounds.one_run_epsilon_lower_bound(1000, 200, 190, 1e-3), lows[2])
    self.assertLess(bounds.one_run_epsilon_lower_bound(1000, 200, 190, 1e-6, 0.99), lows[2])
    p_values = [bounds.one_run_p_value(1000, 200, 170, eps, 1e-6) for eps in (0.5, 1, 2, 4)]
    self.assertEqual(p_values, sorted(p_values))  # A weaker claim explains more.

  def test_valid_on_randomized_response(self):
    # An ε-DP mechanism: each canary's bit is reported truthfully with probability
    # e^ε / (1 + e^ε). The auditor guesses every canary by its report.
    rng = np.random.default_rng(0)
    eps, m, runs = 1.0, 400, 400
    truthful = math.exp(eps) / (1 + math.exp(eps))
    exceed = 0
    for _ in range(runs):
      correct = int(np.sum(rng.random(m) < truthful))
      exceed += bounds.one_run_epsilon_lower_bound(m, m, correct, 0.0, 0.95) > eps
    self.assertLessEqual(exceed / runs, 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs))
    # And it has power: the bound is usually well above 0.
    correct = int(m * truthful)
    self.assertGreater(bounds.one_run_epsilon_lower_bound(m, m, correct, 0.0), 0.5 * eps)

  def test_bad_counts_are_named(self):
    with self.assertRaisesRegex(ValueError, 'correct <= guesses <= canaries'):
      bounds.one_run_p_value(10, 20, 5, 1.0, 0.0)
    with self.assertRaisesRegex(ValueError, '`delta`'):
      bounds.one_run_p_value(10, 10, 5, 1.0, 1.5)
    with self.assertRaisesRegex(ValueError, '`confidence`'):
      bounds.one_run_epsilon_lower_bound(10, 10, 5, 0.0, confidence=1.0)


class DistinguishingBoundTest(absltest.TestCase):

  def test_clopper_pearson_closed_forms(self):
    # No success in n: upper bound 1 - α^(1/n); all successes: lower bound α^(1/n).
    low, high = bounds.clopper_pearson(0, 50, 0.95)
    self.assertEqual(low, 0.0)
    self.assertAlmostEqual(high, 1 - 0.05**(1 / 50), places=10)
    low, high = bounds.clopper_pearson(50, 50, 0.95)
    self.assertAlmostEqual(low, 0.05**(1 / 50), places=10)
    self.assertEqual(high, 1.0)
    low, high = bounds.clopper_pearson(30, 100, 0.9)
    self.assertLess(low, 0.3)
    self.assertGreater(high, 0.3)

  def test_bound_from_error_counts(self):
    # Perfect separation of 1,000 trials each way.
    perfect = bounds.distinguishing_epsilon_lower_bound(0, 1000, 0, 1000, 0.0)
    fpr_high = 1 - 0.025**(1 / 1000)
    self.assertAlmostEqual(perfect, math.log((1 - fpr_high) / fpr_high), places=6)
    # Equal error rates refute nothing.
    self.assertEqual(bounds.distinguishing_epsilon_lower_bound(500, 1000, 500, 1000, 0.0), 0.0)
    # δ is subtracted from the hit rate.
    self.assertLess(bounds.distinguishing_epsilon_lower_bound(10, 1000, 400, 1000, 0.1),
                    bounds.distinguishing_epsilon_lower_bound(10, 1000, 400, 1000, 0.0))

  def test_valid_on_randomized_response(self):
    rng = np.random.default_rng(1)
    eps, n, runs = 1.5, 2000, 400
    miss = 1 / (1 + math.exp(eps))
    exceed = 0
    for _ in range(runs):
      fp, fn = rng.binomial(n, miss, size=2)
      exceed += bounds.distinguishing_epsilon_lower_bound(int(fp), n, int(fn), n, 0.0) > eps
    self.assertLessEqual(exceed / runs, 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs))
    self.assertGreater(bounds.distinguishing_epsilon_lower_bound(int(n * miss), n,
                                                                 int(n * miss), n, 0.0), 1.0)


if __name__ == '__main__':
  absltest.main()
