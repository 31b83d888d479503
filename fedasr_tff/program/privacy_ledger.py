"""The privacy a federated run spends, and the noise a run must add (spec §1.2 and §6).

A run adds noise of std σ_DP·C to the averaged update (σ_DP in units of the clip C). Its
guarantee is user-level (ε, δ)-DP of T rounds of the Poisson-sampled Gaussian mechanism with

    q = S / K,    z = σ_DP · S,

for cohort S and population K. Two populations are accounted:

* the run itself: the S clients a round out of the K clients it trains on;
* the declared one (spec §6, extrapolation): the population K' and cohort S' the user says the
  configuration stands for. Model quality is assumed to depend only on σ_DP, so the same σ_DP
  with S' clients a round is the noise multiplier z' = σ_DP·S' at rate q' = S'/K'. This is how
  the paper quotes ε for millions of users from runs on thousands.

The noise can be given as σ_DP, as the noise multiplier z of the run's own cohort (σ_DP = z/S),
or as a target ε for the declared population at the planned rounds (σ_DP = z'/S' with z' the
smallest multiplier that meets it, `privacy.noise_multiplier_for_epsilon`).
"""

import dataclasses
import functools
import math
from typing import Dict
from typing import Optional

from fedasr_tff import privacy
from fedasr_tff import validation

ACCOUNTANTS = ('rdp', 'pld')


def resolve_sigma_dp(*, sigma_dp: Optional[float], noise_multiplier: Optional[float],
                     target_epsilon: Optional[float], cohort_size: int,
                     declared_cohort_size: int, declared_population: int, planned_rounds: int,
                     delta: float) -> float:
  """σ_DP from exactly one of the three specifications (module docstring); 0 if none is given."""
  given = {name: value for name, value in (('sigma_dp', sigma_dp),
                                           ('noise_multiplier', noise_multiplier),
                                           ('target_epsilon', target_epsilon))
           if value is not None}
  if len(given) > 1:
    raise ValueError(f'Give the noise one way only; got {", ".join(sorted(given))}.')
  if sigma_dp is not None:
    validation.check_non_negative('sigma_dp', sigma_dp)
    return float(sigma_dp)
  if noise_multiplier is not None:
    validation.check_non_negative('noise_multiplier', noise_multiplier)
    return privacy.sigma_dp_from_noise_multiplier(noise_multiplier, cohort_size)
  if target_epsilon is not None:
    validation.check_positive('target_epsilon', target_epsilon)
    z = privacy.noise_multiplier_for_epsilon(target_epsilon,
                                             declared_cohort_size / declared_population,
                                             planned_rounds, delta)
    return privacy.sigma_dp_from_noise_multiplier(z, declared_cohort_size)
  return 0.0


