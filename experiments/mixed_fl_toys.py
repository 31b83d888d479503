r"""Mixed federated learning on synthetic tasks in miniature, through the real TFF processes.

Augenstein et al., "Mixed Federated Learning: Joint Decentralized and Centralized Learning",
arXiv:2205.13655, has no toy experiments; these are the analogs of its claims
(`fedasr_tff.algorithms.mixed_fl` runs them):

* `--toy=quadratic` (its Sec. 4 and App. B): linear regression with the squared error, so every
  loss is a deterministic quadratic; every client holds the same data (IID clients, full-batch
  steps) and the server data of another curvature. With K > 1 local steps, parallel training's
  fixed point is biased away from argmin f = w_f·f_fed + w_c·f_central, while both gradient
  transfers reach it. Prints ||x_T − x*|| and f(x_T) − f(x*) for each algorithm.
* `--toy=label_skew` (its smile experiment, Sec. 5.1, in miniature): binary classification of
  two Gaussian classes; federated clients hold only label 1 ("smiling"), the server only label
  0; evaluation on a balanced mixture. Runs FL alone, PT, 1-w GT, 2-w GT and the oracle
  (central training on the union, `algorithms.build_central_work`), and prints AUC, eval loss and
  accuracy on each label (mean ± std over `--toy_seeds`) and the gradient dissimilarity G̃², B̃²
  (eq. 7, max over rounds 10..T).

  python -m experiments.mixed_fl_toys --toy=quadratic
  python -m experiments.mixed_fl_toys --toy=label_skew --toy_seeds=3 --toy_rounds=150 \
      --results_dir=/tmp/mixed_toys

With --results_dir, the curves and the table are written to `mixed_fl_<toy>.json`.
"""

import json
import os

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import cli
from experiments import local_worker
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.algorithms import mixed_fl

TASKS = ('quadratic', 'label_skew')
_TASK = flags.DEFINE_enum('toy', 'label_skew', TASKS, 'Which synthetic task.')
_SEEDS = flags.DEFINE_integer('toy_seeds', 3, 'Seeds (label_skew).', lower_bound=1)
_ROUNDS = flags.DEFINE_integer('toy_rounds', None, 'Rounds (default: 300 quadratic, 150 '
                               'label_skew).', lower_bound=1)
# Its own flags only (no experiments.common): tests import this module beside other binaries.
_RESULTS_DIR = flags.DEFINE_string('results_dir', None, 'Where to write mixed_fl_<toy>.json.')

FL_ALONE, ORACLE = 'fl_alone', 'oracle'


def _keras_model(features, hidden, seed):
  """A linear model (`hidden` None) or one hidden layer of `hidden` ReLU units."""
  tf.keras.utils.set_random_seed(seed)
  layers = [tf.keras.layers.InputLayer(input_shape=(features,))]
  if hidden:
    layers.append(tf.keras.layers.Dense(hidden, activation='relu'))
  layers.append(tf.keras.layers.Dense(1))
  return tf.keras.Sequential(layers)


def _model_fn(features, hidden, loss, seed=0):
  spec = (tf.TensorSpec([None, features], tf.float32), tf.TensorSpec([None, 1], tf.float32))
  return lambda: tff.learning.models.from_keras_model(_keras_model(features, hidden, seed),
                                                      loss=loss(), input_spec=spec)


def _dataset(x, y, batch_size):
  return tf.data.Dataset.from_tensor_slices((x.astype(np.float32), y.astype(np.float32))
                                            ).batch(batch_size)


def _trainable(state):
  return [np.asarray(w, np.float64) for w in state.global_model_weights.trainable]


# --- quadratic ---------------------------------------------------------------------------------

