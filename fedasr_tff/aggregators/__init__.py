"""TFF aggregation factories for user-level DP with global and per-layer clipping, and a DP
weighted mean with bounded weights."""

from fedasr_tff.aggregators.allocation import ALLOCATIONS
from fedasr_tff.aggregators.allocation import group_clips
from fedasr_tff.aggregators.bounded_weight_dp import BoundedWeightDPFactory
from fedasr_tff.aggregators.per_layer_dp import GLOBAL_GROUP
from fedasr_tff.aggregators.per_layer_dp import PerLayerDPFactory
from fedasr_tff.aggregators.per_layer_dp import PerLayerDPParams
from fedasr_tff.aggregators.per_layer_query import NOISE_DRAWS
from fedasr_tff.aggregators.per_layer_query import NOISE_PLACEMENTS
from fedasr_tff.aggregators.per_layer_query import PerLayerClipGaussianSumQuery
from fedasr_tff.aggregators.per_layer_query import adaptive_value_noise_multiplier
from fedasr_tff.aggregators.per_layer_query import gaussian_noise
