"""Resident memory of a benchmark and of the TFF worker it started."""

import psutil

from fedasr_tff.runtime import execution_context


def rss_mb():
  """(this process, its TFF workers) resident memory in MB."""
  workers = 0
  for child in psutil.Process().children(recursive=True):
    try:
      if child.name() == execution_context.WORKER_PROCESS_NAME:
        workers += child.memory_info().rss
    except psutil.NoSuchProcess:
      pass
  return psutil.Process().memory_info().rss / 2**20, workers / 2**20
