"""Clipping, Gaussian noise and accounting of client deltas, configured once for every task.

`DPConfig` holds the flags of user-level DP on the server (Pelikan et al., NeurIPS 2025,
arXiv:2310.00098, Algorithm 1: each client's delta clipped to C, globally or per layer, Gaussian
noise of std z·C on the sum). Every task builds its DP aggregator (`DPConfig.aggregator`), its
noise level (`DPConfig.noise_level`: σ_DP, the run's z and the declared population's z') and
its privacy ledger (`DPConfig.ledger`) here, so the aggregator's z, the ledger's z and the
statement agree by construction; the ledger then reads z back from the aggregator's state.
"""

import dataclasses
from typing import Callable
from typing import Optional
from typing import Sequence

from fedasr_tff import aggregators
from fedasr_tff import privacy
from fedasr_tff.aggregators import bounded_weight_dp
from fedasr_tff.aggregators import per_layer_query
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program.fields import check_choice
from fedasr_tff.program.fields import field
from fedasr_tff.program.fields import naming_fields

CLIPPINGS = ('none', 'global', 'uniform', 'dim', 'weighted')


@dataclasses.dataclass(frozen=True)
class NoiseLevel:
  """The noise of a run in the two units that are used (`privacy.conventions`).

  Attributes:
    sigma_dp: σ_DP, the std on the averaged update in units of the clip.
    noise_multiplier: z = σ_DP·S of the run's own cohort S, what the aggregator is given.
    declared_noise_multiplier: z' = σ_DP·S' of the declared cohort S'.
  """
  sigma_dp: float
  noise_multiplier: float
  declared_noise_multiplier: float


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """Client-delta clipping, Gaussian noise and the population privacy is accounted for.

  The noise is given one way at most: `sigma_dp`, `noise_multiplier` (z of the run's cohort) or
  `target_epsilon` (for the declared population at the planned rounds). `noise_level` turns the
  one given into σ_DP and the noise multipliers (the library checks the value there). Each field
  is the flag of the same name, documented by its help.
  """
  clipping: str = field(
      'dim', 'Client-delta clipping (Pelikan et al. 2025, Sec. 3, Definition 3): global, or '
      'per layer with C_h uniform, proportional to sqrt(dim), or weighted (MLP weights x '
      '--mlp_weight, ibid. App. H.5); none: plain mean, no DP.', CLIPPINGS)
  clip: float = field(0.01, 'Total clip C of a client delta.')
  mlp_weight: float = field(10.0, 'alpha of the MLP weights (w1, w2) for --clipping=weighted.')
  normalize: bool = field(False, 'Rescale every layer to exactly C_h once the delta norm '
                           'reaches C (the paper\'s released code).')
  adaptive_clipping: bool = field(False, 'Per-layer adaptive clips tracking --target_quantile '
                                   '(--clip is the initial C).')
  target_quantile: float = field(0.5, 'Adaptive clipping quantile.')
  clip_learning_rate: float = field(0.2, 'Adaptive clipping learning rate.')
  noise_placement: str = field('server', 'Add the noise to the sum, or on every client.',
                                per_layer_query.NOISE_PLACEMENTS)
  sigma_dp: Optional[float] = field(
      None, 'Noise std on the averaged update in units of --clip (Pelikan et al. 2025, '
      'Algorithm 1 and App. H.1).')
  noise_multiplier: Optional[float] = field(
      None, 'Noise multiplier z of this run\'s cohort (sigma_dp = z / cohort_size).')
  target_epsilon: Optional[float] = field(
      None, 'Solve the noise for this epsilon at --delta, --rounds, --population and '
      '--population_cohort_size.')
  delta: float = field(1e-9, 'delta of the (epsilon, delta) guarantee.')
  population: Optional[int] = field(
      None, 'Population K\' the privacy is accounted for (Pelikan et al. 2025, Sec. 4.3 and '
      'Table 1: the extrapolated population); default: the number of training clients.')
  population_cohort_size: Optional[int] = field(
      None, 'Cohort S\' of the declared population (same sigma_dp, z\' = sigma_dp * S\'); '
      'default --cohort_size.')
  noise_seed: Optional[int] = field(
      None, 'Seed of the server-side DP noise (default: OS entropy, kept in the checkpoints). '
      'Fix it only for reproducible simulations.')
  release_client_diagnostics: bool = field(
      False, 'In a run with noise, also release un-noised client statistics (training loss, '
      'delta and per-layer norms, clipped fractions, client counts) under client/, and the '
      'report of unusable training files: OUTSIDE the DP guarantee, and the privacy statement '
      'says so. Runs without noise always release them.')
  release_client_evaluation: bool = field(
      False, 'In a run with noise, allow --eval_split to share speakers with the federated '
      'clients: its scores (eval/*, the evaluation lines, eval_per_speaker.csv) are then '
      'un-noised statistics of those clients\' data, OUTSIDE the DP guarantee, and the privacy '
      'statement says so. Without it such evaluation data is refused. Runs without noise '
      'always allow it.')

  def __post_init__(self):
    check_choice('clipping', self.clipping, CLIPPINGS)
    given = [name for name in ('sigma_dp', 'noise_multiplier', 'target_epsilon')
             if getattr(self, name) is not None]
    if len(given) > 1:
      raise ValueError('Give the noise one way only: `sigma_dp`, `noise_multiplier` or '
                       f'`target_epsilon`; got {", ".join(f"`{n}`" for n in given)}.')
    if self.clipping == 'none' and (self.adds_noise or self.adaptive_clipping):
      raise ValueError('`clipping`=none cannot be combined with DP noise or '
                       '`adaptive_clipping`: the noise is calibrated to the clip.')

  @property
  def adds_noise(self) -> bool:
    """Whether noise is asked for (a target ε always asks for some)."""
    return (self.target_epsilon is not None
            or any(v not in (None, 0) for v in (self.sigma_dp, self.noise_multiplier)))

  def noise_level(self, cohort_size: int, declared_cohort_size: int, declared_population: int,
                  rounds: int) -> NoiseLevel:
    """σ_DP and the noise multipliers from the one noise setting given.

    The given quantity is used as it is and the others follow from it with the conventions
    z = σ_DP·S and z' = σ_DP·S' (`privacy.conventions`): `noise_multiplier` is the run's z;
    `target_epsilon` is met by the smallest z' for the declared population K', S' at the
    planned rounds (`privacy.noise_multiplier_for_epsilon`). Without noise all are 0.

    Args:
      cohort_size: the run's expected cohort S.
      declared_cohort_size: the declared population's cohort S'.
      declared_population: the declared population K'.
      rounds: the planned rounds T.

    Returns:
      The run's `NoiseLevel`.
    """
    if self.noise_multiplier is not None:
      sigma_dp = privacy.sigma_dp_from_noise_multiplier(self.noise_multiplier, cohort_size)
      return NoiseLevel(sigma_dp, float(self.noise_multiplier),
                        privacy.noise_multiplier_from_sigma_dp(sigma_dp, declared_cohort_size))
    if self.target_epsilon is not None:
      declared_z = privacy.noise_multiplier_for_epsilon(
          self.target_epsilon, declared_cohort_size / declared_population, rounds, self.delta)
      sigma_dp = privacy.sigma_dp_from_noise_multiplier(declared_z, declared_cohort_size)
      return NoiseLevel(sigma_dp, privacy.noise_multiplier_from_sigma_dp(sigma_dp, cohort_size),
                        declared_z)
    sigma_dp = 0.0 if self.sigma_dp is None else self.sigma_dp
    return NoiseLevel(float(sigma_dp),
                      privacy.noise_multiplier_from_sigma_dp(sigma_dp, cohort_size),
                      privacy.noise_multiplier_from_sigma_dp(sigma_dp, declared_cohort_size))

  def ledger(self, noise: NoiseLevel, *, cohort_size: int, population: int,
             declared_cohort_size: int, declared_population: int, rounds: int,
             sampling: str) -> privacy_ledger.PrivacyLedger:
    """The run's privacy ledger at `noise` (it checks the cohort against the population).

    Args:
      noise: the run's `noise_level`.
      cohort_size: the run's expected cohort S.
      population: the run's clients K.
      declared_cohort_size: the declared population's cohort S'.
      declared_population: the declared population K'.
      rounds: the planned rounds T.
      sampling: how cohorts are drawn (`cohorts.SAMPLINGS`).

    Returns:
      A `PrivacyLedger`; once the aggregator exists, replace its `noise_multiplier` with the
      one the aggregator's state applies (`privacy_ledger.applied_noise_multiplier`).
    """
    return privacy_ledger.PrivacyLedger(
        noise_multiplier=noise.noise_multiplier, cohort_size=cohort_size, population=population,
        declared_noise_multiplier=noise.declared_noise_multiplier,
        declared_cohort_size=declared_cohort_size, declared_population=declared_population,
        planned_rounds=rounds, delta=self.delta, sampling=sampling)

  def aggregator(self, noise_multiplier: float, cohort_size: int,
                 leaf_names: Optional[Sequence[str]], diagnostics: bool, *,
                 weighted_leaf: Optional[Callable[[str], bool]] = None,
                 min_weight: Optional[float] = None,
                 weight_budget: float = bounded_weight_dp.DEFAULT_WEIGHT_BUDGET):
    """The delta aggregator: None (TFF's plain mean), `aggregators.PerLayerDPFactory`, or for
    weighted deltas (`min_weight` given: DGA) `aggregators.BoundedWeightDPFactory`.

    Args:
      noise_multiplier: the run's z (`noise_level`).
      cohort_size: the expected cohort S the sum is divided by.
      leaf_names: the model's tensor names, which name the clipping groups in the measurements;
        None for numbered groups (not with "weighted").
      diagnostics: measure un-noised client statistics (only where they are released).
      weighted_leaf: for `clipping`="weighted", whether a tensor, by name, is one of the model's
        MLP tensors (weight `mlp_weight`; the others weigh 1).
      min_weight: DGA's smallest client weight, for weighted deltas.
      weight_budget: the share of z spent on DGA's weight sum.

    Returns:
      The aggregation factory, or None without clipping.
    """
    if self.clipping == 'none':
      return None
    if self.clipping == 'weighted' and (leaf_names is None or weighted_leaf is None):
      raise ValueError('`clipping`=weighted needs the model\'s tensor names and which of them '
                       'are its MLP tensors.')
    layer_weights = None
    if self.clipping == 'weighted':
      layer_weights = [self.mlp_weight if weighted_leaf(name) else 1.0 for name in leaf_names]
    common = dict(allocation=self.clipping, layer_weights=layer_weights,
                  noise_placement=self.noise_placement, noise_seed=self.noise_seed,
                  diagnostics=diagnostics,
                  leaf_names=None if leaf_names is None else list(leaf_names))
    with naming_fields({'initial_clip': 'clip', 'learning_rate': 'clip_learning_rate',
                         'allocation': 'clipping', 'layer_weights': 'mlp_weight',
                         'clients_per_round': 'cohort_size', 'weight_budget': 'dga_weight_budget'}):
      if min_weight is not None:
        del common['noise_placement']  # Checked by `FederatedConfig`: server only.
        weighted = dict(min_weight=min_weight, weight_budget=weight_budget, **common)
        if self.adaptive_clipping:
          return aggregators.BoundedWeightDPFactory.gaussian_adaptive(
              noise_multiplier, cohort_size, self.clip, target_quantile=self.target_quantile,
              learning_rate=self.clip_learning_rate, **weighted)
        return aggregators.BoundedWeightDPFactory.gaussian_fixed(
            noise_multiplier, cohort_size, self.clip, normalize=self.normalize, **weighted)
      if self.adaptive_clipping:
        return aggregators.PerLayerDPFactory.gaussian_adaptive(
            noise_multiplier, cohort_size, self.clip, target_quantile=self.target_quantile,
            learning_rate=self.clip_learning_rate, **common)
      return aggregators.PerLayerDPFactory.gaussian_fixed(
          noise_multiplier, cohort_size, self.clip, normalize=self.normalize, **common)
