"""The federated training binary end to end, in subprocesses (as users run it).

Runs go through `python -m experiments.train_federated`: start-up flag checks, `--helpfull`,
and a run killed with SIGKILL, then started again (with other flags: refused; with its own:
resumed), which must end in the same model as a run that was never interrupted and leave no TFF
worker behind (mixed FL, its round on the worker). DP FedAvg in process, killed three times and
resumed bit-identical with no worker started, is `chaos_test.py`.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import numpy as np
import psutil

from fedasr_tff import models
from fedasr_tff.data import synthetic
from fedasr_tff.program import model_io
from tests.experiments import start_up

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env():
  path = os.pathsep.join([_ROOT] + [p for p in sys.path if p])
  return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL='2')


def _command(*args):
  return [sys.executable, '-m', 'experiments.train_federated', *args]


def _run(*args, timeout=600):
  return subprocess.run(_command(*args), capture_output=True, text=True, env=_env(),
                        cwd=_ROOT, timeout=timeout, check=False)


# Mixed FL, the server training on the seed part of the split, the clients the rest.
_MIXED = ('--speakers=federated', '--mixed=two_way', '--central_split=train',
          '--central_speakers=seed', '--central_weight=0.3')


def _assert_same_model(reference, resumed):
  model = models.build_ctc_transformer('tiny', 29)
  want = model_io.load_weights(os.path.join(reference, 'model.npz'), model)
  got = model_io.load_weights(os.path.join(resumed, 'model.npz'), model)
  for a, b in zip(want.trainable, got.trainable, strict=True):
    np.testing.assert_array_equal(a, b)


class TrainFederatedTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    synthetic.make_corpus(cls.tmp, num_speakers=5, mean_utterances=2, skew=0.0, seed=0,
                          words_per_utterance=(1, 2))
    cls.corpus = os.path.join(cls.tmp, 'librispeech')
    cls.cache = os.path.join(cls.tmp, 'cache')

  def _flags(self, output_dir, *extra, model='tiny'):
    return [f'--corpus_dir={self.corpus}', '--speakers=all', f'--output_dir={output_dir}',
            f'--feature_cache_dir={self.cache}', f'--model_config={model}', '--cohort_size=2',
            '--rounds=3', '--local_steps=1', '--checkpoint_every=1', '--eval_every=2',
            '--sigma_dp=0.01', '--clip=1.0', '--server_lr=0.01', '--noise_seed=3', '--seed=1',
            '--spec_augment', '--noprogress', *extra]

  def test_helpfull_lists_the_flags_with_help(self):
    result = _run('--helpfull', timeout=240)   # absl exits with status 1 after the help.
    for name in ('cohort_size', 'rounds', 'local_steps', 'local_epochs', 'client_lr',
                 'server_optimizer', 'server_lr', 'clipping', 'clip', 'noise_multiplier',
                 'sigma_dp', 'target_epsilon', 'delta', 'population', 'seed'):
      self.assertRegex(result.stdout, rf'--{name}: \S', msg=name)
    # Nor a stray traceback at exit from the context TFF sets when imported.
    for ended in (result, _run('--only_check_args', timeout=240)):
      self.assertNotIn('Exception ignored', ended.stderr)
      self.assertNotIn('Traceback', ended.stderr)

  def test_bad_flags_fail_at_start_up_naming_the_flag(self):
    out = os.path.join(self.tmp, 'bad')
    # Checks that need the binary (data, the population, the DP ledger); the impossible flag
    # combinations of the configuration are checked in-process (config_flags_test.py).
    cases = [
        (['--cohort_size=10', '--population=5'], 'population'),
        (['--sigma_dp=-1'], 'sigma_dp'),
        (['--noise_multiplier=-0.5'], 'noise_multiplier'),
        (['--corpus_dir=/no/such/corpus'], 'corpus_dir'),
        (['--local_steps=2', '--local_epochs=1'], 'local_epochs'),
        (['--noise_placement=client'], '--sampling=poisson'),
    ]
    # Each fails during start-up: one interpreter runs them all (`start_up`).
    results = start_up.refusals('experiments.train_federated',
                                [self._flags(out, *extra) for extra, _ in cases],
                                env=_env(), cwd=_ROOT)
    for result, (extra, expected) in zip(results, cases, strict=True):
      self.assertNotEqual(result.returncode, 0, msg=extra)
      self.assertIn(expected, result.stderr + result.stdout, msg=extra)
    self.assertFalse(os.path.exists(os.path.join(out, 'checkpoints')))

  def test_seed_model_of_another_configuration_is_refused(self):
    small = models.build_ctc_transformer('small', 29)
    path = os.path.join(self.tmp, 'small.npz')
    model_io.save_weights(path, small, model_io.model_weights(small))
    # Written without metadata, so of whole-utterance features: those given, so the shapes are
    # what is refused.
    result = _run(*self._flags(os.path.join(self.tmp, 'mismatch'), f'--seed_model={path}',
                               '--feature_normalization=utterance'))
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('--seed_model', result.stderr)
    self.assertIn('shape', result.stderr)

  def _start(self, output_dir, model, *extra):
    # SIGINT at its default disposition in the run, as under a terminal: a test runner started
    # as a background job of a non-interactive shell ignores SIGINT, and its children inherit that.
    return subprocess.Popen(_command(*self._flags(output_dir, *extra, model=model)),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=_ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

  def _kill_after_checkpoint(self, proc, output_dir, round_num, sig):
    """Sends `sig` once the checkpoint of `round_num` exists; returns the run's TFF workers
    (asserting that it started one)."""
    checkpoint = os.path.join(output_dir, 'checkpoints', f'program_state_{round_num}')
    deadline = time.monotonic() + 600
    workers = []
    while not os.path.isdir(checkpoint) and proc.poll() is None:
      self.assertLess(time.monotonic(), deadline, f'no checkpoint of round {round_num} appeared')
      try:
        workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                   if c.name() == 'worker_binary'] or workers
      except psutil.NoSuchProcess:
        pass
      time.sleep(0.1)
    self.assertIsNone(proc.poll(), 'the run ended before it could be killed')
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    self.assertNotEqual(proc.returncode, 0, msg=err[-3000:])
    self.assertFalse(os.path.exists(os.path.join(output_dir, 'model.npz')), 'it ran to the end')
    self.assertNotEmpty(workers, 'the run started no TFF worker')
    return workers

  def _assert_stopped(self, workers, timeout):
    deadline = time.monotonic() + timeout
    while True:
      left = [w.pid for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
      if not left or time.monotonic() > deadline:
        break
      time.sleep(0.1)
    self.assertEmpty(left, 'the killed run left its TFF worker running')

  def test_killed_run_resumes_to_the_same_final_state(self):
    # Every draw of client work (the order and SpecAugment masks of a client's batches) must be
    # a function of (run secret, round, client) for a replayed round to be bit-identical. The
    # run is mixed FL's 2-way gradient transfer (the server trains on the seed speaker): its
    # central batches, central optimizer and augmenting gradients must replay too. The model's
    # own draws (dropout, layer drop, CAPE) follow the batch seeds: tff_model_test.py replays
    # rounds of a model that makes them, on clients and in mixed FL's central steps.
    reference = os.path.join(self.tmp, 'reference')
    result = _run(*self._flags(reference, *_MIXED))
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    self.assertIn('epsilon spent', result.stdout)
    # Both seeds were fixed: the statement says what that costs.
    self.assertIn('voids the amplification', result.stdout)
    self.assertIn('**no** DP guarantee', result.stdout)
    # TFF's worker handle is released at exit, not complained about in interpreter teardown.
    self.assertNotIn('Exception ignored', result.stderr)

    # SIGKILL after round 1's checkpoint, which nothing in the run can catch: the watchdog stops
    # the orphaned worker (within its 5 s grace and a margin). Ctrl-C, SIGTERM and SIGHUP stop
    # it through the run's clean-up (tests/runtime/execution_context_test.py, every way a run
    # ends).
    resumed = os.path.join(self.tmp, 'resumed')
    proc = self._start(resumed, 'tiny', *_MIXED)
    workers = self._kill_after_checkpoint(proc, resumed, 1, signal.SIGKILL)
    self.assertEqual(proc.returncode, -signal.SIGKILL)
    self._assert_stopped(workers, timeout=30)

    # Resuming with other flags is refused before anything runs, naming the flag.
    refused = _run(*self._flags(resumed, *_MIXED, '--client_lr=0.5'))
    self.assertNotEqual(refused.returncode, 0)
    self.assertIn('client_lr', refused.stderr)

    result = _run(*self._flags(resumed, *_MIXED))
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    self.assertIn('Resuming from the checkpoint of round', result.stdout)
    self.assertIn('Mixed federated learning', result.stdout)
    _assert_same_model(reference, resumed)
    # The metrics CSV holds every round once, the resumed ones replacing the killed run's.
    with open(os.path.join(resumed, 'metrics.csv')) as f:
      keys = [line.split(',')[0] for line in f.read().splitlines()[1:]]
    self.assertEqual(keys, ['0', '1', '2', '3'])


if __name__ == '__main__':
  absltest.main()
