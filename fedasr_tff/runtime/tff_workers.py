"""Stopping the C++ worker processes that TFF's local execution context starts.

TFF 0.87's default (local C++) context launches `worker_binary` as a child process on first use
and talks to it over gRPC. The worker is only signalled from a `__del__`, which does not run
reliably at interpreter exit, so it outlives the Python process (~125 MB each) and keeps the
parent's stdout/stderr open: a shell pipeline or CI step that ran a TFF program then never ends.

`stop_tff_workers` stops the workers *this* process started (its own descendants named
`worker_binary`, never anyone else's). Importing `fedasr_tff` registers it to run at exit;
TFF restarts a worker by itself if a computation runs after it was stopped.

How each way a run can end is covered:

* Normal end, uncaught exception, `sys.exit`: the atexit hook.
* Ctrl-C (SIGINT): Python raises KeyboardInterrupt, the interpreter shuts down normally and runs
  the atexit hook. When the terminal sends SIGINT to the whole process group the worker gets it
  too and shuts down by itself (SIGINT is TFF's own signal for stopping it).
* SIGTERM, SIGHUP (`kill`, a scheduler or container stopping the run, a closed terminal): their
  default action ends the process *without* running atexit hooks, so binaries call
  `install_termination_handlers()` at the start of `main`; it makes them exit through normal
  shutdown with status 128 + signal number (143, 129).
* SIGKILL (`kill -9`, the OOM killer) cannot be caught, and TFF offers no way to make the worker
  die with its parent: Linux's `prctl(PR_SET_PDEATHSIG)` must be called in the child between fork
  and exec, and TFF starts the worker with a plain `subprocess.Popen` inside a closure of its
  executor factory (no `preexec_fn`, no hook) that only patching TFF's private internals could
  change. Instead `install_termination_handlers` starts a watchdog: a small stdlib-only Python
  process (~9 MB) that blocks reading a pipe from this process. The kernel closes the pipe's
  write end when this process dies, however it dies; the watchdog then stops the workers this
  process left behind (SIGINT, then SIGKILL after 5 s) and exits. It finds them without knowing
  their pids, which change when TFF restarts a worker: it puts a per-process token in this
  process's environment, which TFF's `Popen` passes on to every worker started afterwards. This
  relies only on observable behaviour (the worker's process name; TFF's `Popen` passing no
  `env`, so the worker inherits this process's environment): if that changed, the watchdog
  would find nothing and the tests would fail. It also backs up the other cases (it runs when
  the interpreter shuts down, too).
  Not covered: systems without /proc (the watchdog is Linux-only), workers started before
  `install_termination_handlers`, and a process that forked children (multiprocessing's "fork")
  that still run, as they hold the pipe open. Then, after a SIGKILL, list the workers with
  `ps -o pid,ppid,args -C worker_binary` (the orphaned ones have been adopted by pid 1 or a
  subreaper) and kill those; or stop runs with SIGTERM rather than SIGKILL, or with
  `pkill -P <pid>` just before `kill -9 <pid>`.
"""

import atexit
import gc
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

WORKER_PROCESS_NAME = 'worker_binary'

# Set in this process's environment (so inherited by the workers) by `install_termination_handlers`.
_OWNER_ENV = 'FEDASR_TFF_WORKER_OWNER'

_TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_registered_at_exit = False
_termination_handlers_installed = False
_exiting_on_signal = None  # the signal number once `_exit_on_signal` has raised SystemExit
_watchdog = None  # the `subprocess.Popen` of the orphaned-worker watchdog


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
    atexit.register(_at_exit)
    _registered_at_exit = True


def _at_exit() -> None:
  stop_tff_workers()
  _release_tff_context()


def _release_tff_context() -> None:
  """Frees TFF's default context now, while the interpreter is intact.

  TFF keeps its worker's handle in the default context and only lets go of it when that context
  is garbage collected. Left to the interpreter's final teardown, the handle's `__del__` runs
  after the `subprocess` module is gone and prints "Exception ignored ... 'NoneType' object has
  no attribute 'Popen'" at the end of every run. Installing a context that holds no worker
  frees it here instead; its `__del__` then reaps the worker `stop_tff_workers` stopped. A
  computation run after this (by an exit hook registered before `fedasr_tff` was imported)
  fails with a message saying why.
  """
  tff = sys.modules.get('tensorflow_federated')
  if tff is None:
    return

  class _ClosedContext(tff.framework.SyncContext):

    def invoke(self, comp, arg):
      raise RuntimeError('TFF computations cannot run after fedasr_tff stopped the TFF workers '
                         'at interpreter exit.')

  try:
    tff.framework.set_default_context(_ClosedContext())
  except Exception:  # pylint: disable=broad-except
    return  # Cosmetic only: the worker is stopped either way.
  gc.collect()


