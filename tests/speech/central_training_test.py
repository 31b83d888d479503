"""Central training of a seed model (`fedasr_tff.speech.central_training`)."""

import csv
import os
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff.program import model_io
from fedasr_tff.speech import central_training
from fedasr_tff.speech import data
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic


class CentralTrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=2, seed=4, skew=0.0,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    cls.train_data = data.SpeechClientData(utterances[2:], cls.vocab, max_batch_seconds=3.0,
                                           spec_augment=True, strict=True)
    cls.eval_data = data.SpeechClientData(utterances[:2], cls.vocab, strict=True)

  def _train(self, name, **overrides):
    config = central_training.CentralConfig(
        **{'steps': 6, 'optimizer': 'lars', 'learning_rate': 0.5, 'schedule': 'step',
           'decay_every': 2, 'decay_start': 2, 'warmup_steps': 4, 'eval_every_steps': 3,
           'seed': 7, **overrides})
    output_dir = os.path.join(self.root, name)
    lines = []
    result = central_training.train(config, self.train_data, self.vocab, output_dir,
                                    eval_data=self.eval_data, show_progress=False,
                                    log=lines.append)
    return result, output_dir, lines

  def test_trains_and_exports_a_seed_model_reproducibly(self):
    result, output_dir, lines = self._train('a')
    model = models.build_ctc_transformer('tiny', self.vocab.size)
    saved = model_io.load_weights(os.path.join(output_dir, 'model.npz'), model)
    # It records the features it was trained on (`data_config.model_features`).
    self.assertEqual(model_io.read_metadata(os.path.join(output_dir, 'model.npz')),
                     {'feature_normalization': 'utterance'})
    initial = model_io.model_weights(model)
    for got, want in zip(saved.trainable, result.weights.trainable, strict=True):
      np.testing.assert_array_equal(got, want)
    self.assertTrue(any(np.any(a != b) for a, b in zip(saved.trainable, initial.trainable,
                                                        strict=True)))
    with open(os.path.join(output_dir, 'metrics.csv')) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([r['key'] for r in rows], ['3', '6'])
    # Step decay halves the rate every 2 steps from step 2: steps 1-2 at 0.5, 3-4 at 0.25, 5-6 at
    # 0.125; the warm-up scales step s by min(1, s / 4): 3/4 at step 3, 1 at step 6.
    self.assertAlmostEqual(float(rows[0]['train/learning_rate']), 0.25 * 3 / 4)
    self.assertAlmostEqual(float(rows[1]['train/learning_rate']), 0.125)
    self.assertTrue(all(np.isfinite(float(r['train/loss'])) for r in rows))
    self.assertTrue(all(0 <= float(r['eval/cer']) for r in rows))
    self.assertLen(lines, 2)
    self.assertTrue(os.path.isfile(os.path.join(output_dir, 'eval_per_speaker.csv')))
    self.assertEqual(result.evaluation.overall.utterances, 2)

    again, _, _ = self._train('b')
    for a, b in zip(result.weights.trainable, again.weights.trainable, strict=True):
      np.testing.assert_array_equal(a, b)

  def test_evaluation_data_of_other_features_is_refused(self):
    mel_eval = data.SpeechClientData(
        [u for c in self.eval_data.client_ids for u in self.eval_data.utterances(c)],
        self.vocab, feature_normalization='cmn')
    with self.assertRaisesRegex(ValueError, 'the training data: "utterance", the evaluation '
                                'data: "cmn"'):
      central_training.train(central_training.CentralConfig(steps=1), self.train_data,
                             self.vocab, os.path.join(self.root, 'cmn'), eval_data=mel_eval)
    self.assertFalse(os.path.exists(os.path.join(self.root, 'cmn')))

  def test_bad_configuration_names_the_argument(self):
    with self.assertRaisesRegex(ValueError, 'optimizer'):
      central_training.CentralConfig(steps=1, optimizer='nadam')
    with self.assertRaisesRegex(ValueError, 'steps'):
      central_training.CentralConfig(steps=0)
    with self.assertRaisesRegex(ValueError, 'schedule'):
      central_training.CentralConfig(steps=1, schedule='cosine')
    with self.assertRaisesRegex(ValueError, 'warmup_steps'):
      central_training.CentralConfig(steps=1, warmup_steps=-1)


if __name__ == '__main__':
  absltest.main()
