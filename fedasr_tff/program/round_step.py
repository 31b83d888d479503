"""One federated round as every speech run and the privacy audit run it.

Sample the cohort from the run secret (`cohorts.sample_cohort`), give each member its data from
its seed (`cohorts.client_seed`), run the process's `next`, and check that the aggregator still
runs the mechanism the ledger's claim is for (`PrivacyLedger.check_round`). The audit attacks
the round a run trains, not a copy of it.
"""

from typing import Any
from typing import Callable
from typing import List
from typing import NamedTuple
from typing import Optional
from typing import Sequence

from fedasr_tff.program import cohorts
from fedasr_tff.program import privacy_ledger


class RoundResult(NamedTuple):
  """What `run_round` did: the clients that trained (sampling order) and `next`'s output."""
  cohort: List[Any]
  output: Any


def run_round(next_fn: Callable[[Any, List[Any]], Any], state: Any,
              client_ids: Sequence[Any], *, cohort_size: int, secret, round_num: int,
              sampling: str, client_data: Callable[[Any, int], Any],
              ledger: Optional[privacy_ledger.PrivacyLedger],
              takes_part: Optional[Callable[[Any], bool]] = None) -> RoundResult:
  """Trains one round of a federated process on a sampled cohort.

  Args:
    next_fn: (state, client data in cohort order) -> the process's `LearningProcessOutput`.
    state: the process state before the round.
    client_ids: the population the cohort is sampled from.
    cohort_size: the expected cohort S.
    secret: the run secret the cohort and the client seeds are drawn from.
    round_num: the round, as the cohort and seeds are drawn for it.
    sampling: one of `cohorts.SAMPLINGS`.
    client_data: (client, its seed this round) -> the client's data.
    ledger: the run's privacy ledger, checked against the new aggregator state; None without
      DP.
    takes_part: whether a sampled client trains (a client that does not leaves the cohort, as
      an absent client does); every sampled client by default.

  Returns:
    The `RoundResult`.
  """
  cohort = cohorts.sample_cohort(client_ids, cohort_size, secret, round_num, sampling)
  if takes_part is not None:
    cohort = [c for c in cohort if takes_part(c)]
  datasets = [client_data(c, cohorts.client_seed(secret, round_num, c)) for c in cohort]
  output = next_fn(state, datasets)
  if ledger is not None:
    ledger.check_round(output.state.aggregator)  # Every round runs the mechanism claimed.
  return RoundResult(cohort, output)
