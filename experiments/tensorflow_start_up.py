"""TensorFlow's start-up noise, kept off the binaries' stderr.

Importing TensorFlow 2.14 on a machine without a GPU prints, from its C++ libraries, three
`E ... Unable to register cuDNN/cuFFT/cuBLAS factory` lines (whatever `TF_CPP_MIN_LOG_LEVEL`
short of 3, which would hide real errors too) and, at lower log levels, notes that no CUDA driver
or TensorRT was found and which CPU instructions the build does not use. None is an error of the
run; every command would open with them. `install()` puts a finder on `sys.meta_path` that runs
the first `import tensorflow` with file descriptor 2 sent to a temporary file, then writes back to
stderr every line but those (`is_start_up_noise`). Nothing else is held back: lines printed later,
by TensorFlow or anyone, go straight to stderr. `FEDASR_TF_START_UP_LOG=1` turns the filter off.
"""

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile

SHOW_ENV = 'FEDASR_TF_START_UP_LOG'
_NOISE = re.compile(
    r'Unable to register (cuDNN|cuFFT|cuBLAS) factory: Attempting to register factory for plugin'
    r'|cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine'
    r'|TF-TRT Warning: Could not find TensorRT'
    r'|cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized')
# The second line of cpu_feature_guard's note.
_NOISE_CONTINUATION = re.compile(r'To enable the following instructions: .* rebuild TensorFlow')


def is_start_up_noise(line: str) -> bool:
  """Whether `line` is one of TensorFlow's start-up lines that `install` keeps off stderr.

  Args:
    line: a line TensorFlow printed while it was imported.
  """
  return bool(_NOISE.search(line) or _NOISE_CONTINUATION.match(line))


@contextlib.contextmanager
def _stderr_filtered():
  """Sends fd 2 to a temporary file (not a pipe, which a long write would fill) while the
  block runs, then writes back every line that is not start-up noise."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      kept = [line for line in captured.read().decode('utf-8', 'replace').splitlines(True)
              if not is_start_up_noise(line)]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
  """The loader of `tensorflow` found by the rest of `sys.meta_path`, run with stderr filtered."""

  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    with _stderr_filtered():
      self._loader.exec_module(module)

  def __getattr__(self, name):  # get_source, get_resource_reader, ...: the real loader's
    return getattr(self._loader, name)


class _QuietTensorflowFinder(importlib.abc.MetaPathFinder):
  """Finds `tensorflow` as the rest of `sys.meta_path` would, with a quiet loader; then leaves
  `sys.meta_path`, as the noise comes once, when TensorFlow's libraries are loaded."""

  def find_spec(self, fullname, path, target=None):
    if fullname != 'tensorflow':
      return None
    with contextlib.suppress(ValueError):
      sys.meta_path.remove(self)
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is not None and spec.loader is not None:
      spec.loader = _QuietLoader(spec.loader)
    return spec


def install() -> None:
  """Keeps TensorFlow's start-up noise off stderr (module docstring), unless TensorFlow is
  already imported or `FEDASR_TF_START_UP_LOG=1`. Idempotent."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # C++ INFO and WARNING lines, when unset
  if (os.environ.get(SHOW_ENV) == '1' or 'tensorflow' in sys.modules or
      any(isinstance(finder, _QuietTensorflowFinder) for finder in sys.meta_path)):
    return
  sys.meta_path.insert(0, _QuietTensorflowFinder())
