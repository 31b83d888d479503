"""The end-of-run report: a Markdown summary with PNG plots, built from metrics CSVs.

Inputs are the CSV files `tff.program.CSVFileReleaseManager` writes: a header row whose first
column is `key` (the round; 0 = before training, or the step for central training), then one
column per metric, named by its path in the released structure joined with '/'. Cells are the
values as strings, and empty where a metric was not released in that round (evaluation runs only
every few rounds, for example). Rates (WER, CER, clipped fractions) are fractions, so 0.25 is
25%.

Plots are drawn with matplotlib's object API (`matplotlib.figure.Figure`) onto the non-interactive
Agg backend, so nothing needs a display and no figure outlives the function that drew it.
"""

import csv
import math
import os
import re
from typing import Mapping
from typing import Optional
from typing import Sequence

import matplotlib
from matplotlib import figure as mpl_figure
import numpy as np

from fedasr_tff import aggregators
from fedasr_tff import privacy
from fedasr_tff import private_files
from fedasr_tff.speech import models

matplotlib.use('Agg')

_KEY = 'key'

_WER = 'eval/wer'
_CER = 'eval/cer'
# Exact client norms are released under `client/` (outside the DP guarantee, an opt-in in DP
# runs); the norms of the released update and the adaptive clips come from the noised release,
# without the prefix.
_PER_LAYER = re.compile(r'^(?:client/)?per_layer/(?P<layer>.+)/(?P<metric>norm_before_clip|'
                        r'norm_after_clip|clipped_fraction|released_norm|noise_norm|clip)$')
# Within a layer, the multiplicative weight first.
_VARIABLES = ('kernel', 'scale', 'gamma', 'bias', 'beta')
_LAYER_ROWS = (
    ('norm_before_clip', 'Client update norm before clipping', 'L2 norm (mean over rounds)', True),
    ('norm_after_clip', 'After clipping (at most the per-layer bound)',
     'L2 norm (mean over rounds)', True),
    ('clipped_fraction', 'Fraction of clients clipped', 'clipped clients (%, mean over rounds)',
     False),
    ('released_norm', 'Released (noised) average update (inside the DP guarantee)',
     'L2 norm (mean over rounds)', True),
    ('noise_norm', 'Its expected noise part, sqrt(d_h)·σ_DP·C (public)',
     'L2 norm (mean over rounds)', True),
    ('clip', 'Adaptive per-layer clip C_h (noised state, inside the DP guarantee)',
     'clip (mean over rounds)', True),
)
_PRIVACY_SERIES = (
    ('privacy/epsilon_run_rdp', 'this run, RDP', 'C2', '-'),
    ('privacy/epsilon_run_pld', 'this run, PLD', 'C3', '-'),
    ('privacy/epsilon_declared_rdp', 'declared population, RDP', 'C0', '-'),
    ('privacy/epsilon_declared_pld', 'declared population, PLD', 'C1', '-'),
    ('privacy/projected_epsilon_declared_rdp', 'declared, RDP, projected', 'C0', '--'),
    ('privacy/projected_epsilon_declared_pld', 'declared, PLD, projected', 'C1', '--'),
)
_COLUMN_TITLES = {'model': 'Model', 'wer': 'WER (%)', 'cer': 'CER (%)', 'rounds': 'Rounds',
                  'epsilon': 'ε', 'epsilon_run': 'ε (this run)',
                  'epsilon_declared': 'ε (declared population)',
                  'wer_open': 'WER, greedy, no word list (%)'}
_PERCENT_COLUMNS = ('wer', 'cer', 'wer_open')
# The word error rate is the headline figure, so it leads the table.
_LEADING_COLUMNS = ('model', 'wer', 'cer', 'wer_open')
_MISSING = '—'


# Reading.


def _parse_cell(cell: str) -> float:
  """A released scalar as a float: '' is NaN, Python's 'True'/'False' are 1/0."""
  cell = cell.strip()
  if not cell:
    return math.nan
  if cell in ('True', 'False'):
    return float(cell == 'True')
  return float(cell)


