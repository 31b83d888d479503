"""A disk cache of the parts of a round's map-reduce form, keyed by the round itself.

The in-process engine (`inprocess.MapReduceRound`) runs a round from the map-reduce form TFF
compiles (`tff.backends.mapreduce.get_map_reduce_form_for_computation`), a compilation that is
most of a small model's first round (docs/benchmarks.md, "Measurements behind the code"). The
form depends only on the round's computation proto, the TFF and TensorFlow versions and the
compiler's options, so it is kept under a SHA-256 of those (`CompileCache.key`): another round is
another entry. An entry holds the parts' graphs, what TFF would send its worker: never state,
data or `initialize` (which holds the DP noise seed). The engine runs them as they are, so the
directory must be the user's own (docs/running.md, "Engines").
"""

import hashlib
import os
import stat
import tempfile
from typing import Callable
from typing import Dict
from typing import Optional
from typing import Sequence

from absl import logging
from google.protobuf import message
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

# Changed whenever an entry's layout changes, so that older entries are never read.
_FORMAT = b'fedasr_tff map-reduce parts v1'
_SUFFIX = '.mrparts'


def default_directory() -> str:
  """`$XDG_CACHE_HOME/fedasr_tff/compiled`, or `~/.cache/fedasr_tff/compiled`."""
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'fedasr_tff', 'compiled')


class CompileCache:
  """The parts of rounds' map-reduce forms, on disk (module docstring)."""

  def __init__(self, directory: str):
    """Opens the cache, making its directory (mode 0700) if it does not exist.

    Args:
      directory: where entries live; the user's own.

    Raises:
      ValueError: naming `directory`, if it is empty, not a directory, owned by another user or
        writable by group or others.
    """
    if not directory:
      raise ValueError('The compile cache\'s `directory` is empty.')
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
      raise ValueError(f'The compile cache {directory} is not a directory.')
    if info.st_uid != os.getuid():
      raise ValueError(f'The compile cache {directory} belongs to user {info.st_uid}, not to this '
                       f'user ({os.getuid()}): its graphs would run in this process. Give a '
                       'directory of your own.')
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
      raise ValueError(f'The compile cache {directory} is writable by group or others (mode '
                       f'{stat.S_IMODE(info.st_mode):o}): its graphs would run in this process. '
                       f'`chmod go-w {directory}`, or give another directory.')
    self.directory = directory

  def key(self, computation: tff.Computation, compiler_options: bytes = b'') -> str:
    """The entry's name: SHA-256 of the computation and everything that compiles it.

    Args:
      computation: the round.
      compiler_options: the compiler's options, serialised.

    Returns:
      A hexadecimal digest.
    """
    digest = hashlib.sha256()
    # The proto comes out the same in every process that builds the round, so a warm cache hits
    # in a new process: client work's model has zero-initialised trainable variables
    # (`fedasr_tff.algorithms.local_training.client_model`), so no initializer seed that Keras
    # draws per process reaches the round.
    for part in (_FORMAT, tff.__version__.encode(), tf.__version__.encode(), compiler_options,
                 tff.framework.ConcreteComputation.get_proto(computation).SerializeToString(
                     deterministic=True)):
      # Length-prefixed, so that no two different tuples hash the same bytes.
      digest.update(len(part).to_bytes(8, 'little'))
      digest.update(part)
    return digest.hexdigest()

  def path(self, key: str) -> str:
    """The file of the entry `key`."""
    return os.path.join(self.directory, key + _SUFFIX)

  def parts(self, key: str, names: Sequence[str],
            compile_parts: Callable[[], Dict[str, tff.Computation]]) -> Dict[str, tff.Computation]:
    """The entry `key`, read if present, else compiled by `compile_parts` and written.

    Args:
      key: from `key`.
      names: the parts an entry holds.
      compile_parts: compiles the round; returns its computations `names` by name.

    Returns:
      The computations by name (as `compile_parts` returns them, or read back: the same protos,
      their types without Python containers).
    """
    path = self.path(key)
    read = self._read(path, names)
    if read is not None:
      return read
    parts = compile_parts()
    self._write(path, parts)
    return parts

  def _read(self, path: str, names: Sequence[str]) -> Optional[Dict[str, tff.Computation]]:
    data = read_if_present(path)
    if data is None:
      return None
    try:
      entry = computation_pb2.Computation.FromString(data)
      held = ([element.name for element in entry.struct.element]
              if entry.WhichOneof('computation') == 'struct' else [])
      if sorted(held) != sorted(names):
        raise ValueError(f'holds {held}, not {list(names)}')
      stack = tff.framework.get_context_stack()
      return {element.name: tff.framework.ConcreteComputation(computation_proto=element.value,
                                                               context_stack=stack)
              for element in entry.struct.element}
    except (message.DecodeError, ValueError, TypeError) as e:
      # An entry is only ever a copy: one that does not parse is compiled again.
      logging.warning('Compile cache entry %s does not parse (%s); compiling the round again.',
                      path, e)
      return None

  def _write(self, path: str, parts: Dict[str, tff.Computation]) -> None:
    entry = computation_pb2.Computation()
    for name, part in sorted(parts.items()):
      entry.struct.element.add(name=name).value.CopyFrom(
          tff.framework.ConcreteComputation.get_proto(part))
    write_atomically(path, entry.SerializeToString())


def read_if_present(path: str) -> Optional[bytes]:
  """The bytes of the entry at `path`, or None if there is none."""
  try:
    with open(path, 'rb') as f:
      return f.read()
  except FileNotFoundError:
    return None


def write_atomically(path: str, data: bytes) -> None:
  """Writes `data` to `path` through a temporary file in its directory, renamed when complete, so
  that a crashed write leaves no partial file."""
  handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix='.tmp')
  try:
    with os.fdopen(handle, 'wb') as f:
      f.write(data)
    os.replace(temporary, path)
  except BaseException:
    os.unlink(temporary)
    raise
