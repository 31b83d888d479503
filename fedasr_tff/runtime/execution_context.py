"""TFF's local C++ execution context, with a worker that dies with this process and that only
this process can reach.

TFF 0.87's local C++ context (`tff.framework.local_cpp_executor_factory`) starts `worker_binary`
lazily, from a background thread, with a plain `subprocess.Popen` writing to our stdout and
stderr, and stops it only from a `__del__` that does not run reliably at exit: the worker (40 MB
idle, 1 GB training) outlives the process and holds its output pipes open, so a pipeline running
it hangs. And it serves unauthenticated gRPC on every interface. `set_local_cpp_execution_context`
builds the same context from TFF's public pieces around a worker it starts, owns and isolates
itself (`start_local_worker`); what the isolation protects, and from whom: `docs/privacy.md`,
"Security".
"""

import atexit
import collections
import dataclasses
import functools
import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional
import weakref

from absl import logging
import grpc
import portpicker
import tensorflow_federated as tff

from fedasr_tff.runtime import namespace_bridge

WORKER_PROCESS_NAME = 'worker_binary'
WORKER_PATH = os.path.join(os.path.dirname(tff.__file__), 'data', WORKER_PROCESS_NAME)
ALLOW_EXPOSED_WORKER_VARIABLE = 'FEDASR_TFF_ALLOW_EXPOSED_WORKER'
# Messages up to TFF's 2 GB (gRPC: 4 MB received); a first retry sooner than gRPC's default, as
# a worker starts fast.
CHANNEL_OPTIONS = [('grpc.max_receive_message_length', 2 * 10**9),
                   ('grpc.max_send_message_length', 2 * 10**9),
                   ('grpc.initial_reconnect_backoff_ms', 50)]
_BRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'namespace_bridge.py')
_NAMESPACE_PORT = 8000  # any port: the namespace is new, so nothing else listens in it
_SOCKET_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL

_worker = None  # the LocalWorker of the context set last


class WorkerDiedError(RuntimeError):
  """The local worker ended during the run (killed from outside, or crashed).

  Attributes:
    pid: the pid of `worker_binary` (0 if it never started).
    returncode: its exit status (negative: the signal that ended it).
  """

  def __init__(self, message: str, pid: int, returncode: int):
    super().__init__(message)
    self.pid = pid
    self.returncode = returncode

  def summary(self) -> str:
    """One line naming the worker and how it ended (the message may add its log's tail)."""
    return f'TFF {WORKER_PROCESS_NAME} {self.pid} ended ({_exit_status(self.returncode)})'


class WorkerIsolationError(RuntimeError):
  """This machine cannot put the worker in a network namespace, and no one accepted the exposure."""


@dataclasses.dataclass
class LocalWorker:
  """A TFF worker that this process started and owns.

  Attributes:
    process: The started process (with isolation: the namespace's bridge, whose child the worker
      is; each dies with the other).
    target: The gRPC target that reaches it: `unix:PATH` when isolated, else `localhost:PORT`.
    isolated: Whether it runs in its own network namespace (`start_local_worker`).
    folder: The owner-only folder of its Unix socket (None when not isolated), removed by `stop`.
  """
  process: subprocess.Popen
  target: str
  isolated: bool
  folder: Optional[str] = None

  @property
  def worker_pid(self) -> int:
    """The pid of `worker_binary` (with isolation the bridge's child; 0 until it has started)."""
    if not self.isolated:
      return self.process.pid
    try:
      with open(os.path.join(self.folder, namespace_bridge.WORKER_PID_FILE)) as f:
        return int(f.read())
    except (OSError, ValueError):
      return 0

  def stop(self) -> None:
    """Kills the worker (and its bridge) and removes its socket's folder; idempotent."""
    self.process.kill()  # kill() and wait() do nothing once it has been reaped
    self.process.wait()
    if self.folder is not None:
      shutil.rmtree(self.folder, ignore_errors=True)


