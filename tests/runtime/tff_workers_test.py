import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import psutil
import tensorflow_federated as tff

from fedasr_tff.runtime import tff_workers


def _run_tff_computation():
  # Any computation goes through TFF's default (local C++) context, which starts a worker.
  @tff.federated_computation
  def one():
    return 1

  return one()


# A run of a binary. It reports its processes, then waits for input on stdin (or a signal while
# it waits) and ends as argv[1] says: 'exit' or 'raise'. argv[2] is whether it calls
# install_termination_handlers (if not, importing fedasr_tff is all it does).
_CHILD_SCRIPT = textwrap.dedent("""
    import faulthandler
    import select
    import signal
    import sys

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's stack dump on a hang
    # Start as a run from an interactive shell does, whatever the test runner ignores.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

    import psutil
    import tensorflow_federated as tff

    import fedasr_tff
    from fedasr_tff.runtime import tff_workers

    if sys.argv[2] == 'install':
      tff_workers.install_termination_handlers()

    @tff.federated_computation
    def one():
      return 1

    print('result', one(), flush=True)
    print('workers', *[w.pid for w in tff_workers._own_workers()], flush=True)
    print('descendants', *[p.pid for p in psutil.Process().children(recursive=True)], flush=True)
    # Wait for the test's go-ahead or signal. Poll: a signal the kernel hands to another
    # (TensorFlow) thread does not interrupt a blocking read in the main thread, and Python only
    # runs the handler once the main thread runs Python code again.
    while not select.select([sys.stdin], [], [], 0.1)[0]:
      pass
    if sys.argv[1] == 'raise':
      raise RuntimeError('failing on purpose')
""")

# Each child starts TensorFlow and TFF (~10 s of CPU); setUpClass starts them all at once.
_STARTUP_TIMEOUT_SECONDS = 240
_EXIT_TIMEOUT_SECONDS = 60
# The watchdog gives an orphaned worker 5 s to handle SIGINT before it sends SIGKILL.
_GONE_TIMEOUT_SECONDS = 30

# name -> (how the run ends, whether it installs the handlers, the signal the test sends (else it
# lets the child go on), whether to the child's whole process group as a terminal's Ctrl-C does,
# the expected returncode).
_CASES = {
    'normal_end_importing_fedasr_tff_only': ('exit', False, None, False, 0),
    'normal_end': ('exit', True, None, False, 0),
    'uncaught_exception': ('raise', True, None, False, 1),
    'sigint': ('exit', True, signal.SIGINT, False, -signal.SIGINT),
    'ctrl_c_to_the_process_group': ('exit', True, signal.SIGINT, True, -signal.SIGINT),
    'sigterm': ('exit', True, signal.SIGTERM, False, 128 + signal.SIGTERM),
    'sigkill': ('exit', True, signal.SIGKILL, False, -signal.SIGKILL),
}


def _running(process: psutil.Process) -> bool:
  try:
    # is_running() also compares the start time, so a reused pid does not count.
    return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


