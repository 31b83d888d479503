"""Lower bounds on ε from an attack's guesses: the statistics of an empirical privacy audit.

An audit runs the mechanism on data with canaries, guesses from the output which canaries were
present, and asks which (ε, δ) claims the guesses refute. A claim is refuted at confidence 1 - β
when guesses this good would happen with probability at most β under every (ε, δ)-DP mechanism;
the largest refuted ε is the measured lower bound. It is evidence, never proof: a mechanism can
be far less private than its bound shows and still not be caught. Two audits: one training run
(Steinke, Nasr and Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023,
arXiv:2305.08846; `one_run_epsilon_lower_bound`) and many runs of a distinguishing test
(Jagielski, Ullman and Oprea, "Auditing Differentially Private Machine Learning: How Private is
Private SGD?", NeurIPS 2020; Nasr et al., "Adversary Instantiation", IEEE S&P 2021;
`distinguishing_epsilon_lower_bound`).
"""

import math

import numpy as np
from scipy import optimize
from scipy import special
from scipy import stats

from fedasr_tff import validation


def _check_confidence(confidence):
  validation.check_open_unit_interval('confidence', confidence)


def one_run_p_value(canaries: int, guesses: int, correct: int, epsilon: float,
                    delta: float) -> float:
  """P[`correct` or more right guesses] under any (ε, δ)-DP mechanism.

  Steinke, Nasr and Jagielski 2023, Theorem 5.2: m canaries, each included independently with
  probability 1/2; the auditor makes r guesses (the rest abstain) and v of them are right. If the
  mechanism is (ε, δ)-DP in each canary's inclusion, then with p = e^ε / (1 + e^ε) and
  f(u) = P[Binomial(r, p) >= u],

      P[v correct or more] <= f(v) + 2 m δ · max_{i = 1..v} (f(v - i) - f(v)) / i.

  Args:
    canaries: m, canaries each included with probability 1/2.
    guesses: r <= m, the guesses made.
    correct: v <= r, the right ones.
    epsilon: ε >= 0 of the claim tested.
    delta: δ in [0, 1) of the claim tested.

  Returns:
    The right-hand side above, at most 1.

  Raises:
    ValueError: for counts not 0 <= v <= r <= m or ε, δ out of range.
  """
  validation.check_positive_integer('canaries', canaries)
  validation.check_non_negative_integer('guesses', guesses)
  validation.check_non_negative_integer('correct', correct)
  if not correct <= guesses <= canaries:
    raise ValueError(f'Need correct <= guesses <= canaries, got {correct}, {guesses}, '
                     f'{canaries}.')
  validation.check_non_negative('epsilon', epsilon)
  validation.check_unit_interval_right_open('delta', delta)
  if correct == 0:
    return 1.0
  p = special.expit(epsilon)
  tail = stats.binom.sf(correct - 1, guesses, p)  # f(v)
  if delta == 0:
    return float(tail)
  i = np.arange(1, correct + 1)
  # f(v - i) - f(v) = P[v - i <= Binomial < v].
  between = stats.binom.sf(correct - i - 1, guesses, p) - tail
  return float(min(1.0, tail + 2 * canaries * delta * np.max(between / i)))


def one_run_epsilon_lower_bound(canaries: int, guesses: int, correct: int, delta: float,
                                confidence: float = 0.95) -> float:
  """The largest ε refuted at `confidence` by `correct` of `guesses` (0 if none is).

  The largest ε whose `one_run_p_value` is at most β (the p-value grows with ε). With every guess
  right, the bound is capped near -log(β^(-1/r) - 1): r = 100 guesses at β = 0.05 cannot show
  more than ε ≈ 3.5.

  Args:
    canaries: as `one_run_p_value`.
    guesses: as `one_run_p_value`.
    correct: as `one_run_p_value`.
    delta: as `one_run_p_value`.
    confidence: 1 - β, in (0, 1).

  Returns:
    The ε lower bound; inf when the guesses refute every ε up to 1e3.
  """
  _check_confidence(confidence)
  beta = 1 - confidence
  if one_run_p_value(canaries, guesses, correct, 0.0, delta) > beta:
    return 0.0

  def refuted_margin(epsilon):
    return beta - one_run_p_value(canaries, guesses, correct, epsilon, delta)

  high = 1.0
  while refuted_margin(high) > 0:
    high *= 2
    if high > 1e3:  # Every guess right at every ε: more guesses than any claim needs.
      return math.inf
  return float(optimize.brentq(refuted_margin, 0.0, high, xtol=1e-6))


def clopper_pearson(successes: int, trials: int, confidence: float):
  """One-sided Clopper-Pearson bounds on a binomial rate.

  Args:
    successes: the successes, <= `trials`.
    trials: the trials, > 0.
    confidence: the confidence of each bound, in (0, 1).

  Returns:
    (lower, upper), each a one-sided bound at `confidence`.
  """
  validation.check_non_negative_integer('successes', successes)
  validation.check_positive_integer('trials', trials)
  if successes > trials:
    raise ValueError(f'`successes` ({successes}) exceeds `trials` ({trials}).')
  _check_confidence(confidence)
  alpha = 1 - confidence
  lower = 0.0 if successes == 0 else stats.beta.ppf(alpha, successes, trials - successes + 1)
  upper = 1.0 if successes == trials else stats.beta.ppf(1 - alpha, successes + 1,
                                                           trials - successes)
  return float(lower), float(upper)


def distinguishing_epsilon_lower_bound(false_positives: int, negatives: int,
                                       false_negatives: int, positives: int, delta: float,
                                       confidence: float = 0.95) -> float:
  """ε refuted at `confidence` by a distinguishing test's error counts; 0 if none is.

  The mechanism runs many times on one of two neighbouring inputs, chosen at random, and a
  threshold test says which. (ε, δ)-DP bounds the test's error rates: TPR <= e^ε FPR + δ and
  TNR <= e^ε FNR + δ, so

      ε >= max(log((TPR - δ) / FPR), log((TNR - δ) / FNR)),

  with FPR and FNR bounded above by one-sided Clopper-Pearson bounds, each at 1 - β/2 so both hold
  together at 1 - β (TPR = 1 - FNR, TNR = 1 - FPR). The threshold must be chosen before the
  trials it is scored on.

  Args:
    false_positives: trials without the canary that the test called "with".
    negatives: trials without the canary.
    false_negatives: trials with the canary called "without".
    positives: trials with the canary.
    delta: δ of the claim.
    confidence: 1 - β for the two Clopper-Pearson bounds together.

  Returns:
    The ε lower bound, >= 0.
  """
  validation.check_unit_interval_right_open('delta', delta)
  _check_confidence(confidence)
  each = 1 - (1 - confidence) / 2
  _, fpr_high = clopper_pearson(false_positives, negatives, each)
  _, fnr_high = clopper_pearson(false_negatives, positives, each)
  bounds = [0.0]
  # TPR >= 1 - FNR_high against FPR_high, and TNR >= 1 - FPR_high against FNR_high.
  for hit_low, miss_high in ((1 - fnr_high, fpr_high), (1 - fpr_high, fnr_high)):
    if hit_low > delta and miss_high > 0:
      bounds.append(math.log((hit_low - delta) / miss_high))
  return max(bounds)
