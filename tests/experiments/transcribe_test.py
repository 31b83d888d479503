"""The transcription binary end to end, in subprocesses (as users run it).

A random `tiny` model (what is checked is the plumbing, not accuracy): a manifest with references
(transcripts and WER/CER), the SavedModel it exports giving the same transcripts, a word list,
unreadable audio, and flag errors that name the flag or the file and line.
"""

import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import tensorflow as tf

from fedasr_tff.program import model_io
from fedasr_tff.speech import data
from fedasr_tff.speech import data_config
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic
from tests.experiments import start_up

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
              PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))


def _start(*args):
  return subprocess.Popen([sys.executable, '-m', 'experiments.transcribe', *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                          cwd=_ROOT)


def _finish(proc):
  stdout, stderr = proc.communicate(timeout=300)
  return proc.returncode, stdout, stderr


class TranscribeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    synthetic.make_corpus(cls.tmp, num_speakers=1, mean_utterances=2, skew=0.0, seed=0,
                          words_per_utterance=(1, 2))
    cls.utterances = data.read_librispeech(os.path.join(cls.tmp, 'librispeech'), 'train')
    cls.manifest = os.path.join(cls.tmp, 'list.tsv')
    with open(cls.manifest, 'w') as f:
      for u in cls.utterances:
        f.write(f'{os.path.relpath(u.path, cls.tmp)}\t{u.transcript}\n')
    model = models.build_ctc_transformer('tiny', data.Vocabulary('en').size)
    cls.model = os.path.join(cls.tmp, 'model.npz')
    # Trained on "cmn" features, as its model.npz records: the binary computes them.
    model_io.save_weights(cls.model, model, model_io.model_weights(model),
                          data_config.model_metadata('cmn'))
    cls.corrupt = os.path.join(cls.tmp, 'corrupt.wav')
    with open(cls.corrupt, 'wb') as f:
      f.write(b'RIFF not really')
    cls.words = os.path.join(cls.tmp, 'words.txt')
    with open(cls.words, 'w') as f:
      f.write('yes\nno\n')

  def test_manifest_export_and_saved_model_give_the_same_transcripts(self):
    output = os.path.join(self.tmp, 'out', 'hyp.tsv')
    saved_model = os.path.join(self.tmp, 'saved_model')
    code, _, stderr = _finish(_start(f'--model={self.model}', f'--manifest={self.manifest}',
                                     f'--output={output}', f'--export_saved_model={saved_model}'))
    self.assertEqual(code, 0, msg=stderr[-3000:])
    self.assertRegex(stderr, r'WER \d+\.\d\d%  CER \d+\.\d\d%  \(2 utterances\)')
    with open(output) as f:
      lines = [line.rstrip('\n').split('\t') for line in f]
    self.assertEqual([path for path, _ in lines], [u.path for u in self.utterances])
    self.assertEqual(tf.saved_model.load(saved_model).feature_normalization.numpy(), b'cmn')
    # The SavedModel (greedy, arguments and --audio) and beam search with a word list.
    runs = [_start(f'--saved_model={saved_model}', self.utterances[0].path,
                   f'--audio={self.utterances[1].path}'),
            _start(f'--saved_model={saved_model}', f'--manifest={self.manifest}',
                   '--decoder=beam', '--beam_width=4', '--top_paths=4',
                   f'--word_list={self.words}')]
    code, stdout, stderr = _finish(runs[0])
    self.assertEqual(code, 0, msg=stderr[-3000:])
    self.assertEqual([line.split('\t') for line in stdout.splitlines()], lines)
    code, stdout, stderr = _finish(runs[1])
    self.assertEqual(code, 0, msg=stderr[-3000:])
    for line in stdout.splitlines():
      self.assertTrue(set(line.split('\t')[1].split()) <= {'yes', 'no'}, msg=line)

  def test_unreadable_audio_stops_naming_the_file_or_is_skipped(self):
    good = self.utterances[0].path
    runs = [_start(f'--model={self.model}', self.corrupt, good),
            _start(f'--model={self.model}', self.corrupt, good, '--skip_unreadable')]
    code, stdout, stderr = _finish(runs[0])
    self.assertNotEqual(code, 0)
    self.assertIn(self.corrupt, stderr)
    self.assertEqual(stdout, '')
    code, stdout, stderr = _finish(runs[1])
    self.assertEqual(code, 0, msg=stderr[-3000:])
    self.assertEqual([line.split('\t')[0] for line in stdout.splitlines()], [good])
    self.assertIn(f'Skipped {self.corrupt}', stderr)
    self.assertIn('1 of 2 files skipped', stderr)

  def test_bad_flags_and_files_are_named(self):
    # A few, in one interpreter (`start_up`): manifest and word-list lines are named by
    # `tests/speech/data/corpora_test.py` and `tests/speech/decoding_test.py`.
    audio = self.utterances[0].path
    model = f'--model={self.model}'
    cases = [
        ([model, f'--saved_model={self.tmp}', audio], '--model and --saved_model'),
        ([model, '--top_paths=2', audio], '--top_paths'),
        ([model, '/no/such/audio.wav'], '/no/such/audio.wav'),
        ([model, '--model_config=small', audio], '--model_config=small'),
    ]
    results = start_up.refusals('experiments.transcribe', [args for args, _ in cases],
                                env=_env(), cwd=_ROOT)
    for result, (args, expected) in zip(results, cases, strict=True):
      self.assertNotEqual(result.returncode, 0, msg=args)
      self.assertIn(expected, result.stderr + result.stdout, msg=args)


if __name__ == '__main__':
  absltest.main()
