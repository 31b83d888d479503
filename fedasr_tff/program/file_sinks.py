"""TFF's file release managers (`metrics.csv`, TensorBoard events), their failures naming the file.

TFF writes them through `tf.io.gfile`, whose errors are `tf.errors` that keep their cause in the
message; a full disk ("No space left on device", "Disk quota exceeded") becomes the `OSError` it
stands for, naming the file, as every other write of a run does (`private_files.writing`), so a
binary stops with one line saying where. A full disk can also tear the row being appended to
`metrics.csv`: opened again, the file loses that partial last line (the round it held is released
again from the release journal, `release_journal`), and the next row does not run into it; the
temporary copy TFF failed to write is removed as the write fails (and, should the process have died
first, when the file is opened again).
"""

import glob
import os
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import private_files


def _remove_temporary_copies(path: str) -> None:
  # TFF rewrites a file through `{path}_tempNNNN`, left behind where that write failed.
  for partial in glob.glob(f'{glob.escape(path)}_temp[0-9][0-9][0-9][0-9]'):
    os.remove(partial)


class _Named(tff.program.ReleaseManager):
  """`manager`, its full-disk errors raised as `OSError`s naming `path`; where a release fails,
  TFF's temporary copies of `path` are removed (`rewritten`: whether it writes through them)."""

  def __init__(self, manager: tff.program.ReleaseManager, path: str, rewritten: bool = False):
    self._manager, self._path, self._rewritten = manager, path, rewritten

  async def release(self, value: Any, key: int) -> None:
    try:
      await self._manager.release(value, key)
    except BaseException as e:
      if self._rewritten:
        _remove_temporary_copies(self._path)
      if isinstance(e, tf.errors.OpError):
        for number in private_files.FULL_DISK:
          if os.strerror(number) in e.message:
            raise OSError(number, os.strerror(number), self._path) from e
      raise


def metrics_csv(path: str) -> tff.program.ReleaseManager:
  """TFF's `CSVFileReleaseManager` of `path`, a torn last row and TFF's leftover temporary files
  removed first (module docstring).

  Args:
    path: the CSV file.

  Returns:
    The release manager.
  """
  _remove_temporary_copies(path)  # Left by a process that died while it wrote.
  if os.path.isfile(path):
    with open(path, 'rb+') as f:
      content = f.read()
      if not content.endswith(b'\n'):
        f.truncate(content.rfind(b'\n') + 1)
    if not content.rfind(b'\n') + 1:  # Not even the header: TFF writes it anew.
      os.remove(path)
  return _Named(tff.program.CSVFileReleaseManager(path), path, rewritten=True)


def tensorboard(directory: str) -> tff.program.ReleaseManager:
  """TFF's `TensorBoardReleaseManager` of `directory` (module docstring).

  Args:
    directory: the folder of the event files.

  Returns:
    The release manager.
  """
  return _Named(tff.program.TensorBoardReleaseManager(directory), directory)
