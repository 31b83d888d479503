"""TFF's local C++ execution context, with a worker process that dies with this one.

TFF 0.87's local C++ context (`tff.framework.local_cpp_executor_factory`) starts `worker_binary`
lazily, from a background thread, with a plain `subprocess.Popen` writing to our stdout and stderr,
and stops it only from a `__del__` that does not run reliably at exit: the worker (40 MB idle, 1 GB
training) outlives the process and holds its output pipes open, so a pipeline running it hangs.

`set_local_cpp_execution_context` builds the same context from TFF's public pieces, but starts the
worker itself, at once, from the main thread: under `setpriv --pdeathsig KILL`, so the kernel kills
it when that thread exits, i.e. when this process ends, however (SIGTERM and SIGKILL too); in its
own session, so a Ctrl-C or hang-up of the job reaches this process only; with its output in an
unlinked temporary file, so it holds none of our pipes and an error can quote its last lines. It is
also killed at normal exit and when the context is set again. A worker that died fails the next
computation (TFF would start another one, from its background thread).
"""

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
import time

from absl import logging
import grpc
import portpicker
import tensorflow_federated as tff

WORKER_PROCESS_NAME = 'worker_binary'
WORKER_PATH = os.path.join(os.path.dirname(tff.__file__), 'data', WORKER_PROCESS_NAME)
# Messages up to TFF's 2 GB (gRPC: 4 MB received); a first retry after 50 ms (gRPC: 1 s), as a
# worker starts fast.
CHANNEL_OPTIONS = [('grpc.max_receive_message_length', 2 * 10**9),
                   ('grpc.max_send_message_length', 2 * 10**9),
                   ('grpc.initial_reconnect_backoff_ms', 50)]

_worker = None  # the subprocess.Popen of the context set last


def set_local_cpp_execution_context(max_concurrent_computation_calls: int | None = None) -> None:
  """Sets TFF's default context to a local C++ worker that this process starts and owns.

  Args:
    max_concurrent_computation_calls: How many calls of one computation the worker runs at once
      (in a federated round: clients trained in parallel); None for no limit.

  Raises:
    ValueError: `max_concurrent_computation_calls` is not None or a positive int.
    RuntimeError: Not called from the main thread, or the worker does not start.
  """
  calls = max_concurrent_computation_calls
  if calls is not None and (type(calls) is not int or calls < 1):
    raise ValueError(f'max_concurrent_computation_calls must be None or an int > 0: {calls!r}')
  if threading.current_thread() is not threading.main_thread():
    raise RuntimeError('Call from the main thread: the worker dies with the thread that starts it.')
  _stop_worker()
  port = portpicker.pick_unused_port()
  log = tempfile.TemporaryFile()
  global _worker
  _worker = worker = start_worker(port, calls, log)
  atexit.unregister(_stop_worker)  # registered once, however often the context is set
  atexit.register(_stop_worker)
  stub = tff.framework.RemoteExecutorGrpcStub(
      grpc.insecure_channel(f'localhost:{port}', CHANNEL_OPTIONS))
  deadline = time.monotonic() + 120  # seconds; it starts in ~0.2 s
  while not stub.is_ready and worker.poll() is None and time.monotonic() < deadline:
    time.sleep(0.01)
  if not stub.is_ready:
    raise RuntimeError(_failure(worker, log))  # _stop_worker kills it (at exit, or next time)

  def check_worker():
    if worker.poll() is not None:
      raise RuntimeError(_failure(worker, log))

  tff.framework.set_default_context(remote_context(stub, check=check_worker))


def worker_command(port: int, max_concurrent_computation_calls: int | None = None) -> list:
  """The command line of TFF's worker serving on `port` (None: no limit on concurrent calls)."""
  calls = max_concurrent_computation_calls or -1
  return [WORKER_PATH, f'--port={port}', f'--max_concurrent_computation_calls={calls}']


def dying_with_parent(command: list, what: str) -> list:
  """`command` run under `setpriv --pdeathsig KILL`: the kernel kills it when the thread that
  started it exits, however the process ends (SIGKILL too). setpriv sets PR_SET_PDEATHSIG between
  fork and exec, running no Python in the forked child. Without setpriv (util-linux), `command`
  as it is, with a warning naming `what` would outlive a killed parent."""
  if shutil.which('setpriv'):
    return ['setpriv', '--pdeathsig', 'KILL', '--', *command]
  logging.warning('setpriv not found: %s will outlive this process if it is killed.', what)
  return list(command)


def start_worker(port: int, max_concurrent_computation_calls: int | None = None,
                 log=None) -> subprocess.Popen:
  """Starts TFF's worker on `port`, killed by the kernel when the calling thread exits (module
  docstring), in its own session, its output to the file `log` (None: discarded)."""
  output = subprocess.DEVNULL if log is None else log
  return subprocess.Popen(dying_with_parent(worker_command(port, max_concurrent_computation_calls),
                                            'the TFF worker'),
                          stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                          start_new_session=True)


def remote_context(stub, asynchronous: bool = False, check=None):
  """TFF's execution context (sync, or async for the mergeable context) over the worker behind
  `stub` (a `tff.framework.RemoteExecutorGrpcStub`), as TFF's native backend builds it;
  `check()` runs before every new executor (it may raise)."""

  def create_executor(cardinalities):
    if check is not None:
      check()
    executor = tff.framework.RemoteExecutor(stub)
    executor.set_cardinalities({tff.CLIENTS: 0, **cardinalities})  # TFF's default: no clients
    return executor

  context = (tff.framework.AsyncExecutionContext if asynchronous else
             tff.framework.SyncExecutionContext)
  return context(tff.framework.ResourceManagingExecutorFactory(create_executor),
                 tff.backends.native.desugar_and_transform_to_native,
                 transform_args=tff.tensorflow.transform_args,
                 transform_result=tff.tensorflow.transform_result)


def _failure(worker: subprocess.Popen, log) -> str:
  size = os.fstat(log.fileno()).st_size
  tail = os.pread(log.fileno(), 3000, max(0, size - 3000)).decode(errors='replace')
  state = 'running' if worker.poll() is None else f'exit status {worker.returncode}'
  return f'TFF {WORKER_PROCESS_NAME} {worker.pid} is not serving ({state}):\n{tail}'


def _stop_worker() -> None:
  if _worker is not None:  # kill() and wait() do nothing once it has been reaped
    _worker.kill()
    _worker.wait()
