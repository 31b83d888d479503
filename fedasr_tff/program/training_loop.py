"""One resumable round loop for every federated task (speech FedAvg, DGA, mixed FL, retriever).

A task (`Task`) supplies what differs between federated programs: its rounds, evaluation, the
state a checkpoint holds and the final outputs. The loop (`train`) owns what must be the same
for all of them, as `tff.learning.programs.train_model` does for TFF's learning programs:
owner-only checkpoints and resuming from the latest; releases held until a checkpoint covers
them (`release_journal`), so each round is released exactly once, even after a kill; the final
`model.npz` and `summary.json`. Where checkpoints and releases go comes in (`RunOutputs`).

Every draw a task makes in a round must be a function of (its secrets, the round, the client),
and the secrets must be in `program_state`, so a round recomputed after a resume is
bit-identical and releases nothing new (docs/privacy.md, "Each round is released once").
"""

import abc
import asyncio
import dataclasses
import json
import math
import os
from typing import Any
from typing import Callable
from typing import Dict
from typing import Mapping
from typing import Optional
from typing import Sequence
from typing import Tuple

import numpy as np
import tensorflow_federated as tff

from fedasr_tff import private_files
from fedasr_tff.program import file_sinks
from fedasr_tff.program import model_io
from fedasr_tff.program import npz_state
from fedasr_tff.program import progress as progress_lib
from fedasr_tff.program import release_journal

Values = Dict[str, Any]


class Task(abc.ABC):
  """What a federated task supplies to `train`.

  Attributes:
    rounds: the rounds of the run, T.
    eval_every: rounds between evaluations (and at the last round).
    checkpoint_every: rounds between checkpoints (and at rounds 0 and T).
    shown_metrics: the released metrics the progress bar shows, by flattened name.
  """
  rounds: int
  eval_every: int
  checkpoint_every: int
  shown_metrics: Sequence[str] = progress_lib.DEFAULT_SHOWN

  @abc.abstractmethod
  def program_state(self) -> Any:
    """What a checkpoint holds now: the process state and every secret the rounds draw from."""

  @abc.abstractmethod
  def restore(self, saved: Any) -> None:
    """Continues from `saved`, a `program_state` read back from a checkpoint.

    Args:
      saved: what `program_state` returned when the checkpoint was saved, as read back.
    """

  def opening_lines(self) -> Sequence[str]:
    """Lines logged when the loop starts (for example, releases outside the guarantee)."""
    return ()

  def initialize(self) -> None:
    """A new run's work before its round 0 (e.g. a DP release that starts the model); not
    called on a resume, since round 0's checkpoint holds its result."""
    return None  # Most tasks start from their initial state as it is.

  @abc.abstractmethod
  def run_round(self, round_num: int) -> Values:
    """Trains round `round_num` (from 1) and returns its released values.

    Args:
      round_num: the round to train, from 1; after a resume, the round after the checkpoint's.

    Returns:
      The round's released values (a nested dict of scalars), to which `evaluate`'s are added.
    """

  @abc.abstractmethod
  def evaluate(self, round_num: int, values: Values) -> Tuple[Values, str]:
    """Scores the current model after `round_num` (0: before training).

    Args:
      round_num: the round just trained.
      values: the released values of that round (empty for round 0).

    Returns:
      (values to release beside the round's, the log line of the evaluation).
    """

  @abc.abstractmethod
  def final_weights(self) -> Tuple[Tuple[Sequence[str], Sequence[str]],
                                   tff.learning.models.ModelWeights]:
    """((trainable tensor names, non-trainable tensor names), the final weights), for
    `model.npz` (`model_io.save_named_weights`)."""

  def model_metadata(self) -> Mapping[str, str]:
    """What `model.npz` records beside the weights (`model_io.save_named_weights`); none by
    default."""
    return {}

  @abc.abstractmethod
  def summary(self) -> Values:
    """The content of `summary.json`, once the last round is trained."""


