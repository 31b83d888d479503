r"""Dynamic gradient aggregation in miniature: label-noise clients, through the real TFF processes.

Dimitriadis et al., "Federated Transfer Learning with Dynamic Gradient Aggregation",
arXiv:2008.02452, Sec. 4 (Table 1's iteration counts: FedAvg ~800, hierarchical uniform ~384,
DGA softmax ~224, DGA-RL ~144 rounds to convergence). The miniature of the team's spec (property
18): K = `--dga_clients` clients (default 200), N = `--dga_cohort` (20) a round drawn **with
replacement** as in the paper, softmax regression on `--dga_classes` Gaussian classes, every
client with its own label skew (Dirichlet), and a fraction `--dga_noisy_fraction` (20%) of the
clients with noisy labels (`--dga_noise_kind`: a permutation of the classes of their own, or
uniformly random labels). Four runs from one initial model, `--dga_seeds` seeds each:

* fedavg: uniform weights, server SGD at learning rate 1 (FedAvg exactly);
* uniform_adam: uniform weights, server Adam (the paper's hierarchical optimization);
* dga_softmax: softmax(−β L_j) weights, server Adam;
* dga_rl: DGA-RL weights (`algorithms.dga_rl`) scored on a validation set, server Adam.

Printed (and with --dga_results_dir written to `dga_toys.json` / `.md`): the rounds until the
validation error first reaches `--dga_target_error` (mean over seeds; runs that never reach it
count as the round budget and are flagged), the final validation error (mean ± std), and, as a
simulation diagnostic from ground truth the server never has, the mean normalised weight N·α_j of
the noisy and of the clean clients (1 = uniform). Clients train with local SGD; no DP here.

  python -m experiments.dga_toys --dga_seeds=3 --dga_rounds=150 --dga_results_dir=/tmp/dga_toys
"""

import collections
import json
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import cli
from experiments import local_worker
from fedasr_tff import optimizers
from fedasr_tff.algorithms import dga
from fedasr_tff.algorithms import dga_rl

# Own flags only (tests import several experiment modules into one process).
_CLIENTS = flags.DEFINE_integer('dga_clients', 200, 'Clients K.', lower_bound=2)
_COHORT = flags.DEFINE_integer('dga_cohort', 20, 'Clients a round N (with replacement).',
                               lower_bound=1)
_NOISY = flags.DEFINE_float('dga_noisy_fraction', 0.2, 'Fraction of clients with noisy labels.')
_NOISE_KIND = flags.DEFINE_enum(
    'dga_noise_kind', 'permuted', ['permuted', 'random'], 'Label noise of the noisy clients: '
    'permuted, their labels shuffled by a permutation of the classes of their own (consistently '
    'wrong); random, labels drawn uniformly.')
_CLASSES = flags.DEFINE_integer('dga_classes', 10, 'Classes.', lower_bound=2)
_ROUNDS = flags.DEFINE_integer('dga_rounds', 150, 'Rounds per run.', lower_bound=1)
_SEEDS = flags.DEFINE_integer('dga_seeds', 3, 'Seeds.', lower_bound=1)
_TARGET = flags.DEFINE_float('dga_target_error', 0.32, 'Target validation error.')
_BETA = flags.DEFINE_float('dga_toy_beta', 2.0, 'beta of the DGA softmax.')
_SERVER_LR = flags.DEFINE_float('dga_server_lr', 0.03, 'Server Adam learning rate.')
_RUNS = flags.DEFINE_list('dga_runs', None, 'Runs (default: all).')
_RESULTS_DIR = flags.DEFINE_string('dga_results_dir', None, 'Where to write dga_toys.json / .md.')

RUNS = ('fedavg', 'uniform_adam', 'dga_softmax', 'dga_rl')
_FEATURES, _EXAMPLES, _BATCH, _LOCAL_STEPS, _CLIENT_LR = 20, 40, 10, 5, 0.1
# The CE loss of 10 classes starts at ln 10 = 2.3; the range covers it with room.
_LOSS_CLIP = 6.0
# Scale of the class means (unit-variance features): small enough that 150 rounds matter.
_SEPARATION = 0.5


def make_task(seed: int, clients: int, classes: int, noisy_fraction: float,
              noise_kind: str = 'permuted'):
  """(client (x, y) arrays, noisy client mask, validation (x, y)) of the label-noise task."""
  rng = np.random.default_rng(seed)
  means = rng.normal(scale=_SEPARATION, size=(classes, _FEATURES))

  def draw(labels):
    return (means[labels] + rng.normal(size=(len(labels), _FEATURES))).astype(np.float32)

  data = []
  for _ in range(clients):
    labels = rng.choice(classes, size=_EXAMPLES, p=rng.dirichlet(np.full(classes, 0.5)))
    data.append((draw(labels), labels.astype(np.int32)))
  noisy = np.zeros(clients, bool)
  noisy[rng.choice(clients, size=int(round(noisy_fraction * clients)), replace=False)] = True
  for j in np.flatnonzero(noisy):
    x, y = data[j]
    if noise_kind == 'permuted':
      noisy_labels = rng.permutation(classes)[y]  # Consistently wrong: a class relabelled.
    else:
      noisy_labels = rng.integers(0, classes, size=len(y))  # Pure noise.
    data[j] = (x, noisy_labels.astype(np.int32))
  val_labels = rng.integers(0, classes, size=2000)
  return data, noisy, (draw(val_labels), val_labels)


