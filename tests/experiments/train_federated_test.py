"""The federated training binary's start-up, in subprocesses (as users run it): `--helpfull`,
flag checks that need the binary, a seed model of another configuration.

Its runs killed with SIGKILL and resumed bit-identical (mixed FL on a TFF worker) are
`chaos_test.py`; resuming with other flags is refused in the census of bad inputs
(`bad_inputs_test.py`); a worker orphaned by a killed run is stopped
(`tests/runtime/execution_context_test.py`).
"""

import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

from fedasr_tff.program import model_io
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic
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


if __name__ == '__main__':
  absltest.main()
