"""The training binaries over TFF workers on Unix sockets (`--workers`), as users run them:
the speech trainer (its workers building each client's batches from a client store) and the
retriever end with the same final model and released metrics as their local runs; a worker
killed mid-run stops the speech run with an error naming it, and the run resumes from its
checkpoint once the worker is back. Flags that do not apply to workers are refused in the census
of bad inputs (`bad_inputs_test.py`)."""

import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import numpy as np

from benchmarks import chaos
from fedasr_tff.program import model_io
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic
from tests.runtime import workers as workers_lib


def _command(binary, *args):
  return [sys.executable, '-m', f'experiments.{binary}', *args]


def _run(binary, *args, timeout=600):
  return subprocess.run(_command(binary, *args), capture_output=True, text=True,
                        env=workers_lib.subprocess_env(), cwd=workers_lib.ROOT, timeout=timeout,
                        check=False)


def _metrics_keys(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    return [line.split(',')[0] for line in f.read().splitlines()[1:]]


def _metrics(output_dir):
  """{(round, column): value} of metrics.csv, without the timings."""
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  return {(row['key'], column): float(value) for row in rows for column, value in row.items()
          if column != 'key' and not column.startswith('time/') and
          not column.endswith('round_seconds') and value != ''}


class DistributedTrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    synthetic.make_corpus(cls.tmp, num_speakers=5, mean_utterances=2, skew=0.0, seed=0,
                          words_per_utterance=(1, 2))
    cls.workers = workers_lib.Workers(2)

  @classmethod
  def tearDownClass(cls):
    cls.workers.stop()
    super().tearDownClass()

  def _flags(self, output_dir, *extra):
    # The adaptive per-layer clip: its state must survive the merge and the resume.
    return [f'--corpus_dir={os.path.join(self.tmp, "librispeech")}', '--speakers=all',
            f'--output_dir={output_dir}', f'--feature_cache_dir={os.path.join(self.tmp, "c")}',
            '--model_config=tiny', '--cohort_size=3', '--rounds=3', '--local_steps=2',
            '--checkpoint_every=1', '--eval_every=2', '--sigma_dp=0.01', '--clip=1.0',
            '--adaptive_clipping', '--server_lr=0.01', '--noise_seed=3', '--seed=1',
            '--spec_augment', '--noprogress', *extra]

  def _killed_after_round_1(self, binary, flags, output_dir):
    """Runs `binary` with `flags` (which name `output_dir` and a 3 s worker timeout), kills
    worker 1 once round 1's checkpoint exists, and checks that the next round failed naming it
    and that the run released no model. Returns the rounds whose metrics were released."""
    proc = subprocess.Popen(_command(binary, *flags), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=workers_lib.subprocess_env(),
                            cwd=workers_lib.ROOT)
    checkpoint = os.path.join(output_dir, 'checkpoints', 'program_state_1')
    deadline = time.monotonic() + 600
    while not os.path.isdir(checkpoint) and proc.poll() is None:
      self.assertLess(time.monotonic(), deadline, 'no checkpoint of round 1 appeared')
      time.sleep(0.02)
    self.workers.kill(1)
    try:
      _, err = proc.communicate(timeout=300)
    finally:
      if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    self.assertNotEqual(proc.returncode, 0, msg='the run went on without its worker')
    self.assertIn(f'TFF worker {self.workers.addresses[1]} has been unreachable for 3 s', err)
    self.assertIn('resume from the last checkpoint', err)
    self.assertFalse(os.path.exists(os.path.join(output_dir, 'model.npz')))
    return _metrics_keys(output_dir)

  def _assert_same_metrics(self, local, distributed):
    want_metrics, got_metrics = _metrics(local), _metrics(distributed)
    self.assertEqual(sorted(want_metrics), sorted(got_metrics))
    for key, value in want_metrics.items():
      self.assertAlmostEqual(got_metrics[key], value, delta=1e-5 * max(1.0, abs(value)),
                             msg=key)
    return got_metrics

  def test_same_model_as_local_from_a_client_store_and_resumes_after_a_worker_dies(self):
    # The local run in process (`--engine`'s default), watched to its end: it starts no TFF
    # worker (`chaos.run_once`, as the chaos benchmark watches its in-process tasks).
    local = os.path.join(self.tmp, 'local')
    flags = [flag for flag in self._flags(local) if not flag.startswith('--output_dir=')]
    log = os.path.join(self.tmp, 'local.log')
    ended = chaos.run_once(chaos.Task('experiments.train_federated', tuple(flags), worker=False),
                           local, log)
    self.assertEqual(ended.returncode, 0, msg=ended.stderr_tail)
    self.assertFalse(ended.traceback, msg=ended.stderr_tail)  # none at exit either
    self.assertFalse(ended.stray_worker, 'the in-process run started a TFF worker')
    with open(log) as f:
      out = f.read()
    self.assertNotIn('- Workers:', out)
    self.assertIn('epsilon spent', out)
    # Both seeds were fixed: the statement says what that costs.
    self.assertIn('voids the amplification', out)
    self.assertIn('**no** DP guarantee', out)

    # On the workers, from a client store: the driver sends each client's store index and seed,
    # and the workers read and batch its features (SpecAugment and the seeded sample of its two
    # local steps included) as the local run's driver did, or the model below would differ by
    # far more than the merge's last bits.
    distributed = os.path.join(self.tmp, 'distributed')
    store = os.path.join(self.tmp, 'store')
    on_workers = (f'--workers={",".join(self.workers.addresses)}', f'--client_store_dir={store}')
    # Killed after round 1's checkpoint: the next round fails once the worker has been
    # unreachable for 3 s, and nothing past the checkpoint is released.
    released = self._killed_after_round_1(
        'train_federated', self._flags(distributed, *on_workers, '--worker_timeout=3'),
        distributed)
    self.assertIn(released, (['0', '1'], ['0', '1', '2']), msg=released)
    self.assertTrue(os.path.isfile(os.path.join(store, 'manifest.json')))

    self.workers.restart(1)
    result = _run('train_federated', *self._flags(distributed, *on_workers))
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    self.assertIn('Resuming from the checkpoint of round', result.stdout)
    self.assertIn(f'- Workers: the rounds ran on 2 TFF workers ({self.workers.addresses[0]}',
                  result.stdout)
    self.assertIn(f'client store {store}: each can read every client in it', result.stdout)
    self.assertEqual(_metrics_keys(distributed), ['0', '1', '2', '3'])
    model = models.build_ctc_transformer('tiny', 29)
    want = model_io.load_weights(os.path.join(local, 'model.npz'), model)
    got = model_io.load_weights(os.path.join(distributed, 'model.npz'), model)
    # The same noise (once per round, after the merge, from the same secret) and the same
    # clients; partial sums merge block by block, so floats may differ in the last bits.
    for a, b in zip(want.trainable, got.trainable, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    # The same released metrics (privacy, clip, noise std, update norm, evaluation).
    got_metrics = self._assert_same_metrics(local, distributed)
    self.assertIn(('3', 'dp/noise_stddev'), got_metrics)

  def _retriever_flags(self, output_dir, *extra):
    return ['--output_dir=' + output_dir, '--noprogress',
            f'--feature_cache_dir={os.path.join(self.tmp, "features")}', '--max_classes=3',
            '--max_class_examples=5', '--min_class_examples=5', '--max_length=16',
            '--num_clients=3', '--local_dp=adaptive', '--noise_seed=4', '--rounds=12',
            '--eval_every=4', *extra]

  def test_retriever_same_model_as_local(self):
    # Local DP's per-client states go back to their clients through the round's aggregation;
    # a client trained twice or a state handed to the wrong client would change the model.
    # (A worker's death and the resume are the speech run's, above: the same runtime.)
    local = os.path.join(self.tmp, 'retriever_local')
    result = _run('train_retriever', *self._retriever_flags(local))
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    distributed = os.path.join(self.tmp, 'retriever_distributed')
    workers = f'--workers={",".join(self.workers.addresses)}'
    result = _run('train_retriever', *self._retriever_flags(distributed, workers))
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    self.assertIn(f'- Workers: the rounds ran on 2 TFF workers ({self.workers.addresses[0]}',
                  result.stdout)
    with np.load(os.path.join(local, 'model.npz')) as want, \
        np.load(os.path.join(distributed, 'model.npz')) as got:
      self.assertEqual(sorted(want.files), sorted(got.files))
      for name in want.files:
        if want[name].dtype.kind == 'f':
          np.testing.assert_allclose(want[name], got[name], rtol=0, atol=1e-5, err_msg=name)
    got_metrics = self._assert_same_metrics(local, distributed)
    self.assertIn(('12', 'privacy/local_epsilon_max'), got_metrics)


if __name__ == '__main__':
  absltest.main()
