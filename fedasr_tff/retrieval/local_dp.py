"""Local (client-side) DP with a per-client adaptive clip, as pure TF functions.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025, Sec. 3.4,
Algorithm 1 of App. A (ClientInit, ClientUpdate) and the adaptive-clipping lemma of App. C
(Lemma C.4). Each client privatizes its own update before it leaves the device; the aggregator
is untrusted. The mechanism is `privatize` (the update clipped to the client's clip C, Gaussian
noise of std z_rel·C: its sensitivity and noise argument) and its accounting `local_epsilon`
(per client, replace-one adjacency, no amplification; the adaptive clip's leak is not covered).
What a run's guarantee covers: `docs/retrieval.md` and `docs/privacy.md`.
"""

import dataclasses
import math
from typing import Any
from typing import Dict
from typing import NamedTuple
from typing import Optional
from typing import Tuple

import tensorflow as tf

from fedasr_tff import validation
from fedasr_tff.aggregators.per_layer_query import adaptive_value_noise_multiplier
from fedasr_tff.aggregators.per_layer_query import gaussian_noise
from fedasr_tff.privacy import accounting

NOISE_MODES = ('practical', 'paper_literal')


def sigma_b(num_clients: int) -> float:
  """The paper's heuristic `clipped_count_stddev` (Algorithm 1; after Andrew et al.,
  "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021).

  Args:
    num_clients: m, a positive integer.

  Returns:
    σ_b = m / 20.
  """
  validation.check_positive_integer('num_clients', num_clients)
  return num_clients / 20


def noise_multiplier_delta(noise_multiplier: float, clipped_count_stddev: float) -> float:
  """z_Δ = (z^-2 − (2 σ_b)^-2)^(-1/2) (Algorithm 1, ClientInit; after Andrew et al. 2021).

  z_Δ > z, and z_Δ -> z as σ_b -> ∞. It is the value multiplier of central adaptive clipping
  with one clipping group (`aggregators.per_layer_query.adaptive_value_noise_multiplier`), which
  computes it.

  Args:
    noise_multiplier: z > 0.
    clipped_count_stddev: σ_b > 0.

  Returns:
    z_Δ.

  Raises:
    ValueError: naming `noise_multiplier` (z) or `clipped_count_stddev` (σ_b) if either is not
      > 0, or both if z >= 2 σ_b (z_Δ undefined; e.g. z = 0.1 with one client, σ_b = 0.05).
  """
  validation.check_positive('noise_multiplier', noise_multiplier)
  validation.check_positive('clipped_count_stddev', clipped_count_stddev)
  if noise_multiplier >= 2 * clipped_count_stddev:
    raise ValueError(
        f'`noise_multiplier` ({noise_multiplier!r}) must be < 2 * `clipped_count_stddev` '
        f'({2 * clipped_count_stddev!r}) for z_delta to be defined.')
  return adaptive_value_noise_multiplier(noise_multiplier, clipped_count_stddev, num_groups=1)


