"""Tests of the TFF execution context whose worker process dies with the process that set it.

In this process: computations run on the worker it starts, `max_concurrent_computation_calls`
reaches the worker (and is checked), setting the context again replaces the worker, and a worker
that is gone fails the next computation with its status and output. In child processes, as a
binary runs: no worker is left running, and nothing holds the child's output pipe open, however
the run ends.
"""

import asyncio
import gc
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import psutil
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2

from fedasr_tff.runtime import execution_context


@tff.tensorflow.computation(np.int32)
def _add_one(x):
  return x + 1


@tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
def _sum_at_clients(values):
  return tff.federated_sum(tff.federated_map(_add_one, values))


def _running(process: psutil.Process) -> bool:
  try:
    # is_running() also compares the start time, so a reused pid does not count. A killed worker
    # whose parent died stays a zombie where nothing reaps orphans (as in some containers).
    return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def _workers():
  return [p for p in psutil.Process().children(recursive=True)
          if _running(p) and p.name() == execution_context.WORKER_PROCESS_NAME]


def _wait_until_gone(processes, timeout_seconds):
  deadline = time.monotonic() + timeout_seconds
  while any(_running(p) for p in processes) and time.monotonic() < deadline:
    time.sleep(0.1)
  return not any(_running(p) for p in processes)


def _stdio(pid):
  return [os.readlink(f'/proc/{pid}/fd/{fd}') for fd in (0, 1, 2)]


class _RecordingStub(tff.framework.RemoteExecutorStub):
  """A worker's stub that records the calls it gets and hands out new value references."""

  def __init__(self):
    self.calls = []

  def _reference(self):
    return executor_pb2.ValueRef(id=str(len(self.calls)))

  def get_executor(self, request):
    self.calls.append('get_executor')
    return executor_pb2.GetExecutorResponse(executor=executor_pb2.ExecutorId(id='executor'))

  def create_value(self, request):
    self.calls.append('create_value')
    return executor_pb2.CreateValueResponse(value_ref=self._reference())

  def create_call(self, request):
    self.calls.append('create_call')
    return executor_pb2.CreateCallResponse(value_ref=self._reference())

  def create_struct(self, request):
    raise NotImplementedError

  def create_selection(self, request):
    raise NotImplementedError

  def compute(self, request):
    raise NotImplementedError

  def dispose(self, request):
    self.calls.append(f'dispose {len(request.value_ref)}')
    return executor_pb2.DisposeResponse()

  def dispose_executor(self, request):
    self.calls.append('dispose_executor')
    return executor_pb2.DisposeExecutorResponse()

  @property
  def is_ready(self):
    return True


class CachingRemoteExecutorTest(absltest.TestCase):

  def test_sends_each_computation_once_and_frees_them_with_the_executor(self):
    stub = _RecordingStub()
    executor = execution_context.CachingRemoteExecutor(stub, capacity=2, dispose_batch_size=1)
    executor.set_cardinalities({tff.CLIENTS: 3})

    def create(value, type_spec=None):
      return asyncio.run(executor.create_value(value, type_spec))

    first = create(_add_one)
    self.assertIs(create(_add_one), first)
    self.assertEqual(stub.calls, ['get_executor', 'create_value'])
    one = tff.TensorType(np.int32)
    self.assertIsNot(create(np.int32(1), one), create(np.int32(1), one))  # arguments: every time
    self.assertEqual(executor.computations_sent, 1)
    create(_sum_at_clients)
    create(_add_one)  # the most recently used again: `_sum_at_clients` goes first
    disposals = stub.calls.count('dispose 1')
    create(tff.tensorflow.computation(lambda: 1))
    gc.collect()
    self.assertEqual(stub.calls.count('dispose 1'), disposals + 1)  # `_sum_at_clients` freed
    self.assertIs(create(_add_one), first)
    self.assertEqual(executor.computations_sent, 3)
    self.assertEqual(stub.calls.count('create_value'), 5)
    del first
    # Closed at exit: one DisposeExecutor frees its values on the worker; the finalizers of the
    # values it kept dispose nothing more.
    before = len(stub.calls)
    execution_context.close_open_executors()
    gc.collect()
    self.assertEqual(stub.calls[before:], ['dispose_executor'])


