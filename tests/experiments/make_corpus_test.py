import contextlib
import io
import os
import tempfile

from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver

from experiments import make_corpus
from fedasr_tff import data


class MakeCorpusTest(absltest.TestCase):

  def test_writes_both_layouts(self):
    root = self.enterContext(tempfile.TemporaryDirectory())
    out = io.StringIO()
    with flagsaver.flagsaver():
      flags.FLAGS.unparse_flags()
      flags.FLAGS(['make_corpus', f'--output_dir={root}', '--speakers=2',
                   '--utterances_per_speaker=1', '--skew=0', '--layouts=librispeech',
                   '--words=alpha,beta',
                   '--layouts=common_voice'])
      with contextlib.redirect_stdout(out):
        make_corpus.main(['make_corpus'])
    self.assertIn('wrote 2 speakers', out.getvalue())
    utterances = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
    self.assertLen(utterances, 2)
    for u in utterances:
      self.assertLessEqual(set(u.transcript.lower().split()), {'alpha', 'beta'})
    self.assertLen(data.read_common_voice(os.path.join(root, 'common_voice'), 'train'), 2)

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