@dataclasses.dataclass(frozen=True)
class LocalDPConfig:
  """One client's local-DP settings (`privatize`). Build with `fixed` or `adaptive`.

  The clip update C <- (1 − β) C + β γ n̄ is an EMA towards γ·(norm): the paper's rule, not the
  geometric quantile rule of Andrew et al. (2021), and no clipped count is released. The AG News
  run's "EMA decay 0.9, target quantile 0.9, update rate 0.05" map to ρ = 0.9, γ = 0.9, β = 0.05
  (our reading; the paper's formula has only β and γ).

  Attributes:
    noise_multiplier: z > 0 (z = 0, no noise, allowed for a fixed clip).
    initial_clip: C_0 > 0 (math.inf, no clipping, allowed for a fixed clip).
    clipped_count_stddev: σ_b > 0, adaptive clipping only (it sets z_Δ); see `sigma_b`.
    beta: β in [0, 1), the clip update rate; 0 is a fixed clip.
    gamma: γ > 0, the clip's target multiple of the norm (adaptive only).
    norm_ema_decay: ρ in [0, 1) of the norm smoother, or None for the raw norm.
    warmup_rounds: releases sent without DP at the start (>= 0).
    noise_mode: one of `NOISE_MODES`: "practical" (the default), noise std s = z_rel · C, with
      z_rel = z for a fixed clip and z_rel = z_Δ (`noise_multiplier_delta`) for an adaptive one
      (the paper's text); "paper_literal", Algorithm 1's variance,
      s² = 2 z_Δ² (1 − β)² C² + 2 z_Δ² β² γ² ||Δ||² (for a fixed clip it equals the practical
      z·C). It depends on the *unclipped* norm ||Δ||, a function of the data, so it is OUTSIDE
      the Gaussian-mechanism argument and `local_epsilon` does not account it.
  """
  noise_multiplier: float
  initial_clip: float
  clipped_count_stddev: Optional[float] = None
  beta: float = 0.0
  gamma: float = 1.0
  norm_ema_decay: Optional[float] = None
  warmup_rounds: int = 0
  noise_mode: str = 'practical'

  def __post_init__(self):
    if self.beta == 0:
      # No noise (z = 0) and no clip (C = inf) are allowed for a fixed clip: the DP pipeline
      # then reduces to plain FedAvg, bit for bit (tests/retrieval/process_test.py,
      # NoDPReductionTest); such a config's ε is infinite.
      validation.check_non_negative('noise_multiplier', self.noise_multiplier)
      if not (isinstance(self.initial_clip, (int, float)) and self.initial_clip > 0):
        raise ValueError(f'`initial_clip` must be a number > 0 (inf allowed for a fixed clip), '
                         f'got {self.initial_clip!r}.')
    else:
      validation.check_positive('noise_multiplier', self.noise_multiplier)
      validation.check_positive('initial_clip', self.initial_clip)
    validation.check_unit_interval_right_open('beta', self.beta)
    validation.check_positive('gamma', self.gamma)
    if self.norm_ema_decay is not None:
      validation.check_unit_interval_right_open('norm_ema_decay', self.norm_ema_decay)
    validation.check_non_negative_integer('warmup_rounds', self.warmup_rounds)
    if self.noise_mode not in NOISE_MODES:
      raise ValueError(f'`noise_mode` must be one of {NOISE_MODES}, got {self.noise_mode!r}.')
    if self.is_adaptive:
      if self.clipped_count_stddev is None:
        raise ValueError('`clipped_count_stddev` is required with adaptive clipping (beta > 0).')
      noise_multiplier_delta(self.noise_multiplier, self.clipped_count_stddev)
    elif self.clipped_count_stddev is not None:
      raise ValueError('`clipped_count_stddev` applies to adaptive clipping (beta > 0) only, got '
                       f'{self.clipped_count_stddev!r} with beta = 0.')

  @classmethod
  def fixed(cls, noise_multiplier: float, clip: float, *, warmup_rounds: int = 0):
    """A fixed clip C with noise std z·C (the paper's fixed DP, s_0 = z).

    Args:
      noise_multiplier: z >= 0.
      clip: C > 0 (inf: no clipping).
      warmup_rounds: releases sent without DP at the start.

    Returns:
      The `LocalDPConfig`.

    Raises:
      ValueError: for an argument out of range.
    """
    return cls(noise_multiplier=noise_multiplier, initial_clip=clip, warmup_rounds=warmup_rounds)

  @classmethod
  def adaptive(cls, noise_multiplier: float, clipped_count_stddev: float, *,
               initial_clip: float = 1.0, beta: float = 0.05, gamma: float = 0.9,
               norm_ema_decay: Optional[float] = 0.9, warmup_rounds: int = 0,
               noise_mode: str = 'practical'):
    """An adaptive clip, defaults from the paper's AG News run (β = 0.05, γ = 0.9, ρ = 0.9).

    Args:
      noise_multiplier: z > 0.
      clipped_count_stddev: σ_b > 0 (`sigma_b`), with z < 2 σ_b.
      initial_clip: C_0 > 0; 1.0 is our default.
      beta: β in (0, 1) (use `fixed` for β = 0).
      gamma: γ > 0.
      norm_ema_decay: ρ in [0, 1), or None for the raw norm.
      warmup_rounds: releases sent without DP at the start.
      noise_mode: one of `NOISE_MODES`.

    Returns:
      The `LocalDPConfig`.

    Raises:
      ValueError: for an argument out of range, or z >= 2 σ_b.
    """
    validation.check_open_unit_interval('beta', beta)
    return cls(noise_multiplier=noise_multiplier, initial_clip=initial_clip,
               clipped_count_stddev=clipped_count_stddev, beta=beta, gamma=gamma,
               norm_ema_decay=norm_ema_decay, warmup_rounds=warmup_rounds, noise_mode=noise_mode)

  @property
  def is_adaptive(self) -> bool:
    """Whether the clip adapts (β > 0)."""
    return self.beta > 0

  @property
  def release_noise_multiplier(self) -> float:
    """z_rel: noise std over clip in practical mode, z_Δ (adaptive) or z (fixed)."""
    if self.is_adaptive:
      return noise_multiplier_delta(self.noise_multiplier, self.clipped_count_stddev)
    return self.noise_multiplier