class _FakeExecutor:

  def __init__(self, cardinalities):
    self.cardinalities = cardinalities
    self.closed = False

  def close(self):
    self.closed = True


class ExecutorPerCardinalitiesTest(absltest.TestCase):

  def test_keeps_one_executor_per_cardinalities_and_closes_the_least_recently_used(self):
    factory = execution_context.ExecutorPerCardinalities(_FakeExecutor, capacity=2)
    three, four = factory.create_executor({tff.CLIENTS: 3}), factory.create_executor(
        {tff.CLIENTS: 4})
    self.assertIs(factory.create_executor({tff.CLIENTS: 3}), three)  # now the most recent
    five = factory.create_executor({tff.CLIENTS: 5})
    self.assertTrue(four.closed)
    self.assertFalse(three.closed or five.closed)
    self.assertIsNot(factory.create_executor({tff.CLIENTS: 4}), four)
    factory.clean_up_executor({tff.CLIENTS: 5})
    self.assertTrue(five.closed)
    self.assertIsNot(factory.create_executor({tff.CLIENTS: 5}), five)


class SetLocalCppExecutionContextTest(parameterized.TestCase):

  def test_runs_computations_on_a_worker_holding_none_of_this_process_stdio(self):
    execution_context.set_local_cpp_execution_context()
    workers = _workers()
    self.assertLen(workers, 1)
    self.assertEqual(_add_one(2), 3)
    self.assertEqual(_sum_at_clients([1, 2, 3]), 9)
    # Called again, the computations already on the worker run on the new arguments.
    self.assertEqual(_sum_at_clients([4, 5, 6]), 18)
    self.assertEqual(_add_one(5), 6)
    self.assertEqual(workers[0].cmdline()[-1], '--max_concurrent_computation_calls=-1')
    self.assertEqual(_workers(), workers)  # and no other
    # stdin /dev/null; stdout and stderr an unlinked temporary file.
    stdin, stdout, stderr = _stdio(workers[0].pid)
    self.assertEqual(stdin, '/dev/null')
    self.assertEqual(stdout, stderr)
    self.assertTrue(stdout.endswith('(deleted)'), msg=stdout)

  def test_passes_max_concurrent_computation_calls_to_the_worker(self):
    execution_context.set_local_cpp_execution_context(max_concurrent_computation_calls=3)
    workers = _workers()
    self.assertLen(workers, 1)
    self.assertEqual(workers[0].cmdline()[-1], '--max_concurrent_computation_calls=3')
    self.assertEqual(_sum_at_clients(list(range(10))), 55)
    self.addCleanup(execution_context.set_local_cpp_execution_context)

  @parameterized.parameters(0, -1, 2.0, True, '2')
  def test_rejects_max_concurrent_computation_calls(self, value):
    execution_context.set_local_cpp_execution_context()
    workers = _workers()
    with self.assertRaisesRegex(ValueError, 'max_concurrent_computation_calls'):
      execution_context.set_local_cpp_execution_context(max_concurrent_computation_calls=value)
    self.assertEqual(_workers(), workers)  # left as it was
    self.assertEqual(_add_one(1), 2)

  def test_setting_it_again_stops_the_previous_worker(self):
    execution_context.set_local_cpp_execution_context()
    first = _workers()
    execution_context.set_local_cpp_execution_context()
    self.assertFalse(any(_running(p) for p in first))
    self.assertLen(_workers(), 1)
    self.assertNotEqual(_workers(), first)
    self.assertEqual(_add_one(4), 5)

  def test_a_worker_that_died_fails_the_next_computation_with_its_status(self):
    execution_context.set_local_cpp_execution_context()
    self.addCleanup(execution_context.set_local_cpp_execution_context)
    self.assertEqual(_sum_at_clients([1]), 2)  # an executor is cached; it then finds out
    self.assertFalse(execution_context.local_worker_died())
    (worker,) = _workers()
    worker.kill()
    self.assertTrue(_wait_until_gone([worker], 30))  # not reaped: that is the context's job
    # The bridge (this process's child) ends once its worker has.
    deadline = time.monotonic() + 30
    while not execution_context.local_worker_died() and time.monotonic() < deadline:
      time.sleep(0.05)
    self.assertTrue(execution_context.local_worker_died())
    with self.assertRaisesRegex(RuntimeError, f'{worker.pid} is not serving \\(exit status -9\\)'):
      _sum_at_clients([1])
    # Killed from outside, it wrote nothing: no colon promising its output.
    with self.assertRaises(execution_context.WorkerDiedError) as raised:
      _sum_at_clients([1])
    self.assertEqual((raised.exception.pid, raised.exception.returncode), (worker.pid, -9))
    self.assertEndsWith(str(raised.exception), '(exit status -9), and wrote nothing.')
    self.assertEqual(raised.exception.summary(),
                     f'TFF worker_binary {worker.pid} ended (exit status -9, SIGKILL)')

  def test_a_worker_that_does_not_start_is_reported_with_its_output(self):
    with tempfile.NamedTemporaryFile('w', suffix='.sh', delete=False) as script:
      script.write('#!/bin/sh\necho "no such flag: $1" >&2\nexit 3\n')
    self.addCleanup(os.remove, script.name)
    os.chmod(script.name, 0o755)
    self.addCleanup(execution_context.set_local_cpp_execution_context)
    with mock.patch.object(execution_context, 'WORKER_PATH', script.name):
      with self.assertRaisesRegex(RuntimeError, r'exit status 3\):\nno such flag: --port='):
        execution_context.set_local_cpp_execution_context()

  def test_a_worker_killed_while_it_starts_is_reported_as_died(self):
    # Killed from outside before it serves (the chaos benchmark's kills found this): the run
    # ends as when its worker dies in a round, with one line (experiments/common.py).
    with tempfile.NamedTemporaryFile('w', suffix='.sh', delete=False) as script:
      script.write('#!/bin/sh\nkill -KILL $$\n')
    self.addCleanup(os.remove, script.name)
    os.chmod(script.name, 0o755)
    self.addCleanup(execution_context.set_local_cpp_execution_context)
    with mock.patch.object(execution_context, 'WORKER_PATH', script.name), \
        self.assertRaises(execution_context.WorkerDiedError) as raised:
      execution_context.set_local_cpp_execution_context()
    self.assertEqual(raised.exception.returncode, -9)
    self.assertEndsWith(raised.exception.summary(), 'ended (exit status -9, SIGKILL)')

  def test_must_be_called_from_the_main_thread(self):
    raised = []

    def set_context():
      try:
        execution_context.set_local_cpp_execution_context()
      except RuntimeError as e:
        raised.append(e)

    thread = threading.Thread(target=set_context)
    thread.start()
    thread.join()
    self.assertLen(raised, 1)
    self.assertIn('main thread', str(raised[0]))