def set_local_cpp_execution_context(max_concurrent_computation_calls: Optional[int] = None, *,
                                    allow_exposed_worker: Optional[bool] = None) -> None:
  """Sets TFF's default context to a local C++ worker that this process starts and owns.

  The worker runs in a network namespace of its own, reachable from this process alone
  (`start_local_worker`). A worker that died fails the next computation (TFF would start another
  one, from its background thread).

  Args:
    max_concurrent_computation_calls: How many calls of one computation the worker runs at once
      (in a federated round: clients trained in parallel); None for no limit.
    allow_exposed_worker: Where no network namespace can be made, whether to start the worker as
      TFF does, serving unauthenticated gRPC on every interface. None: the environment variable
      FEDASR_TFF_ALLOW_EXPOSED_WORKER decides ('1': yes); by default, no.

  Raises:
    ValueError: `max_concurrent_computation_calls` is not None or a positive int.
    WorkerIsolationError: No network namespace can be made, and the exposure is not accepted.
    RuntimeError: Not called from the main thread, or the worker does not start.
  """
  # Refused before the running worker is stopped, so the context set before goes on working.
  _checked_calls(max_concurrent_computation_calls)
  _namespace_or_refusal(allow_exposed_worker)
  _check_main_thread()
  _stop_worker()
  tff.framework.set_default_context(
      _local_worker_context(max_concurrent_computation_calls, allow_exposed_worker))


def set_inprocess_execution_context(max_concurrent_computation_calls: Optional[int] = None, *,
                                    allow_exposed_worker: Optional[bool] = None,
                                    compile_cache=None) -> None:
  """Sets TFF's default context to the in-process engine, with a local worker for the rest.

  TensorFlow computations, `initialize` and rounds with a map-reduce form run in this process
  (`inprocess_context.InProcessContext`); anything else on a local C++ worker as
  `set_local_cpp_execution_context` starts it, started only when first needed, so a run whose
  computations all run in process opens no worker at all.

  Args:
    max_concurrent_computation_calls: clients a round trains at once, in process (its lanes)
      and on the worker; None: `inprocess_context.DEFAULT_LANES` in process, no limit on the
      worker.
    allow_exposed_worker: as in `set_local_cpp_execution_context`; checked now, not when the
      worker starts.
    compile_cache: a `compile_cache.CompileCache` where rounds' compiled forms are kept across
      processes (the binaries' default is one in `compile_cache.default_directory()`); None
      compiles every round in every process.

  Raises:
    ValueError: `max_concurrent_computation_calls` is not None or a positive int.
    WorkerIsolationError: No network namespace can be made, and the exposure is not accepted.
    RuntimeError: Not called from the main thread.
  """
  from fedasr_tff.runtime import inprocess_context  # pylint: disable=g-import-not-at-top
  _checked_calls(max_concurrent_computation_calls)
  _namespace_or_refusal(allow_exposed_worker)
  _check_main_thread()
  _stop_worker()
  tff.framework.set_default_context(inprocess_context.InProcessContext(
      functools.partial(_local_worker_context, max_concurrent_computation_calls,
                        allow_exposed_worker),
      lanes=max_concurrent_computation_calls or inprocess_context.DEFAULT_LANES,
      cache=compile_cache))


def _check_main_thread() -> None:
  if threading.current_thread() is not threading.main_thread():
    raise RuntimeError('Call from the main thread: the worker dies with the thread that starts it.')


def _local_worker_context(max_concurrent_computation_calls: Optional[int],
                          allow_exposed_worker: Optional[bool]) -> tff.framework.SyncContext:
  """Starts the local worker (`start_local_worker`) and returns the context that runs on it."""
  log = tempfile.TemporaryFile()
  global _worker
  _worker = worker = start_local_worker(max_concurrent_computation_calls, log,
                                        allow_exposed_worker=allow_exposed_worker)
  atexit.unregister(_stop_worker)  # registered once, however often the context is set
  atexit.register(_stop_worker)
  stub = tff.framework.RemoteExecutorGrpcStub(grpc.insecure_channel(worker.target,
                                                                    CHANNEL_OPTIONS))
  deadline = time.monotonic() + 120  # seconds; it starts in a fraction of one
  while not stub.is_ready and worker.process.poll() is None and time.monotonic() < deadline:
    time.sleep(0.01)
  if not stub.is_ready:
    if (worker.process.returncode or 0) < 0:
      # Killed by a signal while it started: from outside, as a worker that dies in a round.
      raise WorkerDiedError(_failure(worker, log), worker.worker_pid, worker.process.returncode)
    raise RuntimeError(_failure(worker, log))  # _stop_worker kills it (at exit, or next time)

  def check_worker():
    if worker.process.poll() is not None:
      raise WorkerDiedError(_failure(worker, log), worker.worker_pid, worker.process.returncode)

  return remote_context(stub, check=check_worker)


