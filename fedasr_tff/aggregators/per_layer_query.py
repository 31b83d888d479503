"""A tensorflow-privacy `DPQuery` for per-layer clipping with isotropic Gaussian noise.

Mechanism (spec §1–§2). Each client delta is split into H groups (tensors, or a given grouping).

1. Sanitise: a delta holding NaN or Inf is replaced by zeros (and counted), so it can never reach
   the sum; a zero delta has norm 0 <= C, so this does not change the sensitivity.
2. Clip group h to C_h, with sqrt(sum_h C_h^2) = C (`allocation.group_clips`):
   * clip (Def. 3):       g_h <- g_h * min(1, C_h / ||g_h||);
   * normalize (the released code, spec §2): if ||g|| >= C every group is rescaled to exactly
     C_h, otherwise g is left alone.
   Either way ||clipped g|| <= C, so adding or removing one client moves the sum by at most C.
3. Sum over the cohort and add N(0, (z C)^2) to every coordinate of every group: isotropic noise
   calibrated to the *total* sensitivity C, not to C_h. `noise_placement="client"` instead adds
   N(0, (z C)^2 / S) on each of the S clients before the sum, as the paper's Algorithm 1 does;
   the S independent draws sum to the same N(0, (z C)^2), provided exactly S clients report.
   The guarantee then covers the *aggregate*: it assumes the server only learns the sum (secure
   aggregation). A server that saw single noised records would see each with std z C / sqrt(S).
   (Dividing by S, done by the enclosing `tfp.NormalizedQuery`, gives std σ_DP·C on the mean
   with σ_DP = z / S.)

One round is therefore the Gaussian mechanism with noise multiplier z, reported as
`GaussianDpEvent(z)`; with Poisson sampling of rate q the accountant composes
`PoissonSampledDpEvent(q, GaussianDpEvent(z))` over rounds.

Adaptive clipping (Andrew et al. 2021, "Differentially private learning with adaptive
clipping"; the geometric update of tensorflow-privacy's `QuantileEstimatorQuery`). Every group
tracks its own quantile: each client also reports b_h = 1[||g_h|| <= C_h] - 1/2 for all h, the
server adds N(0, σ_b^2) to each of the H sums and sets

    u_h = clip((Σ_k b_h,k + noise_h) / S + 1/2, 0, 1),   C_h <- C_h · exp(-η (u_h - γ)),

with target quantile γ and learning rate η. The value noise follows the current total
C = sqrt(Σ_h C_h^2): its std is z_v·C, so the sensitivity the noise assumes is the one the
clipping enforces, whatever the C_h drift to.

Privacy of the adaptive round. One client changes each b_h by at most 1/2, in all H coordinates at
once, so the count vector has L2 sensitivity sqrt(H)/2 and noise multiplier z_b = 2σ_b / sqrt(H).
The round releases two Gaussian mechanisms on the same client, whose joint noise multiplier z
satisfies 1/z^2 = 1/z_v^2 + 1/z_b^2 (their sensitivities add in quadrature once each is
measured in its own noise units). To spend exactly the budget of a multiplier z, the value noise is
raised to

    z_v = (z^-2 - H (2σ_b)^-2)^(-1/2),

which needs z < 2σ_b / sqrt(H). This is TFF's `adaptive_clip_noise_params` with the count
sensitivity sqrt(H)/2 in place of 1/2 (H = 1 gives TFF's formula exactly). The reported event is
the equivalent single `GaussianDpEvent(z)`. (Not `ComposedDpEvent([Gaussian(z_v), Gaussian(z_b)])`:
TFF hands events back with float32 multipliers, and dp-accounting 0.4.3's RDP accountant then
silently keeps only the first Gaussian of a composition under Poisson sampling, understating ε.)

Noise randomness. Server-side noise (the value noise with `noise_placement="server"` and the
clipped-count noise) is drawn with stateless ops from a seed carried in the global state, which
is split every round: the noise stream is fresh every round, and a run restored from a
checkpoint of that state continues the exact stream an uninterrupted run would have drawn. The
seed defaults to 63 bits of OS entropy (`secrets`), drawn when the query is built; a fixed
`noise_seed` is for reproducible simulations only, since anyone who knows it can subtract the
noise. Client-side noise comes from TF's stateful RNG on each client (a client has no identity in
a TFF aggregation to derive a distinct seed from), so it is not replayed on resume.

Diagnostics. The global state also carries exact (un-noised) per-group sums of the clients' norms
before and after clipping, clip indicators and non-finite counts of the last round, reported by
`derive_metrics` for the per-layer norm plots. They are computed from client data without noise:
they never feed back into the model or the clips, but releasing them is outside the DP guarantee.
Pass `diagnostics=False` where they must not leave the server.
"""