@dataclasses.dataclass(frozen=True)
class RunOutputs:
  """Where a run's checkpoints and released values go: the loop's collaborators, given to `train`
  as TFF's `train_model` is given its program state manager and release managers.

  Attributes:
    state_manager: saves and loads the program state; its folder also holds the release journal.
    release_managers: each receives every released round's values once, keyed by the round
      (`standard_outputs`: `metrics.csv` and TensorBoard); `with_release_manager` adds one.
    progress: the progress bar, which also receives the log lines; None prints them as they come.
  """
  state_manager: npz_state.NpzProgramStateManager
  release_managers: Tuple[tff.program.ReleaseManager, ...] = ()
  progress: Optional[progress_lib.ProgressBarReleaseManager] = None

  def with_release_manager(self, manager: tff.program.ReleaseManager) -> 'RunOutputs':
    """These outputs and `manager` too.

    Args:
      manager: a `tff.program.ReleaseManager` of your own; it receives what the others do.
    """
    return dataclasses.replace(self, release_managers=(*self.release_managers, manager))


def checkpoint_manager(checkpoint_dir: str) -> npz_state.NpzProgramStateManager:
  """The state manager of a run's checkpoints in `checkpoint_dir`.

  Args:
    checkpoint_dir: the folder of the checkpoints.
  """
  # The first checkpoint kept too: the start of the run, for a user who wants to look back.
  # TFF's manager with `.npz` files for its SavedModels (milliseconds against seconds a save).
  return npz_state.NpzProgramStateManager(checkpoint_dir, keep_total=3, keep_first=True)


def check_checkpoints(output_dir: str) -> None:
  """Refuses a run whose latest checkpoint in `output_dir` cannot be read, changing nothing.

  `train` refuses it too, but only once the task is built; a runner calls this first, so that
  the refusal comes at start-up rather than after building the process (tens of seconds).

  Args:
    output_dir: the run's output directory (it may not exist yet).

  Raises:
    ValueError: as `train` (`release_journal.check_latest`).
  """
  checkpoint_dir = os.path.join(output_dir, 'checkpoints')
  if os.path.isdir(checkpoint_dir):
    release_journal.check_latest(checkpoint_manager(checkpoint_dir), checkpoint_dir)


def standard_outputs(output_dir: str, rounds: int, *,
                     shown_metrics: Sequence[str] = progress_lib.DEFAULT_SHOWN,
                     show_progress: bool = True) -> RunOutputs:
  """A run's outputs in `output_dir`, as the binaries write them: owner-only checkpoints in
  `checkpoints/`, `metrics.csv`, `tensorboard/` and a progress bar on stderr.

  Args:
    output_dir: the run's output directory.
    rounds: the run's rounds, the progress bar's total.
    shown_metrics: the released metrics the bar shows (a task's `shown_metrics`).
    show_progress: draw the progress bar.

  Raises:
    ValueError: if the latest checkpoint cannot be read (`check_checkpoints`), before any sink
      touches a file.
  """
  # Every file in it owner-only, those of a run written before this was done too.
  checkpoint_dir = private_files.make_private_tree(private_files.make_private_directory(
      os.path.join(output_dir, 'checkpoints')))
  state_manager = checkpoint_manager(checkpoint_dir)
  release_journal.check_latest(state_manager, checkpoint_dir)
  return RunOutputs(
      state_manager,
      (file_sinks.metrics_csv(os.path.join(output_dir, 'metrics.csv')),
       file_sinks.tensorboard(os.path.join(output_dir, 'tensorboard'))),
      progress_lib.ProgressBarReleaseManager(rounds, shown=shown_metrics,
                                             disable=not show_progress))


