"""A study: a grid of independent runs (cells) over seeds, run a few at a time and read back.

A cell is one run of a binary with an output folder of its own, finished when its `done_file`
exists there. Started again, a study runs only the unfinished cells (`run_cells`), and those
resume from their own checkpoints; `estimate_seconds` says how long that takes, and `mean_std`
and `compare` read the results over seeds.
"""

import dataclasses
import json
import math
import os
import statistics
import subprocess
import time
from typing import Callable
from typing import Dict
from typing import Mapping
from typing import Optional
from typing import Sequence
from typing import Tuple

from fedasr_tff.runtime import execution_context

DONE_FILE = 'summary.json'
_LOG_FILE = 'cell.log'
_SECONDS_FILE = 'cell_seconds.json'


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of a study: `argv` (a command line) writing into `output_dir`.

  Attributes:
    name: the cell's name, unique in its study.
    argv: the command line of the run.
    output_dir: the run's own output folder; `cell.log` and `cell_seconds.json` go there too.
    done_file: the file whose presence there means the run finished: by default `summary.json`,
      which `training_loop.train` writes last.
  """
  name: str
  argv: Sequence[str]
  output_dir: str
  done_file: str = DONE_FILE

  @property
  def done(self) -> bool:
    """Whether the run finished (its `done_file` exists)."""
    return os.path.isfile(os.path.join(self.output_dir, self.done_file))

  @property
  def log_path(self) -> str:
    """Where the run's output goes."""
    return os.path.join(self.output_dir, _LOG_FILE)

  def measured_seconds(self) -> Optional[float]:
    """The wall time of the run that finished the cell (None if it was not measured)."""
    path = os.path.join(self.output_dir, _SECONDS_FILE)
    if not os.path.isfile(path):
      return None
    with open(path) as f:
      return float(json.load(f)['seconds'])


def estimate_seconds(cells: Sequence[Cell], parallel: int,
                     calibrated_cell_seconds: float) -> Tuple[float, str]:
  """Wall time of the unfinished `cells`, and how it was estimated.

  The cells run in waves of `parallel`: ceil(n / parallel) x t_cell for n unfinished cells, with
  t_cell the mean measured wall time of the finished cells when there are any, else
  `calibrated_cell_seconds`.

  Args:
    cells: the study's cells.
    parallel: how many cells run at once (>= 1).
    calibrated_cell_seconds: the caller's estimate of one cell's wall time, used while no
      finished cell has been measured.

  Returns:
    (seconds, a phrase saying which t_cell was used).

  Raises:
    ValueError: if `parallel` < 1.
  """
  if parallel < 1:
    raise ValueError(f'`parallel` must be >= 1, got {parallel}.')
  todo = sum(not cell.done for cell in cells)
  measured = [s for s in (cell.measured_seconds() for cell in cells if cell.done) if s]
  if measured:
    per_cell = statistics.mean(measured)
    how = f'mean wall time of the {len(measured)} finished cells, {per_cell:.0f} s'
  else:
    per_cell = calibrated_cell_seconds
    how = f'calibrated {per_cell:.0f} s a cell'
  return math.ceil(todo / parallel) * per_cell, how


def _start(cell: Cell, env: Optional[Mapping[str, str]]) -> Tuple[subprocess.Popen, float]:
  os.makedirs(cell.output_dir, exist_ok=True)
  with open(cell.log_path, 'a') as log:
    process = subprocess.Popen(execution_context.dying_with_parent(cell.argv, 'the cell'),
                               stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, env=None if env is None else dict(env))
  return process, time.monotonic()


def _tail(path: str, chars: int = 3000) -> str:
  with open(path, errors='replace') as f:
    return f.read()[-chars:]


