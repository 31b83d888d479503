"""`BoundedWeightDPFactory`: a user-level DP *weighted* mean of client deltas, with bounded weights.

Data-dependent aggregation weights, such as those of dynamic gradient aggregation (Dimitriadis,
Kumatani, Gmyr, Gaur and Eskimez, "Federated Transfer Learning with Dynamic Gradient
Aggregation", arXiv:2008.02452, Eq. 6; `algorithms.dga`), change the sensitivity of the mean,
and the loss that drives them is client data. This mechanism (our design; the DGA paper has no
DP) bounds every weight to [w_min, 1], weights the per-layer clipped delta after the clip, noises
the weighted sum and the weight sum, and divides by the noised weight sum floored at a public F:
one Gaussian mechanism a round (`BoundedWeightMeanQuery` states the argument). Usage:
`docs/dga.md`.
"""

import collections
import math
from typing import Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.aggregators import noise_seeds
from fedasr_tff.aggregators import per_layer_dp
from fedasr_tff.aggregators import per_layer_query

# Default fraction of a round's privacy budget (in 1/z² units) spent on the weight sum.
DEFAULT_WEIGHT_BUDGET = 0.1

# The record the DP query sees: the client's delta and its aggregation weight.
UPDATE, WEIGHT = 'update', 'weight'

_GlobalState = collections.namedtuple(
    '_GlobalState', ['value_state', 'noise_seed', 'weight_sum', 'denominator',
                     'exact_weight_sum'])


def combined_noise_multiplier(*noise_multipliers: float) -> float:
  """The multiplier z of Gaussian mechanisms on one client released together.

  Measured in the units of its own noise, each mechanism's sensitivity is 1/z_i, and these add
  in quadrature: 1/z² = Σ_i 1/z_i².

  Args:
    *noise_multipliers: the mechanisms' multipliers z_i.

  Returns:
    z; 0.0 if any z_i is 0 (a release without noise).
  """
  if any(z <= 0 for z in noise_multipliers):
    return 0.0
  return sum(z**-2 for z in noise_multipliers)**-0.5


def split_noise_multiplier(noise_multiplier: float, weight_budget: float):
  """Splits a round's budget between the value sum and the weight sum.

  In 1/z² units: 1/z_weight² = f/z² and 1/z_value² = (1 − f)/z², so
  `combined_noise_multiplier(z_value, z_weight)` is z.

  Args:
    noise_multiplier: the round's total z >= 0.
    weight_budget: f in (0, 1), the fraction spent on the weight sum.

  Returns:
    (z_value, z_weight); (0.0, 0.0) when z is 0.

  Raises:
    ValueError: if z < 0 or f is not in (0, 1).
  """
  validation.check_non_negative('noise_multiplier', noise_multiplier)
  validation.check_open_unit_interval('weight_budget', weight_budget)
  if noise_multiplier == 0:
    return 0.0, 0.0
  return (noise_multiplier / math.sqrt(1.0 - weight_budget),
          noise_multiplier / math.sqrt(weight_budget))


