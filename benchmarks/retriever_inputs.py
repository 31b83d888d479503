"""The retriever benchmarks' clients: examples dealt in equal contiguous parts, one round's
batches each (`retrieval.data.client_dataset`)."""

import numpy as np

from fedasr_tff.retrieval import data as data_lib

BATCH = 4


def client_datasets(inputs, labels, clients: int, round_num: int) -> list:
  """Each of `clients` clients' batches of a round: a contiguous part of the examples, in an
  order drawn from (round, client).

  Args:
    inputs: {name: [N, ...] array} (cached features, or tokens).
    labels: [N] class ids.
    clients: the parts.
    round_num: the round, which seeds the batch orders.
  """
  parts = np.array_split(np.arange(len(labels)), clients)
  return [data_lib.client_dataset({k: v[p] for k, v in inputs.items()}, labels[p], BATCH,
                                  seed=1000 * round_num + i) for i, p in enumerate(parts)]
