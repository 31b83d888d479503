r"""The classifier-as-retriever paper's comparisons in miniature, over several seeds.

  python -m experiments.retriever_study --output_dir=/tmp/retriever_study --seeds=0,1,2

Runs, on any corpus `train_retriever` reads (its flags: --corpus, --corpus_path, ...; by
default Debian's fortunes, category = document to retrieve) with the pretrained
all-MiniLM-L6-v2, every cell of `CELLS` for each seed (the seed fixes the test split, the client
split, the initialisation and the batch orders) through `fedasr_tff.retrieval.training.train`,
and prints and writes (`results.md`, `results.csv`) held-out top-1 and top-K accuracy and
macro-F1, mean ± std over the seeds, with each DP cell's ε. The cells (Fofonjka et al., webAI
2025, Sec. 6):

* E1: MIPS on the frozen model (class prototypes; no training) < classifier-only <= adapter +
  classifier;
* E2: centralized (one client) against FL (`--clients`) at the same total epochs, and FL with
  the paper's local DP (adaptive clip, z = 0.1), and with central DP (`PerLayerDPFactory`) at a
  stated ε for a declared population;
* E4: local DP with 3 warm-up rounds (ε = ∞: the warm-up sends raw updates);
* E5: last-token against mean pooling, and the pre-classifier head.

A cell whose run finished (its `summary.json` exists) is read back, so a killed study resumes
with the unfinished cells. `--cells` picks cells by name.
"""

import csv
import json
import os

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from fedasr_tff import privacy
from fedasr_tff import private_files
from fedasr_tff.program import study
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.retrieval import training

_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds (one run of each cell per seed).')
_CELLS = flags.DEFINE_list('cells', None, 'Cells to run (default all).')
_CLIENTS = flags.DEFINE_integer('clients', 3, 'FL clients (the paper\'s AG News run has 3).',
                                lower_bound=2)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'FL rounds.', lower_bound=1)
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', 2, 'Local epochs a round.', lower_bound=1)
# The corpus: any that `train_retriever` reads, by the trainer's flags of the same names
# (`RetrieverConfig`); by default the study's fortunes, the first 10 categories of 40 entries or
# more, 40 of each.
CORPUS_FLAGS = ('corpus', 'corpus_path', 'text_column', 'label_column', 'package_label',
                'test_path', 'max_chars', 'min_class_examples', 'max_class_examples',
                'max_classes', 'test_fraction')
config_flags.define_flags(retriever_config.RetrieverConfig, CORPUS_FLAGS, defaults={
    'max_classes': 10, 'min_class_examples': 40, 'max_class_examples': 40})
_LR = flags.DEFINE_float('client_learning_rate', 0.1, 'Local SGD learning rate of the head.')
_ADAPTER_LR = flags.DEFINE_float('adapter_learning_rate', 0.1,
                                 'Local SGD learning rate of adapter + classifier.')
_CENTRAL_Z = flags.DEFINE_float('central_noise_multiplier', 0.15,
                                'Central DP cell: z on the sum of the clients\' deltas.')
_CENTRAL_CLIP = flags.DEFINE_float('central_clip', 0.5, 'Central DP cell: the clip.')
_MAX_LENGTH = flags.DEFINE_integer('max_length', 32, 'Tokens per text.', lower_bound=2)
_DECLARED_POPULATION = flags.DEFINE_integer('declared_population', 10**6,
                                            'Central DP cell: declared population K\'.')
_DECLARED_COHORT = flags.DEFINE_integer('declared_cohort_size', 1000,
                                        'Central DP cell: declared cohort S\'.')


def cells():
  """{name: (description, RetrieverConfig overrides)}; 'mips' is the untrained baseline."""
  clients = _CLIENTS.value
  adapter = dict(mode='adapter_classifier', client_learning_rate=_ADAPTER_LR.value)
  return {
      'mips': ('E1 MIPS on the frozen model (no training)', {}),
      'central': ('E2 centralized, classifier only (1 client)', dict(num_clients=1)),
      'fl': (f'E1/E2 FL, classifier only ({clients} clients)', {}),
      'fl_adapter': (f'E1 FL, adapter + classifier ({clients} clients)', adapter),
      'central_adapter': ('E1 centralized, adapter + classifier', dict(adapter, num_clients=1)),
      'fl_local_dp': ('E2 FL + local DP (adaptive clip, z = 0.1)',
                      dict(local_dp='adaptive', noise_multiplier=0.1)),
      'fl_local_dp_warmup': ('E4 FL + local DP, 3 warm-up rounds',
                             dict(local_dp='adaptive', noise_multiplier=0.1, warmup_rounds=3)),
      'fl_central_dp': (f'E2 FL + central DP (z = {_CENTRAL_Z.value:g} on the sum)',
                        dict(central_dp='fixed', weighting='uniform',
                             central_noise_multiplier=_CENTRAL_Z.value,
                             central_clip=_CENTRAL_CLIP.value,
                             declared_population=_DECLARED_POPULATION.value,
                             declared_cohort_size=_DECLARED_COHORT.value)),
      'fl_last_pooling': ('E5 FL, last-token pooling', dict(pooling='last')),
      'fl_pre_classifier': ('E5 FL, pre-classifier head', dict(head='pre_classifier')),
  }


