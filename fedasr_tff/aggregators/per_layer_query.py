"""Per-layer clipping with isotropic Gaussian noise, as a tensorflow-privacy `DPQuery`.

DP federated averaging (McMahan et al., "Learning Differentially Private Recurrent Language
Models", ICLR 2018, arXiv:1710.06963) with per-layer clipping (Pelikan et al., "Enabling
Differentially Private Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers
and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 3, Def. 3) and, optionally, one
adaptive clip per group (Andrew et al., "Differentially Private Learning with Adaptive Clipping",
NeurIPS 2021, arXiv:1905.03871).

The privacy argument. Each client delta is split into H groups clipped to C_h with
sqrt(Σ_h C_h²) = C, and a guard rescales any record whose total norm still exceeds C, so one
client moves the sum by at most C for every finite input (`PerLayerClipGaussianSumQuery`). Every
coordinate of the sum gets N(0, (z C)²), drawn so that the bounded reach of TensorFlow's samplers
adds a negligible term to δ (`gaussian_noise`): one round is the Gaussian mechanism with
multiplier z, reported as
`GaussianDpEvent(z)`. Adaptive clips release H noised clipped counts as well, paid for out of the
same z (`adaptive_value_noise_multiplier`). What a run releases: `docs/privacy.md`; usage:
`docs/aggregators.md`.
"""

import collections
import math
from typing import Optional
from typing import Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp

from fedasr_tff.aggregators import noise_seeds

NOISE_PLACEMENTS = ('server', 'client')

# Every DP noise tensor is the sum of this many TF Gaussian draws (`gaussian_noise` says why 7).
NOISE_DRAWS = 7

_GlobalState = collections.namedtuple(
    '_GlobalState', ['group_clips', 'round_clips', 'diagnostics', 'noise_seed', 'released_norms',
                     'noise_norms'])


def gaussian_noise(shape, stddev, dtype=tf.float32, seed=None) -> tf.Tensor:
  """N(0, stddev²) noise drawn as the sum of k = `NOISE_DRAWS` TF draws of variance stddev² / k.

  Why a sum. TensorFlow's Gaussian samplers (float32 and float64) use Box-Muller with the uniform
  draw u clamped at 1e-7, so a draw never exceeds a = sqrt(-2 ln 1e-7) = 5.678 standard
  deviations, and a pair of draws lands exactly on the circle of radius a with probability
  p_a ≈ 1e-7 (u = 0, 2^-23, in float32; u < 1e-7 in float64), whose coordinates pile up towards
  ±a (an arcsine law). Bounded support breaks the Gaussian mechanism's argument: an output
  coordinate within Δ_i of the edge of one dataset's noise range, where the noise of a
  neighbouring dataset (mean shifted by Δ_i) cannot reach, identifies the dataset, so that event
  belongs in δ. With one draw per coordinate its probability per round is about
  Σ_i [φ(a) Δ_i / σ + p_a sqrt(2 Δ_i / (a σ)) / π]; at the scale of Pelikan et al. 2025
  (d = 2.6e8 parameters, z = σ / C ≈ 0.6, Δ spread evenly so that Δ_i / σ = 1 / (z sqrt(d)))
  that is 1e-3 + 6e-2 per round, far above δ = 1e-9.

  The sum of k draws still has variance σ², but support ±a sqrt(k) σ = ±15.02 σ. Write a draw as
  T_j = G_j · min(1, a / R_j), with G_j the exact Box-Muller output of the same uniforms and R_j
  its radius, so T_j has the sign of G_j and |T_j| <= |G_j|. The edge event of coordinate i needs
  Σ_j T_j > k a - sqrt(k) Δ_i / σ; when Δ_i <= a σ / sqrt(k) this forces every T_j >= 0, hence
  Σ_j G_j >= Σ_j T_j, so its probability is at most Φ̄(a sqrt(k) - Δ_i / σ) (Φ̄ the standard
  normal tail). As Δ_i <= C = σ / z, a round's edge event has probability at most
  d Φ̄(a sqrt(k) - 1/z) for any neighbour once z >= sqrt(k) / a = 0.47: 1e-32 at that scale
  (for Δ spread evenly, d Φ̄(15.02) + φ(15.02) sqrt(d) / z = 7e-43 + 1e-45), far below
  δ / (100 T) = 5e-15 for δ = 1e-9 and T = 2000 rounds. k = 5 is the smallest k meeting that
  bound at this scale (k = 4 gives 4e-14); 7 leaves room for larger models and smaller z. Inside
  its support the k-sum differs from a Gaussian only through the clamped draws (probability p_a
  per pair). Not addressed: float outputs lie on a grid whose gaps differ between neighbouring
  outputs, so in principle the low-order bits of a release can distinguish neighbouring datasets
  (Mironov, "On Significance of the Least Significant Bits for Differential Privacy", ACM CCS
  2012), a known limitation shared by all TensorFlow-based DP (tensorflow-privacy, TFF).

  Args:
    shape: shape of the noise.
    stddev: its standard deviation (a scalar).
    dtype: a floating dtype.
    seed: a shape-[2] integer seed: stateless draws (the seed is split into k), for noise that is
      a function of the aggregator state; None draws from TF's stateful RNG.

  Returns:
    A tensor of `shape` and `dtype`.
  """
  draws = NOISE_DRAWS
  seeds = None if seed is None else tf.random.experimental.stateless_split(seed, draws)
  total = None
  for j in range(draws):
    # Draw j waits for the running sum, so at most two noise tensors are alive at once.
    with tf.control_dependencies([] if total is None else [total]):
      if seeds is None:
        draw = tf.random.normal(shape, dtype=dtype)
      else:
        draw = tf.random.stateless_normal(shape, seeds[j], dtype=dtype)
    total = draw if total is None else total + draw
  return total * tf.cast(stddev / math.sqrt(draws), dtype)


