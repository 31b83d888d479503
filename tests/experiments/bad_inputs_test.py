"""A census of bad inputs across every binary under `experiments/` (docs/bad_input.md).

Each case is a command line of one binary with one thing wrong: a file missing, empty,
truncated, of the wrong format, encoding or sample rate, or with non-finite values; an unknown
column or label; an impossible combination of flags; an output path that cannot be a folder; an
output folder of another run. Each must end during start-up with a non-zero status, nothing on
stdout, one line on stderr (`PROGRAM: MESSAGE. Try --helpshort.`, `experiments.cli`; absl's two
lines for a flag it cannot parse) that names the cause, and no file created or changed under the
test's folder: the inputs and the output folders are compared, hash and mtime, before and after.
A refused run does not even create its (empty) output folder.

The cases of a binary run in one interpreter (`start_up.refusals`): importing TensorFlow costs
about 8 s of CPU an interpreter. With FEDASR_CENSUS_TABLE=PATH the rows of the docs' table
(binary, input, message as printed) are appended to PATH.
"""

import collections
import hashlib
import json
import os
import shutil
import sys
import tempfile

from absl.testing import absltest

from tests.experiments import bad_files
from tests.experiments import start_up

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TABLE = os.environ.get('FEDASR_CENSUS_TABLE')

# A case: what is wrong (the docs' table), the command line, the text its one line must hold,
# and whether absl refuses it while parsing the flags (its two standard lines).
Case = collections.namedtuple('Case', ['input', 'args', 'expected', 'flag_parse'],
                              defaults=[False])
_FLAG_PARSE_HINT = 'Pass --helpshort or --helpfull to see help on flags.'


