import asyncio
import math
import os
import re
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from experiments import report
from fedasr_tff import reading
from tests.experiments import png

_BLOCK_LAYERS = ('ln1/gamma', 'ln1/beta', 'wqkv/kernel', 'wf/kernel', 'ln2/gamma', 'ln2/beta',
                 'w1/kernel', 'w2/kernel')
_OUTER_LAYERS = ('conv/conv/kernel', 'conv/conv/bias', 'input_norm/scale', 'input_norm/bias',
                 'final_ln/gamma', 'final_ln/beta', 'output/kernel', 'output/bias')


def _release_all(csv_path, releases):
  """Writes `releases` [(key, value)] with TFF's own CSV release manager."""
  manager = tff.program.CSVFileReleaseManager(csv_path)
  for key, value in releases:
    asyncio.run(manager.release(value, key))
  return csv_path


def _eval(wer, cer, epsilon=None):
  value = {'eval': {'loss': 10.0 * wer, 'wer': wer, 'cer': cer}}
  if epsilon is not None:
    value['privacy'] = {'epsilon_declared_rdp': epsilon, 'epsilon_declared_pld': 0.8 * epsilon,
                        'projected_epsilon_declared_rdp': 3 * epsilon,
                        'projected_epsilon_declared_pld': 2.4 * epsilon,
                        'epsilon_run_rdp': 1e5 * epsilon, 'epsilon_run_pld': 8e4 * epsilon}
  return value


def _train(round_num, layers, client=True, adaptive=False, released=False):
  """A round's released values: client statistics under `client/` (as the runner releases them
  in runs without noise or with the opt-in); adaptive clips (the noised state) and the norms of
  the noised average update (`released`) without."""
  value = {'dp': {'noise_stddev': 0.01, 'clip': 1.0}, 'time': {'round_seconds': 1.5}}
  per_layer = {}
  for i, layer in enumerate(layers):
    # Flat keys with slashes flatten to the same column names as the runner's nested ones.
    per_layer[f'{layer}/norm_before_clip'] = (i + 1) * round_num
    per_layer[f'{layer}/norm_after_clip'] = min((i + 1) * round_num, 3.0)
    per_layer[f'{layer}/clipped_fraction'] = 1.0 if (i + 1) * round_num > 3 else 0.0
  if client:
    value['client'] = {'train': {'loss': 5.0 / round_num, 'examples': 64, 'delta_norm': 2.0},
                       'dp': {'clipped_fraction': 0.5}, 'per_layer': per_layer}
  public = {}
  if adaptive:
    public.update({f'{layer}/clip': 0.1 * (i + 1) / round_num for i, layer in enumerate(layers)})
  if released:
    public.update({f'{layer}/released_norm': 0.2 * (i + 1) for i, layer in enumerate(layers)})
    public.update({f'{layer}/noise_norm': 0.01 * (i + 1) for i, layer in enumerate(layers)})
  if public:
    value['per_layer'] = public
  return value


def _merge(*values):
  merged = {}
  for value in values:
    merged.update(value)
  return merged


def _run(csv_path, layers, dp=True, **train_kwargs):
  """Rounds 0..4; evaluation (and accounting) at rounds 0, 2 and 4 only."""
  eps = (lambda r: 0.5 * r + 0.1) if dp else (lambda r: None)
  return _release_all(csv_path, [
      (0, _eval(0.95, 0.80, eps(0))),
      (1, _train(1, layers, **train_kwargs)),
      (2, _merge(_train(2, layers, **train_kwargs), _eval(0.60, 0.30, eps(2)))),
      (3, _train(3, layers, **train_kwargs)),
      (4, _merge(_train(4, layers, **train_kwargs), _eval(0.40, 0.20, eps(4)))),
  ])


def _model_layers(num_blocks=2):
  blocks = [f'block_{b:02d}/{layer}' for b in range(num_blocks) for layer in _BLOCK_LAYERS]
  return blocks + list(_OUTER_LAYERS)


class ReportTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # absltest's create_tempdir needs parsed flags, which pytest does not give it.
    self.dir = self.enterContext(tempfile.TemporaryDirectory())

  def path(self, name):
    return os.path.join(self.dir, name)

  def write_file(self, name, content):
    with open(self.path(name), 'w') as f:
      f.write(content)
    return self.path(name)

  def assertPng(self, png_path):
    png.assert_png(self, png_path)

  def test_read_metrics_parses_empty_cells_as_nan(self):
    csv_path = _run(self.path('dp.csv'), ['all'])
    metrics = report.read_metrics(csv_path)
    self.assertEqual(next(iter(metrics)), 'key')
    np.testing.assert_array_equal(metrics['key'], [0, 1, 2, 3, 4])
    self.assertTrue(np.issubdtype(metrics['key'].dtype, np.integer))
    np.testing.assert_array_equal(metrics['eval/wer'], [0.95, np.nan, 0.60, np.nan, 0.40])
    np.testing.assert_array_equal(metrics['client/train/loss'],
                                  [np.nan, 5.0, 2.5, 5 / 3, 1.25])
    np.testing.assert_array_equal(metrics['client/train/examples'], [np.nan, 64, 64, 64, 64])
    np.testing.assert_array_equal(metrics['client/per_layer/all/norm_after_clip'],
                                  [np.nan, 1.0, 2.0, 3.0, 3.0])
    np.testing.assert_allclose(metrics['privacy/epsilon_declared_pld'],
                               [0.08, np.nan, 0.88, np.nan, 1.68])
    self.assertEqual(metrics['eval/cer'].dtype, np.float64)

  def test_read_metrics_errors_name_the_file(self):
    missing = self.path('missing.csv')
    with self.assertRaisesRegex(ValueError, re.escape(missing)):
      report.read_metrics(missing)
    no_key = self.write_file('no_key.csv', 'round,eval/wer\n1,0.5\n')
    with self.assertRaisesRegex(ValueError, re.escape(no_key) + '.*`key` column'):
      report.read_metrics(no_key)
    empty = self.write_file('empty.csv', '')
    with self.assertRaisesRegex(ValueError, re.escape(empty)):
      report.read_metrics(empty)
    not_scalar = self.write_file('vector.csv', 'key,x\n1,"[1, 2]"\n')
    with self.assertRaisesRegex(ValueError, re.escape(not_scalar) + ".*'x'"):
      report.read_metrics(not_scalar)

  def test_error_rate_plot(self):
    runs = {'FL, no noise': _run(self.path('fl.csv'), ['all'], dp=False),
            'FL + DP': _run(self.path('dp.csv'), ['all'])}
    png = self.path('plots/error_rates.png')
    self.assertEqual(report.plot_error_rates(runs, png), png)
    self.assertPng(png)
    # A reference (the seed model) is drawn as a line of its own.
    with_seed = self.path('plots/with_seed.png')
    report.plot_error_rates(runs, with_seed, references={'seed model': (0.9, 0.45)})
    self.assertPng(with_seed)
    with open(png, 'rb') as a, open(with_seed, 'rb') as b:
      self.assertNotEqual(a.read(), b.read())

  def test_error_rate_plot_rejects_a_run_without_error_rates(self):
    no_eval = _release_all(self.path('no_eval.csv'), [(1, _train(1, ['all']))])
    with self.assertRaisesRegex(ValueError, re.escape(no_eval)):
      report.plot_error_rates({'broken': no_eval}, self.path('error_rates.png'))
    with self.assertRaisesRegex(ValueError, 'at least one run'):
      report.plot_error_rates({}, self.path('error_rates.png'))

  def test_layer_norm_plot(self):
    csv_path = _run(self.path('per_layer.csv'), _model_layers())
    png = self.path('layer_norms.png')
    self.assertEqual(report.plot_layer_norms(csv_path, png), png)
    self.assertPng(png)

  def test_layer_norm_plot_from_the_noised_clip_trajectory_alone(self):
    # A DP run with adaptive clipping and no client statistics: only the clips, which are the
    # noised state, are released per layer, and the figure draws them.
    layers = _model_layers()
    csv_path = _run(self.path('adaptive.csv'), layers, client=False, adaptive=True)
    metrics = report.read_metrics(csv_path)
    self.assertFalse([c for c in metrics if c.startswith('client/')])
    self.assertEqual(set(report._per_layer_columns(metrics)), {'clip'})
    png = self.path('layer_norms.png')
    self.assertEqual(report.plot_layer_norms(csv_path, png), png)
    self.assertPng(png)

  def test_layer_norm_plot_from_the_released_update_alone(self):
    # A DP run with fixed clips and no client statistics: the per-layer norms of its noised
    # average update and their expected noise part, and the title says they are released ones.
    csv_path = _run(self.path('dp_released.csv'), _model_layers(), client=False, released=True)
    metrics = report.read_metrics(csv_path)
    self.assertFalse([c for c in metrics if c.startswith('client/')])
    self.assertEqual(set(report._per_layer_columns(metrics)), {'released_norm', 'noise_norm'})
    titles = []
    real_suptitle = report.mpl_figure.Figure.suptitle

    def spy(fig, text, *args, **kwargs):
      titles.append(text)
      return real_suptitle(fig, text, *args, **kwargs)

    png = self.path('layer_norms.png')
    with absltest.mock.patch.object(report.mpl_figure.Figure, 'suptitle', spy):
      self.assertEqual(report.plot_layer_norms(csv_path, png, label='FL + DP'), png)
    self.assertPng(png)
    self.assertIn('released quantities only', titles[0])
    self.assertNotIn('exact client statistics', titles[0])

  def test_layer_norm_plot_skips_global_clipping_and_missing_data(self):
    png = self.path('layer_norms.png')
    self.assertIsNone(report.plot_layer_norms(_run(self.path('all.csv'), ['all']), png))
    no_layers = _release_all(self.path('eval_only.csv'), [(0, _eval(0.9, 0.5))])
    self.assertIsNone(report.plot_layer_norms(no_layers, png))
    self.assertFalse(os.path.exists(png))

  def test_layers_grouped_by_parameter_type_and_block(self):
    layers = _model_layers(num_blocks=3)
    series = report._block_series(layers)
    self.assertLen(series, len(_BLOCK_LAYERS))
    self.assertEqual(series[('wqkv', 'kernel')],
                     {0: 'block_00/wqkv/kernel', 1: 'block_01/wqkv/kernel',
                      2: 'block_02/wqkv/kernel'})
    self.assertEqual(series[('ln1', 'beta')][2], 'block_02/ln1/beta')
    self.assertEqual(report._outer_layers(layers),
                     ['input_norm/scale', 'input_norm/bias', 'conv/conv/kernel',
                      'conv/conv/bias', 'final_ln/gamma', 'final_ln/beta', 'output/kernel',
                      'output/bias'])
    # Forward-pass order of the block parameters, weights before biases within one.
    self.assertEqual(sorted(series, key=report._series_order)[:4],
                     [('ln1', 'gamma'), ('ln1', 'beta'), ('wqkv', 'kernel'), ('wf', 'kernel')])

  def test_layer_norm_profile_pools_blocks_rounds_and_runs_in_forward_order(self):
    layers = _model_layers(num_blocks=2)
    one = _run(self.path('one.csv'), layers)
    # Layer i's norm before clipping is (i + 1) x round: a mean of 2.5 (i + 1) over rounds 1-4.
    profile = report.layer_norm_profile([one])
    self.assertEqual(list(profile)[:3], ['ln1 gamma', 'ln1 beta', 'wqkv kernel'])
    self.assertEqual(list(profile)[len(_BLOCK_LAYERS):len(_BLOCK_LAYERS) + 2],
                     ['input_norm/scale', 'input_norm/bias'])
    # ln1 gamma is layer 0 in block 0 and layer 8 in block 1: (2.5 + 22.5) / 2.
    self.assertAlmostEqual(profile['ln1 gamma'], 12.5)
    self.assertAlmostEqual(profile['output/bias'], 2.5 * (layers.index('output/bias') + 1))
    # Two identical runs pool to the same means.
    two = _run(self.path('two.csv'), layers)
    self.assertEqual(report.layer_norm_profile([one, two]), profile)
    self.assertEqual(report.layer_norm_profile([_run(self.path('all.csv'), ['all'])]), {})

  def test_study_plot(self):
    png = self.path('study.png')
    rates = {'CER (%)': {'a': (30.0, 1.0), 'b': (35.0, 2.0)}, 'WER (%)': {'a': (90.0, 3.0)}}
    profile = report.layer_norm_profile([_run(self.path('one.csv'), _model_layers())])
    self.assertEqual(report.plot_study(rates, {'a': profile}, png, 'exact client statistics'),
                     png)
    self.assertPng(png)
    with self.assertRaisesRegex(ValueError, 'error_rates'):
      report.plot_study({}, {}, png, '')

  def test_privacy_plot_only_for_dp_runs(self):
    png = self.path('privacy.png')
    self.assertIsNone(report.plot_privacy(_run(self.path('fl.csv'), ['all'], dp=False), png))
    self.assertFalse(os.path.exists(png))
    self.assertEqual(report.plot_privacy(_run(self.path('dp.csv'), ['all']), png), png)
    self.assertPng(png)

  def test_privacy_plot_draws_both_populations_and_titles_the_run(self):
    drawn = {}
    real_plot = report.mpl_figure.Figure.subplots

    def spy(fig, *args, **kwargs):
      axes = real_plot(fig, *args, **kwargs)
      drawn['axes'] = axes
      return axes

    with absltest.mock.patch.object(report.mpl_figure.Figure, 'subplots', spy):
      report.plot_privacy(_run(self.path('dp.csv'), ['all']), self.path('privacy.png'),
                          label='FL + DP')
    axes = drawn['axes']
    # The title names the run, not the last series (a loop once rebound `label`).
    self.assertEqual(axes.get_title(), 'Privacy loss spent: FL + DP')
    labels = [line.get_label() for line in axes.get_lines()]
    self.assertIn('this run, RDP', labels)
    self.assertIn('declared population, RDP', labels)
    self.assertEqual(axes.get_yscale(), 'log')

  def test_write_report(self):
    dp_csv = _run(self.path('dp.csv'), _model_layers())
    runs = {'FL, no noise': _run(self.path('fl.csv'), ['all'], dp=False), 'FL + DP': dp_csv}
    statement = 'User-level **(ε = 1.70, δ = 1e-9)**-DP\nwith the RDP accountant.'
    out_dir = self.path('report')
    report_path = report.write_report(
        out_dir, title='Run 42', privacy_statement=statement, runs=runs, layer_norm_run=dp_csv,
        results=[
            {'model': 'seed (central)', 'wer': 0.41, 'cer': 0.18, 'rounds': 0, 'epsilon': None},
            {'model': 'FL + DP', 'wer': 0.23456, 'cer': 0.0949, 'rounds': 4, 'epsilon': 1.6789},
        ],
        notes=['Evaluation every 2 rounds.'], references={'seed (central)': (0.41, 0.18)})
    self.assertEqual(report_path, os.path.join(out_dir, 'report.md'))
    with open(report_path) as f:
      text = f.read()
    self.assertStartsWith(text, '# Run 42\n\n## Results\n\n**WER (greedy decoding): seed '
                          '(central) 41.0% (CER 18.0%); FL + DP 23.5% (CER 9.5%).**\n')
    self.assertIn('| Model | WER (%) | CER (%) | Rounds | ε |\n|---|---|---|---|---|\n'
                  '| seed (central) | 41.0 | 18.0 | 0 | — |\n'
                  '| FL + DP | 23.5 | 9.5 | 4 | 1.68 |\n', text)
    self.assertIn('## Privacy\n\n' + statement + '\n', text)
    self.assertIn('- Evaluation every 2 rounds.', text)
    self.assertIn('dashed: seed (central).', text)
    links = re.findall(r'!\[[^\]]*\]\(([^)]+)\)', text)
    self.assertCountEqual(links, ['error_rates.png', 'layer_norms.png', 'privacy.png'])
    for link in links:
      self.assertPng(os.path.join(out_dir, link))

  def test_epsilon_cells_keep_small_and_exactly_zero_values(self):
    table = report._results_table([{'model': 'a', 'epsilon': 0.0}, {'model': 'b', 'epsilon': 3e-4},
                                   {'model': 'c', 'epsilon': math.inf}])
    self.assertIn('| a | exactly 0 |', table)
    self.assertIn('| b | 0.0003 |', table)
    self.assertIn('| c | ∞ |', table)

  def test_input_files_section_accounts_for_every_file_and_what_was_left_out(self):
    read = reading.ReadReport()
    account = read.account('train.tsv')
    account.lines, account.header, account.blank, account.record_lines = 6, 1, 1, 4
    account.records = 4
    for _ in range(3):
      read.keep('train.tsv')
    read.skip('train.tsv', 4, 'malformed row: wrong number of fields', strict=False)
    read.add('a.flac', 'audio file without transcript', strict=False)
    text = report.input_section({'--split': {**read.as_dict(), 'left_out': {'class x': 2}}})
    self.assertIn('| --split | `train.tsv` | 6 | 1 | 1 | 4 | 3 | 1 (1 × malformed row: wrong '
                  'number of fields) |', text)
    self.assertIn('- --split: also skipped 1 (1 × audio file without transcript).', text)
    self.assertIn('- --split: 2 example(s) read but left out: class x.', text)

  def test_wer_leads_the_table_whatever_the_rows_order(self):
    table = report._results_table([{'rounds': 4, 'cer': 0.1, 'wer': 0.3, 'model': 'FL'}])
    self.assertStartsWith(table, '| Model | WER (%) | CER (%) | Rounds |\n')
    self.assertEqual(report.headline([{'model': 'FL', 'cer': 0.1}]), '')

  def test_report_links_only_figures_that_apply(self):
    runs = {'FL, no noise': _run(self.path('fl.csv'), ['all'], dp=False)}
    out_dir = self.path('report')
    report_path = report.write_report(out_dir, title='No DP', privacy_statement='No DP.',
                                      runs=runs, layer_norm_run=runs['FL, no noise'],
                                      results=[{'model': 'FL', 'wer': 0.5}])
    with open(report_path) as f:
      text = f.read()
    self.assertEqual(re.findall(r'!\[[^\]]*\]\(([^)]+)\)', text), ['error_rates.png'])
    self.assertIn('| FL | 50.0 |', text)
    self.assertCountEqual(os.listdir(out_dir), ['report.md', 'error_rates.png'])


if __name__ == '__main__':
  absltest.main()