class LocalDPState(NamedTuple):
  """A client's local-DP state.

  Attributes:
    clip: C, float32.
    smoothed_norm: n̄, float32.
    round: the number of releases so far, int32.
  """
  clip: tf.Tensor
  smoothed_norm: tf.Tensor
  round: tf.Tensor


def initial_state(config: LocalDPConfig) -> LocalDPState:
  """A client's state before its first release.

  Args:
    config: its `LocalDPConfig`.

  Returns:
    C = C_0, n̄ = 0 (replaced by the first norm), round 0.
  """
  return LocalDPState(clip=tf.constant(config.initial_clip, tf.float32),
                      smoothed_norm=tf.constant(0.0, tf.float32),
                      round=tf.constant(0, tf.int32))


def _noise_std(config: LocalDPConfig, clip: tf.Tensor, norm: tf.Tensor) -> tf.Tensor:
  if config.noise_multiplier == 0:
    return tf.constant(0.0)   # Not z·C: 0·inf is NaN.
  z_rel = config.release_noise_multiplier
  if config.noise_mode == 'practical' or not config.is_adaptive:
    return z_rel * clip
  variance = (2 * z_rel**2 * (1 - config.beta)**2 * tf.square(clip) +
              2 * z_rel**2 * config.beta**2 * config.gamma**2 * tf.square(norm))
  return tf.sqrt(variance)


def _next_norm_and_clip(config: LocalDPConfig, state: LocalDPState,
                        norm: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  if config.norm_ema_decay is None:
    smoothed = norm
  else:
    decay = config.norm_ema_decay
    smoothed = tf.where(state.round == 0, norm,
                        decay * state.smoothed_norm + (1 - decay) * norm)
  clip = (1 - config.beta) * state.clip + config.beta * config.gamma * smoothed
  return smoothed, clip


def privatize(delta: Any, state: LocalDPState, config: LocalDPConfig,
              seed: tf.Tensor) -> Tuple[Any, LocalDPState, Dict[str, tf.Tensor]]:
  """One local-DP release of `delta`.

  At clip C held by the client, with all trainable tensors flattened into one vector for the
  norm:

      Δ_c = Δ · min(1, C / ||Δ||_2)                 (||Δ|| = 0 gives scale 1, no NaN)
      send Δ_c + N(0, s² I)                         (s: `LocalDPConfig.noise_mode`)
      C <- (1 − β) C + β γ n̄                        (after the release; β = 0 keeps C fixed)

  with n̄ = ||Δ||, or, with the optional smoother of decay ρ (`norm_ema_decay`),
  n̄ <- ρ n̄ + (1 − ρ) ||Δ|| (started at the first observed norm). A delta whose norm is not
  finite (a NaN or inf entry, or an overflowing norm) is replaced by zeros before clipping, and
  counts as norm 0 in the clip update, so the released Δ_c has norm <= C for every input: in
  practical mode Δ_c + N(0, (z_rel C)² I) is a Gaussian mechanism (`local_epsilon` accounts it).
  During warmup (release index < `warmup_rounds`) Δ is sent as is, unclipped and un-noised; C is
  still updated so that it is calibrated when DP starts (our assumption).

  This is one release: the paper's text clips and noises once per round on the round's delta
  (the process's default); its Algorithm 1 does so after every local SGD step. Either way the
  accounting counts releases.

  Args:
    delta: a nest of float tensors (all trainable tensors of one update).
    state: the client's `LocalDPState`.
    config: its `LocalDPConfig`.
    seed: a shape-[2] integer tensor; the noise is a function of it (stateless ops), so a
      replay with the same seed is identical. Use a fresh seed per release.

  Returns:
    (released delta, same structure as `delta`; the next state; measurements: `norm` (||Δ||,
    0 if not finite), `clip` (C used), `noise_std`, `clipped`, `nonfinite`, `dp_active`). Only
    the released delta is covered by the guarantee: the measurements are the client's own
    un-noised statistics and must stay on the client unless released as a labelled opt-in.
  """
  leaves = tf.nest.flatten(delta)
  norm = tf.linalg.global_norm(leaves)
  finite = tf.math.is_finite(norm)
  safe_norm = tf.where(finite, norm, 0.0)
  safe_leaves = [tf.where(finite, x, tf.zeros_like(x)) for x in leaves]
  clip = state.clip
  scale = tf.where(safe_norm > clip, clip / tf.maximum(safe_norm, 1e-30), 1.0)
  noise_std = _noise_std(config, clip, safe_norm)
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), len(leaves))
  dp_active = state.round >= config.warmup_rounds
  released = []
  for i, (raw, safe) in enumerate(zip(leaves, safe_leaves, strict=True)):
    noise = gaussian_noise(tf.shape(safe), noise_std, dtype=safe.dtype, seed=seeds[i])
    private = safe * tf.cast(scale, safe.dtype) + noise
    released.append(tf.where(dp_active, private, raw))
  smoothed, next_clip = _next_norm_and_clip(config, state, safe_norm)
  next_state = LocalDPState(clip=next_clip, smoothed_norm=smoothed, round=state.round + 1)
  measurements = {
      'norm': safe_norm,
      'clip': clip,
      'noise_std': tf.where(dp_active, noise_std, 0.0),
      'clipped': tf.logical_and(dp_active, safe_norm > clip),
      'nonfinite': tf.logical_not(finite),
      'dp_active': dp_active,
  }
  return tf.nest.pack_sequence_as(delta, released), next_state, measurements