# A run of a binary: it sets the context argv[2] times, runs a computation, reports its processes,
# then waits for input on stdin (or a signal while it waits) and ends as argv[1] says.
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

    from fedasr_tff.runtime import execution_context

    for _ in range(int(sys.argv[2])):
      execution_context.set_local_cpp_execution_context()
      print('started', *[p.pid for p in psutil.Process().children(recursive=True)], flush=True)

    @tff.federated_computation
    def one():
      return 1

    print('result', one(), flush=True)
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
_STARTUP_TIMEOUT_SECONDS = 300
_EXIT_TIMEOUT_SECONDS = 60
_GONE_TIMEOUT_SECONDS = 30

# name -> (how the run ends, how often it sets the context, the signal the test sends (else it
# lets the child go on), whether to the child's whole process group as a terminal's Ctrl-C does,
# the expected returncode).
_CASES = {
    'normal_end': ('exit', 1, None, False, 0),
    'uncaught_exception': ('raise', 1, None, False, 1),
    'sigint': ('exit', 1, signal.SIGINT, False, -signal.SIGINT),
    'ctrl_c_to_the_process_group': ('exit', 1, signal.SIGINT, True, -signal.SIGINT),
    'sigterm': ('exit', 1, signal.SIGTERM, False, -signal.SIGTERM),
    'sighup_to_the_process_group': ('exit', 1, signal.SIGHUP, True, -signal.SIGHUP),
    'sigkill': ('exit', 1, signal.SIGKILL, False, -signal.SIGKILL),
    'sigkill_after_setting_it_twice': ('exit', 2, signal.SIGKILL, False, -signal.SIGKILL),
}