class BoundedWeightMeanQuery(tfp.SumAggregationDPQuery):
  """Weighted mean of per-layer clipped records with weights in [w_min, 1].

  Records are mappings {`UPDATE`: delta, `WEIGHT`: scalar weight}. A plain DP mean releases the
  noised sum of clipped deltas divided by a public S; a weighted mean Σ_k w_k Δ_k / Σ_k w_k needs
  the weights' sum as well, and a client with a large weight moves it more. So:

  1. Bound every weight: w_k <- min(max(w_k, w_min), 1), a non-finite weight becomes w_min, so
     w_k ∈ [w_min, 1] for any input (w_min > 0 is public; DGA's weights are exp(−β(L − L_ref))
     of a loss clipped to a public range, which lands in [w_min, 1] already).
  2. Clip the delta with the per-layer query (total norm <= C for any finite input, a non-finite
     delta counts as zero) and multiply it by its weight *after* the clip (clipping w·Δ instead
     would drop the weight of every clipped client, and under DP nearly all are).
  3. Sum both over the cohort and add Gaussian noise: N(0, (z_v C)²) to every coordinate of the
     value sum (server-side, by the per-layer query), N(0, z_w²) to the weight sum.
  4. Release the value sum divided by max(ŵ, F), with ŵ the noised weight sum and F > 0 a public
     floor (the factory's default w_min·S for the expected cohort S: the least weight sum of a
     cohort of S).

  Privacy. Adding or removing one client moves the value sum by w_k·clip(Δ_k), of norm <= C
  (w_k <= 1), and the weight sum by w_k <= 1, whatever the client's loss and delta. Measured in
  the units of their noise, the two sensitivities are 1/z_v and 1/z_w, and (with adaptive
  clipping) the H clipped counts add H/(2σ_b)² as in `per_layer_query`; the round is one Gaussian
  mechanism of multiplier z with

      1/z² = 1/z_v² + H/(2σ_b)² + 1/z_w²,

  reported as one `GaussianDpEvent(z)` (not a composition of events: see
  `PerLayerClipGaussianSumQuery` on dp-accounting's handling of composed Gaussians under Poisson
  sampling). The division by max(ŵ, F) is post-processing of the two noised sums and the public
  F: it releases nothing more, and the floor keeps a noised weight sum near zero or below from
  blowing up or flipping the update (the released mean has norm at most
  ||noised value sum|| / F). The effective noise std on every coordinate of the mean is
  z_v·C / max(ŵ, F), reported as `noise_stddev`.

  Only server-side noise: noise placed on the clients would be multiplied by the weight as well.
  """

  def __init__(self, value_query: per_layer_query.PerLayerClipGaussianSumQuery,
               weight_noise_multiplier: float, min_weight: float, weight_sum_floor: float,
               clients_per_round: float, *, diagnostics: bool = False,
               noise_seed: Optional[int] = None):
    """Initializes the query.

    Args:
      value_query: the per-layer clipped, noised sum of the deltas (not normalized), with
        server-side noise.
      weight_noise_multiplier: z_w >= 0, the noise std on the weight sum (sensitivity 1); > 0
        exactly when the value query adds noise.
      min_weight: w_min in (0, 1].
      weight_sum_floor: F > 0, the least denominator.
      clients_per_round: S, for the reported per-layer noise std.
      diagnostics: also keep and report the exact weight sum (a client statistic, outside
        the guarantee; off by default).
      noise_seed: seed of the weight noise, kept in this query's global state and split every
        round, so a restored state replays it (the per-layer query keeps its own seed for the
        value noise); None draws one from OS entropy (`noise_seeds.fresh_noise_seed`,
        which leaves it unset inside `noise_seeds.unset_noise_seeds()`).

    Raises:
      ValueError: for a value query that is not a server-noised `PerLayerClipGaussianSumQuery`,
        noise on only one of the two sums, or an argument out of range.
    """
    if not isinstance(value_query, per_layer_query.PerLayerClipGaussianSumQuery):
      raise ValueError('`value_query` must be a PerLayerClipGaussianSumQuery, got '
                       f'{value_query!r}.')
    if value_query.noise_placement != 'server':
      raise ValueError('A weighted DP mean needs `noise_placement`="server": client noise would '
                       'be scaled by the weight.')
    validation.check_non_negative('weight_noise_multiplier', weight_noise_multiplier)
    if (weight_noise_multiplier > 0) != (value_query.noise_multiplier > 0):
      raise ValueError('Noise on the weight sum and on the deltas go together: got '
                       f'weight_noise_multiplier={weight_noise_multiplier!r} and a value '
                       f'noise multiplier of {value_query.noise_multiplier!r}.')
    validation.check_sampling_rate('min_weight', min_weight)
    validation.check_positive('weight_sum_floor', weight_sum_floor)
    self._value_query = value_query
    self._weight_noise_multiplier = float(weight_noise_multiplier)
    self._min_weight = float(min_weight)
    self._floor = float(weight_sum_floor)
    self._clients_per_round = float(clients_per_round)
    self._diagnostics = diagnostics
    self._noise_seed = (noise_seeds.fresh_noise_seed() if noise_seed is None
                        else int(noise_seed))
    self._noise_multiplier = combined_noise_multiplier(value_query.noise_multiplier,
                                                       self._weight_noise_multiplier)

  @property
  def noise_multiplier(self) -> float:
    """z of the round's one Gaussian mechanism, as reported."""
    return self._noise_multiplier

  def bounded_weight(self, weight) -> tf.Tensor:
    """Bounds a client's weight (class docstring, step 1).

    Args:
      weight: the client's aggregation weight, a scalar.

    Returns:
      The float32 weight clipped to [w_min, 1]; w_min for a non-finite weight.
    """
    weight = tf.cast(weight, tf.float32)
    bounded = tf.clip_by_value(weight, self._min_weight, 1.0)
    return tf.where(tf.math.is_finite(weight), bounded, self._min_weight)

  def initial_global_state(self):
    """The global state before the first round.

    Returns:
      A `_GlobalState`: the value query's initial state, the weight noise seed, a zero weight
      sum, the floor F as denominator and (with diagnostics) a zero exact weight sum.
    """
    zero = tf.constant(0.0)
    return _GlobalState(self._value_query.initial_global_state(),
                        tf.constant([0, self._noise_seed], tf.int64), zero,
                        tf.constant(self._floor), zero if self._diagnostics else ())

  def derive_sample_params(self, global_state):
    """The value query's sample parameters (the round's clips).

    Args:
      global_state: this query's global state.

    Returns:
      The value query's `derive_sample_params` of its state, once the weight noise seed is
      checked to be set (`noise_seeds.after_noise_seed_check`).
    """
    return noise_seeds.after_noise_seed_check(
        global_state.noise_seed, self._value_query.derive_sample_params(global_state.value_state))

  def initial_sample_state(self, template=None):
    """An empty sum of records.

    Args:
      template: a record, {`UPDATE`: nest of tensors or specs, `WEIGHT`: scalar}.

    Returns:
      (the value query's empty sum for `template[UPDATE]`, a zero weight sum).
    """
    return (self._value_query.initial_sample_state(template[UPDATE]),
            tf.zeros([], tf.float32))

  def preprocess_record(self, params, record):
    """Bounds the weight, clips the delta and weighs it (class docstring, steps 1 and 2).

    Args:
      params: the round's clips (`derive_sample_params`).
      record: {`UPDATE`: the client's delta, `WEIGHT`: its aggregation weight}.

    Returns:
      (the value query's preprocessed record with its value multiplied by the bounded weight,
      the bounded weight).
    """
    weight = self.bounded_weight(record[WEIGHT])
    value, below, diagnostics = self._value_query.preprocess_record(params, record[UPDATE])
    # After the clip: ||w · clip(Δ)|| <= C for w <= 1.
    value = tf.nest.map_structure(lambda x: x * tf.cast(weight, x.dtype), value)
    return (value, below, diagnostics), weight

  def get_noised_result(self, sample_state, global_state):
    """Noises both sums and divides (class docstring, steps 3 and 4).

    Args:
      sample_state: the cohort's sums of `preprocess_record`'s outputs.
      global_state: this query's global state.

    Returns:
      (the weighted mean, the next global state, `GaussianDpEvent(z)` with z the round's total
      multiplier, `noise_multiplier`).
    """
    value_sample, weight_sum = sample_state
    value_sum, value_state, _ = self._value_query.get_noised_result(value_sample,
                                                                    global_state.value_state)
    seeds = tf.random.experimental.stateless_split(global_state.noise_seed, 2)
    noised_weight_sum = weight_sum
    if self._weight_noise_multiplier > 0:
      noised_weight_sum += per_layer_query.gaussian_noise([], self._weight_noise_multiplier,
                                                          tf.float32, seeds[0])
    denominator = tf.maximum(noised_weight_sum, self._floor)
    result = tf.nest.map_structure(lambda x: x / tf.cast(denominator, x.dtype), value_sum)
    new_state = _GlobalState(value_state, seeds[1], noised_weight_sum, denominator,
                             weight_sum if self._diagnostics else ())
    return result, new_state, dp_accounting.GaussianDpEvent(self._noise_multiplier)

  def derive_metrics(self, global_state):
    """The measurements of the round just run.

    Args:
      global_state: the global state `get_noised_result` returned.

    Returns:
      The value query's measurements (`clip`, `per_group`, with diagnostics
      `client_statistics`; `PerLayerClipGaussianSumQuery.derive_metrics`), with `noise_stddev`
      and the per-group norms rescaled to the weighted mean, plus `weight_sum` ŵ and
      `weight_denominator` max(ŵ, F) (both public); with diagnostics also
      `client_statistics/weight_sum`, the exact Σ w_k (outside the guarantee, like the other
      client statistics).
    """
    metrics = self._value_query.derive_metrics(global_state.value_state)
    # The value query reports the std on the sum divided by S; here the sum is divided by the
    # round's denominator.
    rescale = self._clients_per_round / global_state.denominator
    metrics['noise_stddev'] = metrics['noise_stddev'] * rescale
    for group in metrics['per_group'].values():
      group['released_norm'] = group['released_norm'] * rescale
      group['noise_norm'] = group['noise_norm'] * rescale
    metrics['weight_sum'] = global_state.weight_sum
    metrics['weight_denominator'] = global_state.denominator
    if self._diagnostics:
      metrics['client_statistics']['weight_sum'] = global_state.exact_weight_sum
    return metrics