def local_epsilon(config: LocalDPConfig, rounds: int, delta: float, accountant: str = 'rdp',
                  replace_one: bool = True) -> float:
  """Per-client ε after `rounds` releases of `privatize` (practical mode).

  Per client, local DP: the client's upload is the mechanism. Δ_c has L2 norm <= C whatever the
  data, so Δ_c + N(0, (z_rel C)² I) is a Gaussian mechanism. Local DP compares any two inputs of
  the client (replace-one): two clipped deltas differ by up to 2C, so the multiplier is
  z_rel / 2, what is accounted by default. Against the client sending nothing (Δ = 0, the
  add/remove view of central DP) the sensitivity is C and the multiplier z_rel
  (`replace_one=False`, an explicit opt-in: it does not bound what an upload reveals about which
  data the client holds). T releases after warmup compose adaptively: T self-compositions, with
  no amplification by sampling (every client takes part every round), accounted by
  `fedasr_tff.privacy.compute_epsilon` (dp-accounting).

  Not covered: the adaptive clip C_t is a function of the client's own past unclipped norms. It
  is never released directly, but it sets the noise scale of every upload, so it leaks through
  the uploads (their spread reveals C_t, hence past norms). The accounting treats C_t as public
  and does NOT cover that leak; a fixed clip (β = 0) has none. Warmup releases the raw update,
  so a run with warmup has ε = ∞. With z = 0.1 the ε is vacuous; it is still reported as a
  number.

  Args:
    config: the client's `LocalDPConfig`.
    rounds: T, releases so far.
    delta: δ.
    accountant: "rdp" or "pld".
    replace_one: local DP's any-two-inputs relation (multiplier z_rel / 2); False: add/remove
      (z_rel).

  Returns:
    ε; math.inf if any of the `rounds` is a warmup release (the raw update was sent) or there is
    no noise (z = 0), and 0.0 for `rounds` = 0.

  Raises:
    ValueError: naming `noise_mode` for "paper_literal" with an adaptive clip (not a Gaussian
      mechanism of fixed sensitivity-to-noise ratio), or an out-of-range argument.
  """
  validation.check_non_negative_integer('rounds', rounds)
  if config.is_adaptive and config.noise_mode == 'paper_literal':
    raise ValueError('`noise_mode` "paper_literal" has data-dependent noise; no ε is accounted.')
  if rounds > 0 and (config.warmup_rounds > 0 or config.noise_multiplier == 0):
    return math.inf
  multiplier = config.release_noise_multiplier / (2 if replace_one else 1)
  return accounting.compute_epsilon(multiplier, 1.0, rounds, delta, accountant)
