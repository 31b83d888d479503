r"""The DP-FL-for-ASR paper's comparisons in miniature: clipping x server optimizer, over seeds.

  python -m experiments.ablation --output_dir=/tmp/ablation --parallel=2

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025 (arXiv:2310.00098), find at
the same σ_DP that per-layer clipping with C_h ∝ sqrt(dim) beats uniform per-layer clipping,
which beats global clipping (Sec. 3, Table 1); that the layer-wise adaptive server optimizers
(LAMB, LARS) beat Adam and SGD under DP (Sec. 4); and that per-layer update norms are far from
balanced (Fig. 6). Here, on the demo's synthetic corpus (`experiments.recipe
--synthetic_speakers`: its corpus, seed model and federated flags, the runner's):

1. one seed model (--model_config: `tiny`, or `tiny_deep` for depth) trained centrally on 10%
   of the speakers (`speech_stages.seed_model`), which every cell starts from;
2. the grid --clippings x --optimizers at σ_DP = --sigma_dp, plus the no-noise --reference,
   each for every --seed: a cell is one `experiments.train_federated` run in its own folder
   (`OUTPUT_DIR/cells/<cell>_s<seed>`), from the demo's federated configuration
   (`recipe.federated_config`) with that clipping, server optimizer (learning rate from
   --server_lrs) and seed (the run's secret and its DP noise seed: a simulation);
3. `ablation.md` / `ablation.csv`: held-out WER and CER, mean ± std over the seeds, ε for the
   declared population and for the run (the ledger's, `summary.json`), the orderings measured
   against the paper's, and the per-layer norm profile (`layer_norms.csv`, `ablation.png`,
   `layer_norms_*.png`).

The DP cells release un-noised client statistics (`--release_client_diagnostics`): the norm
profile is a simulation diagnostic, outside the DP guarantee, and the output says so.

Cells run as subprocesses, --parallel at once (`program.study.run_cells`). Started again with
the same flags, the ablation reuses the corpus, the seed model and every finished cell, and the
unfinished cells resume from their checkpoints. Before the cells start it prints an estimate of
their wall time: from the finished cells' measured times when there are any, else from the
calibration flags (--seconds_per_client_step, --cell_overhead_seconds, measured on a 2-core
machine running 2 cells at once).

It runs its cells on this machine: `--workers` is refused (experiments.train_federated runs one
cell's configuration on TFF workers).
"""

import csv
import dataclasses
import os
import sys
import time

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import recipe
from experiments import report
from experiments import speech_stages
from fedasr_tff import optimizers
from fedasr_tff import privacy
from fedasr_tff.program import dp_config
from fedasr_tff.program import study
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import presets

_NORMALIZE = '+normalize'
_CLIPPINGS = flags.DEFINE_list(
    'clippings', ['global', 'uniform', 'dim', 'dim+normalize'],
    f'Clippings of the DP cells: any of {", ".join(dp_config.CLIPPINGS)} (not none), with '
    f'"{_NORMALIZE}" for --normalize.')
_OPTIMIZERS = flags.DEFINE_list('optimizers', ['lamb', 'adam', 'sgd'],
                                'Server optimizers of the DP cells.')
_SERVER_LRS = flags.DEFINE_list(
    'server_lrs', ['lamb:0.005', 'adam:0.002', 'sgd:5.0'],
    'Server learning rate of each optimizer, optimizer:lr (replaces the demo\'s --server_lr).')
_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds: one run of each cell per seed.')
_REFERENCE = flags.DEFINE_string('reference', 'dim:lamb', 'clipping:optimizer of the no-noise '
                                 'reference cell; empty for none.')
_PARALLEL = flags.DEFINE_integer('parallel', 1, 'Cells run at once.', lower_bound=1)
_STEP_SECONDS = flags.DEFINE_float(
    'seconds_per_client_step', 0.22, 'Calibration of the time estimate: seconds of a cell per '
    'client and local step (rounds x cohort x local steps of them a cell).', lower_bound=0.0)
