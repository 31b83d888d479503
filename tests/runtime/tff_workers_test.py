import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
import psutil
import tensorflow_federated as tff

from fedasr_tff.runtime import tff_workers


def _run_tff_computation():
  # Any computation goes through TFF's default (local C++) context, which starts a worker.
  @tff.federated_computation
  def one():
    return 1

  return one()


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

  def test_a_process_importing_fedasr_tff_leaves_no_worker_behind(self):
    script = textwrap.dedent("""
        import fedasr_tff
        import tensorflow_federated as tff

        @tff.federated_computation
        def one():
          return 1

        print('result', one(), flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    # If the worker survived its parent it would hold the pipe open and communicate() would hang.
    proc = subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
      out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
      for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
      proc.kill()
      self.fail('the child process (or a worker it left behind) kept the output pipe open')
    self.assertEqual(proc.returncode, 0, msg=err.decode()[-2000:])
    self.assertIn(b'result 1', out)


if __name__ == '__main__':
  absltest.main()
