"""User-level privacy accounting for DP federated learning.

The accounting and noise conventions of Pelikan et al., "Enabling Differentially Private
Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098, Secs. 2 and 4.3 and App. H.1. Usage:
`docs/accounting.md`.
"""

from fedasr_tff.privacy.accounting import ACCOUNTANTS
from fedasr_tff.privacy.accounting import DEFAULT_RDP_ORDERS
from fedasr_tff.privacy.accounting import PUBLISHED_RDP_ORDERS
from fedasr_tff.privacy.accounting import compute_epsilon
from fedasr_tff.privacy.accounting import compute_epsilon_and_order
from fedasr_tff.privacy.accounting import compute_epsilon_without_replacement
from fedasr_tff.privacy.accounting import dp_event
from fedasr_tff.privacy.accounting import noise_multiplier_for_epsilon
from fedasr_tff.privacy.conventions import client_noise_stddev_from_sigma_dp
from fedasr_tff.privacy.conventions import noise_multiplier_from_sigma_dp
from fedasr_tff.privacy.conventions import sigma_dp_from_client_noise_stddev
from fedasr_tff.privacy.conventions import sigma_dp_from_noise_multiplier
from fedasr_tff.privacy.extrapolation import PrivacyConfiguration
from fedasr_tff.privacy.extrapolation import extrapolate
from fedasr_tff.privacy.extrapolation import privacy_of_configuration
from fedasr_tff.privacy.formatting import format_epsilon
from fedasr_tff.privacy.published_tables import PUBLISHED_DELTA
from fedasr_tff.privacy.published_tables import PUBLISHED_TABLES_CSV
from fedasr_tff.privacy.published_tables import PublishedRow
from fedasr_tff.privacy.published_tables import read_privacy_table
