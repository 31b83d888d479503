"""Many-run distinguishing audit of one round of a DP query.

Jagielski, Ullman and Oprea, "Auditing Differentially Private Machine Learning: How Private is
Private SGD?", NeurIPS 2020; Nasr et al., "Adversary Instantiation", IEEE S&P 2021. One round of
the query runs thousands of times on one of two neighbouring cohorts, and a test fitted on half
the trials says which on the other half (`audit`); the statistics are in `bounds`.
"""

import collections
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp

from fedasr_tff import validation
from fedasr_tff.audit import bounds
from fedasr_tff.audit import canaries as canaries_lib
from fedasr_tff.audit import result as result_lib
from fedasr_tff.audit import rounds


def _run_trials(query, canary, bits, cohort_size, zero_updates):
  """Projections [trials, leaves] of each trial's output on the canary's unit leaves."""
  units = [leaf / tf.norm(leaf) for leaf in canary]

  def projections(released, state):
    del state
    return tf.stack([tf.reduce_sum(r * u) for r, u in zip(released, units, strict=True)])

  return rounds.run(query, canary, bits, projections, cohort_size=cohort_size,
                    zero_updates=zero_updates)


def _best_threshold(scores, bits, delta, confidence):
  """The threshold whose ε bound is largest on these (calibration) trials."""
  values = np.unique(scores)
  # Midway between neighbouring scores (at most 400 of them, evenly by rank), and below all.
  candidates = (values[:-1] + values[1:]) / 2
  if len(candidates) > 400:
    candidates = candidates[np.linspace(0, len(candidates) - 1, 400).astype(int)]
  best, best_bound = -np.inf, -1.0
  for threshold in np.concatenate([[values[0] - 1.0], candidates]):
    counts = _error_counts(scores, bits, threshold)
    bound = bounds.distinguishing_epsilon_lower_bound(*counts, delta, confidence)
    if bound > best_bound:
      best, best_bound = threshold, bound
  return best


def _error_counts(scores, bits, threshold):
  called = scores > threshold
  with_canary = bits > 0
  return (int(np.sum(called & ~with_canary)), int(np.sum(~with_canary)),
          int(np.sum(~called & with_canary)), int(np.sum(with_canary)))


def audit(query: tfp.DPQuery,
          leaf_shapes: Sequence[Sequence[int]],
          *,
          trials: int,
          canary_norm: float,
          cohort_size: int = 1,
          zero_updates: bool = False,
          delta: float = 1e-9,
          confidence: float = 0.95,
          audit_seed: int = 0) -> result_lib.AuditResult:
  """Runs the distinguishing audit on `query`.

  Each trial is a round of the query on one of two neighbouring cohorts chosen by a fair coin:
  D without the canary and D' with it (add/remove; or, where the mechanism needs exactly S
  reporting clients, S - 1 zero updates plus the canary or a zero update). The trials run back
  to back from one global state, as consecutive rounds of a run do, so the noise stream is the
  one a run draws (a replayed seed repeats the noise and is caught).

  The canary is the fixed random direction of `canaries` with leaf norm λ. A trial's output r is
  reduced to its projections p_ℓ = <r_ℓ, u_ℓ> on the canary's leaves. The first half of the
  trials calibrates the test: per leaf, the mean shift Δ_ℓ of p_ℓ between the two cohorts and
  its variance s_ℓ² among the trials without the canary; the score is Σ_ℓ (Δ_ℓ / s_ℓ²) p_ℓ (the
  most powerful linear test for Gaussian noise, whatever the clips and noise per leaf), and the
  threshold the one whose ε bound is largest on the calibration half. The second half is then
  scored once with that threshold, and its error counts bound ε
  (`bounds.distinguishing_epsilon_lower_bound`): the bound holds because nothing about the test
  was chosen on the trials it is computed from.

  The claim tested is one round of the Gaussian mechanism with the noise multiplier the query
  reports in its DP event, without sampling (q = 1), at δ. With adaptive clipping the chained
  rounds are not identically distributed (the clips follow the coins), but every round is
  (ε, δ)-DP given the state before it, so the error rates averaged over the rounds still satisfy
  TPR <= e^ε FPR + δ, which is what the bound tests; the Clopper-Pearson intervals then treat
  dependent rounds as independent, an approximation made for adaptive clipping only.

  Args:
    query: the DP query of one round (`PerLayerDPFactory.build_query(value_type)`, or a
      mechanism of your own reporting a `GaussianDpEvent`), with diagnostics off (exact client
      statistics in the state are outside any claim).
    leaf_shapes: the shapes of the value's leaves (a list of tensors).
    trials: rounds run in all, half to calibrate the test and half to score it (>= 100).
    canary_norm: λ, every leaf's norm in the canary (at least the total clip).
    cohort_size: S, clients reporting with `zero_updates`.
    zero_updates: the cohorts are S - 1 zero updates plus the canary or a zero update (for
      client-side noise, calibrated to exactly S reporting clients); otherwise {} vs {canary}.
    delta: δ of the claim.
    confidence: 1 - β of the lower bound.
    audit_seed: seed of the canary and the coins.

  Returns:
    The `AuditResult` of `distinguishing`, with the scored half's error counts in `details`.

  Raises:
    ValueError: for an argument out of range or fewer than 100 trials.
  """
  validation.check_positive_integer('trials', trials)
  if trials < 100:
    raise ValueError(f'`trials` must be >= 100 (half calibrate, half score), got {trials}.')
  validation.check_positive('canary_norm', canary_norm)
  validation.check_positive_integer('cohort_size', cohort_size)
  shapes = [tuple(shape) for shape in leaf_shapes]
  seed = canaries_lib.canary_seed(audit_seed, 0, 0)
  canary = [canary_norm * u for u in canaries_lib.canary_directions(shapes, seed)]
  noise_multiplier = rounds.reported_noise_multiplier(query,
                                                      [tf.zeros_like(leaf) for leaf in canary])
  ledger = result_lib.run_ledger(noise_multiplier, 1, 1, 1, delta)

  bits = (np.random.default_rng([audit_seed, 1]).random(trials) < 0.5).astype(np.int32)
  projections = _run_trials(query, canary, bits, cohort_size, zero_updates)
  half = trials // 2
  calibration, evaluation = slice(0, half), slice(half, trials)
  with_canary = bits[calibration] > 0
  shift = (projections[calibration][with_canary].mean(axis=0)
           - projections[calibration][~with_canary].mean(axis=0))
  variance = projections[calibration][~with_canary].var(axis=0)
  # A leaf whose projection never varies (noise repeated, or none) gets a huge finite weight.
  weights = shift / np.maximum(variance, 1e-12 * shift**2 + np.finfo(np.float64).tiny)
  scores = projections @ weights
  threshold = _best_threshold(scores[calibration], bits[calibration], delta, confidence)
  counts = _error_counts(scores[evaluation], bits[evaluation], threshold)
  lower_bound = bounds.distinguishing_epsilon_lower_bound(*counts, delta, confidence)
  details = collections.OrderedDict(
      trials=trials, scored_trials=trials - half, false_positives=counts[0],
      negatives=counts[1], false_negatives=counts[2], positives=counts[3],
      noise_multiplier=noise_multiplier)
  return result_lib.AuditResult('distinguishing', result_lib.claimed_epsilons(ledger), delta,
                                lower_bound, confidence, details)
