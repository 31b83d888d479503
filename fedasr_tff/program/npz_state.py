"""Checkpoints as one NumPy `.npz` file a round: TFF's `FileProgramStateManager`, faster.

TFF's `tff.program.FileProgramStateManager` writes each version of the program state as a
SavedModel, every leaf a `tf.Variable` of a traced `tf.Module`, which costs more CPU than a round
of a small model (docs/benchmarks.md, "Measurements behind the code"). `NpzProgramStateManager`
keeps its folders, versions and retention (`program_state_N/`, `keep_total`, `keep_first`) and
writes the flattened leaves to `program_state_N/state.npz` instead; the structure comes back from
the `structure` argument of `load`, as in TFF. A save is atomic and holds no pickles, so a
checkpoint cannot run code when it is loaded; a damaged file is refused naming it; runs saved by
TFF's manager still load (`save`, `load`).
"""

import glob
import os
import random
import shutil
from typing import Any
import zipfile

import numpy as np
import tensorflow_federated as tff

# TFF's own flattening of program state (attrs classes, named tuples, mappings) and its
# Serializable, which `tff.program` does not export.
from tensorflow_federated.python.common_libs import serializable
from tensorflow_federated.python.program import structure_utils

from fedasr_tff import private_files

STATE_FILE = 'state.npz'


def _leaf_array(index: int, value: Any) -> np.ndarray:
  """A leaf as an array; one NumPy can hold only as an object array (a pickle) is refused."""
  if isinstance(value, serializable.Serializable):
    value = value.to_bytes()
  array = np.asarray(value)
  if array.dtype == object:
    raise ValueError(f'Program state leaf {index} ({type(value).__name__}) is not an array of '
                     'numbers or bytes; it cannot be checkpointed without a pickle.')
  return array


class NpzProgramStateManager(tff.program.FileProgramStateManager):
  """A `tff.program.FileProgramStateManager` that saves `state.npz` files (module docstring).

  Constructed as TFF's manager (`root_dir`, `prefix`, `keep_total`, `keep_first`, `keep_every_k`).
  """

  @property
  def root_dir(self) -> str:
    """The folder of the versions."""
    return self._root_dir

  def _version_path(self, version: int) -> str:
    return self._get_path_for_version(version)  # TFF's naming, so `get_versions` lists ours.

  async def save(self, program_state: Any, version: int) -> None:
    """Saves `program_state` as version `version`.

    Atomic: the file is written and fsynced in a temporary folder renamed to `program_state_N`
    (as TFF renames its folders), so a run killed while saving leaves no partial version, and the
    next save of that version removes the temporary folder. A save that fails, on a full disk
    say, removes it and names `program_state_N/state.npz`.

    Args:
      program_state: a structure of arrays, numbers, bytes or `tff.program.Serializable`s.
      version: a strictly increasing integer.

    Raises:
      tff.program.ProgramStateExistsError: if `version` is already saved.
      ValueError: for a leaf that is not an array of numbers or bytes.
    """
    path = self._version_path(version)
    if os.path.exists(path):
      raise tff.program.ProgramStateExistsError(version=version, path=self._root_dir)
    materialized = await tff.program.materialize_value(program_state)
    leaves = [_leaf_array(i, leaf) for i, leaf in enumerate(structure_utils.flatten(
        materialized))]
    # The temporary folders of a save of this version that a kill cut short.
    for stale in glob.glob(f'{glob.escape(path)}_temp[0-9]*'):
      shutil.rmtree(stale)
    temporary = f'{path}_temp{random.randrange(10**9)}'
    try:
      # A full disk stops the save naming the version's file; the versions saved stay.
      with private_files.writing(os.path.join(path, STATE_FILE)):
        os.makedirs(temporary)
        with open(os.path.join(temporary, STATE_FILE), 'wb') as f:
          np.savez(f, *leaves)
          f.flush()
          os.fsync(f.fileno())
      os.rename(temporary, path)
    finally:
      if os.path.exists(temporary):
        shutil.rmtree(temporary)
    await self._remove_old_program_state()

  async def check(self, version: int) -> None:
    """Reads every array of version `version`, without the structure `load` needs.

    A run calls this before it builds its process (tens of seconds), so that a damaged file is
    refused at start-up. A version saved by TFF's manager (a SavedModel) is read only by `load`.

    Args:
      version: a saved version.

    Raises:
      ValueError: naming the file when it cannot be read, as `load` does.
    """
    folder = self._version_path(version)
    path = os.path.join(folder, STATE_FILE)
    if os.path.exists(path):
      _read_leaves(path)  # Reading each array checks its zip CRC.
    elif os.path.isdir(folder) and not os.path.exists(os.path.join(folder, 'saved_model.pb')):
      raise ValueError(f'{folder} holds neither {STATE_FILE} nor a SavedModel.')

  async def load(self, version: int, structure: Any) -> Any:
    """Loads version `version` into `structure` (leaves as NumPy arrays).

    A version folder without `state.npz`, saved by TFF's manager before this module, is read by
    `FileProgramStateManager.load`.

    Args:
      version: a saved version.
      structure: the structure saved (its leaves' values are not used).

    Raises:
      tff.program.ProgramStateNotFoundError: if `version` was not saved.
      ValueError: naming the file when it cannot be read or does not fit `structure`.
    """
    folder = self._version_path(version)
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
      if not os.path.isdir(folder) or os.path.exists(os.path.join(folder, 'saved_model.pb')):
        # Not saved (TFF raises ProgramStateNotFoundError), or saved by TFF's own manager.
        return await super().load(version, structure)
      raise ValueError(f'{folder} holds neither {STATE_FILE} nor a SavedModel.')
    expected = structure_utils.flatten(structure)
    leaves = _read_leaves(path)
    if len(leaves) != len(expected):
      raise ValueError(f'{path} holds {len(leaves)} arrays; the program state has '
                       f'{len(expected)} leaves.')
    leaves = [type(want).from_bytes(got.item()) if isinstance(want, serializable.Serializable)
              else got for want, got in zip(expected, leaves, strict=True)]
    return structure_utils.unflatten_as(structure, leaves)


def _read_leaves(path: str) -> list:
  """The arrays of the `state.npz` file `path`, in order; `ValueError` naming it if damaged
  (missing, or truncated or altered: each array's zip CRC is checked as it is read)."""
  try:
    # No pickles: a checkpoint cannot run code when it is loaded.
    with np.load(path, allow_pickle=False) as saved:
      return [saved[f'arr_{i}'] for i in range(len(saved.files))]
  except (zipfile.BadZipFile, EOFError, KeyError, OSError, ValueError) as e:
    raise ValueError(f'{path} cannot be read: {type(e).__name__}: {e}') from e