def run_quadratic(rounds=300, *, local_steps=5, learning_rate=0.05, central_weight=0.5,
                  clients=4, seed=0):
  """||x_T − x*|| and f(x_T) − f(x*) of PT, 1-w GT and 2-w GT on the deterministic quadratic."""
  rng = np.random.default_rng(seed)
  features = 3
  x_f = rng.normal(size=(8, features))
  y_f = x_f @ np.array([[1.0], [-2.0], [0.5]]) + 0.3
  x_c = rng.normal(size=(8, features)) * np.array([2.0, 0.3, 1.0])   # Another curvature.
  y_c = x_c @ np.array([[-1.0], [1.0], [2.0]]) - 0.5
  w_f = 1.0 - central_weight

  def design(x):
    return np.hstack([x, np.ones((len(x), 1))])

  # f(θ) = w_f·mean (Aθ − y)² over client data + w_c·(the same over server data).
  a_f, a_c = design(x_f), design(x_c)
  hessian = 2 * (w_f * a_f.T @ a_f / len(a_f) + central_weight * a_c.T @ a_c / len(a_c))
  linear = 2 * (w_f * a_f.T @ y_f / len(a_f) + central_weight * a_c.T @ y_c / len(a_c))
  optimum = np.linalg.solve(hessian, linear)

  def objective(theta):
    return (w_f * np.mean((a_f @ theta - y_f) ** 2)
            + central_weight * np.mean((a_c @ theta - y_c) ** 2))

  model_fn = _model_fn(features, None, tf.keras.losses.MeanSquaredError)
  client_data = [_dataset(x_f, y_f, len(x_f))] * clients
  central_data = _dataset(x_c, y_c, len(x_c))
  results = {}
  for algorithm in mixed_fl.ALGORITHMS:
    process = algorithms.build_mixed_fl_process(
        model_fn, algorithm=algorithm, central_weight=central_weight,
        client_learning_rate=learning_rate, local_steps=local_steps, local_clip_norm=None,
        server_optimizer=optimizers.build('sgd', 1.0))
    state = process.initialize()
    for _ in range(rounds):
      state = process.next(state, client_data, central_data).state
    kernel, bias = _trainable(state)
    theta = np.vstack([kernel, bias.reshape(1, 1)])
    results[algorithm] = {'distance': float(np.linalg.norm(theta - optimum)),
                          'suboptimality': float(objective(theta) - objective(optimum))}
  return results


# --- label skew --------------------------------------------------------------------------------

def _label_skew_data(rng, *, features=8, clients=30, per_client=16, server=1000, evaluation=500):
  """Two Gaussian classes N(±μ, I); clients hold label 1 only, the server label 0 only."""
  mean = np.full(features, 0.6)

  def sample(label, count, shift=0.0):
    sign = 1.0 if label else -1.0
    x = rng.normal(size=(count, features)) + sign * mean + shift
    return x, np.full((count, 1), float(label))

  client_sets = [sample(1, per_client, rng.normal(scale=0.3, size=features))
                 for _ in range(clients)]
  server_set = sample(0, server)
  eval_pos, eval_neg = sample(1, evaluation), sample(0, evaluation)
  return client_sets, server_set, eval_pos, eval_neg


def _auc(scores, labels):
  metric = tf.keras.metrics.AUC(num_thresholds=2000)
  metric.update_state(labels, tf.sigmoid(scores))
  return float(metric.result())


