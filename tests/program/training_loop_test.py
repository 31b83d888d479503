"""The round loop every task runs on (`fedasr_tff.program.training_loop`), with a toy task."""

import csv
import errno
import glob
import inspect
import json
import os
import stat
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.program import cohorts
from fedasr_tff.program import training_loop

_NO_SPACE = os.strerror(errno.ENOSPC)


class _Killed(Exception):
  pass


class _CountingTask(training_loop.Task):
  """A task whose state is a vector moved by noise drawn from its secret, the round and the
  client, as a DP task's rounds are: a replayed round is bit-identical only if the secret is
  restored from the checkpoint."""

  def __init__(self, rounds=5, eval_every=2, checkpoint_every=2, kill_at=None, seed=None):
    self.rounds, self.eval_every, self.checkpoint_every = rounds, eval_every, checkpoint_every
    self.kill_at = kill_at
    self.secret = cohorts.new_run_secret() if seed is None else seed
    self.weights = np.zeros(3, np.float32)
    self.trained = []

  def program_state(self):
    return (self.weights, cohorts.secret_to_words(self.secret))

  def restore(self, saved):
    self.weights = np.asarray(saved[0]).copy()
    self.secret = cohorts.secret_from_words(saved[1])

  def run_round(self, round_num):
    if round_num == self.kill_at:
      raise _Killed()
    self.trained.append(round_num)
    rng = np.random.default_rng(cohorts.client_seed(self.secret, round_num, 'client'))
    before = tff.learning.models.ModelWeights([self.weights], [])
    self.weights = self.weights + rng.normal(size=3).astype(np.float32)
    after = tff.learning.models.ModelWeights([self.weights], [])
    return {'server': {'update_norm': training_loop.update_norm(before, after)}}

  def evaluate(self, round_num, values):
    score = float(np.sum(self.weights))
    return {'eval': {'score': score}}, f'round {round_num}: {score:.6f} {sorted(values)}'

  def final_weights(self):
    return (['w'], []), tff.learning.models.ModelWeights([self.weights], [])

  def summary(self):
    return {'rounds': self.rounds, 'score': float(np.sum(self.weights))}


def _quiet(line):
  del line  # The log lines are another test's.


def _full_disk_at(real, call, error):
  """`real`, but its `call`-th call (from 1) fails with `error`, as a full disk fails a write."""
  calls = []

  def fail_or_call(*args, **kwargs):
    calls.append(None)
    if len(calls) == call:
      raise error
    return real(*args, **kwargs)

  async def fail_or_await(*args, **kwargs):
    return await fail_or_call(*args, **kwargs)
  return fail_or_await if inspect.iscoroutinefunction(real) else fail_or_call