@dataclasses.dataclass(frozen=True)
class PrivacyLedger:
  """ε spent by a run, for the run's own population and for the declared one."""
  sigma_dp: float
  cohort_size: int
  population: int
  declared_cohort_size: int
  declared_population: int
  planned_rounds: int
  delta: float

  def __post_init__(self):
    validation.check_non_negative('sigma_dp', self.sigma_dp)
    for name in ('cohort_size', 'population', 'declared_cohort_size', 'declared_population',
                 'planned_rounds'):
      validation.check_positive_integer(name, getattr(self, name))
    validation.check_open_unit_interval('delta', self.delta)
    if self.cohort_size > self.population:
      raise ValueError(f'`cohort_size` ({self.cohort_size}) exceeds the population '
                       f'({self.population}).')
    if self.declared_cohort_size > self.declared_population:
      raise ValueError(f'The declared cohort ({self.declared_cohort_size}) exceeds the declared '
                       f'population ({self.declared_population}).')

  @property
  def noise_multiplier(self) -> float:
    """z = σ_DP·S of the run's own cohort (what the aggregator adds, in sum units)."""
    return privacy.noise_multiplier_from_sigma_dp(self.sigma_dp, self.cohort_size)

  @property
  def declared_noise_multiplier(self) -> float:
    return privacy.noise_multiplier_from_sigma_dp(self.sigma_dp, self.declared_cohort_size)

  @property
  def sampling_rate(self) -> float:
    return self.cohort_size / self.population

  @property
  def declared_sampling_rate(self) -> float:
    return self.declared_cohort_size / self.declared_population

  def epsilon(self, rounds: int, declared: bool = True,
              accountant: str = 'rdp') -> float:
    """ε after `rounds` rounds; inf without noise, 0 before the first round."""
    validation.check_non_negative_integer('rounds', rounds)
    if rounds == 0:
      return 0.0
    if self.sigma_dp == 0:
      return math.inf
    if declared:
      return _epsilon(self.declared_noise_multiplier, self.declared_sampling_rate, rounds,
                      self.delta, accountant)
    return _epsilon(self.noise_multiplier, self.sampling_rate, rounds, self.delta, accountant)

  def metrics(self, rounds: int) -> Dict[str, float]:
    """ε of the declared population so far and at the planned rounds, both accountants, and
    the RDP ε of the run's own population so far."""
    values = {}
    for accountant in ACCOUNTANTS:
      values[f'epsilon_{accountant}'] = self.epsilon(rounds, True, accountant)
      values[f'projected_epsilon_{accountant}'] = self.epsilon(self.planned_rounds, True,
                                                               accountant)
    values['run_epsilon_rdp'] = self.epsilon(rounds, False, 'rdp')
    return values

  def statement(self, rounds: int) -> str:
    """The privacy statement of a run after `rounds` rounds, in Markdown."""
    if self.sigma_dp == 0:
      return ('No noise was added: the run is **not** differentially private (ε = ∞). '
              f'Cohort S = {self.cohort_size} of K = {self.population} clients, {rounds} rounds.')
    declared = self.metrics(rounds)
    lines = [
        f'User-level (ε, δ)-DP with δ = {self.delta:g}: noise σ_DP = {self.sigma_dp:.4g} on the '
        f'averaged update (in units of the clip), {rounds} rounds of the Poisson-sampled Gaussian '
        'mechanism.',
        '',
        '| population | cohort S | population K | q = S/K | z = σ_DP·S | ε (RDP) | ε (PLD) |',
        '|---|---|---|---|---|---|---|',
        f'| declared (spec §6) | {self.declared_cohort_size} | {self.declared_population} | '
        f'{self.declared_sampling_rate:.4g} | {self.declared_noise_multiplier:.4g} | '
        f'{declared["epsilon_rdp"]:.3g} | {declared["epsilon_pld"]:.3g} |',
        f'| this run | {self.cohort_size} | {self.population} | {self.sampling_rate:.4g} | '
        f'{self.noise_multiplier:.4g} | {declared["run_epsilon_rdp"]:.3g} | — |',
        '',
        'The declared row is the guarantee of the same σ_DP with the declared cohort and '
        'population (the paper\'s extrapolation: quality is assumed to depend on σ_DP only). '
        'The run itself, on its small population, is only protected as its own row says.',
        '',
        'Each round trains exactly S distinct clients drawn uniformly without replacement; the '
        'accounting assumes Poisson sampling with rate q = S/K, as the paper does (spec §6). '
        'That is the standard approximation for fixed-size cohorts, not a proof for them.',
    ]
    if rounds < self.planned_rounds:
      lines.append(f'At the planned {self.planned_rounds} rounds the declared ε would be '
                   f'{declared["projected_epsilon_rdp"]:.3g} (RDP) / '
                   f'{declared["projected_epsilon_pld"]:.3g} (PLD).')
    return '\n'.join(lines)


@functools.lru_cache(maxsize=256)
def _epsilon(noise_multiplier, sampling_rate, rounds, delta, accountant):
  return privacy.compute_epsilon(noise_multiplier, sampling_rate, rounds, delta, accountant)
