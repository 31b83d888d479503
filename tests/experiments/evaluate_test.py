"""The evaluation binary end to end, in a subprocess: it scores --eval_split, greedy or with beam
search and a word list, and its help says which split that is."""

import glob
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff.program import model_io
from fedasr_tff.speech import data
from fedasr_tff.speech import data_config
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
             PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))
  return subprocess.run([sys.executable, '-m', 'experiments.evaluate', *args],
                        capture_output=True, text=True, env=env, cwd=_ROOT, timeout=300)


class EvaluateBinaryTest(absltest.TestCase):

  def test_scores_the_eval_split_and_says_so(self):
    tmp = tempfile.mkdtemp()
    # Speakers only in dev: scoring another split would fail or count other speakers.
    synthetic.make_corpus(tmp, num_speakers=1, mean_utterances=1, skew=0.0, seed=0,
                          words_per_utterance=(1, 1), split='dev')
    model = models.build_ctc_transformer('tiny', data.Vocabulary('en').size)
    weights = os.path.join(tmp, 'model.npz')
    # Trained on "cmn" features, as its model.npz records: the binary scores on them.
    model_io.save_weights(weights, model, model_io.model_weights(model),
                          data_config.model_metadata('cmn'))
    cache = os.path.join(tmp, 'cache')
    words = os.path.join(tmp, 'words.txt')
    with open(words, 'w') as f:
      f.write('yes\nno\n')
    speakers = {u.speaker for u in data.read_librispeech(os.path.join(tmp, 'librispeech'), 'dev')}
    result = _run(f'--corpus_dir={tmp}/librispeech', '--eval_split=dev', f'--model={weights}',
                  '--model_config=tiny', '--decoder=beam', '--beam_width=2', '--top_paths=2',
                  f'--word_list={words}', f'--feature_cache_dir={cache}')
    self.assertEqual(result.returncode, 0, msg=result.stderr[-3000:])
    [cached] = glob.glob(os.path.join(cache, '*', '*.npy'))
    [utterance] = data.read_librispeech(os.path.join(tmp, 'librispeech'), 'dev')
    np.testing.assert_allclose(
        np.load(cached), data.log_mel_features(data.load_audio(utterance.path), 'cmn'),
        atol=1e-5)
    rows = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    self.assertEqual(rows, sorted(speakers) + ['ALL'])
    self.assertNotIn('Exception ignored', result.stderr)
    help_text = _run('--helpfull').stdout
    self.assertRegex(help_text, r'--eval_split: The split evaluated')
    self.assertNotIn('--split:', help_text)
    self.assertNotIn('Training split', help_text)


if __name__ == '__main__':
  absltest.main()
