"""A progress bar as a `tff.program.ReleaseManager`: rounds done, ETA and the latest metrics.

Rounds advance as they are computed (`advance`); metrics appear when they are released, which a
DP run holds back until a checkpoint covers them (`release_journal`).
"""

import sys
from typing import Optional
from typing import Sequence

import numpy as np
import tensorflow_federated as tff
import tqdm

from fedasr_tff import privacy

# What every task releases under these names (a task adds its own evaluation metrics).
DEFAULT_SHOWN = ('train/loss', 'client/train/loss', 'privacy/epsilon_run_rdp',
                 'privacy/epsilon_declared_rdp')


class ProgressBarReleaseManager(tff.program.ReleaseManager):
  """Advances a tqdm bar to each round and shows the latest of the released `shown` metrics.

  Values are flattened as `tff.program.CSVFileReleaseManager` flattens them (names joined with
  '/') and shown by their last component; a metric keeps its last shown value on rounds that do
  not release it. An ε is shown with the round it was released for (`exactly 0 @r0`): a DP run
  releases a round's metrics only once a checkpoint covers it, so the bar counts rounds computed
  while its ε is the one of the latest released round, not of the round the bar is at.

  Args:
    total_rounds: the rounds of the run, the bar's total.
    shown: the flattened names of the released metrics to show.
    file: where the bar is drawn; None for stderr.
    disable: hide the bar; None hides it when `file` is not a terminal (tqdm's rule).
    unit: what the bar counts.
  """

  def __init__(self, total_rounds: int,
               shown: Sequence[str] = DEFAULT_SHOWN, file=None, disable: Optional[bool] = None,
               unit: str = 'round'):
    self._bar = tqdm.tqdm(total=total_rounds, unit=unit,
                          file=sys.stderr if file is None else file, disable=disable,
                          dynamic_ncols=True)
    self._shown = tuple(shown)
    self._latest = {}

  async def release(self, value, key: int) -> None:
    """Shows the scalar `shown` metrics of `value` and moves the bar to round `key`.

    Args:
      value: the released structure of one round.
      key: the round it belongs to.
    """
    flat = dict(tff.program.structure_utils.flatten_with_name(value))
    for name in self._shown:
      if name in flat and np.ndim(flat[name]) == 0:
        self._latest[name.split('/')[-1]] = (float(flat[name]), key)
    self._bar.set_postfix({k: f'{privacy.format_epsilon(v)} @r{r}' if 'epsilon' in k
                           else f'{v:.4g}' for k, (v, r) in self._latest.items()},
                          refresh=False)
    self.advance(key)

  def start_at(self, round_num: int) -> None:
    """Starts the bar at `round_num` (a resumed run's checkpoint), before any round is computed.

    Args:
      round_num: the round the run resumes from.
    """
    self._bar.n = self._bar.last_print_n = self._bar.initial = round_num
    self._bar.refresh()

  def advance(self, round_num: int) -> None:
    """Moves the bar to `round_num` (computed, not necessarily released yet).

    Args:
      round_num: the last round computed; the bar never moves back.
    """
    self._bar.update(max(0, round_num - self._bar.n))

  def write(self, line: str, writer=print) -> None:
    """Passes `line` to `writer` with the bar cleared first and redrawn after, so log lines
    and the bar do not share a terminal line.

    Args:
      line: the log line.
      writer: what writes it (the run's `log`).
    """
    if self._bar.disable:
      writer(line)
      return
    with self._bar.external_write_mode():
      writer(line)

  def close(self) -> None:
    """Closes the bar."""
    self._bar.close()