_OVERHEAD_SECONDS = flags.DEFINE_float(
    'cell_overhead_seconds', 90.0, 'Calibration of the time estimate: seconds of a cell outside '
    'its rounds (start-up, tracing, evaluations).', lower_bound=0.0)

# The ablation's size on a shared 2-core machine (39 cells in about an hour at --parallel=2;
# docs/results.md, "The paper's findings in miniature"): its corpus, seed model and rounds,
# whatever the demo's defaults are; its seed share and features those it was measured with (the
# paper's 10%, whole-utterance normalisation).
_DEFAULTS = dict(synthetic_speakers=60, utterances_per_speaker=8.0, seed_steps=400,
                 seed_fraction=0.1, feature_normalization='utterance', held_out_speakers=12,
                 rounds=15, eval_every=15, cohort_size=8, local_steps=3, clip=0.1,
                 sigma_dp=5e-3)
for _name, _value in _DEFAULTS.items():
  flags.FLAGS.set_default(_name, _value)

# The metric the orderings are read on: at the ablation's size the tiny model's WER stays near
# 100% (docs/results.md, "The paper's findings in miniature").
_ORDER_METRIC = 'cer'


@dataclasses.dataclass(frozen=True)
class _Variant:
  """One row of the table: a clipping and server optimizer, with or without noise."""
  clipping: str
  normalize: bool
  optimizer: str
  noise: bool

  @property
  def name(self) -> str:
    clipping = self.clipping + (_NORMALIZE if self.normalize else '')
    return f'{clipping} / {self.optimizer}' + ('' if self.noise else ' / no noise')

  @property
  def folder(self) -> str:
    return self.name.replace(' / ', '_').replace(' ', '_').replace('+', '_')


def _parse_clipping(value: str, flag: str):
  clipping, normalize = ((value[:-len(_NORMALIZE)], True) if value.endswith(_NORMALIZE)
                         else (value, False))
  if clipping not in dp_config.CLIPPINGS or clipping == 'none':
    raise app.UsageError(f'--{flag}: {value!r} is not a clipping with DP; give one of '
                         f'{", ".join(c for c in dp_config.CLIPPINGS if c != "none")}, '
                         f'optionally with "{_NORMALIZE}".')
  return clipping, normalize


def _parse_optimizer(value: str, flag: str) -> str:
  if value not in optimizers.OPTIMIZERS:
    raise app.UsageError(f'--{flag}: unknown optimizer {value!r}; known: '
                         f'{", ".join(optimizers.OPTIMIZERS)}.')
  return value


def _server_lrs():
  lrs = {}
  for item in _SERVER_LRS.value:
    name, _, lr = item.partition(':')
    try:
      lrs[_parse_optimizer(name, 'server_lrs')] = float(lr)
    except ValueError:
      raise app.UsageError(f'--server_lrs: {item!r} is not optimizer:learning_rate.') from None
  missing = sorted({*_OPTIMIZERS.value, _REFERENCE.value.partition(':')[2]} - set(lrs) - {''})
  if missing:
    raise app.UsageError(f'--server_lrs: no learning rate for {", ".join(missing)}.')
  return lrs


def _variants():
  """The reference (if any) first, then the DP grid by clipping, then optimizer."""
  variants = []
  if _REFERENCE.value:
    clipping, _, optimizer = _REFERENCE.value.partition(':')
    variants.append(_Variant(*_parse_clipping(clipping, 'reference'),
                             _parse_optimizer(optimizer, 'reference'), noise=False))
  for clipping in _CLIPPINGS.value:
    for optimizer in _OPTIMIZERS.value:
      variants.append(_Variant(*_parse_clipping(clipping, 'clippings'),
                               _parse_optimizer(optimizer, 'optimizers'), noise=True))
  if not variants:
    raise app.UsageError('--clippings, --optimizers and --reference give no cell.')
  return variants


