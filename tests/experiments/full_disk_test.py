"""A run whose disk fills up, end to end: `experiments.train_federated` stops with one line naming
the file it could not write, its latest checkpoint still reads, and once space is back the same
command resumes to the model of a run the disk never stopped, every round released once.

The disk is a tmpfs in a mount namespace of the test's own (`unshare --mount`, in a user
namespace of its own too when not root), filled by the test once the run has saved round 1.
Where no such namespace can be made, the run's checkpoint of round 2 fails with ENOSPC injected
into the binary's process instead.
"""

import errno
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import numpy as np

from fedasr_tff.program import training_loop
from fedasr_tff.speech.data import synthetic

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_NO_SPACE = os.strerror(errno.ENOSPC)
# The binary with its checkpoint of round 2 failing as on a full disk (write() fails, naming no
# file), for machines where the test cannot mount a small disk of its own.
_INJECTED = f'''
import errno, os, runpy, sys
import numpy as np
savez = np.savez
def full_disk(file, *args, **kwargs):
  if 'program_state_2_temp' in getattr(file, 'name', ''):
    raise OSError(errno.ENOSPC, {_NO_SPACE!r})
  return savez(file, *args, **kwargs)
np.savez = full_disk
sys.argv[0] = 'train_federated.py'
runpy.run_module('experiments.train_federated', run_name='__main__')
'''


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
              PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))


class _SmallDisk:
  """A 64 MB tmpfs at `mountpoint` that only the processes of `command` see: a mount namespace
  held open by a sleeping process, entered with nsenter; the test reads it through
  /proc/PID/root."""

  def __init__(self, mountpoint: str):
    self._user = [] if os.geteuid() == 0 else ['--user', '--map-root-user']
    self._holder = subprocess.Popen(
        ['unshare', *self._user, '--mount', '--propagation', 'private', 'sh', '-c',
         'mount -t tmpfs -o size=64m tmpfs "$0" && echo mounted && exec sleep 3600', mountpoint],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if self._holder.stdout.readline().strip() != 'mounted':
      self._holder.wait()
      raise OSError(f'no tmpfs of our own: {self._holder.stderr.read().strip()}')

  def command(self, *args):
    enter = ['-U', '--preserve-credentials'] if self._user else []
    return ['nsenter', '-t', str(self._holder.pid), '-m', *enter, f'--wd={_ROOT}', '--', *args]

  def path(self, path: str) -> str:
    return f'/proc/{self._holder.pid}/root{path}'

  def close(self):
    self._holder.kill()
    self._holder.wait()


class FullDiskTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    synthetic.make_corpus(cls.tmp, num_speakers=5, mean_utterances=2, skew=0.0, seed=0,
                          words_per_utterance=(1, 2))

  def _flags(self, output_dir):
    return [f'--corpus_dir={os.path.join(self.tmp, "librispeech")}', '--speakers=all',
            f'--output_dir={output_dir}', f'--feature_cache_dir={self.tmp}/cache',
            '--model_config=tiny', '--cohort_size=2', '--rounds=3', '--local_steps=1',
            '--checkpoint_every=1', '--eval_every=2', '--sigma_dp=0.01', '--clip=1.0',
            '--server_lr=0.01', '--noise_seed=3', '--seed=1', '--noprogress']

  def _run(self, command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=_ROOT,
                          timeout=600, check=False, **kwargs)

  def test_a_full_disk_stops_the_run_with_one_line_and_it_resumes_once_space_is_back(self):
    reference = os.path.join(self.tmp, 'reference')
    result = self._run([sys.executable, '-m', 'experiments.train_federated',
                        *self._flags(reference)])
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])

    mountpoint = tempfile.mkdtemp()
    output_dir = os.path.join(mountpoint, 'run')
    command = [sys.executable, '-m', 'experiments.train_federated', *self._flags(output_dir)]
    try:
      disk = _SmallDisk(mountpoint)
    except OSError as e:
      print(f'{e}; the checkpoint of round 2 fails by an injected ENOSPC instead.')
      disk = None
    if disk is None:
      seen = lambda path: path  # noqa: E731
      stopped = self._run([sys.executable, '-c', _INJECTED, *self._flags(output_dir)])
    else:
      self.addCleanup(disk.close)
      seen = disk.path
      stopped = self._fill_after_round_one(disk, command, output_dir)

    # One line, naming the file under the output folder, and no traceback.
    self.assertNotEqual(stopped.returncode, 0)
    self.assertNotIn('Traceback', stopped.stderr)
    lines = [line for line in stopped.stderr.splitlines() if _NO_SPACE in line]
    self.assertLen(lines, 1, msg=stopped.stderr[-3000:])
    self.assertRegex(lines[0], rf'^train_federated: {_NO_SPACE} writing {output_dir}/\S+; '
                     'free space and rerun the same command to resume from the latest '
                     r'checkpoint\.$')
    self.assertFalse(os.path.exists(seen(os.path.join(output_dir, 'model.npz'))))
    # The latest checkpoint reads, and no partial file is left.
    training_loop.check_checkpoints(seen(output_dir))
    self.assertEmpty([path for path in glob.glob(seen(output_dir) + '/**', recursive=True)
                      if path.endswith(('.tmp', '.partial')) or '_temp' in path])

    # Space is back: the same command resumes, to the reference's model.
    if disk is not None:
      os.remove(disk.path(os.path.join(mountpoint, 'filler')))
    resumed = self._run(command if disk is None else disk.command(*command))
    self.assertEqual(resumed.returncode, 0, msg=resumed.stderr[-3000:])
    self.assertIn('Resuming from the checkpoint of round', resumed.stdout)
    with np.load(os.path.join(reference, 'model.npz')) as want, \
        np.load(seen(os.path.join(output_dir, 'model.npz'))) as got:
      self.assertEqual(want.files, got.files)
      for name in want.files:
        np.testing.assert_array_equal(want[name], got[name], err_msg=name)
    with open(seen(os.path.join(output_dir, 'metrics.csv'))) as f:
      self.assertEqual([line.split(',')[0] for line in f.read().splitlines()[1:]],
                       ['0', '1', '2', '3'])

  def _fill_after_round_one(self, disk, command, output_dir):
    """Runs `command` on `disk`, filling the disk once round 1 is saved; returns how it ended."""
    process = subprocess.Popen(disk.command(*command), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_env())
    checkpoint = disk.path(os.path.join(output_dir, 'checkpoints', 'program_state_1'))
    deadline = time.monotonic() + 600
    while not os.path.isdir(checkpoint) and process.poll() is None:
      self.assertLess(time.monotonic(), deadline, 'no checkpoint of round 1 appeared')
      time.sleep(0.01)
    self.assertIsNone(process.poll(), 'the run ended before the disk could be filled')
    # Stopped while another program fills the disk (nsenter runs the binary as its process).
    process.send_signal(signal.SIGSTOP)
    with open(disk.path(os.path.join(os.path.dirname(output_dir), 'filler')), 'wb',
              buffering=0) as f, self.assertRaises(OSError) as full:
      while True:
        f.write(b'\0' * 2**16)
    self.assertEqual(full.exception.errno, errno.ENOSPC)
    process.send_signal(signal.SIGCONT)
    out, err = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


if __name__ == '__main__':
  absltest.main()
