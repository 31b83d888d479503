"""The synthetic corpus (`fedasr_tff.data.synthetic`)."""

import filecmp
import os
import tempfile

from absl.testing import absltest

from fedasr_tff.data import synthetic


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


if __name__ == '__main__':
  absltest.main()
