"""Resident memory of a benchmark and of the TFF worker it started."""

import psutil

from fedasr_tff.runtime import execution_context


def worker_processes():
  """The TFF workers this process started (`psutil.Process`es)."""
  for child in psutil.Process().children(recursive=True):
    try:
      if child.name() == execution_context.WORKER_PROCESS_NAME:
        yield child
    except psutil.NoSuchProcess:
      pass


def rss_mb():
  """(this process, its TFF workers) resident memory in MB."""
  workers = 0
  for worker in worker_processes():
    try:
      workers += worker.memory_info().rss
    except psutil.NoSuchProcess:
      pass
  return psutil.Process().memory_info().rss / 2**20, workers / 2**20


def _peak_bytes(pid) -> int:
  with open(f'/proc/{pid}/status') as status:   # Linux: VmHWM, the peak resident set
    for line in status:
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) * 1024
  raise OSError(f'No VmHWM in /proc/{pid}/status.')


def peak_rss_mb():
  """(this process, its TFF workers) peak resident memory so far in MB. TFF's worker frees the
  values of finished calls in batches, so its current RSS swings from round to round; the peak
  is the figure that has to fit in memory."""
  workers = 0
  for worker in worker_processes():
    try:
      workers += _peak_bytes(worker.pid)
    except (OSError, psutil.NoSuchProcess):
      pass
  return _peak_bytes('self') / 2**20, workers / 2**20