def read_metrics(csv_path: str) -> dict[str, np.ndarray]:
  """Reads a `tff.program.CSVFileReleaseManager` metrics file into columns.

  Args:
    csv_path: Path of the CSV file (a local file).

  Returns:
    A dict from column name to a 1-D array with one entry per row, in file order: 'key' (first)
    as int64, every other column as float64 with NaN where the cell is empty. Boolean cells
    ('True'/'False') read as 1.0/0.0.

  Raises:
    ValueError: naming the file, if it does not exist, has no `key` column, repeats a column,
      or holds a cell that is not a number (e.g. a released non-scalar such as '[1, 2]').
  """
  if not os.path.isfile(csv_path):
    raise ValueError(f'Metrics file {csv_path} does not exist.')
  with open(csv_path, newline='') as f:
    rows = list(csv.reader(f))
  header = rows[0] if rows else []
  if _KEY not in header:
    raise ValueError(f'Metrics file {csv_path} has no `{_KEY}` column; was it written by '
                     'a tff.program.CSVFileReleaseManager?')
  if len(set(header)) != len(header):
    raise ValueError(f'Metrics file {csv_path} repeats a column name: {header}.')
  columns = {name: [] for name in header}
  for line, row in enumerate(rows[1:], start=2):
    if len(row) != len(header):
      raise ValueError(f'Metrics file {csv_path}, line {line}: {len(row)} cells for '
                       f'{len(header)} columns.')
    for name, cell in zip(header, row, strict=True):
      try:
        value = int(cell) if name == _KEY else _parse_cell(cell)
      except ValueError:
        raise ValueError(f'Metrics file {csv_path}, line {line}, column {name!r}: {cell!r} is '
                         'not a number.') from None
      columns[name].append(value)
  metrics = {_KEY: np.asarray(columns.pop(_KEY), dtype=np.int64)}
  metrics.update((name, np.asarray(values, dtype=np.float64)) for name, values in columns.items())
  return metrics


