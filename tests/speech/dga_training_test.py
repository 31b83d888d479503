"""DGA in the speech runner (`--aggregation`, `--rehearsal_steps`): what a DP DGA run releases and
states, DGA-RL's checkpointed learner, and the flag combinations that are refused."""

import csv
import os
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff import runtime
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data
from fedasr_tff.speech import federated_training
from fedasr_tff.speech.data import synthetic


def _columns(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return set(next(csv.DictReader(f)))


class _Interrupt(Exception):
  pass


class DGATrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=5, mean_utterances=2, seed=7, skew=0.0,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    speakers = sorted({u.speaker for u in utterances})

    def part(keep, **kwargs):
      return data.SpeechClientData([u for u in utterances if u.speaker in keep], cls.vocab,
                                   strict=True, **kwargs)

    cls.train_data = part(set(speakers[2:]), spec_augment=True)
    cls.server_data = part({speakers[0]}, spec_augment=True)
    cls.validation_data = part({speakers[0]})
    cls.eval_data = part({speakers[1]})

  def _config(self, **overrides):
    if overrides.get('aggregation'):
      overrides = {'dga_beta': 0.05, 'dga_loss_clip': 400.0, **overrides}
    return fields_lib.from_flat(config_lib.FederatedConfig, {
        'rounds': 2, 'cohort_size': 2, 'local_steps': 1, 'clip': 1.0, 'eval_every': 1,
        'checkpoint_every': 1, 'population': 10**6, 'population_cohort_size': 1000,
        'server_optimizer': 'adam', 'server_lr': 0.001, **overrides})

  def test_dp_softmax_run_with_rehearsal_releases_noised_weights_and_states_them(self):
    output_dir = os.path.join(self.root, 'softmax')
    config = self._config(aggregation='dga_softmax', sigma_dp=0.05, rehearsal_steps=1,
                          central_split='train')
    result = federated_training.train(config, self.train_data, self.vocab, output_dir,
                                      eval_data=self.eval_data, central_data=self.server_data,
                                      show_progress=False, log=lambda line: None)
    columns = _columns(output_dir)
    for public in ('dp/weight_sum', 'dp/weight_denominator', 'dp/noise_stddev',
                   'rehearsal/loss', 'rehearsal/delta_norm', 'eval/cer'):
      self.assertIn(public, columns)
    self.assertFalse({c for c in columns if c.startswith('client/')}, columns)
    statement = result.privacy_statement()
    self.assertIn('--aggregation=dga_softmax', statement)
    self.assertIn('one Gaussian mechanism', statement)
    self.assertIn('server rehearsal (--rehearsal_steps=1)', statement)
    self.assertIn('covered by **no** guarantee', statement)
    # The ledger accounts the total z: the value and the weight sum together.
    self.assertAlmostEqual(result.ledger.noise_multiplier, 0.05 * 2, places=5)

  def test_dga_rl_run_resumes_its_learner_exactly(self):
    config = self._config(aggregation='dga_rl', clipping='none', central_split='train',
                          sampling='with_replacement', rehearsal_steps=1, seed=3)
    kwargs = dict(central_data=self.server_data, validation_data=self.validation_data,
                  show_progress=False)
    whole = federated_training.train(config, self.train_data, self.vocab,
                                     os.path.join(self.root, 'rl_whole'),
                                     log=lambda line: None, **kwargs)
    columns = _columns(os.path.join(self.root, 'rl_whole'))
    # Without noise the weights' statistics are released too, under client/.
    for column in ('dga_rl/validation_cer_rl', 'dga_rl/validation_cer_softmax',
                   'dga_rl/kept_rl', 'dga_rl/reward', 'rehearsal/loss',
                   'client/weights/weight_sum', 'client/weights/effective_clients'):
      self.assertIn(column, columns)

    def interrupt_after_round_one(line):
      if line.startswith('round 1/'):
        raise _Interrupt()

    resumed_dir = os.path.join(self.root, 'rl_resumed')
    with self.assertRaises(_Interrupt):
      federated_training.train(config, self.train_data, self.vocab, resumed_dir,
                               log=interrupt_after_round_one, **kwargs)
    resumed = federated_training.train(config, self.train_data, self.vocab, resumed_dir,
                                       log=lambda line: None, **kwargs)
    for a, b in zip(whole.weights.trainable, resumed.weights.trainable, strict=True):
      np.testing.assert_array_equal(a, b)

  def test_bad_configurations_name_the_flag(self):
    for overrides, flag in (
        (dict(aggregation='dga_softmax', dga_loss_clip=None), 'dga_loss_clip'),
        (dict(aggregation='dga_softmax', dga_beta=1.0, dga_loss_clip=1000.0), 'dga_beta'),
        (dict(dga_beta=2.0), 'aggregation'),
        (dict(aggregation='dga_rl', sigma_dp=0.1, central_split='train'), 'aggregation'),
        (dict(aggregation='dga_rl', sampling='poisson', central_split='train'), 'sampling'),
        (dict(sampling='with_replacement', sigma_dp=0.1), 'sampling'),
        (dict(rehearsal_steps=2), 'central_split'),
        (dict(central_split='train'), 'central_split'),
        (dict(aggregation='dga_softmax', mixed='parallel', central_split='train'), 'mixed'),
        (dict(aggregation='dga_softmax', sigma_dp=0.1, noise_placement='client',
              sampling='fixed'), 'noise_placement'),
        (dict(rehearsal_steps=-1), 'rehearsal_steps'),
    ):
      with self.subTest(flag=flag, overrides=overrides), \
          self.assertRaisesRegex(ValueError, f'`{flag}`'):
        self._config(**overrides)

  def test_rl_needs_validation_data(self):
    config = self._config(aggregation='dga_rl', clipping='none', central_split='train')
    with self.assertRaisesRegex(ValueError, 'validation data'):
      federated_training.build_run(config, self.train_data, self.vocab,
                                   os.path.join(self.root, 'no_validation'),
                                   central_data=self.server_data)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
