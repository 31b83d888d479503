"""Tests of `program.transcription`: the in-graph recognizer, its SavedModel, file handling."""

import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff.speech import data
from fedasr_tff.speech import decoding
from fedasr_tff.speech import models
from fedasr_tff.speech import transcription
from fedasr_tff.speech.data import synthetic

# Run in a fresh interpreter: loads the SavedModel and writes what its signatures return.
_LOAD_AND_RUN = '''
import sys
import numpy as np
import tensorflow as tf
directory, inputs, outputs = sys.argv[1:]
loaded = tf.saved_model.load(directory)
with np.load(inputs) as f:
  waveforms, lengths = tf.constant(f['waveforms']), tf.constant(f['lengths'])
greedy = loaded.signatures['serving_default'](waveforms=waveforms, lengths=lengths)
beam = loaded.signatures['transcribe_beam'](waveforms=waveforms, lengths=lengths)
np.savez(outputs, transcripts=greedy['transcripts'].numpy(), logits=greedy['logits'].numpy(),
         logit_lengths=greedy['logit_lengths'].numpy(), beam=beam['transcripts'].numpy(),
         tokens=loaded.tokens.numpy())
'''


class TranscriptionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    synthetic.make_corpus(cls.tmp, num_speakers=1, mean_utterances=3, skew=0.0, seed=0,
                          words_per_utterance=(1, 2))
    cls.paths = [u.path for u in data.read_librispeech(os.path.join(cls.tmp, 'librispeech'),
                                                       'train')]
    cls.vocab = data.Vocabulary('en')
    tf.keras.utils.set_random_seed(0)
    cls.model = models.build_ctc_transformer('tiny', cls.vocab.size)
    cls.transcriber = transcription.Transcriber(cls.model, cls.vocab.tokens, beam_width=4)

  def _batch(self):
    waveforms = [data.load_audio(p) for p in self.paths]
    lengths = np.array([len(w) for w in waveforms], np.int32)
    padded = np.zeros([len(waveforms), lengths.max()], np.float32)
    for i, w in enumerate(waveforms):
      padded[i, :len(w)] = w
    return padded, lengths

  def test_the_graph_matches_the_training_features_and_the_model(self):
    mel = transcription.Transcriber(self.model, self.vocab.tokens, feature_normalization='cmn')
    for transcriber, normalization in ((self.transcriber, 'utterance'), (mel, 'cmn')):
      with self.subTest(normalization):
        self.assertEqual(transcriber.feature_normalization.numpy().decode(), normalization)
        self._check_matches_training_features(transcriber, normalization)
    with self.assertRaisesRegex(ValueError, "feature_normalization must be one of"):
      transcription.Transcriber(self.model, self.vocab.tokens, feature_normalization='cmvn')

  def _check_matches_training_features(self, transcriber, normalization):
    waveforms, lengths = self._batch()
    out = transcriber.transcribe(waveforms, lengths)
    for i, path in enumerate(self.paths):
      features = data.log_mel_features(data.load_audio(path), normalization)
      logits = self.model((features[tf.newaxis], tf.shape(features)[:1]), training=False)[0]
      frames = int(out['logit_lengths'][i])
      self.assertEqual(frames, logits.shape[0])
      np.testing.assert_allclose(out['logits'][i, :frames], logits, atol=1e-4, rtol=1e-4)
      [best] = decoding.decode(logits[tf.newaxis], [frames], self.vocab.tokens)[0]
      self.assertEqual(out['transcripts'][i].numpy().decode(), best.text)

  def test_saved_model_in_a_fresh_process_transcribes_alike(self):
    directory = os.path.join(self.tmp, 'saved_model')
    transcription.export_saved_model(self.transcriber, directory)
    waveforms, lengths = self._batch()
    inputs, outputs = (os.path.join(self.tmp, name) for name in ('in.npz', 'out.npz'))
    np.savez(inputs, waveforms=waveforms, lengths=lengths)
    # Without this project on the path: the SavedModel must stand on TensorFlow alone.
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['TF_CPP_MIN_LOG_LEVEL'] = '2'
    result = subprocess.run([sys.executable, '-c', _LOAD_AND_RUN, directory, inputs, outputs],
                            capture_output=True, text=True, env=env, cwd=self.tmp, timeout=300,
                            check=False)
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    expected = self.transcriber.transcribe(waveforms, lengths)
    expected_beam = self.transcriber.transcribe_beam(waveforms, lengths)['transcripts']
    with np.load(outputs, allow_pickle=True) as loaded:
      self.assertEqual(loaded['transcripts'].tolist(), expected['transcripts'].numpy().tolist())
      self.assertTrue(all(loaded['transcripts']))  # A random model still says something.
      self.assertEqual(loaded['beam'].tolist(), expected_beam.numpy().tolist())
      np.testing.assert_array_equal(loaded['logit_lengths'], expected['logit_lengths'])
      np.testing.assert_allclose(loaded['logits'], expected['logits'], atol=1e-5, rtol=1e-5)
      self.assertEqual([t.decode() for t in loaded['tokens']], list(self.vocab.tokens))
    with self.assertRaisesRegex(ValueError, 'not empty'):
      transcription.export_saved_model(self.transcriber, directory)

  def test_a_vocabulary_that_does_not_fit_the_model_is_refused(self):
    with self.assertRaisesRegex(ValueError, '`tokens`'):
      transcription.Transcriber(self.model, self.vocab.tokens[:-1])

  def test_unreadable_audio_names_the_file_or_is_skipped(self):
    bad = os.path.join(self.tmp, 'corrupt.flac')
    with open(bad, 'wb') as f:
      f.write(b'not a flac file')
    short = os.path.join(self.tmp, 'short.wav')
    tf.io.write_file(short, tf.audio.encode_wav(tf.zeros([100, 1]), 16000))
    good = data.AudioListEntry(self.paths[0], 'argument')
    for path in (bad, short):
      entries = [data.AudioListEntry(path, 'argument'), good]
      with self.assertRaisesRegex(data.AudioError, os.path.basename(path)):
        list(transcription.transcribe_files(self.transcriber.transcribe, self.vocab.tokens,
                                            entries))
      results = list(transcription.transcribe_files(
          self.transcriber.transcribe, self.vocab.tokens, entries, skip_unreadable=True))
      self.assertIn(os.path.basename(path), results[0].error)
      self.assertIsNone(results[0].text)
      self.assertIsNone(results[1].error)

  def test_word_list_restricts_the_files_transcripts(self):
    entries = [data.AudioListEntry(p, 'argument') for p in self.paths]
    words = decoding.WordList(['yes', 'no'])
    results = transcription.transcribe_files(self.transcriber.transcribe, self.vocab.tokens,
                                             entries, 'beam', 4, 4, words)
    for result in results:
      self.assertTrue(set(result.text.split()) <= {'yes', 'no'}, msg=result.text)


if __name__ == '__main__':
  absltest.main()
