"""Direct check of the clipping: canaries the ε audits never send, and what the release makes
of them.

The ε audits' canaries have the same norm in every tensor, far above every clip, and are finite,
so a mechanism that mishandles any other record passes them. This check sends one canary of each
other kind (`canary_leaf_norms`), present in every one of R rounds of the query, and tests the
release for the sensitivity bound and for the documented clipping (`audit`).
"""

import collections
from typing import List
from typing import Sequence

import numpy as np
from scipy import stats
import tensorflow as tf
import tensorflow_privacy as tfp

from fedasr_tff import validation
from fedasr_tff.audit import canaries as canaries_lib
from fedasr_tff.audit import result as result_lib
from fedasr_tff.audit import rounds as rounds_lib

CANARIES = ('below_clip', 'one_leaf', 'at_total_clip', 'non_finite')

# Far beyond any clip, as the ε audits' canaries (`mechanism`).
_FAR = 1e3


def canary_leaf_norms(kind: str, leaf_groups: Sequence[int],
                      group_clips: Sequence[float]) -> np.ndarray:
  """λ_ℓ, the norm of every leaf of a canary, for clips C_h.

      below_clip      every group at half its clip C_h (total C / 2): must pass unclipped,
                      exactly.
      one_leaf        one leaf, of the group with the smallest clip, at 1,000 C; the rest zero.
      at_total_clip   every group at the total clip C: above its own C_h, each within C alone,
                      in all sqrt(H) C.
      non_finite      every leaf at 1,000 C, with a NaN entry: the mechanism may zero it or clip
                      it, but the release must stay finite and move by at most C.

  A group's norm is spread evenly over its leaves.

  Args:
    kind: one of `CANARIES`.
    leaf_groups: the clipping group of every leaf.
    group_clips: C_h.

  Returns:
    λ_ℓ for every leaf, float64.

  Raises:
    ValueError: for an unknown `kind`.
  """
  groups = np.asarray(leaf_groups)
  clips = np.asarray(group_clips, np.float64)
  total = np.sqrt(np.sum(clips**2))
  # A group's norm is spread evenly over its k_h leaves.
  per_leaf = 1.0 / np.sqrt(np.bincount(groups, minlength=len(clips)))[groups]
  if kind == 'below_clip':
    return clips[groups] / 2 * per_leaf
  if kind == 'at_total_clip':
    return total * per_leaf
  if kind == 'one_leaf':
    norms = np.zeros(len(groups))
    norms[int(np.argmax(groups == np.argmin(clips)))] = _FAR * total
    return norms
  if kind == 'non_finite':
    return np.full(len(groups), _FAR * total)
  raise ValueError(f'`kind` must be one of {CANARIES}, got {kind!r}.')


def _canary(shapes, norms, seed, non_finite):
  """The canary's leaves λ_ℓ u_ℓ and its unit leaves u_ℓ; a NaN first entry if `non_finite`."""
  units = canaries_lib.canary_directions(shapes, seed)
  leaves = [float(n) * u for n, u in zip(norms, units, strict=True)]
  if non_finite:
    first = tf.reshape(leaves[0], [-1])
    first = tf.tensor_scatter_nd_update(first, [[0]], [np.nan])
    leaves[0] = tf.reshape(first, shapes[0])
  return leaves, units


def _observe_fn(query, units, group_names):
  """observe(released, state): the projections <release_ℓ, u_ℓ>, then the round's C_h."""

  def observe(released, state):
    _, clips = rounds_lib.released_clips(query, state)
    projections = [tf.reduce_sum(r * u) for r, u in zip(released, units, strict=True)]
    return tf.stack(projections + [tf.cast(clips[name], tf.float32) for name in group_names])

  return observe