def _released_rounds(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    return [int(row['key']) for row in csv.DictReader(f)]


class TrainingLoopTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.enterContext(tempfile.TemporaryDirectory())

  def _train(self, name, task):
    lines = []
    output_dir = os.path.join(self.root, name)
    training_loop.train(task, output_dir, show_progress=False, log=lines.append)
    return output_dir, lines

  def test_a_killed_run_resumes_bit_identically_and_releases_each_round_once(self):
    whole, whole_lines = self._train('whole', _CountingTask(seed=7))
    killed = _CountingTask(kill_at=4, seed=7)
    with self.assertRaises(_Killed):
      self._train('killed', killed)
    output_dir = os.path.join(self.root, 'killed')
    # Round 3 was computed but no checkpoint covers it: it is not released.
    self.assertEqual(killed.trained, [1, 2, 3])
    self.assertEqual(_released_rounds(output_dir), [0, 1, 2])
    resumed = _CountingTask()   # Another secret: the checkpoint's must win.
    _, lines = self._train('killed', resumed)
    self.assertEqual(resumed.trained, [3, 4, 5])
    self.assertEqual(_released_rounds(output_dir), [0, 1, 2, 3, 4, 5])
    self.assertEqual(_released_rounds(whole), [0, 1, 2, 3, 4, 5])
    with np.load(os.path.join(whole, 'model.npz')) as a, \
        np.load(os.path.join(output_dir, 'model.npz')) as b:
      self.assertEqual(a.files, ['w'])
      np.testing.assert_array_equal(a['w'], b['w'])
    self.assertIn('Resuming from the checkpoint of round 2', lines[0])
    self.assertEqual(lines[1:], [line for line in whole_lines
                                 if line.startswith(('round 4', 'round 5'))])

  def test_a_sink_of_ones_own_receives_each_round_once_without_touching_the_loop(self):

    class Recorder(tff.program.ReleaseManager):
      """A user's own sink: it records what it is given."""

      def __init__(self):
        self.released = []

      async def release(self, value, key):
        self.released.append((key, value['eval']['score'] if 'eval' in value else None))

    output_dir = os.path.join(self.root, 'own_sink')
    first, second = Recorder(), Recorder()
    killed = _CountingTask(kill_at=4, seed=7)
    with self.assertRaises(_Killed):
      training_loop.train(killed, output_dir, training_loop.standard_outputs(
          output_dir, killed.rounds, show_progress=False).with_release_manager(first), log=_quiet)
    resumed = _CountingTask(seed=7)
    training_loop.train(resumed, output_dir, training_loop.standard_outputs(
        output_dir, resumed.rounds, show_progress=False).with_release_manager(second), log=_quiet)
    # Held like the standard sinks' releases: rounds covered by a checkpoint, each once.
    self.assertEqual([key for key, _ in first.released], [0, 1, 2])
    self.assertEqual([key for key, _ in second.released], [3, 4, 5])
    self.assertEqual([key for key, _ in first.released + second.released],
                     _released_rounds(output_dir))
    self.assertEqual([w is not None for _, w in first.released + second.released],
                     [True, False, True, False, True, True])
    # Only the user's sink, without the standard ones: nothing but the checkpoints is written.
    alone, sink = os.path.join(self.root, 'alone'), Recorder()
    task = _CountingTask(rounds=2, seed=7)
    training_loop.train(task, alone, training_loop.RunOutputs(
        training_loop.checkpoint_manager(os.path.join(alone, 'checkpoints')), (sink,)),
                        log=_quiet)
    self.assertEqual([key for key, _ in sink.released], [0, 1, 2])
    self.assertCountEqual(os.listdir(alone), ['checkpoints', 'model.npz', 'summary.json'])

  def test_evaluations_and_checkpoints_follow_the_cadence(self):
    output_dir, lines = self._train('cadence', _CountingTask(rounds=5))
    self.assertEqual([line.split(':')[0] for line in lines],
                     ['round 0', 'round 2', 'round 4', 'round 5'])
    # The evaluation line sees the round's own values.
    self.assertIn("['server']", lines[1])
    versions = sorted(int(name.rsplit('_', 1)[1])
                      for name in os.listdir(os.path.join(output_dir, 'checkpoints'))
                      if name.startswith('program_state_'))
    self.assertEqual(versions, [0, 4, 5])   # The first and the two latest are kept.

  def test_the_secret_stays_in_owner_only_checkpoints(self):
    secret = 2**61 + 12345
    output_dir, _ = self._train('private', _CountingTask(seed=secret))
    for directory, _, files in os.walk(output_dir):
      inside = directory.startswith(os.path.join(output_dir, 'checkpoints'))
      if inside:
        self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700, directory)
      for name in files:
        path = os.path.join(directory, name)
        if inside:
          self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)
        elif name.endswith(('.json', '.csv')):
          with open(path) as f:
            text = f.read()
          self.assertNotIn(str(secret), text, path)
    summary = os.path.join(output_dir, 'summary.json')
    self.assertEqual(stat.S_IMODE(os.stat(summary).st_mode), 0o600)
    with open(summary) as f:
      self.assertEqual(json.load(f)['rounds'], 5)

  def test_a_finished_run_started_again_trains_nothing(self):
    output_dir, _ = self._train('finished', _CountingTask(rounds=2))
    again = _CountingTask(rounds=2)
    self._train('finished', again)
    self.assertEqual(again.trained, [])
    self.assertEqual(_released_rounds(output_dir), [0, 1, 2])

  def test_a_full_disk_names_the_file_keeps_the_checkpoint_and_resumes(self):
    whole, _ = self._train('whole', _CountingTask(seed=7))
    # A full disk fails write(), flush() or fsync() (errors that name no file), or TF's writes
    # (metrics.csv, TensorBoard) with a tf.errors whose message says why. Each write of the
    # loop fails in turn, after round 0's checkpoint (rounds 0, 2, 4, 5 are checkpointed).
    os_error = OSError(errno.ENOSPC, _NO_SPACE)
    tf_error = tf.errors.ResourceExhaustedError(None, None, f'/x/y_temp1234; {_NO_SPACE}')
    cases = [
        ('journal', json, 'dump', 2, os_error, 'checkpoints/held_releases.json'),
        ('checkpoint', np, 'savez', 2, os_error, 'checkpoints/program_state_2/state.npz'),
        ('metrics', tff.program.CSVFileReleaseManager, 'release', 2, tf_error, 'metrics.csv'),
        # TFF rewrites metrics.csv through a temporary copy when a row brings new columns.
        ('metrics rewritten', tf.io.gfile, 'rename', 2, tf_error, 'metrics.csv'),
        ('events', tff.program.TensorBoardReleaseManager, 'release', 2, tf_error,
         'tensorboard'),
        ('model', np, 'savez', 5, os_error, 'model.npz'),
        ('summary', json, 'dump', 5, os_error, 'summary.json'),
    ]
    for name, owner, attribute, call, error, path in cases:
      with self.subTest(name):
        output_dir = os.path.join(self.root, name)
        with mock.patch.object(owner, attribute,
                               _full_disk_at(getattr(owner, attribute), call, error)), \
            self.assertRaises(OSError) as raised:
          self._train(name, _CountingTask(seed=7))
        self.assertEqual(raised.exception.errno, errno.ENOSPC)
        self.assertEqual(raised.exception.filename, os.path.join(output_dir, path))
        # No partial file is left, and the latest checkpoint reads.
        self.assertEmpty([f for f in glob.glob(os.path.join(output_dir, '**'), recursive=True)
                          if f.endswith(('.tmp', '.partial', '.partial.npz'))
                          or '_temp' in f])
        training_loop.check_checkpoints(output_dir)
        # Space is back: the same run resumes, ends where the whole run ended and releases
        # every round once.
        self._train(name, _CountingTask())
        self.assertEqual(_released_rounds(output_dir), [0, 1, 2, 3, 4, 5])
        with np.load(os.path.join(whole, 'model.npz')) as a, \
            np.load(os.path.join(output_dir, 'model.npz')) as b:
          np.testing.assert_array_equal(a['w'], b['w'])

  def test_a_metrics_row_torn_by_a_full_disk_is_dropped_on_resume(self):
    rounds = 12
    whole, _ = self._train('whole', _CountingTask(rounds=rounds, seed=7))
    output_dir = os.path.join(self.root, 'torn')

    # Round 12's row is cut by a full disk after its first byte ('1' of '12'); the run stops.
    def torn_release(manager, value, key):
      if key == rounds:
        with open(os.path.join(output_dir, 'metrics.csv'), 'a') as f:
          f.write(str(key)[0])
        raise tf.errors.ResourceExhaustedError(None, None, f'metrics.csv; {_NO_SPACE}')
      return release(manager, value, key)
    release = tff.program.CSVFileReleaseManager.release
    with mock.patch.object(tff.program.CSVFileReleaseManager, 'release', torn_release), \
        self.assertRaises(OSError):
      self._train('torn', _CountingTask(rounds=rounds, seed=7))
    self._train('torn', _CountingTask(rounds=rounds))
    self.assertEqual(_released_rounds(output_dir), list(range(rounds + 1)))
    with open(os.path.join(whole, 'metrics.csv')) as a, \
        open(os.path.join(output_dir, 'metrics.csv')) as b:
      self.assertEqual(a.read(), b.read())


if __name__ == '__main__':
  absltest.main()
