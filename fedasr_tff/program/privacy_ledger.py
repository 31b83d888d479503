"""The privacy a federated run spends: ε of its Gaussian mechanism, for two populations.

A run adds noise of std σ_DP·C to the averaged update (σ_DP in units of the clip C). Its
guarantee is user-level (ε, δ)-DP of T rounds of the Poisson-sampled Gaussian mechanism at
q = S/K with z = σ_DP·S, for cohort S and population K (Pelikan et al., NeurIPS 2025,
arXiv:2310.00098, after McMahan et al., ICLR 2018). Every ε is named by the population it
covers: `epsilon_run_*` is this run's guarantee on its own K clients; `epsilon_declared_*` is the
paper's extrapolation to a declared population K', S' at the same σ_DP (z' = σ_DP·S' at
q' = S'/K'): a run that was not made, assuming model quality depends on σ_DP only
(docs/accounting.md).

The run's z is read from its aggregator's state (`applied_noise_multiplier`, TFF's DP event) and
`PrivacyLedger.check_round` compares every round's event with it, so the accounted z cannot
differ from the applied one.
"""

import dataclasses
import functools
import math
from typing import Dict
from typing import Optional
from typing import Tuple

import dp_accounting
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff import validation
from fedasr_tff.program.cohorts import SAMPLINGS
from fedasr_tff.program.cohorts import WITH_REPLACEMENT

# RDP and PLD of Poisson sampling, add/remove-one adjacency.
ACCOUNTANTS = privacy.ACCOUNTANTS
# With fixed-size cohorts, also dp-accounting's without-replacement RDP (replace-one adjacency,
# `privacy.compute_epsilon_without_replacement`): not comparable with the others.
ALL_ACCOUNTANTS = ACCOUNTANTS + ('wor_rdp',)


def applied_noise_multiplier(aggregator_state) -> float:
  """z of the Gaussian mechanism a DP aggregator runs, read from its state (TFF's DP event).

  After a round the event is TFF's `extract_dp_event_from_state`; in the initial state it is the
  event of the same `get_noised_result` on the initial query state, which for
  `aggregators.PerLayerDPFactory` (whose event does not depend on the state) is the event of
  every round. The multiplier is the float32 value the aggregator computes with, so the ledger
  accounts the noise applied.

  Args:
    aggregator_state: the aggregator part of the learning process state (`state.aggregator`).

  Returns:
    z, or 0 for a state without a DP event (a plain mean).

  Raises:
    ValueError: if the aggregator reports an event other than one `GaussianDpEvent`.
  """
  dp_event = getattr(aggregator_state, 'dp_event', None)
  if dp_event is None:
    return 0.0
  if aggregator_state.is_init_state:
    event = dp_accounting.DpEvent.from_named_tuple(dp_event)
  else:
    event = tff.aggregators.differential_privacy.extract_dp_event_from_state(aggregator_state)
  if not isinstance(event, dp_accounting.GaussianDpEvent):
    raise ValueError(f'The aggregator reported {event}; the ledger accounts one Gaussian '
                     'mechanism a round.')
  return float(event.noise_multiplier)


@dataclasses.dataclass(frozen=True)
class Disclosures:
  """What a run releases or assumes beyond the mechanism itself, for its privacy statement.

  Attributes:
    sampling: how cohorts were drawn, one of `cohorts.SAMPLINGS`.
    sampling_seed_known: the cohorts come from a seed the user fixed (`--seed`), not from a
      secret drawn from OS entropy: anyone who knows it can recompute every cohort.
    noise_seed_known: the server-side noise comes from a seed the user fixed (`--noise_seed`):
      anyone who knows it can recompute and subtract the noise.
    noise_placement: "server" or "client" (client placement assumes secure aggregation).
    client_statistics: names of released metric columns computed from client data without noise
      (the `--release_client_diagnostics` opt-in); empty when none are released.
    pseudo_clients: clients are `--iid` pseudo-speakers, not people.
    adaptive_clipping: the clips are the noised adaptive state.
    central_data: the server's own data and what it was used for (mixed FL, DGA rehearsal or
      validation; a description), '' for none.
    weighting: how data-dependent aggregation weights were released (DGA), '' for uniform.
    evaluated_clients: how many federated clients the released evaluation scored (the
      `--release_client_evaluation` opt-in); 0 when the evaluation data is the server's.
  """
  sampling: str = 'poisson'
  sampling_seed_known: bool = False
  noise_seed_known: bool = False
  noise_placement: str = 'server'
  client_statistics: Tuple[str, ...] = ()
  pseudo_clients: bool = False
  adaptive_clipping: bool = False
  central_data: str = ''
  evaluated_clients: int = 0
  weighting: str = ''