class _Child:
  """A process running `_CHILD_SCRIPT`, in its own process group, its output read by a thread."""

  def __init__(self, ends: str, times: int):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    self.process = subprocess.Popen(
        [sys.executable, '-c', _CHILD_SCRIPT, ends, str(times)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        start_new_session=True)
    self._lines = []
    # Set at the end of the output: once every process holding the pipe has exited.
    self.output_closed = threading.Event()
    self.reported = set()  # the pids of the processes the child started, once it said so
    self.descendants = []  # psutil.Process of those still there (running or zombie)
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in self.process.stdout:
      self._lines.append(line.decode(errors='replace'))
    self.output_closed.set()

  def output(self) -> str:
    return ''.join(self._lines)[-3000:]

  def wait_until_started(self) -> bool:
    """Records the processes the child reported; False if it ended or hung first."""
    deadline = time.monotonic() + _STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline and not self.output_closed.is_set():
      lines = list(self._lines)
      if any(line.startswith('descendants') for line in lines):
        self.reported = {int(pid) for line in lines if line.startswith(('started', 'descendants'))
                         for pid in line.split()[1:]}
        for pid in self.reported:
          try:
            # Looked up while the child waits: its own processes (or their zombies), not reused
            # pids; a worker of the first context, reaped when it was set again, is gone.
            self.descendants.append(psutil.Process(pid))
          except psutil.NoSuchProcess:
            pass
        return True
      time.sleep(0.1)
    return False

  def kill_everything(self):
    if self.process.poll() is None:
      try:
        self.descendants += psutil.Process(self.process.pid).children(recursive=True)
      except psutil.NoSuchProcess:
        pass
      self.process.kill()
      self.process.wait()
    for process in self.descendants:
      if _running(process):
        process.kill()
    self.process.stdin.close()
    self.process.stdout.close()


class RunEndTest(parameterized.TestCase):
  """A run leaves no worker behind, nor its output pipe open, however it ends."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.children = {name: _Child(ends, times) for name, (ends, times, *_) in _CASES.items()}

  @classmethod
  def tearDownClass(cls):
    for child in cls.children.values():
      child.kill_everything()
    super().tearDownClass()

  @parameterized.named_parameters((name, name) for name in _CASES)
  def test_leaves_nothing_running(self, name):
    _, times, sig, to_group, returncode = _CASES[name]
    child = self.children[name]
    self.assertTrue(child.wait_until_started(), msg=child.output())
    self.assertIn('result 1', child.output())
    # A worker per context set, and with isolation the bridge of its network namespace.
    per_context = 1 + (execution_context.network_namespace_prefix() is not None)
    self.assertLen(child.reported, per_context * times, msg=child.output())
    # One running: setting the context again killed and reaped the first worker (and bridge).
    workers = [p for p in child.descendants if _running(p)]
    self.assertLen(workers, per_context, msg=child.output())
    self.assertEqual(
        sum(p.name() == execution_context.WORKER_PROCESS_NAME for p in workers), 1)
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
    if sig in (None, signal.SIGINT):
      # Python shut down normally: its exit hook has killed and reaped the worker.
      self.assertFalse(any(_running(p) for p in workers), msg=child.output())
      self.assertNotIn('Exception ignored', child.output())
    # Otherwise the kernel kills the worker as its parent dies (PR_SET_PDEATHSIG).
    self.assertTrue(_wait_until_gone(workers, _GONE_TIMEOUT_SECONDS), msg=child.output())
    # Nothing holds the child's output pipe open any more: `prog | cat` ends.
    self.assertTrue(child.output_closed.wait(_GONE_TIMEOUT_SECONDS), msg=child.output())


if __name__ == '__main__':
  absltest.main()
