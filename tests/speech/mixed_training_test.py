"""Mixed FL in the speech runner (`--mixed`): what a DP mixed run releases and states, and the
errors for central data and flags that cannot work."""

import csv
import json
import os
import tempfile

from absl.testing import absltest
import tensorflow_federated as tff

from fedasr_tff import runtime
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import privacy_ledger
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data
from fedasr_tff.speech import federated_training
from fedasr_tff.speech import released_metrics
from fedasr_tff.speech.data import synthetic


def _columns(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return set(next(csv.DictReader(f)))


class MixedTrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=5, mean_utterances=2, seed=7, skew=0.0,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    speakers = sorted({u.speaker for u in utterances})
    cls.central_speakers, cls.eval_speakers = {speakers[0]}, {speakers[1]}

    def part(keep, **kwargs):
      return data.SpeechClientData([u for u in utterances if u.speaker in keep], cls.vocab,
                                   strict=True, **kwargs)

    cls.train_data = part(set(speakers[2:]), spec_augment=True)
    cls.central_data = part(cls.central_speakers, spec_augment=True)
    cls.eval_data = part(cls.eval_speakers)

  def _config(self, **overrides):
    if overrides.get('mixed'):
      overrides = {'central_split': 'train', **overrides}
    return fields_lib.from_flat(config_lib.FederatedConfig, {
        'rounds': 2, 'cohort_size': 2, 'local_steps': 1, 'clip': 1.0, 'sigma_dp': 0.05,
        'eval_every': 2, 'checkpoint_every': 2, 'population': 10**6,
        'population_cohort_size': 1000, **overrides})

  def test_dp_mixed_run_releases_server_quantities_and_states_the_central_data(self):
    output_dir = os.path.join(self.root, 'parallel')
    config = self._config(mixed='parallel', central_weight=0.3)
    result = federated_training.train(config, self.train_data, self.vocab, output_dir,
                                      eval_data=self.eval_data, central_data=self.central_data,
                                      show_progress=False, log=lambda line: None)
    columns = _columns(output_dir)
    for public in ('mixed/central_loss', 'mixed/central_delta_norm',
                   'mixed/federated_delta_norm', 'dp/noise_stddev', 'eval/cer'):
      self.assertIn(public, columns)
    self.assertFalse({c for c in columns if c.startswith('client/')}, columns)
    statement = result.privacy_statement()
    self.assertIn('Mixed federated learning', statement)
    self.assertIn('covered by **no** guarantee', statement)
    self.assertIn('--mixed=parallel', statement)
    # The mechanism accounted is the aggregator's, as in FedAvg.
    self.assertAlmostEqual(result.ledger.noise_multiplier, 0.05 * 2, places=6)
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f)['config']['mixed']['mixed'], 'parallel')

  def test_gradient_dissimilarity_is_a_labelled_client_statistic(self):
    config = self._config(mixed='two_way', sigma_dp=None, clipping='none',
                          gradient_dissimilarity=True)
    self.assertTrue([c for c in released_metrics.client_statistic_columns(config)
                     if c.startswith('client/gradient_dissimilarity/')])
    output = tff.learning.templates.LearningProcessOutput(state=None, metrics={
        'client_work': {'train': {'loss': 1.0},
                        'gradient_dissimilarity': {'G2': 0.5, 'B2': 1.5}},
        'aggregator': {}, 'mixed': {'central_loss': 2.0}})
    values = released_metrics.round_metrics(
        config, output, learning_rate=0.1, update_norm=0.2, seconds=1.0)
    self.assertEqual(values['client']['gradient_dissimilarity'], {'G2': 0.5, 'B2': 1.5})
    self.assertEqual(values['mixed'], {'central_loss': 2.0})
    self.assertNotIn('gradient_dissimilarity', values)

  def test_bad_configurations_name_the_flag(self):
    for overrides, flag in (
        (dict(mixed='parallel', central_split=None), 'central_split'),
        (dict(central_weight=0.2), 'mixed'),
        (dict(mixed='one_way', central_lr=0.1), 'central_lr'),
        (dict(mixed='parallel', gradient_dissimilarity=True), 'release_client_diagnostics'),
        (dict(mixed='parallel', central_batch_seconds=-1.0), 'central_batch_seconds'),
    ):
      with self.subTest(flag=flag), self.assertRaisesRegex(ValueError, f'`{flag}`'):
        self._config(**overrides)

  def test_bad_central_data_is_refused_before_training(self):
    def build(name, config, central_data):
      return federated_training.build_run(config, self.train_data, self.vocab,
                                          os.path.join(self.root, name),
                                          central_data=central_data)

    with self.assertRaisesRegex(ValueError, '`central_weight`'):
      build('weight', self._config(mixed='parallel', central_weight=1.5), self.central_data)
    with self.assertRaisesRegex(ValueError, '`central_speakers`'):
      build('shared', self._config(mixed='two_way'), self.train_data)
    with self.assertRaisesRegex(ValueError, '`central_split`'):
      build('missing', self._config(mixed='one_way'), None)
    for name in ('weight', 'shared', 'missing'):
      self.assertFalse(os.path.exists(os.path.join(self.root, name, 'checkpoints')))

  def test_mixed_and_fed_avg_account_the_same_mechanism(self):
    runs = [federated_training.build_run(self._config(**overrides), self.train_data, self.vocab,
                                         os.path.join(self.root, f'ledger_{i}'),
                                         central_data=central)
            for i, (overrides, central) in enumerate((
                (dict(), None), (dict(mixed='one_way'), self.central_data)))]
    self.assertEqual(*(privacy_ledger.applied_noise_multiplier(run.initial_state.aggregator)
                       for run in runs))
    self.assertEqual(*(run.ledger.epsilon(2, declared=False) for run in runs))


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
