"""Tiny bad inputs of real formats for the census of bad inputs (`bad_inputs_test.py`).

`BadFiles(folder)` writes, in a few seconds and without training: a four-speaker synthetic
corpus (LibriSpeech layout, with copies of its split under the studies' split names) and its
manifest; audio cut short, at sample rate 0, of NaN samples, empty, unsupported; manifests,
word lists, privacy tables and document lists of the wrong encoding, separator or columns;
weights files (`model_io`'s writer, fresh weights) truncated, non-finite, of another
configuration or features, and a retriever's; output folders of other runs.
"""

import collections
import json
import os
import shutil
import struct

import numpy as np

from fedasr_tff.program import model_io
from fedasr_tff.program import run_record
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data
from fedasr_tff.speech import data_config
from fedasr_tff.speech import federated_training
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic

# The splits of the studies (dga_speech, mixed_fl_speech), copies of the corpus's one split.
_STUDY_SPLITS = ('train_seed', 'train_clients', 'dev', 'train_server', 'dev_server',
                 'dev_clients')
_Weights = collections.namedtuple('_Weights', ['trainable', 'non_trainable'])


def write(path, text, encoding='utf-8'):
  """Writes `text` to `path` in `encoding`; returns the path."""
  with open(path, 'w', encoding=encoding, newline='') as f:
    f.write(text)
  return path


def wav(path, rate, samples, *, float_samples=False):
  """A mono WAV of 16-bit PCM or 32-bit IEEE float samples, its header written by hand so that
  any rate (0 too) and any sample (NaN too) can be stored; returns the path."""
  payload = np.asarray(samples, np.float32 if float_samples else np.int16).tobytes()
  audio_format, width = (3, 4) if float_samples else (1, 2)
  header = b'RIFF' + struct.pack('<I', 36 + len(payload)) + b'WAVEfmt '
  header += struct.pack('<IHHIIHH', 16, audio_format, 1, rate, rate * width, width, 8 * width)
  with open(path, 'wb') as f:
    f.write(header + b'data' + struct.pack('<I', len(payload)) + payload)
  return path