@dataclasses.dataclass(frozen=True)
class PrivacyLedger:
  """ε spent by a run, for the run's own population and for the declared one.

  Every ε is named by what it covers: `epsilon_run_*` is the guarantee of this run on its own K
  clients; `epsilon_declared_*` is the extrapolation to the declared K', S' (module docstring),
  which holds only under the assumption that model quality depends on σ_DP alone. Built by
  `dp_config.DPConfig.ledger`.

  Attributes:
    noise_multiplier: the run's z, the one its aggregator applies (`applied_noise_multiplier`);
      0 for a run without noise.
    cohort_size: the run's (expected) cohort S.
    population: the run's K training clients, at least S.
    declared_noise_multiplier: z' = σ_DP·S' of the declared cohort.
    declared_cohort_size: the declared cohort S', at most K'.
    declared_population: the declared population K', at least K.
    planned_rounds: the rounds T the run plans, for the projected ε.
    delta: δ of every ε, in (0, 1).
    sampling: how cohorts are drawn (`cohorts.SAMPLINGS`); "fixed" adds the `wor_rdp`
      accountant, and "with_replacement" is refused with noise (no accountant covers it).

  Raises:
    ValueError: on construction, if a size is not a positive integer, `delta` is not in (0, 1),
      a cohort exceeds its population, K' < K, or `sampling` is unknown or "with_replacement"
      with noise.
  """
  noise_multiplier: float
  cohort_size: int
  population: int
  declared_noise_multiplier: float
  declared_cohort_size: int
  declared_population: int
  planned_rounds: int
  delta: float
  sampling: str = 'poisson'

  def __post_init__(self):
    for name in ('cohort_size', 'population', 'declared_cohort_size', 'declared_population',
                 'planned_rounds'):
      validation.check_positive_integer(name, getattr(self, name))
    validation.check_open_unit_interval('delta', self.delta)
    validation.check_cohort_within_population(
        self.cohort_size, self.population,
        population_description=f'the population of {self.population} training clients')
    if self.declared_population < self.population:
      raise ValueError(f'The declared `population` ({self.declared_population}) is smaller than '
                       f'the {self.population} training clients.')
    validation.check_cohort_within_population(
        self.declared_cohort_size, self.declared_population,
        cohort_name='population_cohort_size', population_name='population',
        population_description=f'the declared `population` ({self.declared_population})')
    if self.sampling not in SAMPLINGS:
      raise ValueError(f'`sampling` must be one of {SAMPLINGS}, got {self.sampling!r}.')
    if self.sampling == WITH_REPLACEMENT and self.noise_multiplier > 0:
      raise ValueError('`sampling`=with_replacement has no DP accounting (a user drawn m times '
                       'contributes m·C): it is for runs without noise.')

  @property
  def sigma_dp(self) -> float:
    """σ_DP = z/S of the run (`privacy.conventions`)."""
    return self.noise_multiplier / self.cohort_size

  def check_round(self, aggregator_state) -> None:
    """Raises unless the round that produced `aggregator_state` ran the accounted mechanism.

    Args:
      aggregator_state: the aggregator part of the learning process state after the round.

    Raises:
      RuntimeError: if its z (`applied_noise_multiplier`) differs from `noise_multiplier`.
      ValueError: if the aggregator reports an event other than one `GaussianDpEvent`.
    """
    applied = applied_noise_multiplier(aggregator_state)
    if applied != self.noise_multiplier:
      raise RuntimeError(f'The aggregator applied noise multiplier {applied}, the ledger '
                         f'accounts {self.noise_multiplier}: the privacy figures would be wrong.')

  @property
  def sampling_rate(self) -> float:
    """q = S/K of the run."""
    return self.cohort_size / self.population

  @property
  def declared_sampling_rate(self) -> float:
    """q' = S'/K' of the declared population."""
    return self.declared_cohort_size / self.declared_population

  def epsilon(self, rounds: int, declared: bool = True,
              accountant: str = 'rdp') -> float:
    """ε after `rounds` rounds; inf without noise, 0 before the first round.

    Args:
      rounds: the rounds run (>= 0).
      declared: the declared population's ε (K', S', z'); False for the run's own (K, S, z).
      accountant: "rdp" or "pld" (Poisson sampling, add/remove-one adjacency) or "wor_rdp"
        (fixed-size cohorts drawn without replacement, replace-one adjacency: not comparable).

    Returns:
      ε at `delta`.

    Raises:
      ValueError: if `rounds` is not an integer >= 0 or `accountant` is not one of
        `ALL_ACCOUNTANTS`.
    """
    validation.check_non_negative_integer('rounds', rounds)
    if accountant not in ALL_ACCOUNTANTS:
      raise ValueError(f'`accountant` must be one of {ALL_ACCOUNTANTS}, got {accountant!r}.')
    if rounds == 0:
      return 0.0
    if declared:
      z, cohort, population = (self.declared_noise_multiplier, self.declared_cohort_size,
                               self.declared_population)
    else:
      z, cohort, population = self.noise_multiplier, self.cohort_size, self.population
    if z == 0:
      return math.inf
    return _epsilon(z, cohort, population, rounds, self.delta, accountant)

  def _accountants(self) -> Tuple[str, ...]:
    return ACCOUNTANTS + (('wor_rdp',) if self.sampling == 'fixed' else ())

  def metrics(self, rounds: int) -> Dict[str, float]:
    """Every ε after `rounds` and at the planned rounds, named by population and accountant.

    Args:
      rounds: the rounds run (>= 0).

    Returns:
      {`epsilon_{run,declared}_{rdp,pld[,wor_rdp]}`: ε after `rounds`} and the same names
      prefixed `projected_` at `planned_rounds` (`wor_rdp` only for fixed-size cohorts).
    """
    values = {}
    for prefix, at_rounds in (('', rounds), ('projected_', self.planned_rounds)):
      for population in ('run', 'declared'):
        for accountant in self._accountants():
          values[f'{prefix}epsilon_{population}_{accountant}'] = self.epsilon(
              at_rounds, population == 'declared', accountant)
    return values

  def summary_line(self, rounds: int) -> str:
    """One log line with both populations' ε, each named.

    Args:
      rounds: the rounds run (>= 0).

    Returns:
      The line: the run's ε (RDP, PLD and, for fixed cohorts, without-replacement RDP) and the
      declared population's ε now and at `planned_rounds`.
    """
    m = {name: privacy.format_epsilon(value) for name, value in self.metrics(rounds).items()}
    parts = [f'this run (K={self.population}, S={self.cohort_size}): epsilon_run '
             f'RDP {m["epsilon_run_rdp"]} / PLD {m["epsilon_run_pld"]}']
    if self.sampling == 'fixed':
      parts[-1] += f' / without-replacement RDP {m["epsilon_run_wor_rdp"]}'
    parts.append(f'declared (K\'={self.declared_population}, S\'={self.declared_cohort_size}, '
                 'assumes quality depends on sigma_dp only): epsilon_declared '
                 f'RDP {m["epsilon_declared_rdp"]} / PLD {m["epsilon_declared_pld"]}, '
                 f'{m["projected_epsilon_declared_rdp"]} / '
                 f'{m["projected_epsilon_declared_pld"]} at {self.planned_rounds} rounds')
    return f'epsilon spent at delta={self.delta:g}: ' + '; '.join(parts)

  def statement(self, rounds: int, disclosures: Optional[Disclosures] = None) -> str:
    """The privacy statement of a run after `rounds` rounds, in Markdown.

    Args:
      rounds: the rounds run (>= 0).
      disclosures: what the run released or assumed beyond the mechanism; None for the
        defaults at this ledger's `sampling`.

    Returns:
      The statement: both populations' ε in a table, then what holds and what is outside the
      guarantee; for a run without noise, one paragraph saying it has no guarantee.
    """
    disclosures = disclosures or Disclosures(sampling=self.sampling)
    if self.noise_multiplier == 0:
      return ('No noise was added: the run is **not** differentially private (ε = ∞), and every '
              'number it released (including client statistics) is outside any guarantee. '
              f'Cohort S = {self.cohort_size} of K = {self.population} clients, {rounds} rounds.')
    m = {name: privacy.format_epsilon(value) for name, value in self.metrics(rounds).items()}
    fixed = self.sampling == 'fixed'
    wor_header = ' ε (RDP, without replacement, replace-one) |' if fixed else ''
    wor_rule = '---|' if fixed else ''

    def row(name, population, cohort, k, q, z):
      cells = (f'| {name} | {cohort} | {k} | {q:.4g} | {z:.4g} | '
               f'{m[f"epsilon_{population}_rdp"]} | {m[f"epsilon_{population}_pld"]} |')
      if fixed:
        cells += f' {m[f"epsilon_{population}_wor_rdp"]} |'
      return cells

    sampling_text = (
        'every round each client joins independently with probability q = S/K (Poisson '
        'sampling), the mechanism the accountant analyses; the noised sum is divided by the '
        'expected cohort S, a public constant.' if not fixed else
        'each round trains exactly S distinct clients drawn uniformly without replacement. The '
        'add/remove-one columns account it as Poisson sampling with q = S/K, the paper\'s '
        'approximation, not a proof for fixed-size cohorts; the last column is dp-accounting\'s '
        'RDP analysis of sampling without replacement, which holds for replace-one adjacency '
        'and is not comparable with the other columns.')
    lines = [
        f'User-level (ε, δ)-DP with δ = {self.delta:g}: Gaussian noise σ_DP = '
        f'{self.sigma_dp:.4g} on the averaged update (in units of the clip), {rounds} rounds.',
        '',
        '| whose ε | cohort S | population K | q = S/K | z = σ_DP·S | ε (RDP) | ε (PLD) |'
        + wor_header,
        '|---|---|---|---|---|---|---|' + wor_rule,
        row('this run (`epsilon_run_*`)', 'run', self.cohort_size, self.population,
            self.sampling_rate, self.noise_multiplier),
        row('declared population (`epsilon_declared_*`)', 'declared', self.declared_cohort_size,
            self.declared_population, self.declared_sampling_rate,
            self.declared_noise_multiplier),
        '',
        '- **This run**: the guarantee the run itself has, for its own K clients.',
        '- **Declared population**: the paper\'s extrapolation. The same σ_DP with S\' clients a '
        'round out of K\' is the noise multiplier σ_DP·S\' at rate S\'/K\'. It describes a run '
        'that was not made, under the assumption that model quality depends on σ_DP only; it '
        'is not a guarantee of this run.',
        f'- Sampling: {sampling_text}',
    ]
    if disclosures.sampling_seed_known:
      lines.append('- **The sampling seed was fixed by the user (`--seed`)**: anyone who knows '
                   'it can recompute every cohort, which voids the amplification by sampling '
                   'the accountant assumes. The ε above then do not hold; run without `--seed` '
                   'for a guarantee.')
    else:
      lines.append('- The cohorts and every client\'s random draws come from a secret drawn from '
                   'OS entropy and kept only in the checkpoints.')
    if disclosures.noise_seed_known:
      lines.append('- **The DP noise seed was fixed by the user (`--noise_seed`)** and is written '
                   'in `config.json`: anyone who knows it can recompute the noise and subtract '
                   'it. The run then has **no** DP guarantee; fix it for simulations only.')
    lines.append('- The population size K is treated as public; the number of clients that took '
                 'part in a round is not released (it is a client statistic).')
    if disclosures.noise_placement == 'client':
      lines.append('- Noise is added on the clients (N(0, (zC)²/S) each, for exactly S clients a '
                   'round): the guarantee covers the **sum only** and assumes secure '
                   'aggregation, which this simulation does not provide; a server seeing single '
                   'noised updates would see each with std zC/√S.')
    if disclosures.adaptive_clipping:
      lines.append('- Adaptive clipping: the clips are updated from noised clipped counts, paid '
                   'for within the same z (the released clips are covered).')
    if disclosures.central_data:
      lines.append('- The server also used data of its own: '
                   f'{disclosures.central_data}. That data is covered by **no** guarantee. '
                   'The clients\' guarantee above is unchanged: the server\'s training reads '
                   'only the global model and server data, and everything derived from client '
                   'updates is computed from the noised aggregate (post-processing).')
    if disclosures.weighting:
      lines.append(f'- Aggregation weights: {disclosures.weighting}')
    if disclosures.client_statistics:
      lines.append('- **Outside the guarantee (opt-in `--release_client_diagnostics`)**: these '
                   'released columns are computed from client data without noise: '
                   + ', '.join(f'`{c}`' for c in disclosures.client_statistics) + '.')
    if disclosures.evaluated_clients:
      lines.append('- **Outside the guarantee (opt-in `--release_client_evaluation`)**: the '
                   f'evaluation data holds {disclosures.evaluated_clients} of the federated '
                   'clients, so `eval/*`, the evaluation lines and `eval_per_speaker.csv` are '
                   'computed from their data without noise.')
    if not (disclosures.client_statistics or disclosures.evaluated_clients):
      lines.append('- Released: held-out evaluation (server data), privacy figures, and server '
                   'quantities derived from the noised aggregate (update norm, learning rate, '
                   'noise std, clips, per-layer norms of the noised average update). No '
                   'un-noised client statistic is released.')
    lines.append('- Round timings depend on client data (utterance lengths, example counts): '
                 'they are a side channel outside the guarantee.')
    if disclosures.pseudo_clients:
      lines.append('- Clients are `--iid` pseudo-speakers: the guarantee is per pseudo-client, '
                   'not per person.')
    lines += [
        '- Scope: this guarantee covers this run. Repeated runs and hyperparameter searches on '
        'the same users compose (their ε add up); the seed model\'s speakers and any run '
        'without noise are outside every guarantee; one person may hold several Common Voice '
        '`client_id`s, and is then protected only as several users.',
        '- Checkpoints hold the DP noise seed and the sampling secret: anyone holding them can '
        'subtract the noise. Keep checkpoints (and the feature cache, derived from the raw '
        'audio) as private as the raw data; both are written owner-only.',
        '- Noise comes from TensorFlow\'s floating-point Gaussian sampler, drawn as a sum of '
        'several draws so its tails reach past 15σ; the remaining floating-point discreteness '
        '(Mironov 2012) is a known limitation shared by all TensorFlow-based DP.',
    ]
    if rounds < self.planned_rounds:
      lines.append(f'- At the planned {self.planned_rounds} rounds: epsilon_run '
                   f'{m["projected_epsilon_run_rdp"]} (RDP), epsilon_declared '
                   f'{m["projected_epsilon_declared_rdp"]} (RDP) / '
                   f'{m["projected_epsilon_declared_pld"]} (PLD).')
    return '\n'.join(lines)


@functools.lru_cache(maxsize=256)
def _epsilon(noise_multiplier, cohort_size, population, rounds, delta, accountant):
  if accountant == 'wor_rdp':
    return privacy.compute_epsilon_without_replacement(noise_multiplier, population, cohort_size,
                                                       rounds, delta)
  return privacy.compute_epsilon(noise_multiplier, cohort_size / population, rounds, delta,
                                 accountant)