class BoundedWeightDPFactory(tff.aggregators.WeightedAggregationFactory):
  """DP weighted mean of client deltas with weights in [w_min, 1] (`BoundedWeightMeanQuery`).

  Use the named constructors `gaussian_fixed` and `gaussian_adaptive`; the weight passed to the
  process's `next` is each client's aggregation weight (for DGA, `algorithms.dga`).
  """

  @classmethod
  def gaussian_fixed(cls, noise_multiplier: float, clients_per_round: float, clip: float,
                     min_weight: float, weight_budget: float = DEFAULT_WEIGHT_BUDGET,
                     weight_sum_floor: Optional[float] = None,
                     noise_seed: Optional[int] = None,
                     **per_layer_kwargs) -> 'BoundedWeightDPFactory':
    """Fixed per-layer clipping (`PerLayerDPFactory.gaussian_fixed`), total multiplier z.

    Args:
      noise_multiplier: the round's total z >= 0, shared with the weight sum.
      clients_per_round: S >= 1, the expected cohort.
      clip: the total clip C > 0.
      min_weight: w_min in (0, 1].
      weight_budget: f in (0, 1), the fraction of the budget spent on the weight sum.
      weight_sum_floor: F > 0; default w_min·S.
      noise_seed: seed of both noise streams (the value's and the weight's); None draws fresh
        ones. For reproducible simulations only.
      **per_layer_kwargs: `allocation`, `layer_weights`, `normalize`, `grouping`,
        `diagnostics`, `leaf_names` of `PerLayerDPFactory.gaussian_fixed`.

    Returns:
      A `BoundedWeightDPFactory`.

    Raises:
      ValueError: for an argument out of range.
    """
    tff_default_context.warn_if_current('aggregators.BoundedWeightDPFactory.gaussian_fixed')
    value_z, weight_z = split_noise_multiplier(noise_multiplier, weight_budget)
    value_factory = per_layer_dp.PerLayerDPFactory.gaussian_fixed(
        value_z, clients_per_round, clip, noise_seed=noise_seed, **per_layer_kwargs)
    return cls(value_factory, weight_z, min_weight, weight_sum_floor, noise_seed)

  @classmethod
  def gaussian_adaptive(cls, noise_multiplier: float, clients_per_round: float,
                        initial_clip: float, min_weight: float,
                        weight_budget: float = DEFAULT_WEIGHT_BUDGET,
                        weight_sum_floor: Optional[float] = None,
                        noise_seed: Optional[int] = None,
                        **per_layer_kwargs) -> 'BoundedWeightDPFactory':
    """Per-group adaptive clipping (`PerLayerDPFactory.gaussian_adaptive`), total multiplier z.

    The value part's share of the budget is split again between the value noise and the
    clipped counts.

    Args:
      noise_multiplier: the round's total z >= 0, shared with the weight sum.
      clients_per_round: S >= 1, the expected cohort.
      initial_clip: the initial total clip C > 0.
      min_weight: w_min in (0, 1].
      weight_budget: f in (0, 1), the fraction of the budget spent on the weight sum.
      weight_sum_floor: F > 0; default w_min·S.
      noise_seed: as in `gaussian_fixed`.
      **per_layer_kwargs: further arguments of `PerLayerDPFactory.gaussian_adaptive`
        (`target_quantile`, `learning_rate`, `clipped_count_stddev`, `allocation`, ...).

    Returns:
      A `BoundedWeightDPFactory`.

    Raises:
      ValueError: for an argument out of range.
    """
    tff_default_context.warn_if_current('aggregators.BoundedWeightDPFactory.gaussian_adaptive')
    value_z, weight_z = split_noise_multiplier(noise_multiplier, weight_budget)
    value_factory = per_layer_dp.PerLayerDPFactory.gaussian_adaptive(
        value_z, clients_per_round, initial_clip, noise_seed=noise_seed, **per_layer_kwargs)
    return cls(value_factory, weight_z, min_weight, weight_sum_floor, noise_seed)

  def __init__(self, value_factory: per_layer_dp.PerLayerDPFactory,
               weight_noise_multiplier: float, min_weight: float,
               weight_sum_floor: Optional[float] = None, noise_seed: Optional[int] = None):
    """Use `gaussian_fixed` or `gaussian_adaptive`.

    Args:
      value_factory: the `PerLayerDPFactory` of the deltas, with server-side noise.
      weight_noise_multiplier: z_w, the noise std on the weight sum.
      min_weight: w_min in (0, 1].
      weight_sum_floor: F > 0; default w_min·S.
      noise_seed: the value factory's seed; the weight noise uses the next integer, so the two
        streams differ. None draws fresh ones.
    """
    if not isinstance(value_factory, per_layer_dp.PerLayerDPFactory):
      raise ValueError('`value_factory` must be a PerLayerDPFactory, got '
                       f'{value_factory!r}.')
    if value_factory.noise_placement != 'server':
      raise ValueError('A weighted DP mean needs `noise_placement`="server", got '
                       f'{value_factory.noise_placement!r}: client noise would be scaled by '
                       'the weight.')
    validation.check_sampling_rate('min_weight', min_weight)
    if weight_sum_floor is None:
      weight_sum_floor = min_weight * value_factory.clients_per_round
    validation.check_positive('weight_sum_floor', weight_sum_floor)
    if noise_seed is not None:
      validation.check_non_negative_integer('noise_seed', noise_seed)
    self._value_factory = value_factory
    self._weight_noise_multiplier = float(weight_noise_multiplier)
    self._min_weight = float(min_weight)
    self._weight_sum_floor = float(weight_sum_floor)
    # The weight stream apart from the value stream when a seed is fixed.
    self._noise_seed = None if noise_seed is None else (int(noise_seed) + 1) % 2**63

  @property
  def min_weight(self) -> float:
    """w_min, the least aggregation weight."""
    return self._min_weight

  def build_query(self, value_type) -> BoundedWeightMeanQuery:
    """The DPQuery this factory runs for `value_type`.

    Args:
      value_type: the TFF type of a client's delta.

    Returns:
      A `BoundedWeightMeanQuery` over the value factory's sum query for `value_type`.
    """
    return BoundedWeightMeanQuery(
        self._value_factory.build_sum_query(value_type), self._weight_noise_multiplier,
        self._min_weight, self._weight_sum_floor, self._value_factory.clients_per_round,
        diagnostics=self._value_factory.diagnostics, noise_seed=self._noise_seed)

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    """Creates the aggregation process.

    Args:
      value_type: the TFF type of a client's delta.
      weight_type: the TFF type of its weight, a float scalar.

    Returns:
      An `AggregationProcess` whose `next(state, value, weight)` runs TFF's
      `DifferentiallyPrivateFactory` over the records {`UPDATE`: value, `WEIGHT`: weight}.

    Raises:
      ValueError: if `weight_type` is not a float scalar.
    """
    if not (isinstance(weight_type, tff.TensorType) and weight_type.shape == ()
            and np.issubdtype(weight_type.dtype, np.floating)):
      raise ValueError(f'`weight_type` must be a float scalar, got {weight_type}.')
    record_type = tff.StructWithPythonType(
        [(UPDATE, value_type), (WEIGHT, weight_type)], collections.OrderedDict)
    inner = tff.aggregators.DifferentiallyPrivateFactory(
        self.build_query(value_type)).create(record_type)

    @tff.federated_computation(inner.initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      record = tff.federated_zip(collections.OrderedDict([(UPDATE, value), (WEIGHT, weight)]))
      return inner.next(state, record)

    return tff.templates.AggregationProcess(inner.initialize, next_fn)