def _config(name, overrides, seed, output_dir):
  base = dict({name: flags.FLAGS[name].value for name in CORPUS_FLAGS},
              max_length=_MAX_LENGTH.value, num_clients=_CLIENTS.value,
              local_epochs=_LOCAL_EPOCHS.value, client_learning_rate=_LR.value,
              data_seed=seed, seed=seed, output_dir=os.path.join(output_dir, f'{name}_{seed}'))
  # Centralized is one client holding all the training data, for the same rounds x local
  # epochs: the same total epochs over the data as FL.
  base.update(overrides, rounds=_ROUNDS.value)
  return retriever_config.RetrieverConfig(**base)


def _run(name, overrides, seed, output_dir):
  config = _config(name, overrides, seed, output_dir)
  summary_path = os.path.join(config.output_dir, 'summary.json')
  if os.path.exists(summary_path):
    with open(summary_path) as f:
      return json.load(f)
  if name == 'mips':
    os.makedirs(config.output_dir, exist_ok=True)
    summary = {'eval': training.mips_baseline(config), 'privacy': None}
  else:
    summary = training.train(config, show_progress=False).metrics
  with private_files.open_private(summary_path) as f:   # As the run's own (per-client rows).
    json.dump(summary, f, indent=2)
  return summary


def _epsilon(summary):
  released = summary.get('privacy') or {}
  if 'local_epsilon_max' in released:
    return f'local, per client: {privacy.format_epsilon(released["local_epsilon_max"])}'
  if 'epsilon_run_rdp' in released:
    return (f'run (K=3): {privacy.format_epsilon(released["epsilon_run_rdp"])}; declared '
            f'(K\'={_DECLARED_POPULATION.value:,}, S\'={_DECLARED_COHORT.value:,}): '
            f'{privacy.format_epsilon(released["epsilon_declared_rdp"])}')
  return 'no DP'


def main(argv):
  del argv
  workers = common.start_binary()
  common.require('output_dir')
  output_dir = common.OUTPUT_DIR.value
  chosen = cells()
  if _CELLS.value:
    unknown = sorted(set(_CELLS.value) - set(chosen))
    if unknown:
      raise app.UsageError(f'--cells: unknown {unknown}; known {sorted(chosen)}.')
    chosen = {k: v for k, v in chosen.items() if k in _CELLS.value}
  seeds = common.seeds(_SEEDS)
  rows = []
  for name, (description, overrides) in chosen.items():
    with config_flags.flag_errors():  # A corpus or flag error as one line naming it.
      results = [_run(name, overrides, seed, output_dir) for seed in seeds]
    metrics = sorted(results[0]['eval'])
    row = {'cell': name, 'description': description, 'seeds': len(seeds),
           'epsilon': _epsilon(results[0])}
    for metric in metrics:
      values = [100 * r['eval'][metric] for r in results]
      row[metric] = str(study.mean_std(values))
      row[f'{metric}_values'] = ' '.join(f'{v:.1f}' for v in values)
    rows.append(row)
    print(f'{name}: ' + ', '.join(f'{m} {row[m]}' for m in metrics) + f' ({row["epsilon"]})',
          flush=True)
  keys = list(dict.fromkeys(k for row in rows for k in row))
  with open(os.path.join(output_dir, 'results.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, keys)
    writer.writeheader()
    writer.writerows(rows)
  metric_keys = [k for k in keys if (k.startswith('top') or k == 'macro_f1')
                 and not k.endswith('_values')]
  lines = ['| cell | ' + ' | '.join(f'{m} (%)' for m in metric_keys) + ' | ε |',
           '|---|' + '---|' * (len(metric_keys) + 1)]
  for row in rows:
    lines.append(f'| {row["description"]} | ' + ' | '.join(row.get(m, '') for m in metric_keys)
                 + f' | {row["epsilon"]} |')
  with open(os.path.join(output_dir, 'results.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines))
  if workers is not None:
    print(common.worker_trust_line(workers))


if __name__ == '__main__':
  cli.run(main)