def _env(cache_home):
  # As a user runs the binaries (TensorFlow's own log level untouched: its start-up lines are
  # the binaries' to keep off stderr); the caches in a folder of the test's own.
  env = dict(os.environ, XDG_CACHE_HOME=cache_home,
             PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  return env


def _snapshot(root):
  """{path under root: (kind, size, mtime, sha256)} of every file and folder."""
  seen = {}
  for folder, dirs, files in os.walk(root):
    for name in dirs:
      path = os.path.join(folder, name)
      seen[os.path.relpath(path, root)] = ('dir', os.lstat(path).st_mtime_ns)
    for name in files:
      path = os.path.join(folder, name)
      stat = os.lstat(path)
      with open(path, 'rb') as f:
        digest = hashlib.sha256(f.read()).hexdigest()
      seen[os.path.relpath(path, root)] = ('file', stat.st_size, stat.st_mtime_ns, digest)
  return seen


class BadInputsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.cache_home = tempfile.mkdtemp()   # Outside the compared folder: caches may be made.
    cls.files = bad_files.BadFiles(os.path.join(cls.tmp, 'inputs'))
    cls.out = os.path.join(cls.tmp, 'out')  # Each case's own output path, never created.

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp)
    shutil.rmtree(cls.cache_home)
    super().tearDownClass()

  def _output(self, name):
    """A case's own output folder (the folder must stay absent)."""
    return os.path.join(self.out, name)

  def _census(self, binary, cases):
    before = _snapshot(self.tmp)
    results = start_up.refusals(f'experiments.{binary}', [case.args for case in cases],
                                env=_env(self.cache_home), cwd=_ROOT)
    after = _snapshot(self.tmp)
    changed = sorted(path for path in set(before) | set(after)
                     if before.get(path) != after.get(path))
    rows = []
    for case, result in zip(cases, results, strict=True):
      lines = result.stderr.splitlines()
      rows.append((binary, case.input, lines[0] if lines else ''))
      with self.subTest(binary=binary, input=case.input):
        self.assertNotEqual(result.returncode, 0, msg=result.stderr)
        self.assertEqual(result.stdout, '', msg=result.stderr)
        if case.flag_parse:
          self.assertLen(lines, 2, msg=result.stderr)
          self.assertStartsWith(lines[0], 'FATAL Flags parsing error: ')
          self.assertEqual(lines[1], _FLAG_PARSE_HINT)
        else:
          self.assertLen(lines, 1, msg=result.stderr)
          self.assertStartsWith(lines[0], f'{binary}: ')
          self.assertEndsWith(lines[0], ' Try --helpshort.')
        self.assertIn(case.expected, lines[0] if lines else '')
    if _TABLE:
      with open(_TABLE, 'a', encoding='utf-8') as f:
        f.writelines(f'{json.dumps(row, ensure_ascii=False)}\n' for row in rows)
    self.assertEmpty(changed, f'{binary}: files created or changed by refused runs')

  def test_recipe(self):
    bad = self.files
    out = self._output('recipe')
    corpus = ['--layout=manifest', f'--corpus_dir={bad.folder}']
    self._census('recipe', [
        Case('--corpus_dir missing', [f'--output_dir={out}', '--corpus_dir=/no/such/corpus',
                                      '--split=train'], '/no/such/corpus'),
        Case('manifest (--split) without the speaker column',
             [f'--output_dir={out}', *corpus, f'--split={bad.no_speaker_tsv}'], 'speaker'),
        Case('manifest in Latin-1', [f'--output_dir={out}', *corpus,
                                     f'--split={bad.latin1_tsv}'], bad.latin1_tsv),
        Case('manifest comma-separated', [f'--output_dir={out}', *corpus,
                                          f'--split={bad.comma_tsv}'], bad.comma_tsv),
        Case('manifest empty', [f'--output_dir={out}', *corpus, f'--split={bad.empty_tsv}'],
             bad.empty_tsv),
        Case('manifest is a folder', [f'--output_dir={out}', *corpus, f'--split={bad.folder_wav}'],
             bad.folder_wav),
        Case('--held_out names an unknown speaker', [
            f'--output_dir={out}', *corpus, f'--split={bad.manifest}', '--held_out=nobody'],
             'nobody'),
        Case('--word_list in Latin-1', [f'--output_dir={out}', *corpus,
                                        f'--split={bad.manifest}',
                                        f'--word_list={bad.words_latin1}'], bad.words_latin1),
        Case('--output_dir under a regular file', [
            f'--output_dir={bad.under_file}', *corpus, f'--split={bad.manifest}'],
             '--output_dir'),
        Case('--output_dir of a run with other speaker roles', [
            f'--output_dir={bad.recipe_run}', *corpus, f'--split={bad.manifest}',
            '--split_seed=5'], 'speakers.json'),
        Case('--seed_steps 0', [f'--output_dir={out}', *corpus, f'--split={bad.manifest}',
                                '--seed_steps=0'], '--seed_steps'),
        Case('--sigma_dp negative', [f'--output_dir={out}', *corpus, f'--split={bad.manifest}',
                                     '--sigma_dp=-1'], '--sigma_dp'),
        Case('--synthetic_speakers with --layout', [
            f'--output_dir={out}', '--synthetic_speakers=6', '--layout=manifest'], '--layout'),
        Case('--layout unknown', [f'--output_dir={out}', '--layout=kaldi'], '--layout',
             flag_parse=True),
    ])

  def test_train_federated(self):
    bad = self.files
    out = self._output('train_federated')
    base = [f'--corpus_dir={bad.corpus}', f'--output_dir={out}', '--cohort_size=2']
    self._census('train_federated', [
        Case('--corpus_dir missing', [*base[1:], '--corpus_dir=/no/such/corpus'],
             '/no/such/corpus'),
        Case('--split folder missing', [*base, '--split=nosuch'], 'nosuch'),
        Case('--eval_split folder missing', [*base, '--eval_split=nosuch'], 'nosuch'),
        Case('--seed_model truncated', [*base, f'--seed_model={bad.truncated_model}'],
             bad.truncated_model),
        Case('--seed_model empty', [*base, f'--seed_model={bad.empty_model}'],
             bad.empty_model),
        Case('--seed_model with NaN weights', [*base, f'--seed_model={bad.nan_model}',
                                              '--feature_normalization=cmn'], 'non-finite'),
        Case('--seed_model of another --model_config', [
            *base, f'--seed_model={bad.small_model}', '--feature_normalization=cmn'], 'shape'),
        Case('--seed_model of other features', [*base, f'--seed_model={bad.model}',
                                                '--feature_normalization=utterance'],
             '--feature_normalization=cmn'),
        Case('--seed_model a folder', [*base, f'--seed_model={bad.folder_wav}'], bad.folder_wav),
        Case('manifest (--split) in UTF-16', [
            *base[1:], f'--corpus_dir={bad.folder}', '--layout=manifest',
            f'--split={bad.utf16_tsv}'], bad.utf16_tsv),
        Case('--output_dir under a regular file', [
            *base[:1], f'--output_dir={bad.under_file}', '--cohort_size=2'], '--output_dir'),
        Case('--output_dir of a run with another configuration', [
            *base[:1], f'--output_dir={bad.federated_run}', '--cohort_size=2',
            '--client_lr=0.7'], '--client_lr'),
        Case('--cohort_size above the training clients', [*base, '--cohort_size=10'],
             '--cohort_size (10) exceeds'),
        Case('--workers and --workers_file', [*base, '--workers=localhost:1',
                                              f'--workers_file={bad.workers_file}'],
             '--workers_file'),
        Case('--clients_in_parallel with --workers', [*base, '--workers=localhost:1',
                                                     '--clients_in_parallel=2'],
             '--clients_in_parallel'),
        Case('--worker_tls_key without --workers', [*base, f'--worker_tls_key={bad.a_file}'],
             '--worker_tls_key'),
        Case('manifest (--split) with a row of 4 fields', [
            *base[1:], f'--corpus_dir={bad.folder}', '--layout=manifest',
            f'--split={bad.wide_manifest}'],
             f'{bad.wide_manifest}:3: malformed row: 4 fields, not 3 as in the header'),
        Case('--speakers unknown', [*base, '--speakers=some'], '--speakers', flag_parse=True),
    ])

  def test_train_central(self):
    bad = self.files
    out = self._output('train_central')
    base = [f'--corpus_dir={bad.corpus}', f'--output_dir={out}']
    self._census('train_central', [
        Case('--split folder missing', [*base, '--split=nosuch'], 'nosuch'),
        Case('--seed_fraction above 1', [*base, '--seed_fraction=1.5'], '--seed_fraction'),
        Case('manifest (--split) without the speaker column', [
            f'--corpus_dir={bad.folder}', f'--output_dir={out}', '--layout=manifest',
            f'--split={bad.no_speaker_tsv}'], 'speaker'),
        Case('--output_dir under a regular file', [*base[:1], f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--output_dir a regular file', [*base[:1], f'--output_dir={bad.a_file}'],
             'is a file, not a folder'),
        Case('--workers given', [*base, '--workers=localhost:1'], '--workers'),
        Case('--steps not a number', [*base, '--steps=many'], '--steps', flag_parse=True),
    ])

  def test_evaluate(self):
    bad = self.files
    base = [f'--corpus_dir={bad.corpus}', '--eval_split=train', '--feature_cache_dir=none']
    self._census('evaluate', [
        Case('--model missing', [*base, '--model=/no/such/model.npz'], '/no/such/model.npz'),
        Case('--model with Inf weights', [*base, f'--model={bad.inf_model}'], 'non-finite'),
        Case('--model of another --model_config', [*base, f'--model={bad.small_model}'],
             '--model_config=tiny'),
        Case('--model a retriever\'s model.npz', [*base, f'--model={bad.retriever_model}'],
             bad.retriever_model),
        Case('--model not an npz', [*base, f'--model={bad.text_model}'], bad.text_model),
        Case('--eval_split folder missing', [*base[:1], '--eval_split=nosuch',
                                             f'--model={bad.model}'], 'nosuch'),
        Case('--word_list with two words on a line', [*base, f'--model={bad.model}',
                                                      f'--word_list={bad.words_two}'],
             f'{bad.words_two}:2'),
        Case('--per_speaker_csv under a regular file', [
            *base, f'--model={bad.model}',
            f'--per_speaker_csv={os.path.join(bad.a_file, "dev.csv")}'], '--per_speaker_csv'),
        Case('--top_paths without beam search', [*base, f'--model={bad.model}',
                                                 '--top_paths=2'], '--top_paths'),
    ])

  def test_transcribe(self):
    bad = self.files
    model = f'--model={bad.model}'
    self._census('transcribe', [
        Case('truncated FLAC', [model, bad.truncated_flac], bad.truncated_flac),
        Case('truncated WAV', [model, bad.truncated_wav], bad.truncated_wav),
        Case('WAV of sample rate 0', [model, bad.zero_rate_wav], bad.zero_rate_wav),
        Case('WAV of NaN samples', [model, bad.nan_wav], bad.nan_wav),
        Case('empty WAV', [model, bad.empty_wav], bad.empty_wav),
        Case('a folder named .wav', [model, bad.folder_wav], bad.folder_wav),
        Case('OGG (unsupported)', [model, bad.ogg], bad.ogg),
        Case('text named .mp3', [model, bad.text_mp3], bad.text_mp3),
        Case('--manifest in Latin-1', [model, f'--manifest={bad.latin1_tsv}'], bad.latin1_tsv),
        Case('--manifest empty', [model, f'--manifest={bad.empty_tsv}'], bad.empty_tsv),
        Case('--manifest a folder', [model, f'--manifest={bad.folder_wav}'], bad.folder_wav),
        Case('--model truncated', [f'--model={bad.truncated_model}', bad.flac],
             bad.truncated_model),
        Case('--model with NaN weights', [f'--model={bad.nan_model}', bad.flac], 'non-finite'),
        Case('--model records unknown features', [f'--model={bad.pcen_model}', bad.flac],
             'pcen'),
        Case('--saved_model not a SavedModel', [f'--saved_model={bad.folder}', bad.flac],
             '--saved_model'),
        Case('--word_list in Latin-1', [model, f'--word_list={bad.words_latin1}', bad.flac],
             bad.words_latin1),
        Case('--word_list lists no word', [model, f'--word_list={bad.words_blank}', bad.flac],
             bad.words_blank),
        Case('--output under a regular file', [
            model, f'--output={os.path.join(bad.a_file, "hyp.tsv")}', bad.flac], '--output'),
        Case('--output a folder', [model, f'--output={bad.folder}', bad.flac],
             'is a folder, not a file'),
        Case('--output an existing file, first audio unreadable', [
            model, f'--output={bad.a_file}', bad.truncated_flac], bad.truncated_flac),
        Case('--export_saved_model a non-empty folder', [
            model, f'--export_saved_model={bad.folder}'], '--export_saved_model'),
        Case('--model and --saved_model', [model, f'--saved_model={bad.folder}', bad.flac],
             '--saved_model'),
    ])

  def test_make_corpus(self):
    bad = self.files
    self._census('make_corpus', [
        Case('--output_dir not given', [], '--output_dir'),
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--output_dir of a corpus with that split', [f'--output_dir={bad.corpus_root}'],
             '--split'),
        Case('--words with a word the language cannot spell', [
            f'--output_dir={self._output("make_corpus")}', '--words=naïve,42'], '--words'),
        Case('--speakers 0', [f'--output_dir={self._output("make_corpus")}', '--speakers=0'],
             '--speakers', flag_parse=True),
    ])

  def test_train_retriever(self):
    bad = self.files
    out = self._output('train_retriever')
    self._census('train_retriever', [
        Case('--output_dir of a train_federated run', [
            f'--output_dir={bad.federated_run}', '--corpus=table',
            f'--corpus_path={bad.topics}', '--min_class_examples=5', '--max_length=16'],
             'holds a federated speech training run, not a retriever training run'),
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--corpus_path missing', [f'--output_dir={out}', '--corpus=table',
                                       '--corpus_path=/no/such/table.csv'], '/no/such/table.csv'),
        Case('--clients_in_parallel with --workers', [f'--output_dir={out}',
                                                     '--workers=localhost:1',
                                                     '--clients_in_parallel=2'],
             '--clients_in_parallel'),
        Case('--local_dp with --central_dp', [f'--output_dir={out}', '--local_dp=fixed',
                                              '--central_dp=fixed', '--weighting=uniform'],
             '--local_dp'),
        Case('--checkpoint_dir missing', [f'--output_dir={out}',
                                          '--checkpoint_dir=/no/such/checkpoint'],
             '/no/such/checkpoint'),
        Case('table (.tsv) with a tab inside a text', [
            f'--output_dir={out}', '--corpus=table', f'--corpus_path={bad.topics_tab}'],
             f'{bad.topics_tab}:14: malformed row: 3 fields, not 2 as in the header'),
        Case('table (.csv) with a quote left open', [
            f'--output_dir={out}', '--corpus=table', f'--corpus_path={bad.topics_open_quote}'],
             f'{bad.topics_open_quote}:8: malformed row: a field holds a line break'),
        Case('table without the label column', [
            f'--output_dir={out}', '--corpus=table', f'--corpus_path={bad.topics_no_label}'],
             'missing column(s) label'),
        Case('--malformed_rows unknown', [f'--output_dir={out}', '--malformed_rows=drop'],
             '--malformed_rows', flag_parse=True),
        Case('--mode unknown', [f'--output_dir={out}', '--mode=adapter'], '--mode',
             flag_parse=True),
    ])

  def test_retrieve(self):
    bad = self.files
    model = f'--model={bad.retriever_model}'
    self._census('retrieve', [
        Case('--model missing', ['--model=/no/such/model.npz', 'q'], '/no/such/model.npz'),
        Case('--model a speech model', [f'--model={bad.model}', 'q'], bad.model),
        Case('--model truncated', [f'--model={bad.truncated_model}', 'q'], bad.truncated_model),
        Case('--top_k above the classes', [model, '--top_k=3', 'q'], '--top_k'),
        Case('--documents line without a tab', [model, f'--documents={bad.documents_no_tab}',
                                                'q'], f'{bad.documents_no_tab}:1'),
        Case('--documents names an unknown class', [
            model, f'--documents={bad.documents_unknown}', 'q'], 'sports'),
        Case('--documents in Latin-1', [model, f'--documents={bad.documents_latin1}', 'q'],
             bad.documents_latin1),
        Case('--export_dir with queries', [model, f'--export_dir={self._output("retrieve")}',
                                           'q'], '--export_dir'),
        Case('--export_dir under a regular file', [model, f'--export_dir={bad.under_file}'],
             '--export_dir'),
        Case('--workers given', [model, '--workers=localhost:1', 'q'], '--workers'),
        Case('a blank query', [model, 'q', '  '], 'query 2 (argument 2) is empty'),
        Case('--queries_file of blank lines', [model, f'--queries_file={bad.queries_blank}'],
             'No query read from --queries_file'),
        Case('--queries_file in Latin-1', [model, f'--queries_file={bad.queries_latin1}'],
             f'{bad.queries_latin1}:1: not UTF-8'),
        Case('--documents names a class twice', [model, f'--documents={bad.documents_twice}',
                                                 'q'], f'{bad.documents_twice}:3: class '),
    ])

  def test_retriever_study(self):
    bad = self.files
    out = self._output('retriever_study')
    self._census('retriever_study', [
        Case('--cells unknown', [f'--output_dir={out}', '--cells=mips,best'], 'best'),
        Case('--seeds not integers', [f'--output_dir={out}', '--seeds=0,one'], '--seeds'),
        Case('--seeds repeated', [f'--output_dir={out}', '--seeds=1,1'], '--seeds'),
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--test_fraction above 1', [f'--output_dir={out}', '--test_fraction=1.5',
                                         '--cells=mips'], '--test_fraction'),
        Case('--clients 1', [f'--output_dir={out}', '--clients=1'], '--clients',
             flag_parse=True),
    ])

  def test_audit(self):
    bad = self.files
    out = self._output('audit')
    self._census('audit', [
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}',
                                                   '--noise_multiplier=1'], '--output_dir'),
        Case('--sigma_dp negative', [f'--output_dir={out}', '--sigma_dp=-1'], '--sigma_dp'),
        Case('client noise with a cohort short of the canaries', [
            f'--output_dir={out}', '--noise_multiplier=1', '--noise_placement=client',
            '--sampling=fixed', '--cohort_size=8', '--canaries=10'], '--canaries'),
        Case('--workers given', [f'--output_dir={out}', '--workers=localhost:1'], '--workers'),
        Case('--model_config unknown', [f'--output_dir={out}', '--model_config=huge'],
             '--model_config', flag_parse=True),
    ])

  def test_ablation(self):
    bad = self.files
    out = self._output('ablation')
    self._census('ablation', [
        Case('--server_lrs not optimizer:rate', [f'--output_dir={out}',
                                                 '--server_lrs=lamb:fast,adam:0.002,sgd:5'],
             "'lamb:fast'"),
        Case('--optimizers unknown', [f'--output_dir={out}', '--optimizers=lamb,adagrad'],
             'adagrad'),
        Case('--clippings none', [f'--output_dir={out}', '--clippings=none'], '--clippings'),
        Case('--seeds repeated', [f'--output_dir={out}', '--seeds=0,0'], '--seeds'),
        Case('--cohort_size 0', [f'--output_dir={out}', '--cohort_size=0'], '--cohort_size'),
        Case('--server_lr given', [f'--output_dir={out}', '--server_lr=0.1'], '--server_lr'),
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--workers given', [f'--output_dir={out}', '--workers=localhost:1'], '--workers'),
    ])

  def test_privacy_table(self):
    bad = self.files
    self._census('privacy_table', [
        Case('--csv missing', ['--csv=/no/such/rows.csv'], '/no/such/rows.csv'),
        Case('--csv without the epsilon column', [f'--csv={bad.privacy_no_epsilon}'], 'epsilon'),
        Case('--csv tab-separated', [f'--csv={bad.privacy_tsv}'], bad.privacy_tsv),
        Case('--csv in Latin-1', [f'--csv={bad.privacy_latin1}'], bad.privacy_latin1),
        Case('--csv with z = NaN', [f'--csv={bad.privacy_nan}'], "'z'"),
        Case('--csv with a word for S', [f'--csv={bad.privacy_word}'], 'line 2'),
        Case('--csv empty', [f'--csv={bad.empty}'], bad.empty),
        Case('--cohort_size above --population', [
            '--steps=10', '--noise_multiplier=1', '--cohort_size=10', '--population=5'],
             '--population'),
        Case('--noise_multiplier and --sigma_dp', [
            '--steps=10', '--noise_multiplier=1', '--sigma_dp=1e-3', '--cohort_size=2',
            '--population=5'], 'sigma_dp', flag_parse=True),
        Case('--accountants unknown', ['--accountants=moments'], '--accountants',
             flag_parse=True),
    ])

  def test_dga_speech(self):
    bad = self.files
    out = self._output('dga_speech')
    self._census('dga_speech', [
        Case('--dp_modes unknown', [f'--output_dir={out}', '--dp_modes=dp,strong'], 'strong'),
        Case('--noisy_speakers above 1', [f'--output_dir={out}', '--noisy_speakers=1.5'],
             '--noisy_speakers'),
        Case('--corpus_dir a regular file', [f'--output_dir={out}',
                                             f'--corpus_dir={bad.a_file}'], '--corpus_dir'),
        Case('--output_dir of a study whose seed model has other settings', [
            f'--output_dir={bad.study_run}', f'--corpus_dir={bad.corpus_root}'],
             '--seed_steps=7'),
        Case('--output_dir of a study whose seed model is truncated', [
            f'--output_dir={bad.damaged_study_run}', f'--corpus_dir={bad.corpus_root}'],
             'damaged'),
        Case('--rounds 0', [f'--output_dir={out}', '--rounds=0'], '--rounds'),
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--workers given', [f'--output_dir={out}', '--workers=localhost:1'], '--workers'),
    ])

  def test_dga_toys(self):
    bad = self.files
    self._census('dga_toys', [
        Case('--dga_runs unknown', ['--dga_runs=fedavg,fedprox'], 'fedprox'),
        Case('--dga_noisy_fraction 1', ['--dga_noisy_fraction=1'], '--dga_noisy_fraction'),
        Case('--dga_results_dir under a regular file', [
            f'--dga_results_dir={bad.under_file}'], '--dga_results_dir'),
        Case('an argument', ['extra'], 'extra'),
        Case('--dga_clients 1', ['--dga_clients=1'], '--dga_clients', flag_parse=True),
    ])

  def test_mixed_fl_speech(self):
    bad = self.files
    out = self._output('mixed_fl_speech')
    self._census('mixed_fl_speech', [
        Case('--algorithms unknown', [f'--output_dir={out}', '--algorithms=parallel,three_way'],
             'three_way'),
        Case('--seed_lr 0', [f'--output_dir={out}', '--seed_lr=0'], '--seed_lr'),
        Case('--dp_modes unknown', [f'--output_dir={out}', '--dp_modes=none'], 'none'),
        Case('--corpus_dir a regular file', [f'--output_dir={out}',
                                             f'--corpus_dir={bad.a_file}'], '--corpus_dir'),
        Case('--output_dir of a study whose seed model has other settings', [
            f'--output_dir={bad.study_run}', f'--corpus_dir={bad.corpus_root}'],
             '--seed_steps=7'),
        Case('--output_dir under a regular file', [f'--output_dir={bad.under_file}'],
             '--output_dir'),
        Case('--workers given', [f'--output_dir={out}', '--workers=localhost:1'], '--workers'),
    ])

  def test_mixed_fl_toys(self):
    bad = self.files
    self._census('mixed_fl_toys', [
        Case('--results_dir under a regular file', [f'--results_dir={bad.under_file}'],
             '--results_dir'),
        Case('an argument', ['extra'], 'extra'),
        Case('--toy unknown', ['--toy=cubic'], '--toy', flag_parse=True),
        Case('--toy_seeds 0', ['--toy_seeds=0'], '--toy_seeds', flag_parse=True),
    ])


if __name__ == '__main__':
  absltest.main()