def _model_fn(classes):
  spec = (tf.TensorSpec([None, _FEATURES], tf.float32), tf.TensorSpec([None], tf.int32))

  def model_fn():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(_FEATURES,)),
                                 tf.keras.layers.Dense(classes)])
    return tff.learning.models.from_keras_model(
        model, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=spec)
  return model_fn


def validation_error(weights, validation) -> float:
  kernel, bias = [np.asarray(w, np.float64) for w in weights.trainable]
  x, y = validation
  return float(np.mean(np.argmax(x @ kernel + bias, axis=1) != y))


def run(name: str, seed: int, *, rounds: int, clients: int, cohort: int, classes: int,
        noisy_fraction: float, noise_kind: str, beta: float, server_lr: float):
  """One run: the validation error after every round and the mean weights of noisy and clean
  clients (normalised, N·α)."""
  data, noisy, validation = make_task(seed, clients, classes, noisy_fraction, noise_kind)
  datasets = [tf.data.Dataset.from_tensor_slices(d).shuffle(_EXAMPLES, seed=seed).batch(_BATCH)
              for d in data]
  weighting = (dga.SoftmaxWeighting(beta, loss_clip=_LOSS_CLIP)
               if name in ('dga_softmax', 'dga_rl') else None)
  server = (optimizers.build('sgd', 1.0) if name == 'fedavg'
            else optimizers.build('adam', server_lr))
  process = dga.build_dga_process(_model_fn(classes), weighting=weighting,
                                  client_learning_rate=_CLIENT_LR, local_steps=_LOCAL_STEPS,
                                  server_optimizer=server, with_client_round=True)
  rl = None
  if name == 'dga_rl':
    rl = dga_rl.DGARL(process, cohort, lambda w: validation_error(w, validation), theta=0.002,
                      seed=seed)
  state = process.initialize()
  rng = np.random.default_rng([seed, 1])
  errors, noisy_weights, clean_weights = [], [], []
  for round_num in range(rounds):
    ids = rng.integers(0, clients, size=cohort)  # With replacement, as the paper.
    cohort_data = [datasets[i] for i in ids]
    if rl is not None:
      result = rl.round(state, cohort_data, round_num=round_num)
      state, alpha = result.state, result.rl_weights
    else:
      updates, _, weights, _, _ = process.client_round(state, cohort_data)
      state = process.server_step(state, updates, weights).state
      alpha = np.asarray(weights, np.float64) / np.sum(weights)
    normalised = cohort * np.asarray(alpha, np.float64)
    if noisy[ids].any():
      noisy_weights.append(float(normalised[noisy[ids]].mean()))
    if (~noisy[ids]).any():
      clean_weights.append(float(normalised[~noisy[ids]].mean()))
    errors.append(validation_error(process.get_model_weights(state), validation))
  return {'errors': errors, 'noisy_weight': float(np.mean(noisy_weights)),
          'clean_weight': float(np.mean(clean_weights))}


def rounds_to_target(errors, target):
  """The first round (1-based) whose error is <= target, or None."""
  hits = np.flatnonzero(np.asarray(errors) <= target)
  return int(hits[0]) + 1 if hits.size else None


def table(results, target, rounds) -> str:
  lines = [f'| run | rounds to error <= {target:g} (mean; per seed) | final error | '
           'mean weight N·α, noisy clients | clean clients |', '|---|---|---|---|---|']
  for name, runs in results.items():
    hits = [rounds_to_target(r['errors'], target) for r in runs]
    shown = ', '.join(str(h) if h is not None else f'>{rounds}' for h in hits)
    mean = np.mean([h if h is not None else rounds for h in hits])
    finals = [r['errors'][-1] for r in runs]
    lines.append(
        f'| {name} | {mean:.1f}{"+" if None in hits else ""} ({shown}) | '
        f'{np.mean(finals):.3f} ± {np.std(finals):.3f} | '
        f'{np.mean([r["noisy_weight"] for r in runs]):.3f} | '
        f'{np.mean([r["clean_weight"] for r in runs]):.3f} |')
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  local_worker.set_context()
  names = _RUNS.value or list(RUNS)
  unknown = sorted(set(names) - set(RUNS))
  if unknown:
    raise app.UsageError(f'--dga_runs: unknown run(s) {unknown}; choose from {RUNS}.')
  if not 0 <= _NOISY.value < 1:
    raise app.UsageError(f'--dga_noisy_fraction must lie in [0, 1), got {_NOISY.value}.')
  if _RESULTS_DIR.value:
    cli.check_output('dga_results_dir', _RESULTS_DIR.value)
  settings = dict(rounds=_ROUNDS.value, clients=_CLIENTS.value, cohort=_COHORT.value,
                  classes=_CLASSES.value, noisy_fraction=_NOISY.value,
                  noise_kind=_NOISE_KIND.value, beta=_BETA.value,
                  server_lr=_SERVER_LR.value)
  results = collections.OrderedDict()
  for name in names:
    results[name] = [run(name, seed, **settings) for seed in range(_SEEDS.value)]
    print(f'{name}: final errors {[round(r["errors"][-1], 3) for r in results[name]]}',
          flush=True)
  text = table(results, _TARGET.value, _ROUNDS.value)
  print(text)
  if _RESULTS_DIR.value:
    os.makedirs(_RESULTS_DIR.value, exist_ok=True)
    with open(os.path.join(_RESULTS_DIR.value, 'dga_toys.json'), 'w') as f:
      json.dump({'settings': settings, 'target_error': _TARGET.value, 'results': results}, f,
                indent=2)
    with open(os.path.join(_RESULTS_DIR.value, 'dga_toys.md'), 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  cli.run(main)
