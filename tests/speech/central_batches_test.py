"""The server's central batches of a mixed FL round, and the checks on central data."""

import os
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff.speech import central_batches
from fedasr_tff.speech import data
from fedasr_tff.speech.data import corpora
from fedasr_tff.speech.data import synthetic


def _as_arrays(dataset):
  return [{k: np.asarray(v) for k, v in batch.items()} for batch in dataset]


class CentralBatchesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=3, seed=2, skew=0.0,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    cls.utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    cls.central = data.SpeechClientData(cls.utterances, cls.vocab, max_batch_seconds=2.0,
                                        spec_augment=True, strict=True)

  def test_a_round_draws_its_count_of_batches_as_a_function_of_secret_and_round(self):
    batches = central_batches.CentralBatches(self.central, 3)
    first = _as_arrays(batches.for_round(secret=11, round_num=4))
    self.assertLen(first, 3)
    again = _as_arrays(batches.for_round(secret=11, round_num=4))
    for a, b in zip(first, again, strict=True):
      for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # Another round or another secret draws other batches (their seeds differ).
    for other in (batches.for_round(secret=11, round_num=5),
                  batches.for_round(secret=12, round_num=4)):
      seeds = {tuple(b['seed']) for b in _as_arrays(other)}
      self.assertFalse(seeds & {tuple(b['seed']) for b in first})

  def test_speakers_shared_with_the_clients_are_refused(self):
    speaker = self.central.client_ids[0]
    with self.assertRaisesRegex(ValueError, 'central_speakers.*central_split'):
      central_batches.check_central_data(self.central, [speaker, 'someone else'], self.vocab)
    central_batches.check_central_data(self.central, ['someone else'], self.vocab)

  def test_transcripts_outside_the_vocabulary_are_refused(self):
    path = self.utterances[0].path
    cyrillic = data.SpeechClientData(
        [corpora.Utterance(path, 'привет мир', 'x1'), corpora.Utterance(path, 'да', 'x2')],
        self.vocab)
    with self.assertRaisesRegex(ValueError, r'`language`=.en.*central_corpus_dir'):
      central_batches.check_central_data(cyrillic, ['client'], self.vocab)

  def test_count_is_checked(self):
    with self.assertRaisesRegex(ValueError, 'central_steps'):
      central_batches.CentralBatches(self.central, 0)


if __name__ == '__main__':
  absltest.main()
