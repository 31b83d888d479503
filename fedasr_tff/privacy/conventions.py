"""Conversions between the noise conventions of DP federated learning.

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, App. H.1,
describe one Gaussian mechanism in three units. With a cohort of S clients, uniform client
weights and every client delta clipped to L2 norm C:

* ``sigma_dp`` -- std of the noise on the *cohort average*, in units of C (the papers' σ_DP).
* noise multiplier ``z`` -- std of the noise on the *sum* over the cohort, in units of C; what the
  sampled-Gaussian accountant takes. The average has sensitivity C/S, so z = σ_DP · S.
* client noise std -- std each client adds to its own clipped delta before the sum, in units of
  C, so that the S independent draws add up to the same noise on the sum:
  S · σ_client² = z²  ⇒  σ_client = σ_DP · √S.

Multiply any of them by C for absolute standard deviations. Worked example (the paper's Table 1):
σ_DP = 3e-6 and S = 1024 give z = 0.003072 and σ_client = 9.6e-5 (9.6e-7 absolute at C = 0.01).
"""

import math

from fedasr_tff import validation


def noise_multiplier_from_sigma_dp(sigma_dp: float, cohort_size: int) -> float:
  """The accountant's noise multiplier (the paper's Theorem 1).

  Args:
    sigma_dp: σ_DP >= 0.
    cohort_size: S, a positive integer.

  Returns:
    z = σ_DP · S.
  """
  validation.check_non_negative('sigma_dp', sigma_dp)
  validation.check_positive_integer('cohort_size', cohort_size)
  return sigma_dp * cohort_size


def sigma_dp_from_noise_multiplier(noise_multiplier: float, cohort_size: int) -> float:
  """The noise std on the cohort average in units of C (the paper's App. H.1).

  Args:
    noise_multiplier: z >= 0.
    cohort_size: S, a positive integer.

  Returns:
    σ_DP = z / S.
  """
  validation.check_non_negative('noise_multiplier', noise_multiplier)
  validation.check_positive_integer('cohort_size', cohort_size)
  return noise_multiplier / cohort_size


def client_noise_stddev_from_sigma_dp(sigma_dp: float, cohort_size: int) -> float:
  """The per-client noise std in units of C (the client noise of the paper's Algorithm 1).

  Args:
    sigma_dp: σ_DP >= 0.
    cohort_size: S, a positive integer.

  Returns:
    σ_client = σ_DP · √S.
  """
  validation.check_non_negative('sigma_dp', sigma_dp)
  validation.check_positive_integer('cohort_size', cohort_size)
  return sigma_dp * math.sqrt(cohort_size)


def sigma_dp_from_client_noise_stddev(client_noise_stddev: float, cohort_size: int) -> float:
  """The inverse of `client_noise_stddev_from_sigma_dp`.

  Args:
    client_noise_stddev: σ_client >= 0.
    cohort_size: S, a positive integer.

  Returns:
    σ_DP = σ_client / √S.
  """
  validation.check_non_negative('client_noise_stddev', client_noise_stddev)
  validation.check_positive_integer('cohort_size', cohort_size)
  return client_noise_stddev / math.sqrt(cohort_size)
