"""The retriever binaries end to end, in subprocesses (as users run them): a short run of
`experiments.train_retriever` on the real fortunes corpus and MiniLM, its flag errors and MIPS
baseline, and a two-cell, one-seed `experiments.retriever_study`."""

import json
import os
import stat
import subprocess
import sys
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

from fedasr_tff.program import model_io
from fedasr_tff.retrieval import retriever as retriever_lib
from tests.experiments import start_up

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CACHE_HOME = tempfile.mkdtemp()
# Three categories of five fortunes each, 16 tokens: seconds, not minutes.
_SMALL = ('--max_classes=3', '--max_class_examples=5', '--min_class_examples=5',
          '--max_length=16')


def _env():
  # The default feature cache under a folder of the test's own, not the user's ~/.cache.
  return dict(os.environ, PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]),
              TF_CPP_MIN_LOG_LEVEL='2', XDG_CACHE_HOME=_CACHE_HOME)


def _run(module, *args, timeout=600, input=None):  # noqa: A002 (subprocess.run's name)
  return subprocess.run([sys.executable, '-m', module, *args], capture_output=True, text=True,
                        env=_env(), cwd=_ROOT, timeout=timeout, check=False, input=input)


class RetrieverBinariesTest(absltest.TestCase):

  def test_train_retriever_runs_reports_and_resumes(self):
    output_dir = os.path.join(tempfile.mkdtemp(), 'run')
    cache = os.path.join(os.path.dirname(output_dir), 'features')
    args = ('--output_dir=' + output_dir, '--rounds=2', '--local_dp=fixed', '--noprogress',
            f'--feature_cache_dir={cache}', *_SMALL)
    result = _run('experiments.train_retriever', *args)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    # K of the top-K accuracy: 3 by default, with 3 classes.
    self.assertIn('final top1', result.stdout)
    self.assertRegex(result.stdout, r'final top1 [\d.]+% top3 [\d.]+% macro_f1 [\d.]+% on \d+ '
                     'held-out examples of 3 classes')
    self.assertIn('features computed once in', result.stdout)
    self.assertIn(f', cached in {cache}', result.stdout)
    self.assertIn('Local DP', result.stdout)
    for name in ('metrics.csv', 'summary.json', 'config.json', 'model.npz', 'tensorboard',
                 'report.md', 'confusion.png', 'predictions.tsv'):
      self.assertTrue(os.path.exists(os.path.join(output_dir, name)), name)
    # model.npz names its tensors and records what rebuilds the retriever.
    metadata = model_io.read_metadata(os.path.join(output_dir, 'model.npz'))
    self.assertLen(json.loads(metadata['class_names']), 3)
    self.assertEqual((metadata['mode'], metadata['pooling'], metadata['max_length']),
                     ('classifier_only', 'mean', '16'))
    with open(os.path.join(output_dir, 'report.md')) as f:
      written = f.read()
    self.assertRegex(written, r'macro-F1 [\d.]+% on \d+ held-out examples of 3 classes')
    # Every line of every category file is accounted for, and what the flags left out counted.
    with open(os.path.join(output_dir, 'summary.json')) as f:
      inputs = json.load(f)['inputs']['corpus']
    total = inputs['total']
    self.assertEqual(total['lines'], total['header'] + total['blank'] + total['record_lines'])
    self.assertEqual(total['records'], total['kept'] + sum(total['skipped'].values()))
    self.assertGreater(total['kept'], 15)
    self.assertEqual(sum(inputs['left_out'].values()), total['kept'] - 15)  # 3 classes of 5
    self.assertIn('## Input files', written)
    self.assertIn('left out: class after the first --max_classes=3', written)
    # The held-out texts with the model's top-K classes: owner-only.
    predictions = os.path.join(output_dir, 'predictions.tsv')
    self.assertEqual(stat.S_IMODE(os.stat(predictions).st_mode), 0o600)
    with open(predictions) as f:
      self.assertTrue(f.readline().startswith('text\tlabel\tcorrect\tclass_1\tscore_1\t'))
    self._retrieves(os.path.join(output_dir, 'model.npz'))
    # Started again with more rounds: resumes from the checkpoint of round 2.
    resumed = _run('experiments.train_retriever', *args, '--rounds=3')
    self.assertEqual(resumed.returncode, 0, resumed.stderr[-3000:])
    self.assertIn('Resuming from the checkpoint of round 2', resumed.stdout + resumed.stderr)
    # The second run reads the frozen backbone's features back instead of computing them.
    self.assertIn(f'features read from the cache ({cache})', resumed.stdout)

  def _retrieves(self, model):
    queries = ['computers crash all the time', 'a recipe for cookies']
    result = _run('experiments.retrieve', f'--model={model}', '--format=jsonl', *queries)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    self.assertEqual([a['query'] for a in answers], queries)
    retriever = retriever_lib.load_retriever(model)
    for answer, expected in zip(answers, retriever.retrieve_texts(queries), strict=True):
      self.assertEqual([d['rank'] for d in answer['documents']], [1, 2, 3])  # K = 3 classes
      self.assertEqual([d['name'] for d in answer['documents']], [d['name'] for d in expected])
      scores = [d['score'] for d in answer['documents']]
      self.assertEqual(scores, sorted(scores, reverse=True))
    blank = _run('experiments.retrieve', f'--model={model}', input='\n  \n')
    self.assertNotEqual(blank.returncode, 0)
    self.assertEqual(blank.stdout, '')
    self.assertEqual(blank.stderr, 'retrieve: No query read from standard input (2 line(s), '
                     'all blank): give queries as arguments, in --queries_file, or on standard '
                     'input, one a line. Try --helpshort.\n')
    folder = os.path.dirname(model)
    documents = os.path.join(folder, 'documents.tsv')
    name = retriever.class_names[0]
    with open(documents, 'w') as f:
      f.write(f'{name}\tfirst\n\n{name}\tsecond\n')
    cases = [(['a query', ' '], 'retrieve: query 2 (argument 2) is empty'),
             ([''], 'retrieve: query 1 (argument 1) is empty'),
             ([f'--documents={documents}', 'q'], f'--documents {documents}:3: class {name!r} '
              'again (first at line 1)'),
             (['--top_k=4', 'q'], '--top_k: `k` (4) must be between 1 and the 3 classes')]
    results = start_up.refusals('experiments.retrieve', [[f'--model={model}', *args]
                                                         for args, _ in cases],
                                env=_env(), cwd=_ROOT)
    for result, (args, message) in zip(results, cases, strict=True):
      self.assertEqual(result.returncode, 1, args)
      self.assertEqual(result.stdout, '', args)
      self.assertLen(result.stderr.splitlines(), 1, (args, result.stderr))
      self.assertIn(message, result.stderr, args)
    # The SavedModel: plain tf.saved_model.load (with tensorflow-text's ops) gives the same.
    export_dir = os.path.join(os.path.dirname(model), 'saved_model')
    exported = _run('experiments.retrieve', f'--model={model}', f'--export_dir={export_dir}')
    self.assertEqual(exported.returncode, 0, exported.stderr[-3000:])
    loaded = tf.saved_model.load(export_dir)
    out = loaded.signatures['serving_default'](tf.constant(queries))
    library = retriever.retrieve(tf.constant(queries))
    np.testing.assert_array_equal(out['ids'].numpy(), library['ids'].numpy())
    np.testing.assert_array_equal(out['names'].numpy(), library['names'].numpy())
    np.testing.assert_allclose(out['scores'].numpy(), library['scores'].numpy(), rtol=1e-5)

  def test_flag_errors_name_the_flags_and_mips_baseline_prints(self):
    result = _run('experiments.train_retriever', '--output_dir=' + tempfile.mkdtemp(),
                  '--central_dp=fixed')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('--weighting', result.stderr)
    mips = _run('experiments.train_retriever', '--output_dir=' + tempfile.mkdtemp(),
                '--mips_baseline', *_SMALL)
    self.assertEqual(mips.returncode, 0, mips.stderr[-3000:])
    self.assertIn('MIPS on the frozen model', mips.stdout)

  def test_study_runs_two_cells_on_a_table_corpus_and_writes_the_table(self):
    # Any corpus the trainer reads, by its flags: here a CSV table of three topics.
    output_dir = tempfile.mkdtemp()
    corpus = os.path.join(output_dir, 'topics.csv')
    with open(corpus, 'w') as f:
      f.write('text,label\n')
      for topic in ('weather', 'football', 'cooking'):
        f.writelines(f'a short note about {topic} number {i},{topic}\n' for i in range(8))
    args = ('--output_dir=' + output_dir, '--seeds=0', '--cells=mips,fl', '--rounds=1',
            '--corpus=table', f'--corpus_path={corpus}', '--min_class_examples=5',
            '--max_class_examples=6', '--max_length=16')
    result = _run('experiments.retriever_study', *args)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(output_dir, 'results.md')) as f:
      table = f.read()
    self.assertIn('E1 MIPS on the frozen model', table)
    self.assertIn('FL, classifier only', table)
    with open(os.path.join(output_dir, 'fl_0', 'summary.json')) as f:
      self.assertEqual(json.load(f)['num_classes'], 3)
    # A second start reads the finished cells back instead of running them.
    again = _run('experiments.retriever_study', *args)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertNotIn('round 1/1', again.stdout)

if __name__ == '__main__':
  absltest.main()
