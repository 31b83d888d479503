"""`PerLayerDPFactory`: user-level DP aggregation with per-layer clipping, as a TFF factory.

A drop-in for `tff.aggregators.DifferentiallyPrivateFactory` that runs
`per_layer_query.PerLayerClipGaussianSumQuery` (the mechanism and its privacy argument): the
per-layer clipping of Pelikan et al., "Enabling Differentially Private Federated Learning for
Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098 (Sec. 3, Def. 3). Usage: `docs/aggregators.md`.
"""

import collections
import dataclasses
from typing import Optional
from typing import Sequence
from typing import Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.aggregators import allocation as allocation_lib
from fedasr_tff.aggregators import per_layer_query

# The name of the single group of "global" allocation in the measurements.
GLOBAL_GROUP = 'all'


@dataclasses.dataclass(frozen=True)
class PerLayerDPParams:
  """What a `PerLayerDPFactory` runs, checked once (`PerLayerDPFactory.gaussian_fixed` and
  `gaussian_adaptive`, whose Args document each field).

  Attributes:
    noise_multiplier: z, the total multiplier of a round.
    clients_per_round: S >= 1.
    clip: the total clip C (the initial one if adaptive).
    allocation: how C is split over the groups.
    layer_weights: a_h per group, for "weighted".
    normalize: rescale every group to C_h once the delta's norm reaches C.
    noise_placement: "server" or "client".
    grouping: the group of every leaf; None for one group per leaf tensor.
    diagnostics: report un-noised client statistics.
    noise_seed: seed of the server-side noise; None draws one for every process built.
    leaf_names: names of the value's leaves, naming the groups in the measurements.
    target_quantile: γ of adaptive clipping; None for fixed clips.
    learning_rate: η of adaptive clipping.
    clipped_count_stddev: σ_b of the noised clipped counts.
  """
  noise_multiplier: float
  clients_per_round: float
  clip: float
  allocation: str
  layer_weights: Optional[Tuple[float, ...]]
  normalize: bool
  noise_placement: str
  grouping: Optional[Tuple[int, ...]]
  diagnostics: bool
  noise_seed: Optional[int]
  leaf_names: Optional[Sequence[str]]
  target_quantile: Optional[float] = None
  learning_rate: float = 0.0
  clipped_count_stddev: float = 0.0


def _checked_params(noise_multiplier, clients_per_round, clip, clip_name, allocation,
                    layer_weights, normalize, noise_placement, grouping, diagnostics,
                    noise_seed, leaf_names, target_quantile=None, learning_rate=0.0,
                    clipped_count_stddev=None) -> PerLayerDPParams:
  """The `PerLayerDPParams` of a named constructor's arguments, each checked here once."""
  validation.check_non_negative('noise_multiplier', noise_multiplier)
  validation.check_positive(clip_name, clip)
  validation.check_positive('clients_per_round', clients_per_round)
  if clients_per_round < 1:
    raise ValueError(f'`clients_per_round` must be >= 1, got {clients_per_round!r}.')
  allocation_lib.check_allocation(allocation, layer_weights)
  if noise_placement not in per_layer_query.NOISE_PLACEMENTS:
    raise ValueError(f'`noise_placement` must be one of {per_layer_query.NOISE_PLACEMENTS}, '
                     f'got {noise_placement!r}.')
  if grouping is not None:
    grouping = tuple(int(g) for g in grouping)
    if not grouping or min(grouping) < 0:
      raise ValueError(f'`grouping` must give a group index >= 0 for every leaf, got '
                       f'{list(grouping)!r}.')
  if noise_seed is not None:
    validation.check_non_negative_integer('noise_seed', noise_seed)
  if clipped_count_stddev is None:
    # TFF's default σ_b; none without noise.
    clipped_count_stddev = 0.05 * float(clients_per_round) if noise_multiplier > 0 else 0.0
  return PerLayerDPParams(
      float(noise_multiplier), float(clients_per_round), float(clip), allocation,
      None if layer_weights is None else tuple(layer_weights), bool(normalize), noise_placement,
      grouping, bool(diagnostics),
      # None reaches the query, which draws a fresh seed for every process built: two
      # processes sharing one noise stream would let their difference cancel the noise.
      noise_seed, leaf_names, target_quantile, float(learning_rate), float(clipped_count_stddev))