def train(task: Task, output_dir: str, outputs: Optional[RunOutputs] = None, *,
          show_progress: bool = True, log: Callable[[str], None] = print) -> None:
  """Runs (or resumes from `outputs`' checkpoints) the rounds of `task`; see the module docstring.

  Checkpoints are saved every `task.checkpoint_every` rounds, at round 0 of a new run and at the
  last round; the released values go to every release manager of `outputs` and the progress bar.

  Args:
    task: the task, built and checked (its `run_record` written or compared).
    output_dir: the run's output directory, where `model.npz` and `summary.json` are written.
    outputs: the checkpoints and sinks (`RunOutputs`); default `standard_outputs` of
      `output_dir` for the task's rounds and shown metrics.
    show_progress: draw a progress bar on stderr (for the default outputs).
    log: where the log lines go (held back like the metrics).

  Raises:
    ValueError: if the latest checkpoint cannot be read (`release_journal.load_latest`: it is
      refused, never skipped).
    OSError: a write that failed (a full disk), naming its file; the checkpoints saved before
      it stay whole, and a later call resumes from the latest (`file_sinks`,
      `private_files.writing`).
  """
  if outputs is None:
    outputs = standard_outputs(output_dir, task.rounds, shown_metrics=task.shown_metrics,
                               show_progress=show_progress)
  state_manager, progress = outputs.state_manager, outputs.progress
  checkpoint_dir = state_manager.root_dir
  journal = release_journal.ReleaseJournal(os.path.join(checkpoint_dir, 'held_releases.json'))
  restored, start_round = release_journal.load_latest(state_manager, task.program_state(),
                                                      checkpoint_dir)
  if progress is not None:
    progress.start_at(start_round)
  release = tff.program.GroupingReleaseManager(
      [*outputs.release_managers, *([progress] if progress is not None else [])])

  def write(line: str) -> None:
    if progress is None:
      log(line)
    else:
      progress.write(line, log)

  def release_held(held: release_journal.Held) -> None:
    values, lines = held
    for round_num in sorted(values):
      asyncio.run(release.release(values[round_num], round_num))
    for line in lines:
      write(line)

  def checkpoint_and_release(round_num: int) -> None:
    # Held outputs reach the disk first, then the state that covers them, then the sinks.
    journal.write(round_num)
    asyncio.run(state_manager.save(task.program_state(), round_num))
    # TFF writes 0644 files: owner-only before anything is released.
    saved = private_files.make_private_tree(
        os.path.join(checkpoint_dir, f'program_state_{round_num}'))
    private_files.fsync_tree(saved)
    release_held(journal.held)
    journal.clear()

  if restored is not None:
    task.restore(restored)
    write(f'Resuming from the checkpoint of round {start_round} in {output_dir}.')
    # A run killed between a checkpoint and its release: release those (identical) values.
    release_held(journal.pending(start_round))
    journal.clear()
  for line in task.opening_lines():
    write(line)

  try:
    if restored is None:
      task.initialize()
      values, line = task.evaluate(0, {})
      journal.hold(0, values, (line,))
      checkpoint_and_release(0)
    for round_num in range(start_round + 1, task.rounds + 1):
      values = task.run_round(round_num)
      lines = ()
      if round_num % task.eval_every == 0 or round_num == task.rounds:
        evaluated, line = task.evaluate(round_num, values)
        values.update(evaluated)
        lines = (line,)
      journal.hold(round_num, values, lines)
      if progress is not None:
        progress.advance(round_num)
      if round_num % task.checkpoint_every == 0 or round_num == task.rounds:
        checkpoint_and_release(round_num)
  finally:
    if progress is not None:
      progress.close()

  names, weights = task.final_weights()
  model_io.save_named_weights(os.path.join(output_dir, 'model.npz'), names, weights,
                              task.model_metadata())
  _write_private_json(os.path.join(output_dir, 'summary.json'), task.summary())


def update_norm(before: tff.learning.models.ModelWeights,
                after: tff.learning.models.ModelWeights) -> float:
  """||after − before||_2 over the trainable weights (the server update a round applied).

  Args:
    before: the weights before the round.
    after: the weights after it.

  Returns:
    The L2 norm of the difference, over all trainable tensors.
  """
  return math.sqrt(sum(float(np.sum(np.square(np.asarray(b) - np.asarray(a))))
                       for a, b in zip(before.trainable, after.trainable, strict=True)))


def _write_private_json(path: str, values: Values) -> None:
  """Writes `values` to `path` owner-only and atomically (a crash leaves the old or the new)."""
  partial = f'{path}.partial'
  with private_files.writing(path, partial), private_files.open_private(partial) as f:
    json.dump(values, f, indent=2)
  os.replace(partial, path)
