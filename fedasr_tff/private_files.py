"""Files that must stay as private as the raw data: owner-only, and durable once written.

A DP run's checkpoints hold the noise seed and the sampling secret (anyone holding them can
subtract the noise) and the fingerprint of the training clients, and the feature cache holds
features derived from raw client audio. Every file in them is owner-only (0600, directories
0700), not only their top folder: a copy or an archive of a folder keeps each file's own mode.
A write that fails names its file (`writing`), so that a full disk stops a run with one line
saying where (`FULL_DISK`).
"""

import contextlib
import errno
import os
from typing import Iterator
from typing import Optional

# The errors of a write that more space would let through: no space left, a quota reached.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def writing(path: str, partial: Optional[str] = None) -> Iterator[None]:
  """Names `path` in an `OSError` raised by the writes of it inside, and removes `partial`.

  `write()`, `flush()` and `fsync()` errors name no file (a full disk fails there, not at
  `open()`), so without this a run would stop without saying which of its files was not
  written.

  Args:
    path: the file written.
    partial: the temporary file that becomes `path` once complete, removed if the writes fail
      (a full disk leaves the old `path` or the new, and no partial file), or None.

  Yields:
    Nothing; the writes go in the `with` block.

  Raises:
    OSError: the writes' error, with `path` as its file name if it named none.
  """
  try:
    yield
  except BaseException as e:
    if partial is not None and os.path.lexists(partial):
      os.remove(partial)
    if isinstance(e, OSError) and e.errno is not None and e.filename is None:
      raise OSError(e.errno, e.strerror, path) from e
    raise


def make_private_directory(path: str) -> str:
  """Creates a directory (and parents) if needed and makes it owner-only (0700).

  Args:
    path: the directory.

  Returns:
    `path`.
  """
  os.makedirs(path, mode=0o700, exist_ok=True)
  os.chmod(path, 0o700)
  return path


def open_private(path: str, mode: str = 'w'):
  """Opens a file for writing, owner-only (0600): created so, or made so if it exists.

  Args:
    path: the file.
    mode: a writing mode of `open` ('w', 'wb', 'a', ...); 'a' appends, else it truncates.

  Returns:
    The open file object.
  """
  flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if 'a' in mode else os.O_TRUNC)
  fd = os.open(path, flags, 0o600)
  os.fchmod(fd, 0o600)   # A file written before, with a wider mode.
  return os.fdopen(fd, mode)


def make_private_tree(path: str) -> str:
  """Makes a directory and everything under it owner-only (directories 0700, files 0600).

  For files a library writes itself (TFF's `FileProgramStateManager`): called after each save.
  Not a umask, which is process-wide and would change the files other threads create meanwhile;
  until the call the files are protected by their owner-only parent. Symbolic links are left
  alone.

  Args:
    path: the directory.

  Returns:
    `path`.
  """
  os.chmod(path, 0o700)
  for root, dirs, files in os.walk(path):
    for names, mode in ((dirs, 0o700), (files, 0o600)):
      for name in names:
        entry = os.path.join(root, name)
        if not os.path.islink(entry):   # chmod would change the link's target.
          os.chmod(entry, mode)
  return path


def fsync_directory(path: str) -> None:
  """Makes a directory's entries (creations, renames) durable.

  Args:
    path: the directory.
  """
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def fsync_tree(path: str) -> None:
  """Makes a saved tree (a checkpoint) durable.

  Args:
    path: the tree's root; every file and directory under it is fsynced, then its parent.
  """
  for root, _, files in os.walk(path):
    for name in files:
      fd = os.open(os.path.join(root, name), os.O_RDONLY)
      try:
        os.fsync(fd)
      finally:
        os.close(fd)
    fsync_directory(root)
  fsync_directory(os.path.dirname(os.path.abspath(path)))