def start_local_worker(max_concurrent_computation_calls: Optional[int] = None, log=None, *,
                       allow_exposed_worker: Optional[bool] = None) -> LocalWorker:
  """Starts TFF's worker for this process alone: in its own network namespace where possible.

  The worker starts at once, from the calling thread: under `setpriv --pdeathsig KILL`, so the
  kernel kills it when that thread exits (when this process ends, however: SIGTERM and SIGKILL
  too); in its own session, so a Ctrl-C or hang-up of the job reaches this process only; with
  its output in `log` (an unlinked temporary file in `set_local_cpp_execution_context`), so it
  holds none of our pipes and an error can quote its last lines. `set_local_cpp_execution_context`
  also kills it at normal exit and when the context is set again.

  Isolation: the worker serves plaintext gRPC with no authentication on every interface (TFF
  0.87's `worker_binary` has no address or token flag) and runs whatever TensorFlow graph it is
  sent, as this process's user: anyone who reaches its port can read the run's checkpoints (the
  noise seed), raw audio and features, and write files. So the worker runs in a network
  namespace of its own (`unshare --net`), where its only interface is its own loopback, and this
  process reaches it through a Unix socket in a fresh owner-only folder, bridged to the worker's
  port inside the namespace (`namespace_bridge.py`). No other host can connect, and no other
  local user but root. Where this machine cannot make a namespace, it raises
  `WorkerIsolationError` unless the exposure is accepted; the worker then listens as TFF starts
  it, and a warning says what that exposes.

  Args:
    max_concurrent_computation_calls: As in `set_local_cpp_execution_context`.
    log: A file for the worker's output; None discards it.
    allow_exposed_worker: As in `set_local_cpp_execution_context`.

  Returns:
    The `LocalWorker`; it may still be starting (connect with retries).

  Raises:
    ValueError: `max_concurrent_computation_calls` is not None or a positive int.
    WorkerIsolationError: No network namespace can be made, and the exposure is not accepted.
  """
  calls = _checked_calls(max_concurrent_computation_calls)
  output = subprocess.DEVNULL if log is None else log
  namespace = _namespace_or_refusal(allow_exposed_worker)
  if namespace is None:
    port = portpicker.pick_unused_port()
    process = _popen(worker_command(port, calls), output)
    logging.warning(
        'fedasr-tff: TFF worker %d serves UNAUTHENTICATED gRPC on port %d of EVERY network '
        'interface (no network namespace here; the exposure was accepted). Anyone who reaches '
        'this machine on that port can run TensorFlow graphs as user %s: read this run\'s '
        'checkpoints (the noise seed), data and features, and write files.', process.pid, port,
        getpass.getuser())
    return LocalWorker(process, f'localhost:{port}', isolated=False)
  folder = socket_folder()
  socket_path = os.path.join(folder, 'worker.sock')
  try:
    process = _popen(isolated_worker_command(socket_path, calls, namespace), output)
  except BaseException:
    shutil.rmtree(folder, ignore_errors=True)
    raise
  return LocalWorker(process, f'unix:{socket_path}', isolated=True, folder=folder)


def isolated_worker_command(socket_path: str,
                            max_concurrent_computation_calls: Optional[int] = None,
                            namespace: Optional[tuple] = None) -> list:
  """The command that runs TFF's worker in a new network namespace, served on `socket_path`.

  Args:
    socket_path: The Unix socket to create (0600) and serve the worker's gRPC on.
    max_concurrent_computation_calls: As in `worker_command`.
    namespace: The `unshare` prefix (default: `network_namespace_prefix()`).

  Returns:
    The command: `unshare` running `namespace_bridge.py`, which runs the worker under
    `dying_with_parent`.

  Raises:
    WorkerIsolationError: This machine cannot make a network namespace.
  """
  namespace = namespace or network_namespace_prefix()
  if namespace is None:
    raise WorkerIsolationError('Cannot make a network namespace here (`unshare --net` fails).')
  # -I -S: the bridge needs the standard library alone, not the driver's environment.
  return [*namespace, sys.executable, '-I', '-S', _BRIDGE, socket_path, str(_NAMESPACE_PORT),
          *dying_with_parent(worker_command(_NAMESPACE_PORT, max_concurrent_computation_calls),
                             'the TFF worker')]


