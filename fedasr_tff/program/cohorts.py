"""Which clients train in a round, and the seeds of their randomness.

Cohorts are sampled as in Algorithm 1 (Sec. 2) of Pelikan et al., "Enabling Differentially
Private Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098: each client joins with probability q (fixed cohorts
of S in practice). The seeds are our design.

Everything a round draws is a function of (run secret, round, client), never of how many rounds
ran in this process, so a round recomputed after a resume is bit-identical and releases nothing
new. Amplification by sampling assumes the adversary does not know who was sampled, so the run
secret is 126 bits of OS entropy (`new_run_secret`), kept only in the private checkpoints; a
seed the user fixes is a known secret, which voids the amplification (docs/privacy.md).
"""

import secrets
from typing import List
from typing import Sequence
import zlib

import numpy as np

from fedasr_tff import validation

# How `sample_cohort` draws a cohort of S out of K clients:
# * "poisson": every client joins independently with probability q = S/K, so the cohort's size
#   varies (it may be 0). The mechanism the accountant analyses (McMahan et al., "Learning
#   Differentially Private Recurrent Language Models", ICLR 2018); DP-FedAvg divides the noised
#   sum by the expected cohort S, a public constant, as `PerLayerDPFactory` does.
# * "fixed": S distinct clients uniformly without replacement, as in the paper's released code;
#   accounted exactly only by the replace-one analysis
#   (`privacy.compute_epsilon_without_replacement`).
# * "with_replacement": S uniform draws *with* replacement (Dimitriadis et al., "Federated
#   Transfer Learning with Dynamic Gradient Aggregation", arXiv:2008.02452, Sec. 2): a client
#   drawn m times appears m times, with the same seed, and contributes m times, moving the sum by
#   m·C. dp-accounting has no event for it, so runs with DP noise refuse it
#   (`speech.config.FederatedConfig`, `privacy_ledger.PrivacyLedger`).
POISSON, FIXED, WITH_REPLACEMENT = 'poisson', 'fixed', 'with_replacement'
SAMPLINGS = (POISSON, FIXED, WITH_REPLACEMENT)

# A run secret is two 63-bit words, so it fits a checkpoint as an int64 vector.
_SECRET_WORDS = 2


def new_run_secret() -> int:
  """126 bits of OS entropy: the default secret behind a run's cohorts and client seeds."""
  return secrets.randbits(63 * _SECRET_WORDS)


def secret_to_words(secret: int) -> np.ndarray:
  """The secret as an int64 vector (for the checkpoint); inverse of `secret_from_words`.

  Args:
    secret: the run secret, an integer in [0, 2**126).

  Returns:
    Its two 63-bit words, least significant first, as an int64 vector.

  Raises:
    ValueError: if `secret` is not an integer in [0, 2**126).
  """
  validation.check_non_negative_integer('secret', secret)
  if secret >= 2**(63 * _SECRET_WORDS):
    raise ValueError(f'`secret` must be below 2**{63 * _SECRET_WORDS}, got {secret}.')
  return np.array([(secret >> (63 * i)) & (2**63 - 1) for i in range(_SECRET_WORDS)], np.int64)


def secret_from_words(words) -> int:
  """The secret `secret_to_words` wrote; inverse of `secret_to_words`.

  Args:
    words: the 63-bit words, least significant first, in any array-like shape (a checkpoint
      reads them back as a tensor).

  Returns:
    The run secret.
  """
  words = [int(w) for w in np.asarray(words).reshape([-1])]
  return sum(w << (63 * i) for i, w in enumerate(words))


def _rng(secret: int, round_num: int) -> np.random.Generator:
  validation.check_non_negative_integer('secret', secret)
  validation.check_non_negative_integer('round_num', round_num)
  return np.random.default_rng([secret, round_num])


def sample_cohort(client_ids: Sequence[str], cohort_size: int, secret: int, round_num: int,
                  sampling: str = 'fixed') -> List[str]:
  """The clients of round `round_num`, drawn from (`secret`, `round_num`) as `sampling` says.

  Args:
    client_ids: the population, K clients.
    cohort_size: S, the cohort ("fixed", "with_replacement") or the expected cohort
      ("poisson"), 1 <= S <= K.
    secret: the run secret (an integer >= 0).
    round_num: the round (>= 0).
    sampling: one of `SAMPLINGS` (see the comment there).

  Returns:
    The cohort's client ids: in sorted id order for "poisson" (possibly none), in draw order
    otherwise; "with_replacement" may repeat a client.

  Raises:
    ValueError: if `cohort_size` is not an integer in [1, K], `sampling` is not one of
      `SAMPLINGS`, or `secret` or `round_num` is not an integer >= 0.
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
  """A 63-bit seed for all of one client's randomness in one round (SpecAugment, dropout, ...).

  Args:
    secret: the run secret (an integer >= 0).
    round_num: the round.
    client_id: the client; hashed with CRC-32, so the seed is the same in every process.

  Returns:
    A seed in [0, 2**63), a function of (`secret`, `round_num`, `client_id`) only.

  Raises:
    ValueError: if `secret` is not an integer >= 0.
  """
  validation.check_non_negative_integer('secret', secret)
  entropy = [secret, round_num, zlib.crc32(client_id.encode('utf-8'))]
  return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))