def _pow2(exponents, dtype):
  """2^e exactly, for int64 exponents in float64's normal range, as `dtype`."""
  return tf.cast(tf.bitcast(tf.bitwise.left_shift(exponents + 1023, 52), tf.float64), dtype)


def _scaled_group_norms(leaves, group_ids, num_groups):
  """Leaves scaled by a power of two per group, and the groups' norms, free of under/overflow.

  Args:
    leaves: tensors of one floating dtype.
    group_ids: group index of every leaf.
    num_groups: H.

  Returns:
    (scaled, exponents, norms): scaled[i] = leaves[i] · 2^-e_h for its group h, with 2^e_h the
    power of two at the group's largest |x| clamped so that 2^±e_h are normal numbers (int64
    exponents); norms[h] = ||scaled group h|| in the leaves' dtype, so ||group h|| = 2^e_h ·
    norms[h].
  """
  dtype = leaves[0].dtype
  leaf_max = tf.stack([tf.reduce_max(tf.abs(x)) for x in leaves])
  group_max = tf.maximum(tf.math.unsorted_segment_max(leaf_max, group_ids, num_groups), 0.0)
  # The biased exponent field of a positive float64 (0 for zero and float64 subnormals).
  exponents = tf.bitwise.right_shift(tf.bitcast(tf.cast(group_max, tf.float64), tf.int64), 52)
  min_exponent = int(np.finfo(dtype.as_numpy_dtype).minexp)
  exponents = tf.clip_by_value(exponents - 1023, min_exponent, -min_exponent)
  down = tf.gather(_pow2(-exponents, dtype), group_ids)
  scaled = [x * down[i] for i, x in enumerate(leaves)]
  sq_norms = tf.stack([tf.reduce_sum(tf.square(y)) for y in scaled])
  norms = tf.sqrt(tf.math.unsorted_segment_sum(sq_norms, group_ids, num_groups))
  return scaled, exponents, norms


def _unscaled(norms, exponents):
  """The norms 2^e_h · n_h, in float64, which holds them without overflow for float32 values."""
  return tf.cast(norms, tf.float64) * _pow2(exponents, tf.float64)