@functools.lru_cache(maxsize=None)
def network_namespace_prefix() -> Optional[tuple]:
  """The `unshare` command prefix that runs a command in a new network namespace here, or None.

  As root, `unshare --net`; otherwise (or where a container denies it) a user namespace too,
  `--map-root-user`, which unprivileged users may make where the kernel allows it. Tried once
  per process, with `true`.

  Returns:
    The prefix, or None where no network namespace can be made.
  """
  unshare = shutil.which('unshare')
  if unshare is None:
    return None
  candidates = [(unshare, '--net'), (unshare, '--net', '--map-root-user')]
  for prefix in candidates[0 if os.geteuid() == 0 else 1:]:
    probe = subprocess.run([*prefix, 'true'], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if probe.returncode == 0:
      return prefix
  return None


def worker_command(port: int, max_concurrent_computation_calls: Optional[int] = None) -> list:
  """The command line of TFF's worker.

  Args:
    port: the TCP port it serves on (every interface of its namespace).
    max_concurrent_computation_calls: calls of one computation it runs at once; None: no limit.

  Returns:
    The command, a list.
  """
  calls = max_concurrent_computation_calls or -1
  return [WORKER_PATH, f'--port={port}', f'--max_concurrent_computation_calls={calls}']


def dying_with_parent(command: list, what: str) -> list:
  """`command` run so that the kernel kills it when the thread that started it exits.

  `setpriv --pdeathsig KILL` sets PR_SET_PDEATHSIG between fork and exec, running no Python in
  the forked child, so the command dies however the parent ends (SIGKILL too).

  Args:
    command: the command.
    what: what it runs, for the warning when setpriv (util-linux) is missing.

  Returns:
    The command under setpriv; without setpriv, `command` as it is, with a warning that `what`
    would outlive a killed parent.
  """
  if shutil.which('setpriv'):
    return ['setpriv', '--pdeathsig', 'KILL', '--', *command]
  logging.warning('setpriv not found: %s will outlive this process if it is killed.', what)
  return list(command)


# Executors a context keeps per worker, one per cardinality set (TFF's factory keeps 10): Poisson
# cohorts split over workers give blocks of many sizes; each executor holds the computations it
# was sent (`CachingRemoteExecutor`), a few MB on the worker, freed when it is evicted.
EXECUTORS_PER_WORKER = 32
# Computations an executor keeps: a run calls a handful (initialize, next, the mergeable parts).
COMPUTATIONS_PER_EXECUTOR = 8
# A worker answers a DisposeExecutor in milliseconds; one that took longer than this at exit is
# not asked again (a distributed run's disposals time out too: `distributed`).
_SLOW_CLOSE_SECONDS = 1.0


class CachingRemoteExecutor(tff.framework.RemoteExecutor):
  """TFF's `RemoteExecutor`, sending each computation to its worker once.

  TFF's execution context turns every call into `create_value(computation)` and `create_call`:
  the whole compiled computation travels with each call (1.2 MB for the `tiny` speech model's DP
  round; 1.3 MB a round for one worker in the mergeable form), and the worker parses it again
  (it keeps the parsed computation and its sessions by the compiler's cache key). The
  worker keeps a value until it is disposed, and a computation's value can be called any number
  of times: so the value made for a computation is kept and returned again when the same
  computation object is created on this executor. The context's compiler returns the same object
  for the same computation (`CompilerPipeline` caches its results), and this executor's values
  live on its worker-side executor only; an executor of other cardinalities sends its own copy.
  Arguments and results are not cached: they travel with every call.
  """

  def __init__(self, stub, capacity: int = COMPUTATIONS_PER_EXECUTOR, **kwargs):
    """Initializes the executor.

    Args:
      stub: a `tff.framework.RemoteExecutorGrpcStub` of the worker.
      capacity: computations kept, the least recently called dropped (and disposed) first.
      **kwargs: `tff.framework.RemoteExecutor`'s other arguments.
    """
    super().__init__(stub, **kwargs)
    self.stub = stub
    self._capacity = capacity
    self._computations = collections.OrderedDict()  # id -> (computation, RemoteValue)
    self.computations_sent = 0

  async def create_value(self, value, type_spec=None):
    if not isinstance(value, tff.framework.ConcreteComputation):
      return await super().create_value(value, type_spec)
    # By identity: equality would serialise the computation's proto to compare it.
    cached = self._computations.get(id(value))
    if cached is not None and cached[0] is value:
      self._computations.move_to_end(id(value))
      return cached[1]
    remote = await super().create_value(value, type_spec)
    self.computations_sent += 1
    _close_at_exit(self)
    self._computations[id(value)] = (value, remote)
    if len(self._computations) > self._capacity:
      self._computations.popitem(last=False)  # its RemoteValue's finalizer disposes it
    return remote

  def close(self):
    super().close()
    # Dropped once the executor is cleared: the values' finalizers then dispose nothing.
    self._computations.clear()


_open_executors = weakref.WeakSet()
_exit_hook_registered = False


def _close_at_exit(executor: tff.framework.RemoteExecutor) -> None:
  """Closes `executor` when this process exits, before its values' finalizers run.

  A value TFF creates disposes itself on the worker from a finalizer, at exit too, in batches of
  20: the computations an executor keeps would all be disposed at exit, each batch a call to a
  worker that may be gone. One `DisposeExecutor` call frees them all on the worker, and
  the finalizers of a closed executor's values do nothing. Registered after the first value's
  finalizer, so it runs before them (atexit calls the latest registered first).
  """
  global _exit_hook_registered
  _open_executors.add(executor)
  if not _exit_hook_registered:
    atexit.register(close_open_executors)
    _exit_hook_registered = True


def close_open_executors() -> None:
  """Closes every `CachingRemoteExecutor` still open (this process's exit does it)."""
  # A worker stopped first answers UNAVAILABLE, which TFF's stub logs at INFO for each executor;
  # nothing is lost (its executors ended with it), so that is not logged.
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.WARNING)
  slow_workers = set()
  try:
    for executor in list(_open_executors):
      if id(executor.stub) in slow_workers:
        continue  # its worker did not answer: the rest of its executors are left to it
      started = time.monotonic()
      executor.close()  # errors are TFF's to swallow (the worker is gone: nothing to free)
      if time.monotonic() - started > _SLOW_CLOSE_SECONDS:
        slow_workers.add(id(executor.stub))
  finally:
    logging.set_verbosity(verbosity)


