"""Federated learning processes: local training client work, DP federated averaging, and mixed
federated learning with its server-side central training, and dynamic gradient aggregation."""

from fedasr_tff.algorithms.central_work import build_central_work
from fedasr_tff.algorithms.client_datasets import with_dataset_computation
from fedasr_tff.algorithms.dga import build_dga_process
from fedasr_tff.algorithms.fed_avg import build_evaluation_process
from fedasr_tff.algorithms.fed_avg import build_fed_avg_process
from fedasr_tff.algorithms.fed_avg import compose_process
from fedasr_tff.algorithms.local_training import build_local_training_client_work
from fedasr_tff.algorithms.mixed_fl import build_mixed_fl_process