def adaptive_value_noise_multiplier(noise_multiplier: float, clipped_count_stddev: float,
                                    num_groups: int) -> float:
  """The value noise multiplier z_v that leaves a round of adaptive clipping at total z.

  One client changes each clipped-count indicator b_h by at most 1/2, in all H coordinates at
  once, so the count vector has L2 sensitivity sqrt(H)/2 and noise multiplier
  z_b = 2σ_b / sqrt(H). The round releases two Gaussian mechanisms on the same client, whose
  joint noise multiplier z satisfies 1/z² = 1/z_v² + 1/z_b² (their sensitivities add in
  quadrature once each is measured in its own noise units). To spend exactly the budget of z,
  the value noise is raised to

      z_v = (z^-2 - H (2σ_b)^-2)^(-1/2),

  which needs z < 2σ_b / sqrt(H). This is TFF's `adaptive_clip_noise_params` (the split of
  Andrew et al. 2021) with the count sensitivity sqrt(H)/2 in place of 1/2 (H = 1 gives TFF's
  formula exactly).

  Args:
    noise_multiplier: z >= 0, the total multiplier of one round.
    clipped_count_stddev: σ_b, the noise std on each group's clipped count.
    num_groups: H, the number of clipping groups.

  Returns:
    z_v; 0.0 when z is 0.

  Raises:
    ValueError: if z > 0 and σ_b <= 0, or z >= 2σ_b / sqrt(H) (the counts alone would spend
      the budget).
  """
  if noise_multiplier == 0:
    return 0.0
  if clipped_count_stddev <= 0:
    raise ValueError('`clipped_count_stddev` must be > 0 when `noise_multiplier` > 0.')
  count_multiplier = 2.0 * clipped_count_stddev / math.sqrt(num_groups)
  if noise_multiplier >= count_multiplier:
    raise ValueError(
        f'`clipped_count_stddev`={clipped_count_stddev} is too small for '
        f'noise_multiplier={noise_multiplier} with {num_groups} clipping groups: the clipped '
        f'counts alone would spend the budget (need noise_multiplier < 2 * clipped_count_stddev '
        f'/ sqrt(groups) = {count_multiplier:.4g}). Increase `clipped_count_stddev` or use fewer '
        'groups.')
  return (noise_multiplier**-2 - count_multiplier**-2)**-0.5