def _cell_config(variant, seed, data_config, seed_model, server_lrs):
  # A simulation: the noise is seeded too, so a cell is reproducible.
  return recipe.federated_config(
      data_config, common.FLAGS.sigma_dp if variant.noise else 0.0, clipping=variant.clipping,
      normalize=variant.normalize, server_optimizer=variant.optimizer,
      server_lr=server_lrs[variant.optimizer], seed=seed,
      release_client_diagnostics=variant.noise, seed_model=seed_model,
      noise_seed=seed if variant.noise else None)


def _cells(variants, seeds, data_config, seed_model, server_lrs, output_dir):
  """{(variant, seed): study.Cell}: `experiments.train_federated` with the cell's flags."""
  cells = {}
  # Seed-major: a study stopped early has every variant at its first seeds.
  for seed in seeds:
    for variant in variants:
      config = _cell_config(variant, seed, data_config, seed_model, server_lrs)
      cell_dir = os.path.join(output_dir, 'cells', f'{variant.folder}_s{seed}')
      # Every field that differs from the runner's defaults (its --preset's), given.
      preset = presets.PRESETS[presets.DEFAULT]
      argv = [sys.executable, '-m', 'experiments.train_federated', f'--preset={presets.DEFAULT}',
              *config_flags.argv_from_config(
                  config, presets.for_config(preset, config_lib.FederatedConfig)),
              f'--output_dir={cell_dir}', '--noprogress']
      cells[variant, seed] = study.Cell(f'{variant.folder}_s{seed}', argv, cell_dir)
  return cells


def _orderings(rows):
  """The paper's orderings on the measured CER means: [(claim, holds, sentence)]."""
  by_name = {row['variant'].name: row[_ORDER_METRIC] for row in rows}
  noisy = [row['variant'] for row in rows if row['variant'].noise]
  clippings = list(dict.fromkeys((v.clipping, v.normalize) for v in noisy))
  optimizer_names = list(dict.fromkeys(v.optimizer for v in noisy))

  def name(clipping, normalize, optimizer):
    return _Variant(clipping, normalize, optimizer, True).name

  found = []
  paper = [c for c in ('dim', 'uniform', 'global') if (c, False) in clippings]
  if len(paper) > 1:
    for optimizer in optimizer_names:
      found.append((f'clipping with {optimizer}: {" < ".join(paper)} (Table 1)',
                    *study.compare([name(c, False, optimizer) for c in paper], by_name)))
  for adaptive in ('lamb', 'lars'):
    for other in ('adam', 'sgd'):
      if adaptive in optimizer_names and other in optimizer_names:
        for clipping, normalize in clippings:
          found.append((f'{adaptive} < {other} with {clipping}{_NORMALIZE if normalize else ""}',
                        *study.compare([name(clipping, normalize, adaptive),
                                        name(clipping, normalize, other)], by_name)))
  for row in rows:
    if not row['variant'].noise:
      twin = dataclasses.replace(row['variant'], noise=True).name
      if twin in by_name:
        found.append((f'noise costs accuracy: {row["variant"].name} < {twin}',
                      *study.compare([row['variant'].name, twin], by_name)))
  return found


def _norm_lines(profiles):
  """Markdown table of the per-layer norm profiles, and the imbalance of each."""
  groups = list(dict.fromkeys(g for profile in profiles.values() for g in profile))
  lines = ['| parameter type | ' + ' | '.join(profiles) + ' |',
           '|---|' + '---|' * len(profiles)]
  for group in groups:
    lines.append(f'| {group} | ' + ' | '.join(
        f'{profile[group]:.3g}' if group in profile else '—' for profile in profiles.values())
                 + ' |')
  for label, profile in profiles.items():
    layer_norm = [v for g, v in profile.items() if g.startswith(('ln1', 'ln2'))]
    weights = [v for g, v in profile.items()
               if g.split(' ')[0] in ('wqkv', 'wf', 'w1', 'w2') and g.endswith('kernel')]
    if layer_norm and weights:
      spread = max(profile.values()) / min(profile.values())
      lines.append(f'\n{label}: largest / smallest type {spread:.1f}x; block LayerNorm mean '
                   f'{sum(layer_norm) / len(layer_norm):.3g} against attention/MLP kernels '
                   f'mean {sum(weights) / len(weights):.3g}.')
  return lines