def run_label_skew(rounds=150, *, seed=0, cohort=10, batch_size=8, local_steps=2,
                   learning_rate=0.1, central_weight=0.5, eval_every=10):
  """Curves of AUC, eval loss and per-label accuracy for FL alone, PT, 1-w GT, 2-w GT and the
  oracle, and each mixed algorithm's max G̃², B̃² over rounds 10..T."""
  rng = np.random.default_rng(seed)
  client_sets, server_set, eval_pos, eval_neg = _label_skew_data(rng)
  eval_x = np.vstack([eval_pos[0], eval_neg[0]]).astype(np.float32)
  eval_y = np.vstack([eval_pos[1], eval_neg[1]]).astype(np.float32)
  loss = tf.keras.losses.BinaryCrossentropy(from_logits=True)
  features, hidden = eval_x.shape[1], 16
  model_fn = _model_fn(features, hidden,
                       lambda: tf.keras.losses.BinaryCrossentropy(from_logits=True), seed=seed)

  def evaluate(weights):
    # The model's forward pass in NumPy: a Keras model made eagerly here would be invalidated
    # by the next TFF process built (which constructs models in graph mode).
    kernel_1, bias_1, kernel_2, bias_2 = (np.asarray(w) for w in weights)
    scores = np.maximum(eval_x @ kernel_1 + bias_1, 0.0) @ kernel_2 + bias_2
    predicted = scores > 0
    half = len(eval_pos[0])
    eval_loss = float(loss(eval_y, scores.astype(np.float32)))
    return {'auc': _auc(scores, eval_y), 'eval_loss': eval_loss,
            'accuracy_label_1': float(np.mean(predicted[:half])),
            'accuracy_label_0': float(np.mean(~predicted[half:]))}

  def central_batches(round_rng, pool):
    # K batches of the paper's |B_c| = S·|B_i| (App. C.2): PT and 2-w GT step on each, 1-w GT
    # takes its one gradient on all of them, its rubric's K·S·|B_i|.
    size = mixed_fl.central_batch_size(mixed_fl.PARALLEL, cohort, batch_size, local_steps)
    x, y = pool
    index = round_rng.choice(len(x), size=local_steps * size)
    return _dataset(x[index], y[index], size)

  union = (np.vstack([c[0] for c in client_sets] + [server_set[0]]),
           np.vstack([c[1] for c in client_sets] + [server_set[1]]))
  curves, dissimilarity, initial = {}, {}, None
  for name in (FL_ALONE,) + mixed_fl.ALGORITHMS + (ORACLE,):
    if name == ORACLE:
      oracle = algorithms.build_central_work(
          model_fn, optimizer=optimizers.build('sgd', learning_rate), steps=local_steps)
      optimizer_state = oracle.initialize()
      weights = initial   # The mixed processes' initial model (same seed).
    else:
      process = algorithms.build_mixed_fl_process(
          model_fn, algorithm=mixed_fl.PARALLEL if name == FL_ALONE else name,
          central_weight=0.0 if name == FL_ALONE else central_weight,
          client_learning_rate=learning_rate, local_steps=local_steps, local_clip_norm=None,
          server_optimizer=optimizers.build('sgd', 1.0),
          gradient_dissimilarity=name != FL_ALONE, diagnostics=True)  # No DP here.
      state = process.initialize()
      initial = state.global_model_weights
    curve, g2, b2 = [], [], []
    for round_num in range(1, rounds + 1):
      round_rng = np.random.default_rng([seed, round_num])
      if name == ORACLE:
        optimizer_state, delta, _, _ = oracle.steps(optimizer_state, weights,
                                                    central_batches(round_rng, union))
        weights = tff.learning.models.ModelWeights(
            [w - d for w, d in zip(weights.trainable, delta, strict=True)],
            weights.non_trainable)
        current = weights.trainable
      else:
        cohort_sets = [client_sets[i] for i in round_rng.choice(len(client_sets), cohort,
                                                                replace=False)]
        datasets = [_dataset(x, y, batch_size).shuffle(len(x), seed=round_num)
                    for x, y in cohort_sets]
        output = process.next(state, datasets, central_batches(round_rng, server_set))
        state = output.state
        current = state.global_model_weights.trainable
        if name != FL_ALONE and round_num >= 10:
          measured = output.metrics['client_work']['gradient_dissimilarity']
          g2.append(float(measured['G2']))
          b2.append(float(measured['B2']))
      if round_num % eval_every == 0 or round_num == rounds:
        curve.append({'round': round_num, **evaluate(current)})
    curves[name] = curve
    if g2:
      dissimilarity[name] = {'max_G2': max(g2), 'max_B2': max(b2)}
  return curves, dissimilarity


def _label_skew_table(runs):
  """Mean ± std over seeds of the final metrics, per algorithm, as Markdown."""
  names = list(runs[0][0])
  metrics = ('auc', 'eval_loss', 'accuracy_label_1', 'accuracy_label_0')
  lines = ['| algorithm | ' + ' | '.join(metrics) + ' | max G~² | max B~² |',
           '|---|' + '---|' * (len(metrics) + 2)]
  for name in names:
    cells = []
    for metric in metrics:
      values = [curves[name][-1][metric] for curves, _ in runs]
      cells.append(f'{np.mean(values):.3f} ± {np.std(values):.3f}')
    for key in ('max_G2', 'max_B2'):
      values = [d[name][key] for _, d in runs if name in d]
      cells.append(f'{np.mean(values):.2f}' if values else '-')
    lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  results_dir = _RESULTS_DIR.value
  if results_dir:
    cli.check_output('results_dir', results_dir)
  local_worker.set_context()
  if _TASK.value == 'quadratic':
    results = run_quadratic(_ROUNDS.value or 300)
    print('| algorithm | ||x_T - x*|| | f(x_T) - f(x*) |\n|---|---|---|')
    for name, values in results.items():
      print(f'| {name} | {values["distance"]:.3g} | {values["suboptimality"]:.3g} |')
    output = {'task': 'quadratic', 'results': results}
  else:
    runs = [run_label_skew(_ROUNDS.value or 150, seed=seed) for seed in range(_SEEDS.value)]
    table = _label_skew_table(runs)
    print(table)
    output = {'task': 'label_skew', 'table': table,
              'runs': [{'curves': c, 'dissimilarity': d} for c, d in runs]}
  if results_dir:
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, f'mixed_fl_{_TASK.value}.json'), 'w') as f:
      json.dump(output, f, indent=2)


if __name__ == '__main__':
  cli.run(main)