def run_cells(cells: Sequence[Cell], parallel: int, *, env: Optional[Mapping[str, str]] = None,
              log: Callable[[str], None] = print, poll_seconds: float = 1.0) -> Dict[str, float]:
  """Runs the unfinished `cells`, at most `parallel` at once.

  Each cell runs as a subprocess under `setpriv --pdeathsig KILL`, so that a killed study takes
  its cells with it (and they take their TFF workers, `fedasr_tff.runtime`). A cell's output goes
  to `cell.log` in its folder, and a finished cell's wall time to `cell_seconds.json`.

  Args:
    cells: the study's cells; names must be unique. Finished ones are skipped.
    parallel: how many cells run at once.
    env: the cells' environment (None: this process's).
    log: where a line per started and finished cell goes, with the time left (the cells left,
      `parallel` at a time, at the mean wall time of the cells finished so far).
    poll_seconds: how often the running cells are checked.

  Returns:
    {name: wall seconds} of the cells this call ran.

  Raises:
    ValueError: `parallel` < 1, or a repeated name.
    RuntimeError: a cell exited with an error, naming it and quoting its log; the cells already
      running are finished first, no new one is started.
  """
  if parallel < 1:
    raise ValueError(f'`parallel` must be >= 1, got {parallel}.')
  names = [cell.name for cell in cells]
  if len(set(names)) != len(names):
    raise ValueError(f'Cell names must be unique: {sorted(names)}.')
  todo = [cell for cell in cells if not cell.done]
  waiting, running, seconds, failed = list(todo), {}, {}, []
  started_all = time.monotonic()
  while waiting or running:
    while waiting and len(running) < parallel and not failed:
      cell = waiting.pop(0)
      running[cell.name] = (cell, *_start(cell, env))
      log(f'[{len(seconds) + len(running)}/{len(todo)}] started {cell.name}')
    time.sleep(poll_seconds)
    for name, (cell, process, started) in list(running.items()):
      if process.poll() is None:
        continue
      del running[name]
      if process.returncode or not cell.done:
        failed.append(cell)
        log(f'FAILED {name} (exit {process.returncode}); log: {cell.log_path}')
        continue
      seconds[name] = time.monotonic() - started
      with open(os.path.join(cell.output_dir, _SECONDS_FILE), 'w') as f:
        json.dump({'seconds': seconds[name]}, f)
      elapsed = time.monotonic() - started_all
      # The cells left, `parallel` at a time, at the mean wall time of those finished.
      left = (statistics.mean(seconds.values()) * (len(todo) - len(seconds) - len(failed))
              / parallel)
      log(f'[{len(seconds)}/{len(todo)}] finished {name} in {seconds[name]:.0f} s; '
          f'{elapsed / 60:.1f} min so far, about {left / 60:.1f} min left')
    if failed:
      waiting.clear()
  if failed:
    raise RuntimeError(f'{len(failed)} cell(s) failed: '
                       + '; '.join(f'{c.name} (log {c.log_path}):\n{_tail(c.log_path)}'
                                   for c in failed))
  return seconds


def read_summary(output_dir: str) -> dict:
  """The `summary.json` a finished federated run wrote in `output_dir`.

  Args:
    output_dir: the run's output folder.

  Returns:
    The parsed `summary.json`.
  """
  with open(os.path.join(output_dir, DONE_FILE)) as f:
    return json.load(f)


@dataclasses.dataclass(frozen=True)
class Summary:
  """A metric over seeds (`mean_std`).

  Attributes:
    mean: the mean over seeds.
    std: the sample standard deviation (n - 1), 0 for one seed.
    values: the values, one a seed.
  """
  mean: float
  std: float
  values: Tuple[float, ...]

  def __str__(self) -> str:
    return f'{self.mean:.1f} ± {self.std:.1f}'


def mean_std(values: Sequence[float]) -> Summary:
  """mean and sample std (n - 1) of `values` (at least one).

  Args:
    values: a metric's value for each seed.

  Returns:
    Their `Summary`.

  Raises:
    ValueError: if `values` is empty.
  """
  if not values:
    raise ValueError('`values` must not be empty.')
  values = tuple(float(v) for v in values)
  std = statistics.stdev(values) if len(values) > 1 else 0.0
  return Summary(statistics.mean(values), std, values)


def compare(claimed: Sequence[str], summaries: Mapping[str, Summary]) -> Tuple[bool, str]:
  """Whether the means are in the `claimed` order (each below the next), and a sentence saying so.

  Each step a < b is judged against the seeds' spread sqrt(s_a^2 + s_b^2): it holds (or is
  reversed) by more than the spread, or only within it.

  Args:
    claimed: two or more names of `summaries`, in the claimed increasing order of their means.
    summaries: {name: the metric over seeds}.

  Returns:
    (whether every step holds, "HOLDS: ..." or "DOES NOT HOLD: ..." with each step's verdict,
    means and spread).

  Raises:
    ValueError: if `claimed` has fewer than two names or names one `summaries` lacks.
  """
  if len(claimed) < 2:
    raise ValueError(f'`claimed` needs at least two names, got {list(claimed)}.')
  missing = [name for name in claimed if name not in summaries]
  if missing:
    raise ValueError(f'`claimed` names {missing}, which `summaries` lacks.')
  steps = []
  holds = True
  for a, b in zip(claimed[:-1], claimed[1:], strict=True):
    sa, sb = summaries[a], summaries[b]
    difference = sb.mean - sa.mean
    spread = math.hypot(sa.std, sb.std)
    holds &= difference > 0
    verdict = ('holds' if difference > spread else 'holds within the seeds\' spread'
               if difference > 0 else 'reversed' if -difference > spread
               else 'reversed within the seeds\' spread')
    steps.append(f'{a} < {b}: {verdict} ({sa.mean:.1f} vs {sb.mean:.1f}, spread {spread:.1f})')
  return holds, ('HOLDS' if holds else 'DOES NOT HOLD') + ': ' + '; '.join(steps)