def install_termination_handlers() -> None:
  """Makes the process leave no TFF worker behind when it is terminated (idempotent).

  Binaries call this at the start of `main`, from the main thread (`signal.signal` requires it),
  before running any TFF computation:

  * SIGTERM and SIGHUP raise `SystemExit(128 + signum)` (exit status 143 and 129, the shell's
    convention for "terminated by that signal"), so `finally` blocks, context managers and the
    atexit hook that stops the workers all run. SystemExit rather than KeyboardInterrupt:
    KeyboardInterrupt would report the run as interrupted by the user (exit status -2/130,
    a traceback) and trigger code that treats Ctrl-C specially, while SystemExit is Python's
    "exit now" exception, which `except Exception` does not swallow either. Only the first such
    signal raises; later ones are ignored so that they cannot interrupt the clean-up (SIGKILL
    remains for a run that does not stop). A signal that is ignored (e.g. SIGHUP under `nohup`)
    or already has another Python handler keeps it.
  * SIGINT (Ctrl-C) keeps Python's KeyboardInterrupt: the interpreter shuts down normally, runs
    the atexit hook and then ends by SIGINT (`subprocess` return code -2, shell status 130).
  * On Linux, starts the watchdog described in the module docstring, which stops the workers
    left behind when the process is killed with SIGKILL.

  Python runs signal handlers in the main thread between bytecodes, so a run blocked in a long
  C++ call, or in a system call while the kernel handed the signal to another thread, exits
  when that call returns.
  """
  global _termination_handlers_installed
  if _termination_handlers_installed:
    return
  stop_tff_workers_at_exit()
  for sig in _TERMINATION_SIGNALS:
    if signal.getsignal(sig) == signal.SIG_DFL:
      signal.signal(sig, _exit_on_signal)
  _start_watchdog()
  _termination_handlers_installed = True


def _exit_on_signal(signum, frame) -> None:
  del frame  # unused
  global _exiting_on_signal
  if _exiting_on_signal is not None:
    return  # already exiting: let the clean-up finish
  _exiting_on_signal = signum
  try:
    # os.write, not print: the signal may have interrupted a write to sys.stderr.
    os.write(2, f'{signal.Signals(signum).name} received: stopping TFF workers and exiting '
             f'with status {128 + signum}.\n'.encode())
  except OSError:
    pass
  raise SystemExit(128 + signum)


# The watchdog's source: stdlib only, started with `python -I -S` so that it imports nothing else
# and does not depend on how this process found its modules (virtualenv, Bazel runfiles).
# argv: worker process name, the `NAME=token` environment entry, grace period in seconds.
_WATCHDOG_SOURCE = r"""
import os
import signal
import sys
import time

# It exits as soon as its parent is gone, so it never needs signalling; ignoring the job-control
# signals keeps a `kill` of the whole job from killing it before it has cleaned up.
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
  signal.signal(sig, signal.SIG_IGN)
worker_name, marker, grace = sys.argv[1].encode(), sys.argv[2].encode(), float(sys.argv[3])

# Blocks until the parent writes (a deliberate stop) or the pipe's write end is closed, which the
# kernel does when the parent exits, whatever ended it.
if sys.stdin.buffer.read():
  sys.exit(0)


def read(path):
  try:
    with open(path, 'rb') as f:
      return f.read()
  except OSError:
    return b''


def has_marker(pid):
  return marker in read(f'/proc/{pid}/environ').split(b'\0')


def orphaned_workers():
  # Live workers carrying the token whose parent does not carry it. The dead parent (or the
  # process that adopted the worker) does not: it set the token after it started, and
  # /proc/<pid>/environ shows a process's environment as it started. A worker whose parent does
  # carry it belongs to a descendant that is still running, so it is not an orphan.
  found = set()
  for entry in os.listdir('/proc'):
    if not entry.isdigit() or read(f'/proc/{entry}/comm').rstrip(b'\n') != worker_name:
      continue
    # /proc/<pid>/stat is "pid (comm) state ppid ...".
    fields = read(f'/proc/{entry}/stat').rpartition(b')')[2].split()
    if len(fields) < 2 or fields[0] in (b'Z', b'X') or not has_marker(entry):
      continue
    if not has_marker(int(fields[1])):
      found.add(int(entry))
  return found


def send(pids, sig):
  for pid in pids:
    try:
      os.kill(pid, sig)
    except OSError:
      pass


workers = orphaned_workers()
send(workers, signal.SIGINT)
deadline = time.monotonic() + grace
while workers and time.monotonic() < deadline:
  time.sleep(0.05)
  # Intersecting with a fresh scan also guards against a reused pid.
  workers &= orphaned_workers()
send(workers, signal.SIGKILL)
"""


def _start_watchdog(grace_seconds: float = 5.0) -> None:
  """Starts the orphaned-worker watchdog (see the module docstring) once, on Linux only."""
  global _watchdog
  if _watchdog is not None or not sys.platform.startswith('linux') or not sys.executable:
    return
  token = f'{os.getpid()}-{uuid.uuid4().hex}'
  try:
    _watchdog = subprocess.Popen(
        [sys.executable, '-I', '-S', '-c', _WATCHDOG_SOURCE, WORKER_PROCESS_NAME,
         f'{_OWNER_ENV}={token}', str(grace_seconds)],
        stdin=subprocess.PIPE,
        # Keeps none of this process's output pipes open, and is out of its process group, so
        # a Ctrl-C or `kill` of the job does not reach it.
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd='/',
        start_new_session=True)
  except OSError:
    return  # Without it only SIGKILL is not covered; not a reason to stop the run.
  os.environ[_OWNER_ENV] = token


def _stop_watchdog(timeout_seconds: float = 5.0) -> None:
  """Stops the watchdog without it touching any worker (for tests and before `os.exec*`)."""
  global _watchdog
  if _watchdog is None:
    return
  try:
    _watchdog.communicate(b'stop', timeout=timeout_seconds)
  except subprocess.TimeoutExpired:
    _watchdog.kill()
    _watchdog.wait()
  _watchdog = None
  os.environ.pop(_OWNER_ENV, None)
