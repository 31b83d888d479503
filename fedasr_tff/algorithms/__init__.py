"""Federated learning processes: local training client work and DP federated averaging."""

from fedasr_tff.algorithms.fed_avg import build_evaluation_process
from fedasr_tff.algorithms.fed_avg import build_fed_avg_process
from fedasr_tff.algorithms.fed_avg import compose_process
from fedasr_tff.algorithms.local_training import build_local_training_client_work