class ExecutorPerCardinalities(tff.framework.ExecutorFactory):
  """An executor per cardinality set, the least recently used closed beyond `capacity`.

  TFF's `ResourceManagingExecutorFactory` does the same with 10 executors and drops an evicted one
  without closing it: its worker-side executor, and the computations it holds, stay until the
  worker ends.
  """

  def __init__(self, create_executor, capacity: int = EXECUTORS_PER_WORKER):
    """Initializes the factory.

    Args:
      create_executor: cardinalities -> a new `tff.framework.Executor` for them.
      capacity: executors kept.
    """
    self._create_executor = create_executor
    self._capacity = capacity
    self._executors = collections.OrderedDict()

  @staticmethod
  def _key(cardinalities):
    return tuple(sorted((str(placement), count) for placement, count in cardinalities.items()))

  def create_executor(self, cardinalities):
    key = self._key(cardinalities)
    executor = self._executors.get(key)
    if executor is None:
      executor = self._executors[key] = self._create_executor(cardinalities)
      if len(self._executors) > self._capacity:
        self._executors.popitem(last=False)[1].close()
    self._executors.move_to_end(key)
    return executor

  def clean_up_executor(self, cardinalities):
    executor = self._executors.pop(self._key(cardinalities), None)
    if executor is not None:
      executor.close()