class PerLayerDPFactory(tff.aggregators.UnweightedAggregationFactory):
  """Unweighted DP mean of client deltas with global or per-layer clipping.

  Use the named constructors `gaussian_fixed` and `gaussian_adaptive`. `create` wraps the query
  in `tfp.NormalizedQuery` (division by `clients_per_round`) and hands it to TFF's
  `tff.aggregators.DifferentiallyPrivateFactory`, so the process has TFF's state and
  measurements: `tff.aggregators.differential_privacy.extract_dp_event_from_state(state)`
  returns the round's `DpEvent`, and the measurements of
  `PerLayerClipGaussianSumQuery.derive_metrics` are under `dp_query_metrics`. By default they
  hold no client statistic; `diagnostics=True` adds the exact, un-noised ones (outside the DP
  guarantee).

  The measurements key every group by its name: `GLOBAL_GROUP` ('all') for the single group of
  "global" allocation; with one group per leaf tensor (the default grouping) the leaf's name from
  `leaf_names` (for a model, its tensor names in flatten order, such as `block_00/w1/kernel`);
  `group_<h>` for a custom `grouping` or without `leaf_names`.
  """

  @classmethod
  def gaussian_fixed(cls,
                     noise_multiplier: float,
                     clients_per_round: float,
                     clip: float,
                     allocation: str = 'dim',
                     layer_weights: Optional[Sequence[float]] = None,
                     normalize: bool = False,
                     noise_placement: str = 'server',
                     grouping: Optional[Sequence[int]] = None,
                     diagnostics: bool = False,
                     noise_seed: Optional[int] = None,
                     leaf_names: Optional[Sequence[str]] = None) -> 'PerLayerDPFactory':
    """Fixed per-layer clipping and Gaussian noise of std `noise_multiplier * clip` on the sum.

    Args:
      noise_multiplier: z >= 0, noise std on the cohort sum in units of `clip`. For σ_DP, the
        paper's noise on the averaged update in units of C, z = σ_DP · S
        (`fedasr_tff.privacy.noise_multiplier_from_sigma_dp`).
      clients_per_round: S >= 1; the sum is divided by S.
      clip: the total clip C > 0.
      allocation: "global", "uniform", "dim" or "weighted" (`allocation` module).
      layer_weights: a_h per group, for "weighted" only.
      normalize: rescale every group to exactly C_h when the delta's norm is >= C, as the
        paper's released code does; below C the delta is left alone.
      noise_placement: "server" adds the noise to the sum; "client" adds std z·C/sqrt(S) to each
        client's clipped delta (the paper's Algorithm 1), which needs exactly S clients a round
        and, for the same guarantee, a server that only sees the sum (secure aggregation).
      grouping: group index of every leaf of the value (flatten order); default one group per
        leaf tensor.
      diagnostics: also report exact per-group client statistics of the round (mean norms
        before and after clipping, clipped fractions, non-finite and participating client
        counts), which are outside the DP guarantee (see `per_layer_query`). Off by default:
        the measurements then hold only the clips, `noise_stddev` and the norms of the noised
        release, functions of what the guarantee covers.
      noise_seed: seed of the server-side noise, kept and advanced in the aggregator state so a
        restored checkpoint replays the same noise; None (the default) draws a new one from OS
        entropy for every process `create` builds. Fix it only for reproducible simulations:
        knowing it reveals the noise.
      leaf_names: names of the value's leaf tensors in flatten order (e.g. the model's tensor
        names), unique; with the default grouping they name the groups in the measurements
        (class docstring). Checked against the value when the process is created.

    Returns:
      A `PerLayerDPFactory`.

    Raises:
      ValueError: for an argument out of range or inconsistent with the others.
    """
    tff_default_context.warn_if_current('aggregators.PerLayerDPFactory.gaussian_fixed')
    return cls(_checked_params(noise_multiplier, clients_per_round, clip, 'clip', allocation,
                               layer_weights, normalize, noise_placement, grouping, diagnostics,
                               noise_seed, leaf_names))

  @classmethod
  def gaussian_adaptive(cls,
                        noise_multiplier: float,
                        clients_per_round: float,
                        initial_clip: float,
                        target_quantile: float = 0.5,
                        learning_rate: float = 0.2,
                        allocation: str = 'dim',
                        layer_weights: Optional[Sequence[float]] = None,
                        clipped_count_stddev: Optional[float] = None,
                        noise_placement: str = 'server',
                        grouping: Optional[Sequence[int]] = None,
                        diagnostics: bool = False,
                        noise_seed: Optional[int] = None,
                        leaf_names: Optional[Sequence[str]] = None) -> 'PerLayerDPFactory':
    """Per-group adaptive clipping (geometric quantile tracking) and Gaussian noise.

    The clips start at the allocation of `initial_clip` and each group's clip tracks the
    `target_quantile` of its norms. `noise_multiplier` is the *total* z of a round, shared
    between the value noise and the H noised clipped counts (see `per_layer_query`).

    Args:
      noise_multiplier: total z >= 0 of one round.
      clients_per_round: S >= 1.
      initial_clip: initial total clip C > 0.
      target_quantile: γ in (0, 1), fraction of clients per group left unclipped.
      learning_rate: η >= 0 of the geometric update C_h <- C_h exp(-η (u_h - γ)).
      allocation, layer_weights, noise_placement, grouping, diagnostics, noise_seed,
        leaf_names: as in `gaussian_fixed`.
      clipped_count_stddev: σ_b; default 0.05 * S (TFF's default), 0 when z = 0.

    Returns:
      A `PerLayerDPFactory`.

    Raises:
      ValueError: for an argument out of range or inconsistent with the others; the clipped
        counts' budget is checked when the query is built
        (`per_layer_query.adaptive_value_noise_multiplier`).
    """
    tff_default_context.warn_if_current('aggregators.PerLayerDPFactory.gaussian_adaptive')
    validation.check_open_unit_interval('target_quantile', target_quantile)
    validation.check_non_negative('learning_rate', learning_rate)
    if clipped_count_stddev is not None:
      validation.check_non_negative('clipped_count_stddev', clipped_count_stddev)
    return cls(_checked_params(
        noise_multiplier, clients_per_round, initial_clip, 'initial_clip', allocation,
        layer_weights, False, noise_placement, grouping, diagnostics, noise_seed, leaf_names,
        target_quantile, float(learning_rate), clipped_count_stddev))

  def __init__(self, params: PerLayerDPParams):
    """Use `gaussian_fixed` or `gaussian_adaptive`, which check the parameters.

    Args:
      params: the checked `PerLayerDPParams`.
    """
    if not isinstance(params, PerLayerDPParams):
      raise TypeError(f'`params` must be a PerLayerDPParams (use `gaussian_fixed` or '
                      f'`gaussian_adaptive`), got {type(params).__name__}.')
    self._params = params

  @property
  def params(self) -> PerLayerDPParams:
    """The parameters the factory runs."""
    return self._params

  def _groups(self, leaves):
    """Group index per leaf and number of parameters per group."""
    if self._params.allocation == 'global':
      group_ids = [0] * len(leaves)
    elif self._params.grouping is not None:
      if len(self._params.grouping) != len(leaves):
        raise ValueError(f'`grouping` has {len(self._params.grouping)} entries but the value has '
                         f'{len(leaves)} tensors.')
      group_ids = self._params.grouping
      if sorted(set(group_ids)) != list(range(max(group_ids) + 1)):
        raise ValueError(f'`grouping` must use every group index 0..H-1, got {list(group_ids)!r}.')
    else:
      group_ids = list(range(len(leaves)))
    sizes = np.zeros(max(group_ids) + 1)
    for group, leaf in zip(group_ids, leaves, strict=True):
      sizes[group] += leaf.shape.num_elements()
    return group_ids, sizes

  def _group_names(self, leaves, num_groups):
    """The groups' names in the measurements (class docstring), after checking `leaf_names`."""
    leaf_names = self._params.leaf_names
    if leaf_names is not None:
      if isinstance(leaf_names, str) or not all(isinstance(n, str) for n in leaf_names):
        raise ValueError(f'`leaf_names` must be a sequence of strings, got {leaf_names!r}.')
      leaf_names = list(leaf_names)
      if len(leaf_names) != len(leaves):
        raise ValueError(f'`leaf_names` has {len(leaf_names)} names but the value has '
                         f'{len(leaves)} tensors.')
      duplicates = sorted(n for n, count in collections.Counter(leaf_names).items() if count > 1)
      if duplicates:
        raise ValueError(f'`leaf_names` must be unique, got {duplicates!r} more than once.')
    if self._params.allocation == 'global':
      return [GLOBAL_GROUP]
    if self._params.grouping is None and leaf_names is not None:
      return leaf_names
    return [f'group_{h}' for h in range(num_groups)]

  @property
  def clients_per_round(self) -> float:
    """S, the divisor of the sum."""
    return self._params.clients_per_round

  @property
  def noise_placement(self) -> str:
    """"server" or "client" (`gaussian_fixed`)."""
    return self._params.noise_placement

  @property
  def diagnostics(self) -> bool:
    """Whether the measurements include client statistics."""
    return self._params.diagnostics

  def build_query(self, value_type) -> tfp.DPQuery:
    """The normalized DPQuery this factory runs for `value_type`.

    Args:
      value_type: the TFF type of a client's value (all leaves floating, fully defined shapes).

    Returns:
      `build_sum_query(value_type)` inside a `tfp.NormalizedQuery` dividing by S.
    """
    return tfp.NormalizedQuery(self.build_sum_query(value_type),
                               denominator=self._params.clients_per_round)

  def build_sum_query(self, value_type) -> per_layer_query.PerLayerClipGaussianSumQuery:
    """The clipped, noised sum query for `value_type`, before division by the cohort.

    Args:
      value_type: the TFF type of a client's value.

    Returns:
      A `PerLayerClipGaussianSumQuery` with one group per leaf (or by `grouping`), the clips of
      the allocation and the value noise multiplier (for adaptive clipping, what is left of z
      after the clipped counts).

    Raises:
      ValueError: if `value_type` has no tensors, a non-floating leaf or an undefined shape, or
        does not match `grouping` or `leaf_names`.
    """
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    leaves = tf.nest.flatten(specs)
    if not leaves:
      raise ValueError(f'`value_type` {value_type} has no tensors to aggregate.')
    for leaf in leaves:
      if not leaf.dtype.is_floating:
        raise ValueError(f'`value_type` must hold only floating-point tensors, got {leaf.dtype} '
                         f'in {value_type}.')
      if not leaf.shape.is_fully_defined():
        raise ValueError(f'`value_type` must have fully defined shapes, got {leaf.shape} in '
                         f'{value_type}.')
    group_ids, sizes = self._groups(leaves)
    group_names = self._group_names(leaves, len(sizes))
    params = self._params
    clips = allocation_lib.group_clips(params.clip, sizes, params.allocation,
                                       params.layer_weights)
    if params.target_quantile is None:
      value_noise_multiplier = params.noise_multiplier
    else:
      value_noise_multiplier = per_layer_query.adaptive_value_noise_multiplier(
          params.noise_multiplier, params.clipped_count_stddev, len(clips))
    return per_layer_query.PerLayerClipGaussianSumQuery(
        group_ids,
        clips,
        value_noise_multiplier,
        params.clients_per_round,
        normalize=params.normalize,
        noise_placement=params.noise_placement,
        target_quantile=params.target_quantile,
        learning_rate=params.learning_rate,
        clipped_count_stddev=params.clipped_count_stddev,
        diagnostics=params.diagnostics,
        noise_seed=params.noise_seed,
        group_names=group_names)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    """Creates the aggregation process for `value_type`.

    Args:
      value_type: the TFF type of a client's value.

    Returns:
      TFF's `DifferentiallyPrivateFactory` process running `build_query(value_type)`.
    """
    return tff.aggregators.DifferentiallyPrivateFactory(self.build_query(value_type)).create(
        value_type)
