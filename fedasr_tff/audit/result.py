"""What an audit reports: the claimed ε, the measured lower bound, and the verdict; or, for a
direct check of the mechanism's structure, what it found and the verdict."""

import dataclasses
import math
from typing import Any
from typing import Dict

from fedasr_tff import privacy
from fedasr_tff.program import privacy_ledger

CONSISTENT = 'consistent'
VIOLATION = 'VIOLATION'


def run_ledger(noise_multiplier: float, cohort_size: int, population: int, rounds: int,
               delta: float, sampling: str = 'poisson') -> privacy_ledger.PrivacyLedger:
  """The ledger of an audited run: its own population only, nothing extrapolated.

  Args:
    noise_multiplier: z of every round.
    cohort_size: S, clients a round.
    population: K, the population sampled from.
    rounds: T, the planned rounds.
    delta: δ.
    sampling: the cohorts' sampling (`cohorts.SAMPLINGS`).

  Returns:
    A `PrivacyLedger` whose declared configuration is the run's own.
  """
  return privacy_ledger.PrivacyLedger(
      noise_multiplier=noise_multiplier, cohort_size=cohort_size, population=population,
      declared_noise_multiplier=noise_multiplier, declared_cohort_size=cohort_size,
      declared_population=population, planned_rounds=rounds, delta=delta, sampling=sampling)


def claimed_epsilons(ledger: privacy_ledger.PrivacyLedger) -> Dict[str, float]:
  """The run's own ε at its planned rounds, by accountant.

  Args:
    ledger: the run's ledger.

  Returns:
    {rdp, pld}: ε. The guarantee the run prints (`PrivacyLedger.epsilon(..., declared=False)`),
    never an extrapolated population.
  """
  return {accountant: ledger.epsilon(ledger.planned_rounds, declared=False,
                                     accountant=accountant)
          for accountant in privacy_ledger.ACCOUNTANTS}


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """One audit of one mechanism.

  Attributes:
    method: "one_run" or "distinguishing".
    claimed: the ledger's ε for the audited configuration by accountant ({rdp, pld}).
    delta: δ of the claim.
    lower_bound: the ε the attack refutes at `confidence` (0 if none).
    confidence: 1 - β of the lower bound.
    details: what the attack did (canaries, guesses, correct guesses, rounds, trials, ...).
  """
  method: str
  claimed: Dict[str, float]
  delta: float
  lower_bound: float
  confidence: float
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def claimed_epsilon(self) -> float:
    """The strongest claim: the smallest ε of the accountants (PLD is the tighter)."""
    return min(self.claimed.values())

  @property
  def verdict(self) -> str:
    """VIOLATION when the measured lower bound exceeds the claimed ε: the mechanism leaks more
    than its guarantee allows (at `confidence`)."""
    return VIOLATION if self.lower_bound > self.claimed_epsilon else CONSISTENT

  @property
  def tightness(self) -> float:
    """lower bound / claimed ε: how much of the claim the attack demonstrates (1 = all)."""
    claimed = self.claimed_epsilon
    return 0.0 if math.isinf(claimed) else self.lower_bound / claimed

  def summary(self) -> str:
    """Returns one line: the claim, the lower bound, the tightness and the verdict."""
    claimed = ', '.join(f'{k.upper()} {privacy.format_epsilon(v)}'
                        for k, v in self.claimed.items())
    return (f'{self.method}: claimed epsilon {claimed} at delta={self.delta:g}; measured lower '
            f'bound {self.lower_bound:.3g} at {self.confidence:.0%} confidence '
            f'(tightness {self.tightness:.2f}): {self.verdict}')

  def report(self) -> Dict[str, Any]:
    """Returns the result as `audit.json` records it."""
    return dict(method=self.method, claimed=self.claimed, delta=self.delta,
                lower_bound=self.lower_bound, confidence=self.confidence, verdict=self.verdict,
                tightness=self.tightness, details=self.details)


@dataclasses.dataclass(frozen=True)
class CheckResult:
  """One direct check of the mechanism's structure (`noise_check`, `clipping_check`).

  Attributes:
    method: the check, such as "noise" or "clipping/below_clip".
    passed: whether the mechanism passed it.
    significance: the probability that a correct mechanism fails it (at most).
    finding: one line: what was measured against what was expected.
    details: the statistics behind the verdict.
  """
  method: str
  passed: bool
  significance: float
  finding: str
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def verdict(self) -> str:
    """CONSISTENT if the mechanism passed, else VIOLATION."""
    return CONSISTENT if self.passed else VIOLATION

  def summary(self) -> str:
    """Returns one line: the check, its finding, its false-alarm rate and the verdict."""
    return (f'{self.method}: {self.finding} (false alarm <= {self.significance:g}): '
            f'{self.verdict}')

  def report(self) -> Dict[str, Any]:
    """Returns the result as `audit.json` records it."""
    return dict(method=self.method, verdict=self.verdict, significance=self.significance,
                finding=self.finding, details=self.details)
