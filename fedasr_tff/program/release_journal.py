"""Releases held back until a checkpoint covers them: every round is released exactly once.

A round's outputs (metrics, log lines) are computed from the round's state. If they were released
before that state is durably saved, a run killed in between would recompute the round on resume
and release it a second time; any randomness that differs between the two executions (client
noise, a non-replayed draw) would then hand out two versions of one round, whose difference
cancels noise. So the runner holds a round's outputs in memory and releases them only once a
checkpoint at or after that round is saved:

1. `hold(round, values, lines)` for each computed round;
2. at a checkpoint of round r: `write(r)` puts the held outputs on disk (owner-only, atomically),
   then the checkpoint is saved, then they are released and `clear()`ed;
3. on resume from the checkpoint of round r, `pending(r)` returns what a run killed between
   steps 2's save and its release had not yet released (or had only partly released): the same
   values, read back, so releasing them again reveals nothing new. A journal of any other round
   belongs to a checkpoint that was never saved, and is dropped; those rounds are recomputed.

A damaged latest checkpoint is therefore refused, never skipped (`load_latest`): it covered the
release of its rounds, which an earlier checkpoint would recompute.
"""

import asyncio
import json
import os
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import private_files
from fedasr_tff.program import npz_state

Held = Tuple[Dict[int, Any], List[str]]


class ReleaseJournal:
  """Outputs of computed rounds waiting for a checkpoint (module docstring).

  Args:
    path: the journal's file, beside the checkpoints (it is as private as they are).
  """

  def __init__(self, path: str):
    self._path = path
    self._values: Dict[int, Any] = {}
    self._lines: List[str] = []

  def hold(self, round_num: int, values: Optional[Dict[str, Any]],
           lines: Tuple[str, ...] = ()) -> None:
    """Keeps `values` (the released structure of round `round_num`) and log `lines`.

    Args:
      round_num: the round computed.
      values: its released structure; None or empty for nothing to release.
      lines: its log lines.
    """
    if values:
      self._values[round_num] = values
    self._lines.extend(lines)

  @property
  def held(self) -> Held:
    """({round: released values}, log lines) held in memory, copied."""
    return dict(self._values), list(self._lines)

  def write(self, checkpoint_round: int) -> None:
    """Durably writes the held outputs, tagged with the checkpoint that is about to cover them.

    Owner-only and atomic (a temporary file replaced, then the folder synced); an error names
    the journal (`private_files.writing`).

    Args:
      checkpoint_round: the round of the checkpoint saved next.
    """
    data = {'checkpoint_round': checkpoint_round,
            'values': {str(k): v for k, v in self._values.items()}, 'lines': self._lines}
    partial = f'{self._path}.tmp'
    with private_files.writing(self._path, partial), private_files.open_private(partial) as f:
      json.dump(data, f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(partial, self._path)
    private_files.fsync_directory(os.path.dirname(self._path) or '.')

  def clear(self) -> None:
    """Forgets the held outputs once released."""
    self._values, self._lines = {}, []
    if os.path.exists(self._path):
      os.remove(self._path)

  def pending(self, checkpoint_round: int) -> Held:
    """Outputs written for the checkpoint of `checkpoint_round`, if that run did not clear them.

    Args:
      checkpoint_round: the round of the checkpoint the run resumes from.

    Returns:
      ({round: released values}, log lines) written for that checkpoint; empty when there is no
      journal or it belongs to another checkpoint (one never saved).

    Raises:
      ValueError: if the journal is corrupt (not the JSON `write` writes), saying how to
        recover.
    """
    if not os.path.exists(self._path):
      return {}, []
    try:
      with open(self._path) as f:
        data = json.load(f)
      if data.get('checkpoint_round') != checkpoint_round:
        return {}, []
      return {int(k): v for k, v in data['values'].items()}, list(data['lines'])
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(f'Release journal {self._path} is corrupt ({e}); remove it to recompute '
                       'the rounds after the last checkpoint.') from e


def load_latest(manager: tff.program.FileProgramStateManager, structure: Any,
                checkpoint_dir: str) -> Tuple[Any, int]:
  """(program state, round) of the latest checkpoint of `manager`, or (None, 0) if none.

  Args:
    manager: the run's state manager, writing to `checkpoint_dir`.
    structure: the program state's structure (as for `FileProgramStateManager.load`).
    checkpoint_dir: the manager's folder, named in errors.

  Raises:
    ValueError: naming the checkpoint folder when the latest checkpoint cannot be read, and
      saying what the user can do. Nothing on disk is changed.
  """
  versions = asyncio.run(manager.get_versions()) or []
  if not versions:
    return None, 0
  latest = versions[-1]
  try:
    return asyncio.run(manager.load(latest, structure)), latest
  # A damaged state.npz: ValueError naming it (`npz_state`). A damaged SavedModel (a run
  # checkpointed by TFF's manager): IndexError (truncated variables.data),
  # tf.errors.DataLossError (bad checksum), OSError (missing or truncated saved_model.pb or
  # variables.index), ValueError.
  except (IndexError, OSError, ValueError, tf.errors.OpError) as e:
    raise _unreadable(checkpoint_dir, versions, e) from e


def check_latest(manager: npz_state.NpzProgramStateManager, checkpoint_dir: str) -> None:
  """Refuses, as `load_latest` does, a latest checkpoint whose file cannot be read.

  Needs no program state structure, so a run calls it before building its process (tens of
  seconds); `load_latest` still refuses a file that does not fit the structure.

  Args:
    manager: the run's state manager, reading `checkpoint_dir`.
    checkpoint_dir: the manager's folder, named in errors.

  Raises:
    ValueError: as `load_latest`. Nothing on disk is changed.
  """
  versions = asyncio.run(manager.get_versions()) or []
  if versions:
    try:
      asyncio.run(manager.check(versions[-1]))
    except ValueError as e:
      raise _unreadable(checkpoint_dir, versions, e) from e


def _unreadable(checkpoint_dir: str, versions: List[int], error: Exception) -> ValueError:
  """The refusal of the latest of `versions`, which cannot be read, saying what to do."""
  latest = versions[-1]
  path = os.path.join(checkpoint_dir, f'program_state_{latest}')
  # Not skipped for the previous checkpoint automatically: once saved, this one covered the
  # release of its rounds (module docstring), so resuming earlier recomputes released rounds,
  # and if the recomputation differs (another machine or build), a round released twice in two
  # versions leaks what the noise hid. Only the user knows whether that can happen.
  if len(versions) > 1:
    previous = versions[-2]
    how = (f'To resume from the checkpoint of round {previous} instead, move {path} out of '
           f'{checkpoint_dir} (keep it) and run again. The rounds after {previous} are '
           'then computed and released again: do this only if they were never released '
           f'(metrics.csv has no round after {previous}) or if this is the machine and '
           'software that ran them (they are then recomputed bit-identically).')
  else:
    how = 'There is no earlier checkpoint to resume from.'
  return ValueError(
      f'The latest checkpoint {path} (round {latest}) cannot be read ({type(error).__name__}: '
      f'{error}). Nothing was changed. It is not skipped for an earlier checkpoint '
      f'automatically: the outputs of rounds up to {latest} may have been released, and '
      'computing them again could release a different version of a released round, outside '
      f'the privacy guarantee. {how} Otherwise start a new run in a new output directory (its '
      'privacy cost adds to this run\'s).')
