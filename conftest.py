"""pytest set-up for the whole repository.

`--skip-bazel-tests` (what `make test` passes, tools/test.sh) leaves out the test modules that
`bazel test //... --test_tag_filters=-e2e` runs right after (every `py_test` in a `tests/**/BUILD`
not tagged "e2e"), so each test runs once in CI. A test module without a `py_test` target is an
error then: it would silently run under neither.

`--shard=K/N` runs the K-th (from 0) of N shares of the collected tests, every N-th test from the
K-th, so that `make test` runs the end-to-end tests as two pytest processes side by side: each
spends most of its time in one single-threaded interpreter, and alone they leave a core idle.
"""

import pathlib
import re
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parent
_PY_TEST = re.compile(r'^py_test\((.*?)^\)', re.MULTILINE | re.DOTALL)
_SRCS = re.compile(r'srcs\s*=\s*\[([^\]]*)\]')
_TEST_FILE = re.compile(r'"([^"/:]+_test\.py)"')
_E2E = re.compile(r'tags\s*=\s*\[[^\]]*"e2e"')
_MANUAL = re.compile(r'tags\s*=\s*\[[^\]]*"manual"')
_UNIT_TESTS = re.compile(r'^unit_tests\((.*?)^\)', re.MULTILINE | re.DOTALL)
_MODULE = re.compile(r'"(\w+_test)"')


def pytest_addoption(parser):
  parser.addoption('--skip-bazel-tests', action='store_true', default=False,
                   help='Skip the test modules Bazel runs (py_test targets not tagged e2e).')
  parser.addoption('--shard', default=None, metavar='K/N',
                   help='Run every N-th collected test from the K-th (from 0).')


def _shard(value: str):
  """(K, N) of `--shard=K/N`, or a one-line error naming the flag."""
  match = re.fullmatch(r'(\d+)/(\d+)', value)
  if not match or not 0 <= int(match.group(1)) < int(match.group(2)):
    raise pytest.UsageError(f'--shard: expected K/N with 0 <= K < N, got {value!r}.')
  return int(match.group(1)), int(match.group(2))


def bazel_test_modules(root: pathlib.Path = _ROOT) -> dict:
  """{test module path: whether its py_test is tagged e2e}, from every tests/**/BUILD.

  A module of a package's `unit_tests` target (tests/unit_tests.bzl) is run by Bazel there; its
  own target is tagged "manual" (left out of `//...`) and is not tagged e2e. A "manual" target
  that no `unit_tests` lists is an error: it would run under neither.
  """
  modules = {}
  for build in sorted((root / 'tests').rglob('BUILD')):
    text = build.read_text()
    grouped = {name for block in _UNIT_TESTS.finditer(text)
               for name in _MODULE.findall(block.group(1))}
    for target in _PY_TEST.finditer(text):
      srcs = _SRCS.search(target.group(1))
      files = _TEST_FILE.findall(srcs.group(1)) if srcs else []
      if not files:
        raise pytest.UsageError(f'{build}: a py_test without a `*_test.py` file in `srcs`.')
      for name in files:
        if _MANUAL.search(target.group(1)) and name[:-len('.py')] not in grouped:
          raise pytest.UsageError(f'{build}: {name} is tagged "manual" but no `unit_tests` of '
                                  'the package lists it, so no command runs it.')
        modules[(build.parent / name).resolve()] = bool(_E2E.search(target.group(1)))
  return modules


def pytest_configure(config):
  if config.getoption('--shard') is not None:
    _shard(config.getoption('--shard'))
  if not config.getoption('--skip-bazel-tests'):
    return
  modules = bazel_test_modules()
  missing = [str(p.relative_to(_ROOT)) for p in sorted((_ROOT / 'tests').rglob('*_test.py'))
             if p.resolve() not in modules]
  if missing:
    raise pytest.UsageError('--skip-bazel-tests: no py_test target in a BUILD file runs '
                            f'{", ".join(missing)}; add one (tag it "e2e" to run it here).')
  config.stash[_BAZEL_RUN] = {path for path, e2e in modules.items() if not e2e}


_BAZEL_RUN = pytest.StashKey[set]()


def pytest_collection_modifyitems(config, items):
  if config.getoption('--shard') is None:
    return
  k, n = _shard(config.getoption('--shard'))
  ordered = sorted(range(len(items)), key=lambda i: items[i].nodeid)
  kept = {i for rank, i in enumerate(ordered) if rank % n == k}
  config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i not in kept])
  items[:] = [item for i, item in enumerate(items) if i in kept]


def pytest_ignore_collect(collection_path, config):
  bazel_run = config.stash.get(_BAZEL_RUN, None)
  if bazel_run and pathlib.Path(collection_path).resolve() in bazel_run:
    return True
  return None


@pytest.fixture(scope='session', autouse=True)
def _tff_worker_that_dies_with_pytest():
  # TFF's own context leaves its worker running after pytest ends, holding its output pipe (see
  # fedasr_tff/runtime/execution_context.py). Collection has imported every test module by now:
  # a session without TFF starts no worker.
  if 'tensorflow_federated' in sys.modules:
    from fedasr_tff import runtime  # pylint: disable=g-import-not-at-top

    runtime.set_local_cpp_execution_context()


@pytest.fixture(autouse=True)
def _a_live_tff_worker(_tff_worker_that_dies_with_pytest):
  # TFF's C++ worker once died of SIGSEGV under load in the e2e half of `make test`, and every
  # later test of the session failed on the dead worker. The test that met the crash fails with
  # its exit status; the next test gets a new worker.
  if 'tensorflow_federated' in sys.modules:
    from fedasr_tff.runtime import execution_context  # pylint: disable=g-import-not-at-top

    if execution_context.local_worker_died():
      print('conftest: the TFF worker has died; starting another for the next test.',
            file=sys.stderr)
      execution_context.set_local_cpp_execution_context()
