"""pytest set-up for the whole repository."""

import sys

import pytest


@pytest.fixture(scope='session', autouse=True)
def _tff_worker_that_dies_with_pytest():
  # TFF's own context leaves its worker running after pytest ends, holding its output pipe (see
  # fedasr_tff/runtime/execution_context.py). Collection has imported every test module by now:
  # a session without TFF starts no worker.
  if 'tensorflow_federated' in sys.modules:
    from fedasr_tff import runtime  # pylint: disable=g-import-not-at-top

    runtime.set_local_cpp_execution_context()
