"""Which clients train in a round, and the seeds of their randomness.

The sampling is that of Algorithm 1 (Sec. 2) of Pelikan et al., "Enabling Differentially Private
Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098: each client joins with probability q (fixed cohorts
of S in practice). The seeds are our design.

Everything a round draws is a function of (run secret, round), never of how many rounds ran in
this process, so a run resumed from a checkpoint draws exactly what an uninterrupted run would
have, and a replayed round is bit-identical (it releases nothing new).

Privacy amplification by sampling assumes the adversary does not know who was sampled, so the run
secret is 126 bits of OS entropy by default (`new_run_secret`), kept only in the run's private
checkpoints. A seed the user fixes for a reproducible simulation is a known secret: anyone can
recompute every cohort, and the amplification the accountant assumes no longer holds.

Three samplings (`SAMPLINGS`):

* "poisson": every client joins a round independently with probability q = S/K, so the cohort's
  size varies (it may be 0). This is the mechanism the accountant analyses (McMahan et al. 2018,
  "Learning Differentially Private Recurrent Language Models", ICLR; DP-FedAvg divides the noised
  sum by the expected cohort S, a public constant, as `PerLayerDPFactory` does).
* "fixed": S distinct clients drawn uniformly without replacement, as in the paper's released
  code; accounted exactly only by the replace-one analysis
  (`privacy.compute_epsilon_without_replacement`).
* "with_replacement": S draws uniformly *with* replacement (Dimitriadis et al., "Federated
  Transfer Learning with Dynamic Gradient Aggregation", arXiv:2008.02452, Sec. 2): a client
  drawn m times appears m times in the cohort, with the same seed, so it does the same work m
  times and contributes m times. A user drawn m times moves the sum by m·C and dp-accounting has
  no event for this sampling, so runs with DP noise refuse it (`config.FederatedConfig`, and
  `privacy_ledger.PrivacyLedger`).
"""

import secrets
from typing import List
from typing import Sequence
import zlib

import numpy as np

from fedasr_tff import validation

POISSON, FIXED, WITH_REPLACEMENT = 'poisson', 'fixed', 'with_replacement'
SAMPLINGS = (POISSON, FIXED, WITH_REPLACEMENT)

# A run secret is two 63-bit words, so it fits a checkpoint as an int64 vector.
_SECRET_WORDS = 2


def new_run_secret() -> int:
  """126 bits of OS entropy: the default secret behind a run's cohorts and client seeds."""
  return secrets.randbits(63 * _SECRET_WORDS)


def secret_to_words(secret: int) -> np.ndarray:
  """The secret as an int64 vector (for the checkpoint); inverse of `secret_from_words`."""
  validation.check_non_negative_integer('secret', secret)
  if secret >= 2**(63 * _SECRET_WORDS):
    raise ValueError(f'`secret` must be below 2**{63 * _SECRET_WORDS}, got {secret}.')
  return np.array([(secret >> (63 * i)) & (2**63 - 1) for i in range(_SECRET_WORDS)], np.int64)


def secret_from_words(words) -> int:
  words = [int(w) for w in np.asarray(words).reshape([-1])]
  return sum(w << (63 * i) for i, w in enumerate(words))


def _rng(secret: int, round_num: int) -> np.random.Generator:
  validation.check_non_negative_integer('secret', secret)
  validation.check_non_negative_integer('round_num', round_num)
  return np.random.default_rng([secret, round_num])


def sample_cohort(client_ids: Sequence[str], cohort_size: int, secret: int, round_num: int,
                  sampling: str = 'fixed') -> List[str]:
  """The clients of round `round_num` (module docstring), in sorted id order for "poisson";
  "with_replacement" may repeat a client.

  Args:
    client_ids: the population, K clients.
    cohort_size: S, the cohort ("fixed", "with_replacement") or the expected cohort
      ("poisson"), 1 <= S <= K.
    secret: the run secret (an integer >= 0).
    round_num: the round (>= 0).
    sampling: one of `SAMPLINGS`.
  """
  validation.check_positive_integer('cohort_size', cohort_size)
  if sampling not in SAMPLINGS:
    raise ValueError(f'`sampling` must be one of {SAMPLINGS}, got {sampling!r}.')
  ids = sorted(client_ids)
  if cohort_size > len(ids):
    raise ValueError(f'`cohort_size` ({cohort_size}) exceeds the number of clients '
                     f'({len(ids)}).')
  rng = _rng(secret, round_num)
  if sampling == 'poisson':
    joins = rng.random(len(ids)) < cohort_size / len(ids)
    return [client for client, joined in zip(ids, joins, strict=True) if joined]
  if sampling == WITH_REPLACEMENT:
    return [ids[i] for i in rng.integers(0, len(ids), size=cohort_size)]
  order = rng.permutation(len(ids))
  return [ids[i] for i in order[:cohort_size]]


def client_seed(secret: int, round_num: int, client_id: str) -> int:
  """A 63-bit seed for all of one client's randomness in one round (SpecAugment, dropout, ...)."""
  validation.check_non_negative_integer('secret', secret)
  entropy = [secret, round_num, zlib.crc32(client_id.encode('utf-8'))]
  return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))
