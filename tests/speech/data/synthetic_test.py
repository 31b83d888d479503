"""The synthetic corpus (`fedasr_tff.speech.data.synthetic`)."""

import dataclasses
import filecmp
import os
import subprocess
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff.speech.data import synthetic


class CorruptTranscriptsTest(absltest.TestCase):

  def test_only_the_chosen_speakers_get_random_words_of_the_same_count(self):
    root = tempfile.mkdtemp()
    originals = {}
    for speaker in ('1000', '1001'):
      chapter = os.path.join(root, speaker, '1')
      os.makedirs(chapter)
      path = os.path.join(chapter, f'{speaker}-1.trans.txt')
      text = f'{speaker}-1-0 HELLO WORLD AGAIN\n{speaker}-1-1 ONE\n'
      with open(path, 'w') as f:
        f.write(text)
      originals[speaker] = (path, text)
    synthetic.corrupt_transcripts(root, ['1001'], seed=0)
    with open(originals['1000'][0]) as f:
      self.assertEqual(f.read(), originals['1000'][1])
    with open(originals['1001'][0]) as f:
      lines = [line.split() for line in f]
    self.assertEqual([line[0] for line in lines], ['1001-1-0', '1001-1-1'])
    self.assertEqual([len(line) for line in lines], [4, 2])
    self.assertNotEqual(lines[0][1:], ['HELLO', 'WORLD', 'AGAIN'])


  def test_unknown_speaker_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'No speaker'):
      synthetic.corrupt_transcripts(tempfile.mkdtemp(), ['9999'], seed=0)


class MakeCorpusTest(absltest.TestCase):

  def test_a_corpus_is_a_function_of_its_seed_byte_for_byte(self):
    # sox dithers when it reduces the bit depth, from a random seed unless run with -R: the
    # audio (and so the features and every trained model) differed between runs of one seed.
    roots = [tempfile.mkdtemp() for _ in range(2)]
    for root in roots:
      synthetic.make_corpus(root, num_speakers=2, mean_utterances=2, skew=0.0, seed=3,
                            layouts=('librispeech', 'common_voice'))
    files = sorted(os.path.relpath(os.path.join(folder, name), roots[0])
                   for folder, _, names in os.walk(roots[0]) for name in names)
    self.assertLen([f for f in files if f.endswith('.flac')], 4)
    self.assertLen([f for f in files if f.endswith('.mp3')], 4)
    match, mismatch, errors = filecmp.cmpfiles(roots[0], roots[1], files, shallow=False)
    self.assertEqual((mismatch, errors), ([], []))
    self.assertLen(match, len(files))

  def test_unseen_conditions_are_voiced_and_recorded_as_told(self):
    root, tuned = tempfile.mkdtemp(), tempfile.mkdtemp()
    voices = synthetic.make_corpus(root, num_speakers=2, mean_utterances=2, skew=0.0, seed=3,
                                   conditions=synthetic.UNSEEN)
    synthetic.make_corpus(tuned, num_speakers=2, mean_utterances=2, skew=0.0, seed=3)
    unseen = synthetic.UNSEEN
    for speaker, voice in voices.items():
      self.assertIn(voice.voice.split('+')[1], unseen.voices)
      self.assertNotIn(voice.voice.split('+')[1], synthetic.TUNING.voices)
      self.assertBetween(voice.pitch, *unseen.pitch)
      self.assertBetween(voice.band[0], *unseen.band[0])
      self.assertBetween(voice.band[1], *unseen.band[1])
      chapter = os.path.join(root, 'librispeech', 'train', speaker, '1')
      # The same sentences as the tuning corpus of the seed; other audio.
      self.assertTrue(filecmp.cmp(
          os.path.join(chapter, f'{speaker}-1.trans.txt'),
          os.path.join(tuned, 'librispeech', 'train', speaker, '1', f'{speaker}-1.trans.txt'),
          shallow=False))
      for name in sorted(os.listdir(chapter)):
        if name.endswith('.flac'):
          audio = _read_flac(os.path.join(chapter, name))
          rate = int(subprocess.run(['sox', '--i', '-r', os.path.join(chapter, name)],
                                    capture_output=True, text=True, check=True).stdout)
          self.assertEqual(rate, unseen.sample_rate)
          # At least 0.1 s of noise alone before the speech: well under the speech's power.
          lead = audio[:int(0.1 * rate)]
          self.assertLess(np.mean(lead**2), 0.5 * np.mean(audio**2), name)
          self.assertGreater(np.mean(lead**2), 0.0, name)  # The noise is there too.

  def test_impossible_conditions_are_refused_naming_the_field(self):
    for change, field in (({'voices': ()}, 'voices'), ({'pitch': (50, 50)}, 'pitch'),
                          ({'edge_silence': (0.5, 0.1)}, 'edge_silence'),
                          ({'band': ((300.0, 400.0), (3000.0, 5000.0))}, 'band')):
      with self.subTest(field=field), self.assertRaisesRegex(ValueError, field):
        dataclasses.replace(synthetic.UNSEEN, **change)


def _read_flac(path):
  """The samples of a 16-bit mono FLAC file, as floats."""
  raw = subprocess.run(['sox', path, '-t', 'raw', '-e', 'signed', '-b', '16', '-'],
                       capture_output=True, check=True).stdout
  return np.frombuffer(raw, '<i2').astype(np.float64)


if __name__ == '__main__':
  absltest.main()
