import contextlib
import io
import os
import subprocess
import tempfile

from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver

from experiments import make_corpus
from fedasr_tff.speech import data
from fedasr_tff.speech.data import audio
from fedasr_tff.speech.data import features


class MakeCorpusTest(absltest.TestCase):

  def _make(self, *args):
    """(output folder, what the binary printed) of `make_corpus` run with `args`."""
    root = self.enterContext(tempfile.TemporaryDirectory())
    out = io.StringIO()
    with flagsaver.flagsaver():
      flags.FLAGS.unparse_flags()
      flags.FLAGS(['make_corpus', f'--output_dir={root}', '--utterances_per_speaker=1', *args])
      with contextlib.redirect_stdout(out):
        make_corpus.main(['make_corpus'])
    return root, out.getvalue()

  def test_writes_both_layouts(self):
    root, out = self._make('--speakers=2', '--skew=0', '--layouts=librispeech',
                           '--words=alpha,beta', '--layouts=common_voice')
    self.assertIn('wrote 2 speakers', out)
    utterances = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
    self.assertLen(utterances, 2)
    for u in utterances:
      self.assertLessEqual(set(u.transcript.lower().split()), {'alpha', 'beta'})
    self.assertLen(data.read_common_voice(os.path.join(root, 'common_voice'), 'train'), 2)

  def test_unseen_conditions_give_8_khz_audio_the_reader_takes(self):
    root, out = self._make('--speakers=1', '--conditions=unseen')
    self.assertIn('conditions unseen', out)
    (utterance,) = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
    # Written at 8 kHz; read at 16 kHz like any corpus, every second of it.
    info = {flag: float(subprocess.run(['sox', '--i', flag, utterance.path], capture_output=True,
                                       text=True, check=True).stdout) for flag in ('-r', '-D')}
    self.assertEqual(info['-r'], 8000)
    seconds = len(audio.load_audio(utterance.path)) / features.SAMPLE_RATE
    self.assertAlmostEqual(seconds, info['-D'], delta=0.01)

  def test_missing_output_dir_is_refused(self):
    with flagsaver.flagsaver():
      flags.FLAGS.unparse_flags()
      flags.FLAGS(['make_corpus'])
      with self.assertRaisesRegex(Exception, 'output_dir'):
        make_corpus.main(['make_corpus'])

  def test_unknown_layout_is_refused(self):
    with flagsaver.flagsaver():
      with self.assertRaisesRegex(flags.IllegalFlagValueError, 'layouts'):
        flags.FLAGS(['make_corpus', '--output_dir=/tmp/x', '--layouts=kaldi'])


if __name__ == '__main__':
  absltest.main()
