"""Conversions between the noise conventions of DP federated learning ([1], App. H.1).

The papers describe one Gaussian mechanism in three units. With a cohort of S clients, uniform
client weights and every client delta clipped to L2 norm C:

* ``sigma_dp`` -- std of the noise on the *cohort average*, in units of C (the papers' σ_DP).
* noise multiplier ``z`` -- std of the noise on the *sum* over the cohort, in units of C; what the
  sampled-Gaussian accountant takes. The average has sensitivity C/S, so z = σ_DP · S.
* client noise std -- std each client adds to its own clipped delta before the sum, in units of
  C, so that the S independent draws add up to the same noise on the sum:
  S · σ_client² = z²  ⇒  σ_client = σ_DP · √S.

Multiply any of them by C for absolute standard deviations. Worked example ([1], Table 1): σ_DP =
3e-6 and S = 1024 give z = 0.003072 and σ_client = 9.6e-5 (9.6e-7 absolute at C = 0.01).

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
"""

import math

from fedasr_tff import validation


def noise_multiplier_from_sigma_dp(sigma_dp: float, cohort_size: int) -> float:
  """Accountant noise multiplier z = σ_DP · S ([1], Theorem 1)."""
  validation.check_non_negative('sigma_dp', sigma_dp)
  validation.check_positive_integer('cohort_size', cohort_size)
  return sigma_dp * cohort_size


def sigma_dp_from_noise_multiplier(noise_multiplier: float, cohort_size: int) -> float:
  """σ_DP = z / S, the noise std on the cohort average in units of C ([1], App. H.1)."""
  validation.check_non_negative('noise_multiplier', noise_multiplier)
  validation.check_positive_integer('cohort_size', cohort_size)
  return noise_multiplier / cohort_size


def client_noise_stddev_from_sigma_dp(sigma_dp: float, cohort_size: int) -> float:
  """Per-client noise std σ_DP · √S in units of C ([1], Algorithm 1's client noise)."""
  validation.check_non_negative('sigma_dp', sigma_dp)
  validation.check_positive_integer('cohort_size', cohort_size)
  return sigma_dp * math.sqrt(cohort_size)


def sigma_dp_from_client_noise_stddev(client_noise_stddev: float, cohort_size: int) -> float:
  """σ_DP = σ_client / √S, the inverse of `client_noise_stddev_from_sigma_dp`."""
  validation.check_non_negative('client_noise_stddev', client_noise_stddev)
  validation.check_positive_integer('cohort_size', cohort_size)
  return client_noise_stddev / math.sqrt(cohort_size)