def _check(kind, projections, clips, leaf_groups, norms, normalize, significance, leaf_names):
  """The verdict on one canary from its projections [R, leaves] and clips [R, groups]."""
  rounds = len(projections)
  totals = np.sqrt(np.sum(clips**2, axis=1))
  details = collections.OrderedDict(canary=kind, rounds=rounds,
                                    canary_norm=float(np.linalg.norm(norms)))
  if not np.all(np.isfinite(projections)):
    return result_lib.CheckResult(f'clipping/{kind}', False, significance,
                                  'the release is not finite', details)
  fidelity = kind != 'non_finite'
  level = significance / 2 if fidelity else significance

  # Sensitivity: the contribution along v, in units of the round's C, at most 1.
  along = projections @ (norms / np.linalg.norm(norms)) / totals
  lower = along.mean() - stats.t.ppf(1 - level, rounds - 1) * along.std(ddof=1) / np.sqrt(rounds)
  details['contribution_along_canary'] = float(along.mean())
  details['contribution_lower_bound'] = float(lower)
  passed = lower <= 1.0
  finding = (f'the canary (norm {details["canary_norm"]:.3g} C) moves the release by '
             f'{along.mean():.3g} C along itself')
  if not passed:
    finding += f', at least {lower:.3g} C: above the sensitivity C'

  if fidelity:
    expected = np.stack([canaries_lib.clipped_canary_weights(leaf_groups, c, norms, normalize)
                         for c in clips])
    used = norms > 0
    residuals = (projections - expected)[:, used] / totals[:, None]
    t = residuals.mean(axis=0) / (residuals.std(axis=0, ddof=1) / np.sqrt(rounds))
    threshold = stats.t.isf(level / used.sum() / 2, rounds - 1)
    worst = int(np.argmax(np.abs(t)))
    name = np.asarray(leaf_names)[used][worst]
    details['expected_norm'] = float(np.linalg.norm(expected.mean(axis=0)))
    details['worst_leaf'] = str(name)
    details['worst_leaf_t'] = float(t[worst])
    details['worst_leaf_expected'] = float(expected[:, used][:, worst].mean())
    details['worst_leaf_measured'] = float(projections[:, used][:, worst].mean())
    if abs(t[worst]) > threshold:
      passed = False
      finding += (f'; not the documented clipping: {name} moves by '
                  f'{details["worst_leaf_measured"]:.3g} against '
                  f'{details["worst_leaf_expected"]:.3g} (t = {t[worst]:.3g})')
  return result_lib.CheckResult(f'clipping/{kind}', bool(passed), significance, finding,
                                details)


def audit(query: tfp.DPQuery,
          leaf_shapes: Sequence[Sequence[int]],
          leaf_names: Sequence[str],
          *,
          clients_per_round: float,
          rounds: int = 200,
          normalize: bool = False,
          zero_updates: bool = False,
          significance: float = 1e-3,
          audit_seed: int = 0) -> List[result_lib.CheckResult]:
  """Sends each canary of `CANARIES` through `rounds` rounds of `query` and tests the release.

  The measurement is the projection p_ℓ of the released sum (times S) on each of the canary's
  unit leaves u_ℓ. Two tests, each a t-test on the R rounds (the noise's own spread, whatever its
  placement):

  * Sensitivity (every canary): the projection of the release on the canary's unit direction
    v = Σ_ℓ λ_ℓ u_ℓ / ||λ|| is at most the norm of the canary's contribution, which must be at
    most C_t (the round's released total clip). The check fails when its lower confidence bound,
    in units of C_t, exceeds 1, or when a release is not finite.
  * Fidelity (the finite canaries): the documented clipping (`PerLayerClipGaussianSumQuery`,
    step 2; `canaries.clipped_canary_weights` with the round's released clips) makes leaf ℓ
    w_ℓ u_ℓ; the check fails when some leaf's mean p_ℓ - w_ℓ differs from 0 (two-sided,
    Bonferroni over leaves).

  Each test of a canary gets half of its significance (all of it for `non_finite`).

  Args:
    query: the DP query of one round (`PerLayerDPFactory.build_query(value_type)`), with
      diagnostics off; it must release its clips (`per_group` in its metrics, keyed by the
      leaf names, or one group).
    leaf_shapes: the shapes of the value's tensors.
    leaf_names: their names, in flatten order.
    clients_per_round: S, the query's release is the sum divided by S.
    rounds: R, rounds per canary (>= 10).
    normalize: the query rescales to C_h (`PerLayerDPFactory`'s normalize).
    zero_updates: client-side noise: the canary and S - 1 zero updates a round.
    significance: the probability that a correct mechanism fails one canary's check (at most).
    audit_seed: seed of the canaries' directions.

  Returns:
    One result per canary, in the order of `CANARIES`.

  Raises:
    ValueError: for an argument out of range or fewer than 10 rounds.
  """
  validation.check_positive('clients_per_round', clients_per_round)
  validation.check_positive_integer('rounds', rounds)
  if rounds < 10:
    raise ValueError(f'`rounds` must be >= 10 (a t-test on the rounds), got {rounds}.')
  validation.check_open_unit_interval('significance', significance)
  shapes = [tuple(shape) for shape in leaf_shapes]
  _, clips = rounds_lib.released_clips(query, query.initial_global_state())
  group_names = list(clips)
  leaf_groups, initial_clips = canaries_lib.leaf_groups_and_clips(
      {name: {'clip': float(clip)} for name, clip in clips.items()}, leaf_names)
  results = []
  for i, kind in enumerate(CANARIES):
    norms = canary_leaf_norms(kind, leaf_groups, initial_clips)
    seed = canaries_lib.canary_seed(audit_seed, i, 1)
    canary, units = _canary(shapes, norms, seed, kind == 'non_finite')
    observed = rounds_lib.run(query, canary, np.ones(rounds, np.int32),
                              _observe_fn(query, units, group_names),
                              cohort_size=int(clients_per_round), zero_updates=zero_updates)
    projections = observed[:, :len(shapes)] * clients_per_round
    round_clips = observed[:, len(shapes):]
    results.append(_check(kind, projections, round_clips, leaf_groups, norms, normalize,
                          significance, leaf_names))
  return results
