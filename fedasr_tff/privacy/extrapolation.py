"""Population extrapolation of a trained DP configuration.

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098 (Sec. 4.3,
Table 1), train with a small population K and cohort S, then, following McMahan et al.,
"Learning Differentially Private Recurrent Language Models", ICLR 2018, arXiv:1710.06963, ask what
ε the *same model quality* would cost with a larger population. Model quality is assumed to
depend only on the noise on the averaged update, σ_DP, so σ_DP is held fixed while the
population grows (`extrapolate`).
"""

import dataclasses
from typing import Optional

from fedasr_tff import validation
from fedasr_tff.privacy import accounting
from fedasr_tff.privacy import conventions


@dataclasses.dataclass(frozen=True)
class PrivacyConfiguration:
  """A DP federated configuration and its user-level guarantee.

  Attributes:
    sigma_dp: σ_DP, the noise std on the averaged update in units of C.
    cohort_size: S.
    population: K.
    steps: T, the rounds accounted.
    delta: δ.
    noise_multiplier: z = σ_DP · S.
    sampling_rate: q = S / K.
    epsilon: ε of (q, z, T) at δ.
    accountant: the accountant of ε, "rdp" or "pld".
  """
  sigma_dp: float
  cohort_size: int
  population: int
  steps: int
  delta: float
  noise_multiplier: float
  sampling_rate: float
  epsilon: float
  accountant: str


def privacy_of_configuration(sigma_dp: float, cohort_size: int, population: int, steps: int,
                             delta: float, accountant: str = 'rdp') -> PrivacyConfiguration:
  """ε of training with noise σ_DP on the average, cohort S, population K, T rounds.

  Args:
    sigma_dp: σ_DP > 0.
    cohort_size: S.
    population: K >= S.
    steps: T.
    delta: δ.
    accountant: "rdp" or "pld".

  Returns:
    The `PrivacyConfiguration`.

  Raises:
    ValueError: for an argument out of range or S > K.
  """
  validation.check_positive('sigma_dp', sigma_dp)
  validation.check_cohort_within_population(cohort_size, population)
  noise_multiplier = conventions.noise_multiplier_from_sigma_dp(sigma_dp, cohort_size)
  sampling_rate = cohort_size / population
  epsilon = accounting.compute_epsilon(noise_multiplier, sampling_rate, steps, delta, accountant)
  return PrivacyConfiguration(
      sigma_dp=sigma_dp,
      cohort_size=cohort_size,
      population=population,
      steps=steps,
      delta=delta,
      noise_multiplier=noise_multiplier,
      sampling_rate=sampling_rate,
      epsilon=epsilon,
      accountant=accountant)


def extrapolate(sigma_dp: float, cohort_size: int, population: int, steps: int, delta: float,
                *, cohort_scale: float = 1.0, population_scale: float = 1.0,
                extrapolated_steps: Optional[int] = None,
                accountant: str = 'rdp') -> PrivacyConfiguration:
  """ε at fixed σ_DP after scaling cohort and population.

  1. K and S are scaled together by `cohort_scale` m: q = S/K is unchanged and z = σ_DP·S grows
     by m.
  2. K alone is then scaled by `population_scale` n at fixed S: q falls by n, z is unchanged.

  ε then follows from (q, z, T) alone (the paper's Theorem 1). T may be given again for the
  extrapolated run (the paper's Table 1 accounts, e.g., 2034 or 3390 steps after lowering q); by
  default it is the trained T.

  Args:
    sigma_dp: noise std on the averaged update in units of C, as trained.
    cohort_size: S as trained.
    population: K as trained.
    steps: T as trained.
    delta: target δ.
    cohort_scale: m >= 1; S and K are both multiplied by m (rounded to whole users).
    population_scale: n >= 1; K is multiplied again by n at the scaled S.
    extrapolated_steps: T for the extrapolated run; None keeps `steps`.
    accountant: "rdp" or "pld".

  Returns:
    The extrapolated `PrivacyConfiguration`.

  Raises:
    ValueError: for an argument out of range or a scale below 1.
  """
  validation.check_positive_integer('cohort_size', cohort_size)
  validation.check_positive_integer('population', population)
  validation.check_positive('cohort_scale', cohort_scale)
  validation.check_positive('population_scale', population_scale)
  if cohort_scale < 1:
    raise ValueError(f'`cohort_scale` must be >= 1, got {cohort_scale!r}.')
  if population_scale < 1:
    raise ValueError(f'`population_scale` must be >= 1, got {population_scale!r}.')
  if extrapolated_steps is None:
    extrapolated_steps = steps
  new_cohort = round(cohort_size * cohort_scale)
  new_population = round(population * cohort_scale * population_scale)
  return privacy_of_configuration(sigma_dp, new_cohort, new_population, extrapolated_steps, delta,
                                  accountant)