class PerLayerClipGaussianSumQuery(tfp.SumAggregationDPQuery):
  """Per-group clipping, isotropic Gaussian noise on the sum, optional adaptive clips.

  A record is a client delta g, split into H groups g_h by `group_ids`. For every record
  (`preprocess_record`):

  1. Sanitise: a delta holding NaN or Inf is replaced by zeros (and counted), so it can never
     reach the sum; a zero delta has norm 0 <= C, so this does not change the sensitivity.
  2. Clip every group: g_h <- g_h · min(1, C_h / ||g_h||) (McMahan et al. 2018), or with
     `normalize` (the variant of the released code of Pelikan et al. 2025) rescale every group
     to exactly C_h if ||g|| >= C and leave g alone otherwise.
  3. Guard: if the clipped record's total norm exceeds C = sqrt(Σ_h C_h²), rescale it to C.

  So adding or removing one client moves the sum by at most C for *every* finite input, not only
  for typical deltas (`_clip` says how the norms escape float32 under- and overflow). The sum
  gets N(0, (z C)²) on every coordinate of every group (`get_noised_result`): isotropic noise
  calibrated to the total sensitivity C, not to C_h. `noise_placement="client"` instead adds
  N(0, (z C)² / S) to each of the S records, as Algorithm 1 of Pelikan et al. 2025 does; the S
  independent draws sum to the same N(0, (z C)²), provided exactly S clients report. The
  guarantee then covers the aggregate only: it assumes the server learns nothing but the sum
  (secure aggregation), since each noised record has std z C / sqrt(S). Dividing by S (the
  enclosing `tfp.NormalizedQuery`) gives std σ_DP·C on the mean, with σ_DP = z / S. One round
  is `GaussianDpEvent(z)`; with Poisson sampling of rate q the accountant composes
  `PoissonSampledDpEvent(q, GaussianDpEvent(z))` over rounds.

  Adaptive clipping (the geometric update of tensorflow-privacy's `QuantileEstimatorQuery`,
  Andrew et al. 2021), one quantile per group: each client also reports
  b_h = 1[||g_h|| <= C_h] - 1/2 for all h, the server adds N(0, σ_b²) to each of the H sums and
  sets

      u_h = clip((Σ_k b_h,k + noise_h) / S + 1/2, 0, 1),   C_h <- C_h · exp(-η (u_h - γ)),

  with target quantile γ and learning rate η. The value noise follows the current total C (std
  z_v·C), so the sensitivity the noise assumes is the one the clipping and the guard enforce,
  whatever the C_h drift to. The reported event is the equivalent single `GaussianDpEvent(z)`
  (`adaptive_value_noise_multiplier`), not `ComposedDpEvent([Gaussian(z_v), Gaussian(z_b)])`:
  TFF hands events back with float32 multipliers, and dp-accounting 0.4.3's RDP accountant then
  silently keeps only the first Gaussian of a composition under Poisson sampling, understating ε.
  """

  def __init__(self,
               group_ids: Sequence[int],
               initial_group_clips: Sequence[float],
               value_noise_multiplier: float,
               clients_per_round: float,
               *,
               normalize: bool = False,
               noise_placement: str = 'server',
               target_quantile: Optional[float] = None,
               learning_rate: float = 0.0,
               clipped_count_stddev: float = 0.0,
               diagnostics: bool = False,
               noise_seed: Optional[int] = None,
               group_names: Optional[Sequence[str]] = None):
    """Initializes the query.

    Args:
      group_ids: for every leaf of the record (in `tf.nest.flatten` order), its group index.
      initial_group_clips: C_h for every group.
      value_noise_multiplier: z_v; the noise std on the sum is z_v * sqrt(sum_h C_h^2).
      clients_per_round: S, the expected number of clients a round.
      normalize: rescale every group to C_h when the total norm is >= C (the released code's
        variant, class docstring).
      noise_placement: "server" (on the sum) or "client" (on each record).
      target_quantile: γ for adaptive clipping; None keeps the clips fixed.
      learning_rate: η of the geometric clip update.
      clipped_count_stddev: σ_b, noise std on each group's clipped count.
      diagnostics: keep exact per-group client statistics in the state and report them
        (`derive_metrics`; outside the DP guarantee, off by default).
      noise_seed: seed of the server-side noise (the value noise with `noise_placement="server"`
        and the clipped-count noise). It is carried in the global state and split every round,
        so a run restored from a checkpoint of that state continues the exact noise stream an
        uninterrupted run would have drawn. None draws 63 bits of OS entropy when the query is
        built; fix it for reproducible simulations only, since anyone who knows it can subtract
        the noise. Client-side noise comes from TF's stateful RNG on each client (a client has no
        identity in a TFF aggregation to derive a seed from), so a resumed run does not replay it.
      group_names: unique names of the groups, the keys of the per-group measurements
        (`derive_metrics`); default `group_<h>`.

    Raises:
      ValueError: for adaptive clipping with noise but no clipped-count noise, or `group_names`
        that are not H unique strings.
    """
    if target_quantile is not None and value_noise_multiplier > 0 and clipped_count_stddev <= 0:
      # Clipped counts released without noise would not be covered by the reported event.
      raise ValueError('Adaptive clipping with noise needs `clipped_count_stddev` > 0, got '
                       f'{clipped_count_stddev!r}.')
    self._group_ids = np.asarray(list(group_ids), np.int32)
    self._num_groups = len(initial_group_clips)
    self._initial_group_clips = np.asarray(initial_group_clips, np.float32)
    self._value_noise_multiplier = float(value_noise_multiplier)
    self._total_noise_multiplier = self._value_noise_multiplier
    if target_quantile is not None and clipped_count_stddev > 0 and value_noise_multiplier > 0:
      # The value and count releases together are one Gaussian mechanism
      # (`adaptive_value_noise_multiplier`).
      count_multiplier = 2.0 * clipped_count_stddev / math.sqrt(len(initial_group_clips))
      self._total_noise_multiplier = (value_noise_multiplier**-2 + count_multiplier**-2)**-0.5
    self._clients_per_round = float(clients_per_round)
    self._normalize = normalize
    self._noise_placement = noise_placement
    self._target_quantile = target_quantile
    self._learning_rate = float(learning_rate)
    self._clipped_count_stddev = float(clipped_count_stddev)
    self._diagnostics = diagnostics
    self._noise_seed = noise_seeds.fresh_noise_seed() if noise_seed is None else int(noise_seed)
    if group_names is None:
      group_names = [f'group_{h}' for h in range(self._num_groups)]
    self._group_names = list(group_names)
    if (len(self._group_names) != self._num_groups or
        len(set(self._group_names)) != self._num_groups or
        not all(isinstance(n, str) for n in self._group_names)):
      raise ValueError(f'`group_names` must be {self._num_groups} unique strings, one per group, '
                       f'got {group_names!r}.')

  @property
  def adaptive(self) -> bool:
    """Whether the clips adapt (a target quantile was given)."""
    return self._target_quantile is not None

  @property
  def noise_multiplier(self) -> float:
    """z of the round's one Gaussian mechanism (value and clipped counts), as reported."""
    return self._total_noise_multiplier

  @property
  def noise_placement(self) -> str:
    """"server" (noise on the sum) or "client" (noise on every record)."""
    return self._noise_placement

  def _zero_diagnostics(self):
    if not self._diagnostics:
      return ()
    zeros = tf.zeros([self._num_groups], tf.float32)
    return collections.OrderedDict(
        norm_before_clip=zeros,
        norm_after_clip=zeros,
        clipped=zeros,
        nonfinite=tf.constant(0.0),
        clients=tf.constant(0.0))

  def initial_global_state(self):
    """The global state before the first round.

    Returns:
      A `_GlobalState` with the initial clips (as this round's and the last round's), zero
      diagnostics, the noise seed `[0, noise_seed]` and zero released and noise norms.
    """
    seed = tf.constant([0, self._noise_seed], tf.int64)
    clips = tf.constant(self._initial_group_clips)
    zeros = tf.zeros([self._num_groups], tf.float32)
    return _GlobalState(clips, clips, self._zero_diagnostics(), seed, zeros, zeros)

  def derive_sample_params(self, global_state):
    """The round's clips, passed to `preprocess_record`.

    Args:
      global_state: the query's global state.

    Returns:
      C_h of every group, a float32 vector; an error if the noise seed is unset
      (`noise_seeds.after_noise_seed_check`), so a round never noises with it.
    """
    return noise_seeds.after_noise_seed_check(global_state.noise_seed, global_state.group_clips)

  def initial_sample_state(self, template=None):
    """An empty sum of records.

    Args:
      template: a nest of tensors or specs with the records' structure, shapes and dtypes.

    Returns:
      (zeros shaped like `template`, H zero clipped counts if adaptive, zero diagnostics if
      enabled; `()` for each absent part).
    """
    value = tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype), template)
    below = tf.zeros([self._num_groups], tf.float32) if self.adaptive else ()
    return value, below, self._zero_diagnostics()

  def _value_stddev(self, group_clips):
    return self._value_noise_multiplier * tf.norm(group_clips)

  def _clip(self, leaves, group_clips):
    """Clips every group and guards the total norm (class docstring, steps 2 and 3).

    Computed naively in float32, ||g_h||² = Σ x² underflows for groups of entries below ~1e-19
    (or where most squares underflow and a few do not) and overflows near the float32 maximum;
    normalize would then scale a tiny group up by C_h / (its underestimated norm), releasing a
    record many orders of magnitude outside the ball of radius C. So:

    * Group norms are computed as ||g_h|| = 2^e_h · n_h with n_h = ||2^-e_h g_h||
      (`_scaled_group_norms`). The scaled entries lie in (-4, 4), the largest at least 1 in
      magnitude unless the whole group is subnormal, so Σ (2^-e_h x)² neither overflows nor
      loses more than d_h · 2^-126 (relative) to underflow. A multiplication by a power of two is
      exact, so on ordinary inputs the norms and the clipped record are bit for bit those of the
      direct formulas, but for the guard's corrections of rounding (one ulp).
    * The clip is applied as (2^-e_h g_h) · b_h with b_h = min(2^e_h, C_h / n_h) (clip) or
      b_h = C_h / n_h (normalize): no factor can overflow, and an all-zero group stays zero.
    * The guard recomputes the total norm of the clipped record the same way (in float64 across
      groups) and, if it exceeds C, rescales the record to C. So ||clipped record|| <= C to float
      rounding for every finite input, every allocation, with and without normalize and for both
      noise placements; on an ordinary input it only ever corrects rounding.
    * TensorFlow flushes subnormal numbers (below 1.2e-38 in float32) to zero on CPU: such
      entries count as 0, which can only lower the norm.

    The adaptive indicators and the diagnostics use the same norms.

    Args:
      leaves: the record's finite leaves, all of one floating dtype.
      group_clips: C_h, float32.

    Returns:
      (clipped leaves, group norms before and after clipping (float64), whether each group was
      scaled down by its clip).
    """
    dtype = leaves[0].dtype
    scaled, exponents, norms = _scaled_group_norms(leaves, self._group_ids, self._num_groups)
    norms_before = _unscaled(norms, exponents)
    clips = tf.cast(group_clips, tf.float64)
    total_clip = tf.norm(clips)
    # With y = 2^-e g_h and n = ||y||, the clipped group is y · b_h (docstring).
    restore = _pow2(exponents, dtype)
    to_bound = tf.math.divide_no_nan(tf.cast(group_clips, dtype), norms)
    if self._normalize:
      factors = tf.where(tf.norm(norms_before) >= total_clip, to_bound, restore)
    else:
      factors = tf.minimum(restore, to_bound)
    clipped = tf.logical_and(factors < restore, norms > 0)
    leaf_factors = tf.gather(factors, self._group_ids)
    values = [y * leaf_factors[i] for i, y in enumerate(scaled)]

    # The guard: whatever the above computed, the record leaves with norm <= C.
    scaled, exponents, norms = _scaled_group_norms(values, self._group_ids, self._num_groups)
    norms_after = _unscaled(norms, exponents)
    total_after = tf.norm(norms_after)
    guard = tf.where(total_after > total_clip, total_clip / total_after, 1.0)
    leaf_factors = tf.gather(tf.cast(_pow2(exponents, tf.float64) * guard, dtype), self._group_ids)
    values = [y * leaf_factors[i] for i, y in enumerate(scaled)]
    return values, norms_before, norms_after * guard, clipped

  def preprocess_record(self, params, record):
    """Sanitises, clips and guards one client's record (class docstring, steps 1-3).

    Args:
      params: the round's clips C_h (`derive_sample_params`).
      record: the client's delta, a nest of floating tensors.

    Returns:
      (the clipped record, noised here if `noise_placement="client"`; the clipped-count
      indicators b_h if adaptive, else `()`; the record's diagnostics if enabled, else `()`).
    """
    group_clips = params
    leaves = tf.nest.flatten(record)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(leaf)) for leaf in leaves])
    # One dtype for the norms of all groups: float64 if any leaf needs it.
    dtype = tf.float64 if any(leaf.dtype == tf.float64 for leaf in leaves) else tf.float32
    values = [tf.where(finite, tf.cast(leaf, dtype), tf.zeros([], dtype)) for leaf in leaves]
    values, norms_before, norms_after, clipped = self._clip(values, group_clips)
    values = [tf.cast(x, leaf.dtype) for x, leaf in zip(values, leaves, strict=True)]
    if self._noise_placement == 'client' and self._value_noise_multiplier > 0:
      stddev = self._value_stddev(group_clips) / math.sqrt(self._clients_per_round)
      values = [x + gaussian_noise(tf.shape(x), stddev, x.dtype) for x in values]
    value = tf.nest.pack_sequence_as(record, values)

    below = ()
    if self.adaptive:
      below = tf.cast(norms_before <= tf.cast(group_clips, tf.float64), tf.float32) - 0.5
    diagnostics = ()
    if self._diagnostics:
      diagnostics = collections.OrderedDict(
          norm_before_clip=tf.cast(norms_before, tf.float32),
          norm_after_clip=tf.cast(norms_after, tf.float32),
          clipped=tf.cast(clipped, tf.float32),
          nonfinite=1.0 - tf.cast(finite, tf.float32),
          clients=tf.constant(1.0))
    return value, below, diagnostics

  def get_noised_result(self, sample_state, global_state):
    """Noises the cohort's sum and, if adaptive, updates the clips (class docstring).

    Args:
      sample_state: the sum over the cohort of `preprocess_record`'s outputs.
      global_state: the query's global state.

    Returns:
      (the noised sum, the next global state, `GaussianDpEvent(z)` with z the round's total
      multiplier, `noise_multiplier`).
    """
    value_sum, below_sum, diagnostics = sample_state
    group_clips = global_state.group_clips
    leaves = tf.nest.flatten(value_sum)
    # One seed per leaf, one for the counts, one carried to the next round: stateless draws from
    # the state's seed, so a restored state replays this round's noise (`noise_seed`).
    seeds = tf.random.experimental.stateless_split(global_state.noise_seed, len(leaves) + 2)
    if self._noise_placement == 'server' and self._value_noise_multiplier > 0:
      stddev = self._value_stddev(group_clips)
      leaves = [x + gaussian_noise(tf.shape(x), stddev, x.dtype, seeds[i])
                for i, x in enumerate(leaves)]
      value_sum = tf.nest.pack_sequence_as(value_sum, leaves)

    event = dp_accounting.GaussianDpEvent(self._total_noise_multiplier)
    new_clips = group_clips
    if self.adaptive:
      noised_below = below_sum
      if self._clipped_count_stddev > 0:
        noised_below += gaussian_noise([self._num_groups], self._clipped_count_stddev,
                                       tf.float32, seeds[-2])
      unclipped_fraction = tf.clip_by_value(noised_below / self._clients_per_round + 0.5, 0.0,
                                            1.0)
      new_clips = group_clips * tf.exp(-self._learning_rate *
                                       (unclipped_fraction - self._target_quantile))
    # Post-processing of the release: the norm of each group of the noised sum, over S, and
    # the part the noise alone is expected to contribute, sqrt(d_h)·σ_DP·C.
    released = tf.nest.flatten(value_sum)
    _, exponents, norms = _scaled_group_norms(released, self._group_ids, self._num_groups)
    released_norms = tf.cast(_unscaled(norms, exponents) / self._clients_per_round, tf.float32)
    sizes = np.bincount(self._group_ids, [x.shape.num_elements() for x in released],
                        self._num_groups)
    noise_norms = tf.constant(np.sqrt(sizes), tf.float32) * tf.cast(
        self._value_stddev(group_clips), tf.float32) / self._clients_per_round
    return value_sum, _GlobalState(new_clips, group_clips, diagnostics, seeds[-1],
                                   released_norms, noise_norms), event

  def _per_group(self, **vectors):
    """{group name: {key: vectors[key][h]}} for vectors of length H."""
    columns = {key: tf.unstack(vector, num=self._num_groups) for key, vector in vectors.items()}
    return collections.OrderedDict(
        (name, collections.OrderedDict((key, column[h]) for key, column in columns.items()))
        for h, name in enumerate(self._group_names))

  def derive_metrics(self, global_state):
    """The measurements of the round just run.

    Args:
      global_state: the global state `get_noised_result` returned.

    Returns:
      An ordered dict, per-group entries keyed by the group's name (`group_names`;
      `PerLayerDPFactory` names the groups by the value's leaf tensors), scalars as scalars:

          noise_stddev        std of the noise on each coordinate of the averaged update (σ_DP·C)
          clip                C = sqrt(Σ_h C_h²), the total clip of the round
          per_group
            <group name>
              clip            C_h of the round
              next_clip       C_h of the next round (equal to clip unless adaptive)
              released_norm   ||ũ_h||, the norm of group h of the released (noised) sum over S
              noise_norm      sqrt(d_h)·σ_DP·C, the expected norm of the noise alone in that
                              group (d_h its coordinates), so E||ũ_h||² = ||u_h||² + noise_norm²
          client_statistics   (only with diagnostics)
            clipped_fraction  fraction of the clients clipped, mean over the groups
            nonfinite_clients clients whose delta held NaN or Inf
            clients           clients that reported
            per_group
              <group name>
                norm_before_clip   mean over the clients of ||g_h|| before clipping
                norm_after_clip    mean over the clients of ||g_h|| after clipping
                clipped_fraction   fraction of the clients whose group h was clipped

      Everything outside `client_statistics` is public: the clips are constants or the noised
      adaptive state, the noise std is a function of them, and `released_norm` is computed from
      the noised release alone (post-processing). `client_statistics` are exact (un-noised) sums
      over the round's clients, kept in the state only with `diagnostics=True`: they never feed
      back into the model or the clips, but releasing them is outside the DP guarantee.
    """
    round_clips = global_state.round_clips
    # Std of the noise on each coordinate of the averaged update (σ_DP·C), the same in every
    # group: a function of the clips alone.
    noise_stddev = self._value_stddev(round_clips) / self._clients_per_round
    metrics = collections.OrderedDict(
        noise_stddev=noise_stddev,
        clip=tf.norm(round_clips),
        per_group=self._per_group(clip=round_clips, next_clip=global_state.group_clips,
                                  released_norm=global_state.released_norms,
                                  noise_norm=global_state.noise_norms))
    if not self._diagnostics:
      return metrics
    d = global_state.diagnostics
    clients = tf.maximum(d['clients'], 1.0)
    clipped_fraction = d['clipped'] / clients
    metrics['client_statistics'] = collections.OrderedDict(
        clipped_fraction=tf.reduce_mean(clipped_fraction),
        nonfinite_clients=d['nonfinite'],
        clients=d['clients'],
        per_group=self._per_group(norm_before_clip=d['norm_before_clip'] / clients,
                                  norm_after_clip=d['norm_after_clip'] / clients,
                                  clipped_fraction=clipped_fraction))
    return metrics