import collections
import math
import secrets
from typing import Optional
from typing import Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp

NOISE_PLACEMENTS = ('server', 'client')

# Smallest norm divided by; keeps a zero group at zero instead of producing NaN.
_TINY = 1e-30

_GlobalState = collections.namedtuple('_GlobalState',
                                      ['group_clips', 'diagnostics', 'noise_seed'])


def fresh_noise_seed() -> int:
  """63 bits of OS entropy, the default seed of the server-side noise."""
  return secrets.randbits(63)


def adaptive_value_noise_multiplier(noise_multiplier: float, clipped_count_stddev: float,
                                    num_groups: int) -> float:
  """z_v such that value and H clipped-count releases together cost multiplier z (module doc)."""
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

  See the module docstring for the mechanism and its privacy argument.
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
               diagnostics: bool = True,
               noise_seed: Optional[int] = None):
    """Initializes the query.

    Args:
      group_ids: for every leaf of the record (in `tf.nest.flatten` order), its group index.
      initial_group_clips: C_h for every group.
      value_noise_multiplier: z_v; the noise std on the sum is z_v * sqrt(sum_h C_h^2).
      clients_per_round: S, the expected number of clients a round.
      normalize: rescale every group to C_h when the total norm is >= C (spec §2).
      noise_placement: "server" (on the sum) or "client" (on each record).
      target_quantile: γ for adaptive clipping; None keeps the clips fixed.
      learning_rate: η of the geometric clip update.
      clipped_count_stddev: σ_b, noise std on each group's clipped count.
      diagnostics: keep exact per-group client statistics in the state (module docstring).
      noise_seed: seed of the server-side noise stream (module docstring); None draws one from
        OS entropy.
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
      # The value and count releases together are one Gaussian mechanism (module docstring).
      count_multiplier = 2.0 * clipped_count_stddev / math.sqrt(len(initial_group_clips))
      self._total_noise_multiplier = (value_noise_multiplier**-2 + count_multiplier**-2)**-0.5
    self._clients_per_round = float(clients_per_round)
    self._normalize = normalize
    self._noise_placement = noise_placement
    self._target_quantile = target_quantile
    self._learning_rate = float(learning_rate)
    self._clipped_count_stddev = float(clipped_count_stddev)
    self._diagnostics = diagnostics
    self._noise_seed = fresh_noise_seed() if noise_seed is None else int(noise_seed)

  @property
  def adaptive(self) -> bool:
    return self._target_quantile is not None

  def _zero_diagnostics(self):
    if not self._diagnostics:
      return ()
    zeros = tf.zeros([self._num_groups], tf.float32)
    return collections.OrderedDict(
        norm_before_clip=zeros,
        norm_after_clip=zeros,
        clipped=zeros,
        nonfinite=tf.constant(0.0),
        clients=tf.constant(0.0),
        round_clips=zeros)

  def initial_global_state(self):
    seed = tf.constant([0, self._noise_seed], tf.int64)
    return _GlobalState(tf.constant(self._initial_group_clips), self._zero_diagnostics(), seed)

  def derive_sample_params(self, global_state):
    return global_state.group_clips

  def initial_sample_state(self, template=None):
    value = tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype), template)
    below = tf.zeros([self._num_groups], tf.float32) if self.adaptive else ()
    diagnostics = self._zero_diagnostics()
    if self._diagnostics:
      del diagnostics['round_clips']
    return value, below, diagnostics

  def _value_stddev(self, group_clips):
    return self._value_noise_multiplier * tf.norm(group_clips)

  def preprocess_record(self, params, record):
    group_clips = params
    leaves = tf.nest.flatten(record)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(leaf)) for leaf in leaves])
    leaves = [tf.where(finite, leaf, tf.zeros_like(leaf)) for leaf in leaves]

    leaf_sq_norms = tf.stack([tf.reduce_sum(tf.square(tf.cast(x, tf.float32))) for x in leaves])
    group_norms = tf.sqrt(
        tf.math.unsorted_segment_sum(leaf_sq_norms, self._group_ids, self._num_groups))
    scale_to_clip = group_clips / tf.maximum(group_norms, _TINY)
    if self._normalize:
      total_norm = tf.norm(group_norms)
      factors = tf.where(total_norm >= tf.norm(group_clips), scale_to_clip,
                         tf.ones_like(group_norms))
    else:
      factors = tf.minimum(1.0, scale_to_clip)
    leaf_factors = tf.gather(factors, self._group_ids)
    clipped = [leaf * tf.cast(leaf_factors[i], leaf.dtype) for i, leaf in enumerate(leaves)]
    if self._noise_placement == 'client':
      stddev = self._value_stddev(group_clips) / math.sqrt(self._clients_per_round)
      clipped = [x + tf.random.normal(tf.shape(x), stddev=tf.cast(stddev, x.dtype), dtype=x.dtype)
                 for x in clipped]
    value = tf.nest.pack_sequence_as(record, clipped)

    below = ()
    if self.adaptive:
      below = tf.cast(group_norms <= group_clips, tf.float32) - 0.5
    diagnostics = ()
    if self._diagnostics:
      diagnostics = collections.OrderedDict(
          norm_before_clip=group_norms,
          norm_after_clip=group_norms * factors,
          clipped=tf.cast(factors < 1.0, tf.float32),
          nonfinite=1.0 - tf.cast(finite, tf.float32),
          clients=tf.constant(1.0))
    return value, below, diagnostics

  def get_noised_result(self, sample_state, global_state):
    value_sum, below_sum, diagnostics = sample_state
    group_clips = global_state.group_clips
    value_stddev = self._value_stddev(group_clips)
    leaves = tf.nest.flatten(value_sum)
    # One seed per leaf, one for the counts, one carried to the next round.
    seeds = tf.random.experimental.stateless_split(global_state.noise_seed, len(leaves) + 2)
    if self._noise_placement == 'server':
      leaves = [
          x + tf.random.stateless_normal(
              tf.shape(x), seeds[i], stddev=tf.cast(value_stddev, x.dtype), dtype=x.dtype)
          for i, x in enumerate(leaves)
      ]
      value_sum = tf.nest.pack_sequence_as(value_sum, leaves)

    event = dp_accounting.GaussianDpEvent(self._total_noise_multiplier)
    new_clips = group_clips
    if self.adaptive:
      noised_below = below_sum + tf.random.stateless_normal(
          [self._num_groups], seeds[-2], stddev=self._clipped_count_stddev)
      unclipped_fraction = tf.clip_by_value(noised_below / self._clients_per_round + 0.5, 0.0,
                                            1.0)
      new_clips = group_clips * tf.exp(-self._learning_rate *
                                       (unclipped_fraction - self._target_quantile))

    if self._diagnostics:
      diagnostics = collections.OrderedDict(diagnostics, round_clips=group_clips)
    return value_sum, _GlobalState(new_clips, diagnostics, seeds[-1]), event

  def derive_metrics(self, global_state):
    """Per-group measurements of the last round (vectors of length H) and the current clips."""
    metrics = collections.OrderedDict(group_clip=global_state.group_clips)
    if not self._diagnostics:
      return metrics
    d = global_state.diagnostics
    clients = tf.maximum(d['clients'], 1.0)
    round_clips = d['round_clips']
    metrics.update(
        mean_norm_before_clip=d['norm_before_clip'] / clients,
        mean_norm_after_clip=d['norm_after_clip'] / clients,
        clipped_fraction=d['clipped'] / clients,
        round_clip=round_clips,
        # Std of the noise on each coordinate of the averaged update (σ_DP·C), every group.
        mean_noise_stddev=tf.fill([self._num_groups],
                                  self._value_stddev(round_clips) / self._clients_per_round),
        nonfinite_clients=d['nonfinite'],
        clients=d['clients'])
    return metrics
