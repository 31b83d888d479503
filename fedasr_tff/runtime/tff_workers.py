"""Stopping the C++ worker processes that TFF's local execution context starts.

TFF 0.87's default (local C++) context launches `worker_binary` as a child process on first use
and talks to it over gRPC. The worker is only signalled from a `__del__`, which does not run
reliably at interpreter exit, so it outlives the Python process (~125 MB each) and keeps the
parent's stdout/stderr open: a shell pipeline or CI step that ran a TFF program then never ends.

`stop_tff_workers` stops the workers *this* process started (its own descendants named
`worker_binary`, never anyone else's). Importing `fedasr_tff` registers it to run at exit;
TFF restarts a worker by itself if a computation runs after it was stopped.
"""

import atexit
import signal
import time

import psutil

WORKER_PROCESS_NAME = 'worker_binary'

_registered_at_exit = False


def _own_workers():
  workers = []
  for child in psutil.Process().children(recursive=True):
    try:
      if child.name() == WORKER_PROCESS_NAME and child.status() != psutil.STATUS_ZOMBIE:
        workers.append(child)
    except psutil.NoSuchProcess:
      pass
  return workers


def _wait_until_exited(workers, timeout_seconds: float):
  """Waits until every worker has exited, without reaping it; returns those still running.

  TFF's own `Popen` object reaps the worker (and signals it first when it restarts one), so a
  reaped pid would make TFF's `os.kill` fail: leave the exited worker as a zombie for TFF.
  """
  deadline = time.monotonic() + timeout_seconds
  running = list(workers)
  while running:
    running = [w for w in running if _is_running(w)]
    if not running or time.monotonic() > deadline:
      break
    time.sleep(0.02)
  return running


def _is_running(worker) -> bool:
  try:
    return worker.status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def _signal(workers, sig) -> None:
  for worker in workers:
    try:
      worker.send_signal(sig)
    except psutil.NoSuchProcess:
      pass


def stop_tff_workers(timeout_seconds: float = 5.0) -> int:
  """Stops this process's TFF C++ workers; returns how many were running.

  Sends SIGINT (TFF's own shutdown signal), then SIGKILL to any worker still running after
  `timeout_seconds`.
  """
  workers = _own_workers()
  _signal(workers, signal.SIGINT)
  stubborn = _wait_until_exited(workers, timeout_seconds)
  _signal(stubborn, signal.SIGKILL)
  _wait_until_exited(stubborn, timeout_seconds)
  return len(workers)


def stop_tff_workers_at_exit() -> None:
  """Registers `stop_tff_workers` to run when the interpreter exits (idempotent)."""
  global _registered_at_exit
  if not _registered_at_exit:
    atexit.register(stop_tff_workers)
    _registered_at_exit = True