class _Child:
  """A process running `_CHILD_SCRIPT`, in its own process group, its output read by a thread."""

  def __init__(self, ends: str, install: bool):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    self.process = subprocess.Popen(
        [sys.executable, '-c', _CHILD_SCRIPT, ends, 'install' if install else 'no'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        start_new_session=True)
    self._lines = []
    # Set at the end of the output: once every process holding the pipe (child, worker) exited.
    self.output_closed = threading.Event()
    self.descendants = []  # psutil.Process of each process the child started, once it said so
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in self.process.stdout:
      self._lines.append(line.decode(errors='replace'))
    self.output_closed.set()

  def output(self) -> str:
    return ''.join(self._lines)[-3000:]

  def wait_until_started(self):
    """Returns the worker pids the child printed, once it waits; None if it ended or hung."""
    deadline = time.monotonic() + _STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline and not self.output_closed.is_set():
      printed = {line.split()[0]: [int(pid) for pid in line.split()[1:]]
                 for line in list(self._lines) if line.startswith(('workers', 'descendants'))}
      if 'descendants' in printed:
        for pid in printed['descendants']:
          try:
            # While the child waits, so these are the processes it started, not reused pids.
            self.descendants.append(psutil.Process(pid))
          except psutil.NoSuchProcess:
            pass  # the test then finds one missing
        return printed['workers']
      time.sleep(0.1)
    return None

  def kill_everything(self):
    if self.process.poll() is None:
      os.killpg(self.process.pid, signal.SIGKILL)  # its group: it and its workers
      self.process.wait()
    for process in self.descendants:
      if _running(process):
        process.kill()
    self.process.stdin.close()
    self.process.stdout.close()


class TffWorkersTest(absltest.TestCase):

  def test_stops_the_worker_this_process_started(self):
    self.assertEqual(_run_tff_computation(), 1)
    workers = tff_workers._own_workers()
    self.assertNotEmpty(workers)
    pids = [w.pid for w in workers]
    self.assertEqual(tff_workers.stop_tff_workers(), len(workers))
    for pid in pids:
      self.assertFalse(psutil.pid_exists(pid) and
                       psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    # TFF starts a fresh worker when asked again.
    self.assertEqual(_run_tff_computation(), 1)
    self.assertEqual(tff_workers.stop_tff_workers(), 1)


  def test_exit_releases_tffs_worker_handle_before_interpreter_teardown(self):
    # Building a TFF model leaves TFF's worker handle to be collected at interpreter teardown,
    # where its __del__ fails ("Exception ignored ... no attribute 'Popen'") unless the exit
    # hook released it first.
    script = textwrap.dedent("""
        from fedasr_tff import data, models
        models.build_tff_model_fn('tiny', data.Vocabulary('en').tokens)()
        print('built')
        """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               TF_CPP_MIN_LOG_LEVEL='2')
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            env=env, timeout=_STARTUP_TIMEOUT_SECONDS, check=False)
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    self.assertIn('built', result.stdout)
    self.assertNotIn('Exception ignored', result.stderr)


class InstallTerminationHandlersTest(absltest.TestCase):
  """The handlers in this process; the children below check whole runs."""

  def setUp(self):
    super().setUp()
    for sig in (signal.SIGTERM, signal.SIGHUP):
      self.addCleanup(signal.signal, sig, signal.getsignal(sig))
    self.enter_context(mock.patch.object(tff_workers, '_termination_handlers_installed', False))
    self.enter_context(mock.patch.object(tff_workers, '_exiting_on_signal', None))
    # No watchdog for the test runner's process; the children test it.
    self.start_watchdog = self.enter_context(mock.patch.object(tff_workers, '_start_watchdog'))

  def test_sigterm_and_sighup_exit_with_128_plus_the_signal_number_once(self):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    tff_workers.install_termination_handlers()
    handler = signal.getsignal(signal.SIGTERM)
    self.assertIs(signal.getsignal(signal.SIGHUP), handler)
    tff_workers.install_termination_handlers()
    self.assertIs(signal.getsignal(signal.SIGTERM), handler)
    self.start_watchdog.assert_called_once()

    with self.assertRaises(SystemExit) as raised:
      signal.raise_signal(signal.SIGHUP)
    self.assertEqual(raised.exception.code, 129)
    # Already exiting: a second signal must not interrupt the clean-up.
    signal.raise_signal(signal.SIGTERM)

    tff_workers._exiting_on_signal = None
    with self.assertRaises(SystemExit) as raised:
      signal.raise_signal(signal.SIGTERM)
    self.assertEqual(raised.exception.code, 143)

  def test_keeps_ignored_signals_and_other_handlers(self):
    def own_handler(signum, frame):
      del signum, frame  # unused

    signal.signal(signal.SIGTERM, own_handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    tff_workers.install_termination_handlers()
    self.assertIs(signal.getsignal(signal.SIGTERM), own_handler)
    self.assertEqual(signal.getsignal(signal.SIGHUP), signal.SIG_IGN)


class RunEndTest(parameterized.TestCase):
  """A run leaves no worker (nor watchdog) behind, however it ends."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.children = {name: _Child(ends, install) for name, (ends, install, *_) in _CASES.items()}

  @classmethod
  def tearDownClass(cls):
    for child in cls.children.values():
      child.kill_everything()
    super().tearDownClass()

  @parameterized.named_parameters((name, name) for name in _CASES)
  def test_leaves_nothing_running(self, name):
    _, install, sig, to_group, returncode = _CASES[name]
    child = self.children[name]
    workers = child.wait_until_started()
    self.assertTrue(workers, msg=child.output())  # the computation started a worker
    self.assertContainsSubset(workers, [p.pid for p in child.descendants])
    if install:
      self.assertLen(child.descendants, len(workers) + 1)  # and the watchdog
    if sig is None:
      child.process.stdin.write(b'go on\n')
      child.process.stdin.flush()
    elif to_group:
      os.killpg(child.process.pid, sig)
    else:
      child.process.send_signal(sig)
    try:
      child.process.wait(timeout=_EXIT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
      child.process.send_signal(signal.SIGUSR1)
      time.sleep(2)
      self.fail(f'the child did not exit; its threads:\n{child.output()}')
    self.assertEqual(child.process.returncode, returncode, msg=child.output())
    if sig != signal.SIGKILL:
      # Its atexit hook stops the workers, and waits for them, before the child exits (so does
      # the watchdog, woken when the child's shutdown closes its pipe). After a SIGKILL only the
      # watchdog can, a little later.
      left = [p.pid for p in child.descendants if p.pid in workers and _running(p)]
      self.assertEmpty(left, msg=f'left running when the child exited:\n{child.output()}')

    deadline = time.monotonic() + _GONE_TIMEOUT_SECONDS
    while any(_running(p) for p in child.descendants) and time.monotonic() < deadline:
      time.sleep(0.1)
    left = [p.pid for p in child.descendants if _running(p)]
    self.assertEmpty(left, msg=f'left running (workers: {workers}):\n{child.output()}')
    # Nothing holds the child's output pipe open any more.
    self.assertTrue(child.output_closed.wait(_GONE_TIMEOUT_SECONDS), msg=child.output())


if __name__ == '__main__':
  absltest.main()