def truncated(source, path, keep=None):
  """The first `keep` bytes of `source` (default half of them) written to `path`."""
  with open(source, 'rb') as f:
    content = f.read()
  with open(path, 'wb') as f:
    f.write(content[:len(content) // 2 if keep is None else keep])
  return path


class BadFiles:
  """The inputs, each an attribute holding its path (module docstring)."""

  def __init__(self, folder):
    self.folder = folder
    os.makedirs(folder, exist_ok=True)
    self._corpus()
    self._audio()
    self._models()
    self._texts()
    self._runs()

  def path(self, name):
    return os.path.join(self.folder, name)

  def _corpus(self):
    # Four speakers of one utterance each.
    self.corpus_root = self.path('corpus')
    synthetic.make_corpus(self.corpus_root, num_speakers=4, mean_utterances=1, skew=0.0, seed=0,
                          words_per_utterance=(1, 1))
    self.corpus = os.path.join(self.corpus_root, 'librispeech')
    for split in _STUDY_SPLITS:
      shutil.copytree(os.path.join(self.corpus, 'train'), os.path.join(self.corpus, split))
    # dga_speech corrupts its client split's transcripts once, and marks it so.
    write(os.path.join(self.corpus, 'corrupted_speakers.json'), '[]')
    self.utterances = data.read_librispeech(self.corpus, 'train')
    self.manifest = write(self.path('all.tsv'), 'path\ttranscript\tspeaker\n' + ''.join(
        f'{u.path}\t{u.transcript}\tspk{u.speaker}\n' for u in self.utterances))

  def _audio(self):
    self.flac = self.utterances[0].path
    self.truncated_flac = truncated(self.flac, self.path('truncated.flac'), keep=100)
    good_wav = wav(self.path('good.wav'), 16000, np.zeros(16000))
    self.truncated_wav = truncated(good_wav, self.path('truncated.wav'), keep=30)
    self.zero_rate_wav = wav(self.path('zero_rate.wav'), 0, np.zeros(1600))
    self.nan_wav = wav(self.path('nan.wav'), 16000, np.full(1600, np.nan), float_samples=True)
    self.empty_wav = write(self.path('empty.wav'), '')
    self.folder_wav = self.path('folder.wav')
    os.makedirs(self.folder_wav)
    self.ogg = write(self.path('speech.ogg'), 'OggS')
    self.text_mp3 = write(self.path('text.mp3'), 'not audio at all\n')

  def _models(self):
    size = data.Vocabulary('en').size
    tiny = models.build_ctc_transformer('tiny', size)
    weights = model_io.model_weights(tiny)
    cmn = data_config.model_metadata('cmn')

    def with_value(index, value):
      return _Weights([np.full_like(w, value) if i == index else w
                       for i, w in enumerate(weights.trainable)], weights.non_trainable)

    self.model = self.path('model.npz')   # Trained on "cmn" features, as its metadata says.
    model_io.save_weights(self.model, tiny, weights, cmn)
    self.nan_model = self.path('nan.npz')
    model_io.save_weights(self.nan_model, tiny, with_value(0, np.nan), cmn)
    self.inf_model = self.path('inf.npz')
    model_io.save_weights(self.inf_model, tiny, with_value(1, np.inf), cmn)
    self.pcen_model = self.path('pcen.npz')   # Features no binary computes.
    model_io.save_weights(self.pcen_model, tiny, weights, {data_config.FEATURES_METADATA: 'pcen'})
    small = models.build_ctc_transformer('small', size)
    self.small_model = self.path('small.npz')
    model_io.save_weights(self.small_model, small, model_io.model_weights(small), cmn)
    self.truncated_model = truncated(self.model, self.path('truncated.npz'))
    self.empty_model = write(self.path('empty.npz'), '')
    self.text_model = write(self.path('text.npz'), 'weights\n')
    # A retriever's model.npz: a linear head on MiniLM's 384 features, two classes.
    self.retriever_model = self.path('retriever.npz')
    model_io.save_named_weights(
        self.retriever_model, (['head/classifier/kernel', 'head/classifier/bias'], []),
        _Weights([np.random.default_rng(0).normal(size=(384, 2)).astype(np.float32),
                  np.zeros(2, np.float32)], []),
        {'class_names': json.dumps(['cooking', 'weather']), 'mode': 'classifier_only',
         'head': 'linear', 'hidden_size': '', 'pooling': 'mean', 'max_length': '16',
         'checkpoint_dir': ''})

  def _texts(self):
    self.a_file = write(self.path('a_file.txt'), 'a regular file\n')
    self.under_file = os.path.join(self.a_file, 'out')   # No folder can be made there.
    self.empty = write(self.path('empty.txt'), '')
    header, line = 'path\ttranscript\tspeaker\n', f'{self.flac}\tcafé\tspk1\n'
    self.latin1_tsv = write(self.path('latin1.tsv'), header + line, 'latin-1')
    self.utf16_tsv = write(self.path('utf16.tsv'), header + line, 'utf-16')
    self.no_speaker_tsv = write(self.path('no_speaker.tsv'),
                                f'path\ttranscript\n{self.flac}\tyes\n')
    self.comma_tsv = write(self.path('comma.tsv'), f'path,transcript,speaker\n{self.flac},yes,s\n')
    self.empty_tsv = write(self.path('empty.tsv'), '')
    self.words_latin1 = write(self.path('words_latin1.txt'), 'café\nyes\n', 'latin-1')
    self.words_two = write(self.path('words_two.txt'), 'yes\nno way\n')
    self.words_blank = write(self.path('words_blank.txt'), '\n\n')
    columns, row = 'table,setting,z,S,K,T,epsilon\n', '1,a,0.6,2048,69506,2034,7.2\n'
    self.privacy_no_epsilon = write(self.path('privacy_no_epsilon.csv'),
                                    'table,setting,z,S,K,T\n1,a,0.6,2048,69506,2034\n')
    self.privacy_tsv = write(self.path('privacy.tsv'),
                             (columns + row).replace(',', '\t'))
    self.privacy_latin1 = write(self.path('privacy_latin1.csv'),
                                columns + row.replace(',a,', ',café,'), 'latin-1')
    self.privacy_nan = write(self.path('privacy_nan.csv'), columns + row.replace('0.6', 'nan'))
    self.privacy_word = write(self.path('privacy_word.csv'), columns + row.replace('2048', 'many'))
    self.documents_no_tab = write(self.path('documents_no_tab.tsv'), 'cooking recipes\n')
    self.documents_unknown = write(self.path('documents_unknown.tsv'),
                                   'cooking\trecipes\nsports\tfootball\n')
    self.documents_latin1 = write(self.path('documents_latin1.tsv'), 'cooking\tcafé\n',
                                  'latin-1')
    self.workers_file = write(self.path('workers.txt'), 'localhost:1\n')
    self.topics = write(self.path('topics.csv'), 'text,label\n' + ''.join(
        f'a short note about {topic} number {i},{topic}\n'
        for topic in ('weather', 'football', 'cooking') for i in range(8)))
    # The readers' traps: a row of another width, a quote left open, a duplicated class.
    self.wide_manifest = write(self.path('wide.tsv'), f'path\ttranscript\tspeaker\n'
                               f'{self.flac}\tyes\tspk1\n{self.flac}\ta\ttab\tspk2\n')
    self.topics_tab = write(self.path('topics_tab.tsv'), 'text\tlabel\n' + ''.join(
        f'a note about {topic} {i}\t{topic}\n' for topic in ('weather', 'cooking')
        for i in range(6)) + 'a note\twith a tab\tweather\n')
    self.topics_open_quote = write(self.path('topics_open_quote.csv'), 'text,label\n' + ''.join(
        f'a note about {topic} {i},{topic}\n' for topic in ('weather', 'cooking')
        for i in range(6)).replace('a note about cooking 0', '"a note about cooking 0', 1)
        + 'closed",weather\n')
    self.topics_no_label = write(self.path('topics_no_label.csv'), 'text,topic\nx,weather\n')
    self.queries_blank = write(self.path('queries_blank.txt'), '\n   \n')
    self.queries_latin1 = write(self.path('queries_latin1.txt'), 'a café\n', 'latin-1')
    self.documents_twice = write(self.path('documents_twice.tsv'),
                                 'cooking\trecipes\n\ncooking\tmore recipes\n')

  def _runs(self):
    # A federated speech run's folder: its record as the runner writes it (a default
    # configuration on the corpus's speakers).
    self.federated_run = self.path('federated_run')
    run_record.check_or_write(self.federated_run, federated_training._run_record(  # noqa: SLF001
        config_lib.FederatedConfig(), [u.speaker for u in self.utterances], None))
    # A recipe's folder whose speakers.json holds other roles than any flags give.
    self.recipe_run = self.path('recipe_run')
    os.makedirs(self.recipe_run)
    write(os.path.join(self.recipe_run, 'speakers.json'), json.dumps(
        {'held_out': ['1000'], 'seed': ['1001'], 'federated': ['1002', '1003']}))
    # A study's folder whose seed model was trained with other settings.
    self.study_run = self.path('study_run')
    os.makedirs(os.path.join(self.study_run, 'seed'))
    shutil.copy(self.model, os.path.join(self.study_run, 'seed', 'model.npz'))
    write(os.path.join(self.study_run, 'seed', 'seed_settings.json'), json.dumps(
        {'seed_steps': 7, 'seed_lr': 0.002, 'seed_warmup_steps': 0, 'model_config': 'tiny',
         'seed': 0, 'spec_augment': True}))
    # A study's folder whose seed model is cut short (and older than settings files).
    self.damaged_study_run = self.path('damaged_study_run')
    os.makedirs(os.path.join(self.damaged_study_run, 'seed'))
    truncated(self.model, os.path.join(self.damaged_study_run, 'seed', 'model.npz'))