def remote_context(stub, asynchronous: bool = False, check=None):
  """TFF's execution context over a worker, as TFF's native backend builds it, each computation
  sent to the worker once (`CachingRemoteExecutor`).

  Args:
    stub: a `tff.framework.RemoteExecutorGrpcStub` of the worker.
    asynchronous: an async context (for the mergeable context) instead of a sync one.
    check: a callable run before every new executor (it may raise), or None.

  Returns:
    The `SyncExecutionContext` or `AsyncExecutionContext`.
  """

  def create_executor(cardinalities):
    if check is not None:
      check()
    executor = CachingRemoteExecutor(stub)
    executor.set_cardinalities({tff.CLIENTS: 0, **cardinalities})  # TFF's default: no clients
    return executor

  context = (tff.framework.AsyncExecutionContext if asynchronous else
             tff.framework.SyncExecutionContext)
  return context(ExecutorPerCardinalities(create_executor),
                 tff.backends.native.desugar_and_transform_to_native,
                 transform_args=tff.tensorflow.transform_args,
                 transform_result=tff.tensorflow.transform_result)


def _popen(command: list, output) -> subprocess.Popen:
  return subprocess.Popen(dying_with_parent(command, 'the TFF worker'), stdin=subprocess.DEVNULL,
                          stdout=output, stderr=output, start_new_session=True)


def _namespace_or_refusal(allow_exposed_worker: Optional[bool]) -> Optional[tuple]:
  """`network_namespace_prefix()`, or None where there is none and the exposure is accepted."""
  namespace = network_namespace_prefix()
  if namespace is None and not _exposure_accepted(allow_exposed_worker):
    raise WorkerIsolationError(
        'Cannot start the TFF worker in a network namespace of its own (`unshare --net` and '
        '`unshare --net --map-root-user` both fail here: user namespaces may be disabled, or a '
        'container forbids them), and without one it serves unauthenticated gRPC on every '
        'network interface, running any TensorFlow graph it is sent as this user. To accept '
        'that exposure, pass --allow_exposed_worker to a binary, allow_exposed_worker=True to '
        f'set_local_cpp_execution_context, or set {ALLOW_EXPOSED_WORKER_VARIABLE}=1 (pytest, '
        'Bazel, scripts); only on a machine no one else can reach (docs/privacy.md, '
        '"Security").')
  return namespace


def _checked_calls(calls):
  if calls is not None and (type(calls) is not int or calls < 1):
    raise ValueError(f'max_concurrent_computation_calls must be None or an int > 0: {calls!r}')
  return calls


def _exposure_accepted(allow_exposed_worker: Optional[bool]) -> bool:
  if allow_exposed_worker is not None:
    return bool(allow_exposed_worker)
  return os.environ.get(ALLOW_EXPOSED_WORKER_VARIABLE, '') == '1'


def socket_folder() -> str:
  """A new folder for workers' Unix sockets, 0700 (mkdtemp).

  Returns:
    Its path: in the temporary directory if a socket's path fits there (Bazel's test TMPDIR can
    be too long), else in /tmp.
  """
  folder = tempfile.mkdtemp(prefix='fedasr-tff-worker-')
  if len(folder.encode()) + len('/worker-name.sock') <= _SOCKET_PATH_MAX:  # room for a name
    return folder
  os.rmdir(folder)
  return tempfile.mkdtemp(prefix='fedasr-tff-worker-', dir='/tmp')


def _failure(worker: LocalWorker, log) -> str:
  size = os.fstat(log.fileno()).st_size
  tail = os.pread(log.fileno(), 3000, max(0, size - 3000)).decode(errors='replace')
  process = worker.process  # with isolation it ends as the worker ended (namespace_bridge.py)
  state = 'running' if process.poll() is None else f'exit status {process.returncode}'
  # A worker killed from outside writes nothing: then no colon promising a log.
  log_text = f':\n{tail}' if tail.strip() else ', and wrote nothing.'
  return f'TFF {WORKER_PROCESS_NAME} {worker.worker_pid} is not serving ({state}){log_text}'


def _exit_status(returncode: int) -> str:
  """'exit status N', with the signal of a negative one ('exit status -15, SIGTERM')."""
  if returncode < 0:
    try:
      return f'exit status {returncode}, {signal.Signals(-returncode).name}'
    except ValueError:
      pass
  return f'exit status {returncode}'


def local_worker_died() -> bool:
  """Whether the worker that `set_local_cpp_execution_context` started last has exited."""
  return _worker is not None and _worker.process.poll() is not None


def _stop_worker() -> None:
  global _worker
  if _worker is not None:
    _worker.stop()
    _worker = None  # stopped on purpose: not a worker that died (`local_worker_died`)
