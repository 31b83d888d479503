"""Direct check of the noise: every tensor's noise scale, and no correlation between tensors.

An ε lower bound cannot see noise a little too small in one tensor (the attacks show a third of
the claim on correct mechanisms), nor noise shared between tensors that no canary direction
spans. This check measures both on releases without canaries (empty cohorts, or S zero updates
for client-side noise), where a release is the noise alone (`audit`).
"""

import collections
import itertools
import math
from typing import Sequence

import numpy as np
from scipy import stats
import tensorflow as tf
import tensorflow_privacy as tfp

from fedasr_tff import validation
from fedasr_tff.audit import result as result_lib
from fedasr_tff.audit import rounds as rounds_lib


def _statistics_fn(query, sizes, pairs, clients_per_round):
  """observe(released, state): per tensor Σx², per pair (Σxy, Σx², Σy² on the common length),
  x the release in units of C_t / S."""

  def observe(released, state):
    clip, _ = rounds_lib.released_clips(query, state)
    unit = tf.cast(clip, tf.float64) / clients_per_round
    flat = [tf.reshape(tf.cast(r, tf.float64), [-1]) / unit for r in released]
    values = [tf.reduce_sum(tf.square(x)) for x in flat]
    for i, j in pairs:
      n = min(sizes[i], sizes[j])
      x, y = flat[i][:n], flat[j][:n]
      values += [tf.reduce_sum(x * y), tf.reduce_sum(tf.square(x)), tf.reduce_sum(tf.square(y))]
    return tf.cast(tf.stack(values), tf.float32)

  return observe


def audit(query: tfp.DPQuery,
          leaf_shapes: Sequence[Sequence[int]],
          leaf_names: Sequence[str],
          *,
          clients_per_round: float,
          releases: int = 200,
          zero_updates: bool = False,
          significance: float = 1e-3) -> result_lib.CheckResult:
  """Checks the noise scale of every tensor and the correlation between tensors.

  Scale. `PerLayerClipGaussianSumQuery`'s argument needs N(0, (z C)²) on every coordinate of the
  sum, C the *total* clip (the sensitivity is split across the groups, the noise is not), so std
  z C / S on the released mean: in every tensor, whatever its group clip C_h. For each tensor ℓ,
  the n_ℓ coordinates of all releases, each divided by C_t / S (C_t the round's released clip),
  have sum of squares T_ℓ ~ z_ℓ² χ²(n_ℓ) with z_ℓ the tensor's effective noise multiplier, so
  z_ℓ <= sqrt(T_ℓ / χ²_a(n_ℓ)) at confidence 1 - a (χ²_a the a-quantile). The check fails when
  that upper bound is below the reported z. (Noise above z C is not a breach: the adaptive query
  adds z_v > z to pay for its clipped counts.)

  Correlation. For every pair of tensors, their flattened noise truncated to the shorter length
  and pooled over releases gives r = Σ x y / sqrt(Σ x² Σ y²); for independent noise sqrt(n) r is
  N(0, 1) to a good approximation at the n used here, so the check fails when some |r| sqrt(n)
  exceeds the two-sided normal quantile at a / pairs. Identical noise in two tensors gives
  r = 1. It sees correlation between aligned coordinates only (not noise permuted between
  tensors, nor repeated across rounds: the one-run audit's difference score covers that).

  Half of the significance goes to each test, Bonferroni over tensors and over pairs.

  Args:
    query: the DP query of one round (`PerLayerDPFactory.build_query(value_type)`), with
      diagnostics off; it must release its clips (`clip` in its metrics).
    leaf_shapes: the shapes of the value's tensors.
    leaf_names: their names, in flatten order.
    clients_per_round: S, the query's release is the sum divided by S.
    releases: rounds run on an empty cohort (S zero updates with `zero_updates`).
    zero_updates: client-side noise, which needs exactly S reporting clients.
    significance: the probability that a correct mechanism fails the check (at most).

  Returns:
    The check's result; `details` holds every tensor's upper bound on its effective z and the
    most correlated pair.

  Raises:
    ValueError: for an argument out of range, or not one name per tensor.
  """
  validation.check_positive('clients_per_round', clients_per_round)
  validation.check_positive_integer('releases', releases)
  validation.check_open_unit_interval('significance', significance)
  shapes = [tuple(shape) for shape in leaf_shapes]
  names = list(leaf_names)
  if len(names) != len(shapes):
    raise ValueError(f'`leaf_names` must name the {len(shapes)} tensors of `leaf_shapes`, got '
                     f'{len(names)} names.')
  template = [tf.zeros(shape, tf.float32) for shape in shapes]
  z = rounds_lib.reported_noise_multiplier(query, template)
  sizes = [int(np.prod(shape)) for shape in shapes]
  pairs = list(itertools.combinations(range(len(shapes)), 2))
  observed = rounds_lib.run(query, template, np.zeros(releases, np.int32),
                            _statistics_fn(query, sizes, pairs, clients_per_round),
                            cohort_size=int(clients_per_round), zero_updates=zero_updates)
  totals = observed.sum(axis=0)

  # Scale: one-sided upper bounds on each tensor's effective z, Bonferroni over tensors.
  scale_level = significance / 2 / len(shapes)
  counts = np.asarray(sizes, np.float64) * releases
  sums = totals[:len(shapes)]
  upper = np.sqrt(sums / stats.chi2.ppf(scale_level, counts))
  estimate = np.sqrt(sums / counts)
  scale_ok = bool(np.all(upper >= z))
  worst = int(np.argmin(upper))

  # Correlation: |r| sqrt(n) against the normal quantile, Bonferroni over pairs.
  worst_pair, worst_score, correlation_ok, threshold = None, 0.0, True, math.inf
  if pairs:
    cross = totals[len(shapes):].reshape(len(pairs), 3)
    n = np.array([min(sizes[i], sizes[j]) for i, j in pairs], np.float64) * releases
    r = cross[:, 0] / np.sqrt(np.maximum(cross[:, 1] * cross[:, 2], np.finfo(np.float64).tiny))
    scores = np.abs(r) * np.sqrt(n)
    threshold = float(stats.norm.isf(significance / 2 / len(pairs) / 2))
    top = int(np.argmax(scores))
    worst_pair = (names[pairs[top][0]], names[pairs[top][1]])
    worst_score = float(scores[top])
    correlation_ok = bool(worst_score <= threshold) and bool(np.all(np.isfinite(scores)))

  finding = (f'effective noise multiplier >= {z:.3g} in every tensor (lowest upper bound '
             f'{upper[worst]:.3g}, {names[worst]})' if scale_ok else
             f'noise too small: {names[worst]} has effective noise multiplier <= '
             f'{upper[worst]:.3g} against the reported {z:.3g}')
  if worst_pair is not None:
    finding += ('; no correlation between tensors' if correlation_ok else
                f'; correlated noise: {worst_pair[0]} and {worst_pair[1]} '
                f'(|r| sqrt(n) = {worst_score:.3g} > {threshold:.3g})')
  details = collections.OrderedDict(
      noise_multiplier=z, releases=releases,
      effective_noise_multiplier=dict(zip(names, map(float, estimate), strict=True)),
      effective_noise_multiplier_upper=dict(zip(names, map(float, upper), strict=True)),
      most_correlated_pair=worst_pair, correlation_score=worst_score,
      correlation_threshold=threshold)
  return result_lib.CheckResult('noise', scale_ok and correlation_ok, significance, finding,
                                details)
