"""Files that must stay as private as the raw data: owner-only, and durable once written.

A DP run's checkpoints hold the noise seed and the sampling secret (anyone holding them can
subtract the noise), and the feature cache holds features derived from raw client audio. Both are
created readable by their owner only.
"""

import os


def make_private_directory(path: str) -> str:
  """Creates `path` (and parents) if needed and makes it owner-only (0700); returns `path`."""
  os.makedirs(path, mode=0o700, exist_ok=True)
  os.chmod(path, 0o700)
  return path


def open_private(path: str, mode: str = 'w'):
  """Opens `path` for writing, created owner-only (0600) if it does not exist."""
  flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if 'a' in mode else os.O_TRUNC)
  return os.fdopen(os.open(path, flags, 0o600), mode)


def fsync_directory(path: str) -> None:
  """Makes the entries of directory `path` (creations, renames) durable."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def fsync_tree(path: str) -> None:
  """fsyncs every file and directory under `path`, then `path`'s parent (a saved checkpoint)."""
  for root, _, files in os.walk(path):
    for name in files:
      fd = os.open(os.path.join(root, name), os.O_RDONLY)
      try:
        os.fsync(fd)
      finally:
        os.close(fd)
    fsync_directory(root)
  fsync_directory(os.path.dirname(os.path.abspath(path)))
