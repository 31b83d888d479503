"""Which clients train in a round, and the seeds of their randomness (spec §1, Algorithm 1).

Everything a round draws is a function of (run seed, round), never of how many rounds ran in this
process, so a run resumed from a checkpoint draws exactly what an uninterrupted run would have.
"""

from typing import List
from typing import Sequence
import zlib

import numpy as np

from fedasr_tff import validation


def sample_cohort(client_ids: Sequence[str], cohort_size: int, seed: int,
                  round_num: int) -> List[str]:
  """S distinct clients drawn uniformly without replacement for round `round_num`.

  As in the paper's released code: a permutation of the client ids seeded by (seed, round), of
  which the first S are taken. The accountant assumes Poisson sampling with q = S/K (spec §6).
  """
  validation.check_positive_integer('cohort_size', cohort_size)
  validation.check_non_negative_integer('seed', seed)
  validation.check_non_negative_integer('round_num', round_num)
  ids = sorted(client_ids)
  if cohort_size > len(ids):
    raise ValueError(f'`cohort_size` ({cohort_size}) exceeds the number of clients '
                     f'({len(ids)}).')
  order = np.random.default_rng([seed, round_num]).permutation(len(ids))
  return [ids[i] for i in order[:cohort_size]]


def client_seed(seed: int, round_num: int, client_id: str) -> int:
  """A 63-bit seed for one client's randomness in one round (e.g. its SpecAugment masks)."""
  validation.check_non_negative_integer('seed', seed)
  entropy = [seed, round_num, zlib.crc32(client_id.encode('utf-8'))]
  return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))