def _present(metrics: Mapping[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
  """(keys, values) of the rows where column `name` holds a finite value; empty if absent."""
  if name not in metrics:
    return np.zeros([0], np.int64), np.zeros([0])
  values = metrics[name]
  keep = np.isfinite(values)
  return metrics[_KEY][keep], values[keep]


def _mean_over_rounds(metrics: Mapping[str, np.ndarray], name: str) -> float:
  """Mean of column `name` over the rounds that released it (NaN if none did)."""
  _, values = _present(metrics, name)
  return float(values.mean()) if values.size else math.nan


def save_figure(fig: mpl_figure.Figure, png_path: str) -> str:
  """Writes `fig` to `png_path` (its folder made if missing) owner-only; returns the path."""
  directory = os.path.dirname(png_path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  with private_files.writing(png_path):
    fig.savefig(png_path, dpi=120)
  return png_path


# Error rates.


def plot_error_rates(runs: Mapping[str, str], png_path: str,
                     references: Optional[Mapping[str, tuple[float, float]]] = None) -> str:
  """Plots WER and CER (in %) over rounds, one line per run, in two side-by-side panels.

  Each run's line joins the rows where the rate was released (evaluation rounds, including key 0
  before training); rounds without evaluation are skipped, not drawn as gaps. For central
  training CSVs the x axis is the step. `references` are drawn as dashed horizontal lines: models
  measured once, such as the seed model the runs start from, whose training ran in steps rather
  than rounds and would stretch the x axis.

  Args:
    runs: Label (e.g. 'FL + DP') -> metrics CSV path, in legend order.
    png_path: Where to write the PNG.
    references: Label -> (WER, CER) as fractions.

  Returns:
    `png_path`.

  Raises:
    ValueError: if `runs` is empty, or naming the file of a run that has neither `eval/wer` nor
      `eval/cer` values.
  """
  if not runs:
    raise ValueError('plot_error_rates needs at least one run.')
  fig = mpl_figure.Figure(figsize=(11, 4.2), layout='constrained')
  wer_axes, cer_axes = fig.subplots(1, 2)
  for label, csv_path in runs.items():
    metrics = read_metrics(csv_path)
    drawn = [_plot_rate(axes, metrics, name, label)
             for axes, name in ((wer_axes, _WER), (cer_axes, _CER))]
    if not any(drawn):
      raise ValueError(f'Metrics file {csv_path} (run {label!r}) has no {_WER} or {_CER} values.')
  for i, (label, rates) in enumerate((references or {}).items()):
    for axes, rate in zip((wer_axes, cer_axes), rates, strict=True):
      axes.axhline(100.0 * rate, color=f'C{(len(runs) + i) % 10}', linestyle='--', label=label)
  for axes, title in ((wer_axes, 'Word error rate'), (cer_axes, 'Character error rate')):
    axes.set_title(title)
    axes.set_xlabel('round (0 = before training)')
    axes.set_ylabel(f'{title.split()[0][0]}ER (%)')
    axes.grid(True, alpha=0.3)
  wer_axes.legend()
  return save_figure(fig, png_path)


def _plot_rate(axes, metrics: Mapping[str, np.ndarray], name: str, label: str) -> bool:
  """Draws one run's rate `name` in %; returns whether it had any values."""
  keys, values = _present(metrics, name)
  if not keys.size:
    return False
  axes.plot(keys, 100.0 * values, marker='o', markersize=4, label=label)
  return True


# Per-layer norms.


def _per_layer_columns(metrics: Mapping[str, np.ndarray]) -> dict[str, dict[str, str]]:
  """Metric kind ('norm_before_clip', ...) -> {layer name: column name}."""
  found = {}
  for column in metrics:
    match = _PER_LAYER.match(column)
    if match:
      found.setdefault(match['metric'], {})[match['layer']] = column
  return found


def _block_series(layers: Sequence[str]) -> dict[tuple[str, str], dict[int, str]]:
  """(parameter, variable) -> {block index: layer name} for the layers inside blocks."""
  series = {}
  for layer in layers:
    tensor = models.block_tensor(layer)
    if tensor is not None:
      series.setdefault((tensor.parameter, tensor.variable), {})[tensor.block] = layer
  return series


def _rank(name: str, order: Sequence[str]) -> int:
  """Position of `name` in `order`; names not in it come after all that are."""
  return order.index(name) if name in order else len(order)


def _series_order(key: tuple[str, str]) -> tuple[int, str, int, str]:
  """Sort key for (parameter, variable): forward-pass order, then weights before biases."""
  param, variable = key
  return _rank(param, models.BLOCK_PARAMETERS), param, _rank(variable, _VARIABLES), variable


def _outer_order(layer: str) -> tuple[int, str, int, str]:
  """Sort key of a layer outside the blocks: forward-pass order, then weights before biases."""
  prefix, _, variable = layer.rpartition('/')
  return (_rank(layer.split('/')[0], models.OUTER_LAYERS), prefix, _rank(variable, _VARIABLES),
          variable)


def _outer_layers(layers: Sequence[str]) -> list[str]:
  """The layers outside the blocks, in forward-pass order (unknown ones last, by name)."""
  return sorted((layer for layer in layers if models.block_tensor(layer) is None),
                key=_outer_order)


def _series_style(key: tuple[str, str], colours: Mapping[str, str]) -> dict[str, object]:
  """Colour by parameter type; LayerNorm beta (and any bias) dashed with square markers."""
  param, variable = key
  dashed = variable in ('beta', 'bias')
  return dict(color=colours[param], linestyle='--' if dashed else '-',
              marker='s' if dashed else 'o', markersize=4,
              label=param if variable == 'kernel' else f'{param} {variable}')


def plot_layer_norms(csv_path: str, png_path: str, label: Optional[str] = None) -> Optional[str]:
  """Plots per-layer update norms by parameter type and block (the paper's Figure 6).

  Reads the `[client/]per_layer/<layer>/norm_before_clip`, `.../norm_after_clip`,
  `.../clipped_fraction`, `.../released_norm`, `.../noise_norm` and `.../clip` columns and
  averages every value over the rounds that
  released it (NaN-aware mean). Each metric present gets a row of two panels sharing a y axis:

  * left: x = transformer block index, one line per parameter type (ln1, wqkv, wf, ln2, w1, w2
    in forward-pass order, colour by type). LayerNorm gamma and beta are separate tensors with
    separate clipping bounds, so they are drawn separately: gamma solid, beta dashed.
  * right: the tensors outside the blocks (input norm, conv front-end, final LN, output layer)
    as markers, one per tensor.

  Norms are on a log scale. After clipping, each client's norm is at most its layer's bound, so
  the second row shows the per-layer bounds wherever the third row (the clipped fraction, in %)
  is near 100%. Those three rows are exact client statistics (`client/per_layer/...`), released
  only by runs without noise or with the opt-in, and the title says they are outside any DP
  guarantee. What a DP run releases is drawn instead: the norm ||ũ_h|| of each layer of the
  released (noised) average update (`per_layer/<layer>/released_norm`), the norm the noise alone
  is expected to have there, sqrt(d_h)·σ_DP·C (`.../noise_norm`; E||ũ_h||^2 = ||u_h||^2 +
  noise_norm^2 for the un-noised average u_h), and with adaptive clipping the per-layer clips
  (`.../clip`, the noised state), drawn as the last row. The title says which kind it shows.

  Args:
    csv_path: A metrics CSV of a run with per-layer clipping.
    png_path: Where to write the PNG.
    label: The run's name for the title (default: the CSV's path).

  Returns:
    `png_path`, or None (and nothing is written) when the CSV has no per-layer columns, or only
    the single 'all' group of global clipping.
  """
  metrics = read_metrics(csv_path)
  columns = _per_layer_columns(metrics)
  layers = sorted({layer for by_layer in columns.values() for layer in by_layer})
  if not layers or layers == [aggregators.GLOBAL_GROUP]:
    return None
  rows = [row for row in _LAYER_ROWS if row[0] in columns]
  series = _block_series(layers)
  outer = _outer_layers(layers)
  params = sorted({param for param, _ in series}, key=lambda p: _series_order((p, '')))
  colours = {param: f'C{i % 10}' for i, param in enumerate(params)}
  widths = [width for width, shown in ((3, series), (2, outer)) if shown]
  fig = mpl_figure.Figure(figsize=(2.0 + 3.0 * sum(widths), 1.0 + 3.0 * len(rows)),
                          layout='constrained')
  grid = fig.subplots(len(rows), len(widths), squeeze=False, sharex='col', sharey='row',
                      gridspec_kw={'width_ratios': widths})
  for row_axes, (metric, title, ylabel, log_scale) in zip(grid, rows, strict=True):
    scale = 1.0 if log_scale else 100.0
    panels = iter(row_axes)
    if series:
      _draw_blocks(next(panels), metrics, columns[metric], series, colours, scale)
    if outer:
      _draw_outer(next(panels), metrics, columns[metric], outer, scale)
    row_axes[0].set_ylabel(ylabel)
    row_axes[0].set_title(title, loc='left')
    for axes in row_axes:
      axes.set_yscale('log' if log_scale else 'linear')
      axes.grid(True, which='both' if log_scale else 'major', alpha=0.3)
    if not log_scale:
      row_axes[0].set_ylim(-3, 103)
  for axes, xlabel in zip(grid[-1], [label for label, shown in (
      ('transformer block', series), ('tensors outside the blocks', outer)) if shown],
                          strict=True):
    axes.set_xlabel(xlabel)
  if series:
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc='outside lower center', ncol=min(len(labels), 8),
               title='parameter type (LayerNorm gamma solid, beta dashed)', fontsize='small')
  exact = any(column.startswith('client/') for by_layer in columns.values()
              for column in by_layer.values())
  fig.suptitle(f'Per-layer update norms, averaged over rounds: {label or csv_path}'
               + ('\n(exact client statistics: outside any DP guarantee)' if exact else
                  '\n(released quantities only: inside the DP guarantee)'))
  return save_figure(fig, png_path)


def _profile_group(layer: str) -> str:
  """'wqkv kernel' for `block_03/wqkv/kernel` (blocks pooled); a layer outside the blocks as is."""
  tensor = models.block_tensor(layer)
  return layer if tensor is None else f'{tensor.parameter} {tensor.variable}'


def _profile_order(group: str) -> tuple[int, tuple]:
  """Block parameter types in forward-pass order (weights before biases), then the others."""
  param, _, variable = group.partition(' ')
  if variable and param in models.BLOCK_PARAMETERS:
    return 0, _series_order((param, variable))
  return 1, _outer_order(group)


def layer_norm_profile(csv_paths: Sequence[str],
                       metric: str = 'norm_before_clip') -> dict[str, float]:
  """The numbers behind `plot_layer_norms` (the paper's Figure 6), pooled: the mean of `metric`
  per parameter type, over the blocks, the rounds that released it and the runs `csv_paths`.

  Returns:
    {parameter type ('ln1 gamma', 'wqkv kernel', ...; a tensor outside the blocks by its name):
    mean}, block types in forward-pass order first; empty when the runs have no per-layer
    columns of `metric` other than the single 'all' group of global clipping.
  """
  pooled = {}
  for csv_path in csv_paths:
    metrics = read_metrics(csv_path)
    for layer, column in _per_layer_columns(metrics).get(metric, {}).items():
      if layer != aggregators.GLOBAL_GROUP:
        _, values = _present(metrics, column)
        pooled.setdefault(_profile_group(layer), []).extend(values.tolist())
  return {group: float(np.mean(values)) for group, values in
          sorted(pooled.items(), key=lambda item: _profile_order(item[0])) if values}


def plot_study(error_rates: Mapping[str, Mapping[str, tuple[float, float]]],
               profiles: Mapping[str, Mapping[str, float]], png_path: str,
               profile_title: str) -> str:
  """A study's summary: error rates per cell with error bars, and per-layer norm profiles.

  Args:
    error_rates: {metric ('WER (%)', ...): {cell: (mean, std)}}, one panel per metric, a
      horizontal bar per cell (in order, top to bottom).
    profiles: {run label: `layer_norm_profile`}, one line each over the parameter types (log
      scale); no panel if empty.
    png_path: Where to write the PNG.
    profile_title: the profile panel's title (say there whether the norms are exact client
      statistics outside the DP guarantee).

  Returns:
    `png_path`.
  """
  if not error_rates:
    raise ValueError('plot_study needs at least one metric in `error_rates`.')
  cells = list(dict.fromkeys(cell for by_cell in error_rates.values() for cell in by_cell))
  panels = len(error_rates) + bool(profiles)
  fig = mpl_figure.Figure(figsize=(5.0 * panels, 1.5 + 0.32 * max(len(cells), 8)),
                          layout='constrained')
  axes_row = fig.subplots(1, panels, squeeze=False)[0]
  positions = np.arange(len(cells))[::-1]
  for axes, (metric, by_cell) in zip(axes_row, error_rates.items(), strict=False):
    means = [by_cell.get(cell, (math.nan, 0.0))[0] for cell in cells]
    stds = [by_cell.get(cell, (math.nan, 0.0))[1] for cell in cells]
    axes.barh(positions, means, xerr=stds, color='C0', alpha=0.7, capsize=3)
    axes.set_yticks(positions, cells, fontsize='small')
    finite = [m for m in means if math.isfinite(m)]
    if finite:
      axes.set_xlim(0.9 * min(finite) - 1.0, 1.05 * max(finite) + max(stds) + 0.5)
    axes.set_xlabel(f'{metric}, mean ± std over seeds')
    axes.grid(True, axis='x', alpha=0.3)
  if profiles:
    axes = axes_row[-1]
    groups = list(dict.fromkeys(g for profile in profiles.values() for g in profile))
    groups.sort(key=_profile_order)
    for i, (label, profile) in enumerate(profiles.items()):
      axes.plot([profile.get(g, math.nan) for g in groups], range(len(groups))[::-1],
                marker='o', color=f'C{(i + 1) % 10}', label=label)
    axes.set_yticks(range(len(groups))[::-1], groups, fontsize='small')
    axes.set_xscale('log')
    axes.set_xlabel('client update L2 norm before clipping (mean)')
    axes.set_title(profile_title, fontsize='small')
    axes.grid(True, which='both', alpha=0.3)
    axes.legend(fontsize='small')
  return save_figure(fig, png_path)


def _draw_blocks(axes, metrics, by_layer, series, colours, scale: float) -> None:
  """One line per (parameter, variable) over block indices."""
  for key in sorted(series, key=_series_order):
    points = sorted((block, _mean_over_rounds(metrics, by_layer[layer]) * scale)
                    for block, layer in series[key].items() if layer in by_layer)
    points = [(block, value) for block, value in points if math.isfinite(value)]
    if points:
      blocks, values = zip(*points, strict=True)
      axes.plot(blocks, values, **_series_style(key, colours))
  axes.xaxis.get_major_locator().set_params(integer=True)


def _draw_outer(axes, metrics, by_layer, outer: Sequence[str], scale: float) -> None:
  """One marker per tensor outside the blocks, named on the x axis."""
  positions = range(len(outer))
  values = [_mean_over_rounds(metrics, by_layer[layer]) * scale if layer in by_layer
            else math.nan for layer in outer]
  axes.plot(positions, values, linestyle='none', marker='D', color='0.3')
  axes.set_xticks(list(positions), outer, rotation=40, ha='right', fontsize='small')
  axes.set_xlim(-0.5, len(outer) - 0.5)


# Privacy.


def plot_privacy(csv_path: str, png_path: str, label: Optional[str] = None) -> Optional[str]:
  """Plots ε spent over rounds: this run's own and the declared population's, RDP and PLD.

  Solid lines are ε spent (`privacy/epsilon_run_*` for the run's own population,
  `privacy/epsilon_declared_*` for the declared one, an extrapolation); dashed lines the
  declared population's ε projected at the planned rounds. The two populations' ε differ by
  orders of magnitude, so the y axis is logarithmic; ε = 0 (round 0) and ε = ∞ are left out.
  `label` names the run in the title (default: the CSV's path).

  Returns:
    `png_path`, or None (and nothing is written) when the CSV has no privacy column with a finite
    positive value, as for a run without DP.
  """
  metrics = read_metrics(csv_path)
  present = []
  for name, series_label, colour, style in _PRIVACY_SERIES:
    keys, values = _present(metrics, name)
    keep = values > 0
    if keep.any():
      present.append((series_label, colour, style, keys[keep], values[keep]))
  if not present:
    return None
  fig = mpl_figure.Figure(figsize=(6.5, 4.2), layout='constrained')
  axes = fig.subplots()
  for series_label, colour, style, keys, values in present:
    axes.plot(keys, values, color=colour, linestyle=style, marker='o', markersize=3,
              label=series_label)
  axes.set_title(f'Privacy loss spent: {label or csv_path}')
  axes.set_xlabel('round (0 = before training)')
  axes.set_ylabel('ε (at the run\'s δ)')
  axes.set_yscale('log')
  axes.grid(True, which='both', alpha=0.3)
  axes.legend(fontsize='small')
  return save_figure(fig, png_path)


# The report.


def _format_cell(column: str, value: object) -> str:
  """Table cell: WER/CER as % with one decimal, None/NaN as '—', ε as every ε is written
  (`privacy.format_epsilon`: three significant digits, an exact 0 in words)."""
  if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
    return _MISSING
  if column in _PERCENT_COLUMNS:
    return f'{100.0 * float(value):.1f}'
  if isinstance(value, (float, np.floating)):
    value = float(value)
    if column.startswith('epsilon'):
      return privacy.format_epsilon(value)
    if math.isinf(value):
      return '∞'
    return f'{value:g}'
  return str(value).replace('|', '\\|')


def _results_table(results: Sequence[Mapping[str, object]]) -> str:
  """A Markdown table with one row per result; columns are the rows' keys in first-seen order.

  Known keys get readable headers ('wer' -> 'WER (%)', 'epsilon' -> 'ε', ...); a key missing
  from a row, or None, shows as '—'. WER leads: the columns 'model', 'wer', 'cer' come first,
  whatever order the rows give them.
  """
  columns = list(dict.fromkeys(key for row in results for key in row))
  columns.sort(key=lambda c: _rank(c, _LEADING_COLUMNS))
  lines = ['| ' + ' | '.join(_COLUMN_TITLES.get(c, c) for c in columns) + ' |',
           '|' + '|'.join('---' for _ in columns) + '|']
  for row in results:
    lines.append('| ' + ' | '.join(_format_cell(c, row.get(c)) for c in columns) + ' |')
  return '\n'.join(lines)


def _figures(output_dir: str, runs: Mapping[str, str], layer_norm_run: Optional[str],
             references: Optional[Mapping[str, tuple[float, float]]]
             ) -> list[tuple[str, str, str]]:
  """Draws the figures that apply; returns (heading, file name, caption) for each one written.

  error_rates.png when `runs` is not empty; layer_norms.png from `layer_norm_run` when it has
  per-layer data; privacy.png from the first run in `runs` (in order) with privacy columns.
  """
  figures = []
  if runs:
    plot_error_rates(runs, os.path.join(output_dir, 'error_rates.png'), references)
    caption = 'Word and character error rates on the evaluation set over rounds'
    if references:
      caption += f'; dashed: {", ".join(references)}'
    figures.append(('Error rates', 'error_rates.png', caption + '.'))
  layer_norms_png = os.path.join(output_dir, 'layer_norms.png')
  layer_norm_label = next((label for label, path in runs.items() if path == layer_norm_run),
                          None)
  if layer_norm_run and plot_layer_norms(layer_norm_run, layer_norms_png, layer_norm_label):
    figures.append(('Per-layer update norms', 'layer_norms.png',
                    f'Update norms per parameter type and block, averaged over rounds, from '
                    f'`{layer_norm_run}`.'))
  for label, csv_path in runs.items():
    if plot_privacy(csv_path, os.path.join(output_dir, 'privacy.png'), label):
      figures.append(('Privacy loss', 'privacy.png', f'ε spent over rounds by run "{label}".'))
      break
  return figures


def headline(results: Sequence[Mapping[str, object]], decoding: str = 'greedy decoding') -> str:
  """One sentence with the WER of every result that has one, CER in parentheses.

  For example 'WER (greedy decoding): seed 60.1% (CER 20.3%); FL + DP 41.0% (CER 12.2%).'
  """
  parts = []
  for row in results:
    wer = row.get('wer')
    if wer is None or not math.isfinite(float(wer)):
      continue
    part = f'{row.get("model", "?")} {100.0 * float(wer):.1f}%'
    cer = row.get('cer')
    if cer is not None and math.isfinite(float(cer)):
      part += f' (CER {100.0 * float(cer):.1f}%)'
    parts.append(part)
  return f'WER ({decoding}): ' + '; '.join(parts) + '.' if parts else ''


def write_report(output_dir: str, *, title: str, results: Sequence[Mapping[str, object]],
                 privacy_statement: str, runs: Mapping[str, str],
                 layer_norm_run: Optional[str] = None, notes: Sequence[str] = (),
                 references: Optional[Mapping[str, tuple[float, float]]] = None,
                 decoding: str = 'greedy decoding',
                 inputs: Optional[Mapping[str, Mapping[str, object]]] = None) -> str:
  """Writes `output_dir/report.md` and its figures (PNGs in the same directory).

  Sections: the title; "Results", led by the WER of every result in one sentence (`headline`,
  with `decoding` named), then a table of `results` (see `_results_table`: WER first; WER and CER
  are fractions and shown in % with one decimal); "Privacy", with `privacy_statement` (Markdown)
  inserted verbatim (only surrounding blank space trimmed); "Figures", each embedded with a link
  relative to the report (error_rates.png, layer_norms.png, privacy.png, whichever apply, see
  `_figures`; `references` go to the error-rate plot as in `plot_error_rates`); "Metrics
  files", the CSV behind each run label; "Input files" (`input_section`) if `inputs` are given;
  and "Notes", one bullet per note, if any.

  Returns:
    The path of report.md.
  """
  os.makedirs(output_dir, exist_ok=True)
  lead = headline(results, decoding)
  sections = [f'# {title}', '## Results'] + ([f'**{lead}**'] if lead else []) + [
      _results_table(results) if results else '_No results._',
              '## Privacy', privacy_statement.strip()]
  figures = _figures(output_dir, runs, layer_norm_run, references)
  if figures:
    sections.append('## Figures')
  for heading, file_name, caption in figures:
    sections += [f'### {heading}', f'![{heading}]({file_name})', caption]
  if runs:
    sections += ['## Metrics files',
                 '\n'.join(f'- {label}: `{path}`' for label, path in runs.items())]
  if inputs:
    sections += ['## Input files', input_section(inputs)]
  return write_sections(output_dir, sections, notes)


def _skipped_cell(skipped: Mapping[str, int]) -> str:
  if not skipped:
    return '0'
  reasons = ', '.join(f'{n:,} × {reason}' for reason, n in skipped.items())
  return f'{sum(skipped.values()):,} ({reasons})'.replace('|', '\\|')


def input_section(inputs: Mapping[str, Mapping[str, object]]) -> str:
  """The "Input files" section: what the readers made of every line of each data set's files.

  Args:
    inputs: {data set: `fedasr_tff.reading.ReadReport.as_dict()`, with optionally `left_out`,
      {reason: examples} the run's flags left out after reading}, as `summary.json` holds them.

  Returns:
    Markdown: a table row per file (lines, header, blank, records kept and skipped, by reason),
    problems that are no line of a file, and what the flags left out.
  """
  rows = ['| data | file | lines | header | blank | records | kept | skipped |',
          '|---|---|---|---|---|---|---|---|']
  notes = []
  for name, read in inputs.items():
    files = dict(read.get('files', {}))
    if read.get('files_read', 0) > len(files):  # many files: their total, then those with skips
      files = {f'all {read["files_read"]:,} files': read['total'], **files}
    for path, account in files.items():
      rows.append(f'| {name} | `{path}` | {account["lines"]:,} | {account["header"]:,} | '
                  f'{account["blank"]:,} | {account["records"]:,} | {account["kept"]:,} | '
                  f'{_skipped_cell(account["skipped"])} |')
    in_files = read.get('total', {}).get('skipped', {})
    elsewhere = {reason: n - in_files.get(reason, 0)
                 for reason, n in read.get('problems', {}).items() if n > in_files.get(reason, 0)}
    if elsewhere:
      notes.append(f'{name}: also skipped {_skipped_cell(elsewhere)}.')
    for reason, n in read.get('left_out', {}).items():
      notes.append(f'{name}: {n:,} example(s) read but left out: {reason}.')
  text = ('What the readers made of every line of the input (records: rows, entries or '
          'stanzas; lines = header + blank + the records\' lines). Read before training: they '
          'describe the files you supplied, not the training.\n\n' + '\n'.join(rows))
  if notes:
    text += '\n\n' + '\n'.join(f'- {note}' for note in notes)
  return text


def write_sections(output_dir: str, sections: Sequence[str], notes: Sequence[str]) -> str:
  """Writes `output_dir/report.md`: the sections, then "Notes" (a bullet each) if any."""
  if notes:
    sections = [*sections, '## Notes', '\n'.join(f'- {note}' for note in notes)]
  report_path = os.path.join(output_dir, 'report.md')
  with private_files.writing(report_path), open(report_path, 'w') as f:
    f.write('\n\n'.join(sections) + '\n')
  return report_path