def _write(output_dir, rows, seed_eval, profiles, orderings, notes):
  keys = ['cell', 'clipping', 'normalize', 'server_optimizer', 'sigma_dp', 'seeds', 'wer_mean',
          'wer_std', 'cer_mean', 'cer_std', 'wer_values', 'cer_values', 'epsilon_declared_rdp',
          'epsilon_run_rdp']
  with open(os.path.join(output_dir, 'ablation.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, keys)
    writer.writeheader()
    for row in rows:
      v = row['variant']
      writer.writerow(dict(
          cell=v.name, clipping=v.clipping, normalize=v.normalize, server_optimizer=v.optimizer,
          sigma_dp=row['sigma_dp'], seeds=len(row['cer'].values), wer_mean=row['wer'].mean,
          wer_std=row['wer'].std, cer_mean=row['cer'].mean, cer_std=row['cer'].std,
          wer_values=' '.join(f'{x:.2f}' for x in row['wer'].values),
          cer_values=' '.join(f'{x:.2f}' for x in row['cer'].values),
          epsilon_declared_rdp=row['epsilons'][0], epsilon_run_rdp=row['epsilons'][1]))
  with open(os.path.join(output_dir, 'layer_norms.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['parameter_type', *profiles])
    for group in dict.fromkeys(g for p in profiles.values() for g in p):
      writer.writerow([group, *(p.get(group, '') for p in profiles.values())])

  lines = ['| cell | σ_DP | held-out WER (%) | held-out CER (%) | CER per seed | '
           'ε declared / run (RDP, δ=1e-9) |', '|---|---|---|---|---|---|',
           f'| seed model (central, 10% of speakers) | — | {100 * seed_eval.wer:.1f} | '
           f'{100 * seed_eval.cer:.1f} | — | — |']
  for row in rows:
    eps = row['epsilons']
    eps = (' / '.join(privacy.format_epsilon(e) for e in eps[:2]) if eps[0] is not None
           else '∞ (no noise)')
    lines.append(f'| {row["variant"].name} | {row["sigma_dp"]:g} | {row["wer"]} | '
                 f'{row["cer"]} | {", ".join(f"{x:.1f}" for x in row["cer"].values)} | {eps} |')
  lines += ['', '**Orderings of the paper, measured on held-out CER** (lower is better):', '']
  lines += [f'- {claim}: {sentence}' for claim, _, sentence in orderings]
  lines += ['', '**Per-layer client update norms before clipping** (mean over blocks, rounds and '
            'seeds; the paper\'s Fig. 6). Exact client statistics: in the DP cells they are '
            'released by the simulation\'s opt-in (--release_client_diagnostics) and are '
            'OUTSIDE the DP guarantee.', '']
  lines += _norm_lines(profiles)
  lines += ['', *[f'- {note}' for note in notes]]
  text = '\n'.join(lines)
  with open(os.path.join(output_dir, 'ablation.md'), 'w') as f:
    f.write(f'# Ablation: clipping x server optimizer under DP\n\n{text}\n')
  return text


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal='the ablation runs its cells on this machine.')
  common.require('output_dir')
  if common.FLAGS['server_lr'].present:
    raise app.UsageError('--server_lr is the demo\'s; the ablation takes --server_lrs.')
  if common.FLAGS['spec_augment'].present:
    raise app.UsageError('--spec_augment is the demo\'s; the ablation trains with SpecAugment '
                         '(as it always has, its seed model and its cells alike).')
  seeds = common.seeds(_SEEDS)
  variants = _variants()
  started = time.monotonic()
  output_dir = common.OUTPUT_DIR.value
  data_config = dataclasses.replace(recipe.recipe_data(output_dir), spec_augment=True)
  # Every cell configured before the corpus is written or the seed model trained.
  with config_flags.flag_errors():
    seed_config = config_flags.config_from_flags(speech_stages.SeedConfig)
    cells = _cells(variants, seeds, data_config, os.path.join(output_dir, 'seed', 'model.npz'),
                   _server_lrs(), output_dir)
  recipe.write_synthetic_corpus(output_dir)
  vocab = data_config.vocabulary()
  seed_data = data_config.load_client_data(data_config.split, vocab, speakers='seed',
                                           training=True)
  eval_data = data_config.load_eval_data(vocab)
  _, seed_eval = speech_stages.seed_model(seed_config, seed_data, vocab, output_dir,
                                          eval_data=eval_data)

  calibrated = (_OVERHEAD_SECONDS.value + _STEP_SECONDS.value * common.FLAGS.rounds
                * common.FLAGS.cohort_size * common.FLAGS.local_steps)
  estimate, how = study.estimate_seconds(list(cells.values()), _PARALLEL.value, calibrated)
  todo = sum(not cell.done for cell in cells.values())
  print(f'\n== {len(cells)} cells ({len(variants)} x {len(seeds)} seeds), {todo} to run, '
        f'{_PARALLEL.value} at once: about {estimate / 60:.0f} min ({how})', flush=True)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.dirname(os.path.dirname(os.path.abspath(recipe.__file__))), *sys.path[1:]]))
  study.run_cells(list(cells.values()), _PARALLEL.value, env=env,
                  log=lambda line: print(line, flush=True))

  rows, profiles = [], {}
  for variant in variants:
    summaries = [study.read_summary(cells[variant, seed].output_dir) for seed in seeds]
    csvs = [os.path.join(cells[variant, seed].output_dir, 'metrics.csv') for seed in seeds]
    released = summaries[0]['privacy'] or {}
    rows.append(dict(
        variant=variant, sigma_dp=summaries[0]['sigma_dp'],
        wer=study.mean_std([100 * s['eval']['wer'] for s in summaries]),
        cer=study.mean_std([100 * s['eval']['cer'] for s in summaries]),
        epsilons=(released.get('epsilon_declared_rdp'), released.get('epsilon_run_rdp'))))
    profile = report.layer_norm_profile(csvs)
    if profile and (not variant.noise or variant.optimizer == _OPTIMIZERS.value[0]):
      profiles[variant.name] = profile
  orderings = _orderings(rows)
  notes = [f'{len(seeds)} seeds ({", ".join(map(str, seeds))}): each fixes the cohorts and the '
           'DP noise of a run; the corpus and the seed model are shared by all cells.',
           f'Cells: `{os.path.join(output_dir, "cells")}`; wall time of this invocation: '
           f'{(time.monotonic() - started) / 60:.1f} min.']
  text = _write(output_dir, rows, seed_eval.overall, profiles, orderings, notes)
  report.plot_study(
      {'WER (%)': {r['variant'].name: (r['wer'].mean, r['wer'].std) for r in rows},
       'CER (%)': {r['variant'].name: (r['cer'].mean, r['cer'].std) for r in rows}},
      profiles, os.path.join(output_dir, 'ablation.png'),
      'Per-layer client update norms (exact client statistics;\nin DP cells OUTSIDE the DP '
      'guarantee: a simulation diagnostic)')
  for variant in variants:
    if variant.name in profiles:
      report.plot_layer_norms(os.path.join(cells[variant, seeds[0]].output_dir, 'metrics.csv'),
                              os.path.join(output_dir, f'layer_norms_{variant.folder}.png'),
                              f'{variant.name}, seed {seeds[0]}')
  print('\n' + text)
  print(f'\nwritten: {os.path.join(output_dir, "ablation.md")}, ablation.csv, layer_norms.csv, '
        'ablation.png')


if __name__ == '__main__':
  cli.run(main)
