"""Runs the tests of several test modules in one process: the `unit_tests` target of a package.

Every Python process of this project spends about 7 s of CPU importing TensorFlow, and Bazel
starts one process per test target, so the light modules of a package share one target (CI has
2 cores and 30 minutes for every test). Each module keeps its own target, tagged "manual" (not
in `//...`) for running it alone: `bazel test //tests/speech/data:text_test`.

Usage (a `py_test` whose `main` is this file, as `tests/unit_tests.bzl` makes it):
`--test_modules=tests.speech.data.text_test,...`.
"""

import importlib
import sys
import unittest

from absl import flags
from absl.testing import absltest

_FLAG = 'test_modules'
flags.DEFINE_list(_FLAG, None, 'The test modules to run, by module name.')


def _modules_from_argv(argv):
  """The modules of --test_modules, read before absl parses the flags: they are imported first,
  as a test module run alone imports its dependencies before `absltest.main`."""
  names = [arg.split('=', 1)[1] for arg in argv if arg.startswith(f'--{_FLAG}=')]
  if not names or not names[-1]:
    raise SystemExit(f'{argv[0]}: --{_FLAG}=MODULE,... names no test module.')
  return [importlib.import_module(name) for name in names[-1].split(',')]


_MODULES = _modules_from_argv(sys.argv) if __name__ == '__main__' else []


def load_tests(loader: unittest.TestLoader, standard_tests, pattern):
  """unittest's load_tests protocol: the tests of every module of --test_modules."""
  del standard_tests, pattern
  suite = unittest.TestSuite()
  for module in _MODULES:
    suite.addTests(loader.loadTestsFromModule(module))
  return suite


if __name__ == '__main__':
  if 'tensorflow_federated' in sys.modules:
    # As conftest.py does under pytest, a context of ours instead of the one TFF sets on import:
    # the in-process one, which starts no worker until a computation needs one (these modules
    # start no subprocess).
    from fedasr_tff import runtime  # pylint: disable=g-import-not-at-top

    runtime.set_inprocess_execution_context()
  absltest.main()
