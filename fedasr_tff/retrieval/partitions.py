"""Splits of a labelled text corpus over clients, and its held-out test part.

Each split returns sorted int64 index arrays into the corpus (`LabelledTexts.subset` applies
them): the even split the classifier-as-retriever paper uses (Fofonjka, Zehtabi, Behtash, Mauer
and Stout, webAI 2025, Sec. 4), a Dirichlet label skew, the corpus's own client column, and a
stratified train/test split.
"""

import math
from typing import List
from typing import Tuple

import numpy as np

from fedasr_tff import validation
from fedasr_tff.retrieval.text_corpora import LabelledTexts

# Draws of a Dirichlet split before it gives up on leaving no client without an example.
_DIRICHLET_DRAWS = 100


def _check_data(data) -> None:
  if not isinstance(data, LabelledTexts):
    raise ValueError(f'`data` must be a LabelledTexts, got {type(data).__name__}.')


def split_evenly(data: LabelledTexts, num_clients: int, seed: int) -> List[np.ndarray]:
  """The even split of examples over clients the paper uses.

  Our reading: a uniform random partition into parts of equal size, up to one; a permutation of
  the examples drawn from `seed`, dealt round-robin.

  Args:
    data: the corpus.
    num_clients: the parts, at most the number of examples.
    seed: seed of the permutation.

  Returns:
    `num_clients` disjoint sorted index arrays covering `data`, of sizes differing by at most
    one.
  """
  _check_data(data)
  validation.check_positive_integer('num_clients', num_clients)
  validation.check_non_negative_integer('seed', seed)
  if num_clients > len(data):
    raise ValueError(f'`num_clients` ({num_clients}) must be at most the number of examples '
                     f'({len(data)}), so that every client has one.')
  order = np.random.default_rng(seed).permutation(len(data))
  return [np.sort(order[client::num_clients]) for client in range(num_clients)]


def split_dirichlet(data: LabelledTexts, num_clients: int, alpha: float,
                    seed: int) -> List[np.ndarray]:
  """Label-skewed clients, the usual FL convention for non-IID splits.

  Hsu, Qi and Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated
  Visual Classification", arXiv:1909.06335, 2019: for each class c, shares q_c ~ Dir(α, ..., α)
  over the N clients, and the class's examples, in a random order, cut at the cumulative shares
  (client i gets about q_c,i of class c). Small α gives clients of one or a few classes; as α
  grows each client's classes approach the corpus's proportions. A draw that leaves a client
  without an example is drawn again, up to `_DIRICHLET_DRAWS` times.

  Args:
    data: the corpus.
    num_clients: N, at most the number of examples.
    alpha: α > 0, the concentration.
    seed: seed of the draws.

  Returns:
    `num_clients` disjoint sorted index arrays covering `data`, none empty.

  Raises:
    ValueError: naming the argument out of range, or `alpha` and `num_clients` when no draw
      gives every client an example.
  """
  _check_data(data)
  validation.check_positive_integer('num_clients', num_clients)
  validation.check_positive('alpha', alpha)
  validation.check_non_negative_integer('seed', seed)
  if num_clients > len(data):
    raise ValueError(f'`num_clients` ({num_clients}) must be at most the number of examples '
                     f'({len(data)}), so that every client has one.')
  rng = np.random.default_rng(seed)
  for _ in range(_DIRICHLET_DRAWS):
    parts = [[] for _ in range(num_clients)]
    for label in range(data.num_classes):
      members = rng.permutation(np.flatnonzero(data.labels == label))
      shares = rng.dirichlet(np.full(num_clients, float(alpha)))
      cuts = np.round(np.cumsum(shares)[:-1] * len(members)).astype(np.int64)
      for client, part in enumerate(np.split(members, cuts)):
        parts[client].extend(part.tolist())
    if all(parts):
      return [np.sort(np.asarray(part, np.int64)) for part in parts]
  raise ValueError(f'`alpha` = {alpha} left a client without examples in each of '
                   f'{_DIRICHLET_DRAWS} draws over {num_clients} clients and {len(data)} '
                   'examples: give a larger `alpha` or fewer `num_clients`.')


def split_by_client(data: LabelledTexts) -> Tuple[List[str], List[np.ndarray]]:
  """The natural split over clients, by the corpus's client column.

  Args:
    data: a corpus with `clients`.

  Returns:
    (the client ids, sorted; the sorted indices of each one's examples).

  Raises:
    ValueError: if the corpus has no client column.
  """
  _check_data(data)
  if data.clients is None:
    raise ValueError('`data.clients` is None: the corpus has no client column (read it with '
                     '`read_labelled_table(..., client_column=...)`, or use `split_evenly`).')
  ids, codes = np.unique(np.array(data.clients, dtype=object), return_inverse=True)
  order = np.argsort(codes, kind='stable')
  parts = np.split(order, np.cumsum(np.bincount(codes, minlength=len(ids)))[:-1])
  return [str(i) for i in ids], [part.astype(np.int64) for part in parts]


def train_test_split(data: LabelledTexts, test_fraction: float,
                     seed: int) -> Tuple[np.ndarray, np.ndarray]:
  """A train/test split stratified by label.

  Of the n_c examples of class c, round(test_fraction n_c) (halves up) drawn from `seed` go to
  test, but at least one and at most n_c - 1 when n_c >= 2; a class's only example goes to
  train.

  Args:
    data: the corpus.
    test_fraction: in (0, 1).
    seed: seed of the draws.

  Returns:
    (train, test) indices: both sorted; disjoint; together all of `data`.
  """
  _check_data(data)
  validation.check_open_unit_interval('test_fraction', test_fraction)
  validation.check_non_negative_integer('seed', seed)
  rng = np.random.default_rng(seed)
  test = []
  for label in range(data.num_classes):
    members = np.flatnonzero(data.labels == label)
    if len(members) < 2:
      continue
    count = min(len(members) - 1, max(1, math.floor(test_fraction * len(members) + 0.5)))
    test.append(rng.choice(members, size=count, replace=False))
  test = np.sort(np.concatenate(test)) if test else np.zeros([0], np.int64)
  in_test = np.zeros(len(data), bool)
  in_test[test] = True
  return np.flatnonzero(~in_test).astype(np.int64), test.astype(np.int64)

