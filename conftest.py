"""pytest set-up for the whole repository."""

import pytest

from fedasr_tff.runtime import tff_workers


@pytest.fixture(scope='session', autouse=True)
def _stop_tff_workers_after_session():
  # TFF's C++ worker outlives the test process and holds its output pipe; see tff_workers.
  yield
  tff_workers.stop_tff_workers()
