r"""Round time of the federated process against the same client work in plain TensorFlow.

The federated round is `fedasr_tff.algorithms.build_fed_avg_process` on the `tiny` CTC
transformer (local SGD with global-norm clipping at 1.0, unweighted mean of the deltas, SGD
server optimizer at learning rate 1), run by TFF's local C++ execution context
(`fedasr_tff.runtime`): the `worker_binary` child process, sent the cohort's datasets over gRPC
every round.

The floor is the same arithmetic without TFF, in this process: for every client of the cohort,
one `tf.function` assigns the global weights to a Keras `tiny` model, takes `--local_steps` SGD
steps (CTC loss, gradients clipped to global L2 norm 1.0, the same learning rate, the model's
seed the batch's `seed` with the local step folded in, as the client work does) over the client's
batches, cycling them, in a `tf.range` loop on a dataset iterator, and returns the delta; the
deltas are averaged with `tf.add_n` and applied. For the cohorts in `--reduce_floor_cohorts` a
second floor runs the same steps with the loop as `dataset.reduce` (the form the library's client
work had until this benchmark showed it slow), still in this process. All start from the same
weights and their first rounds are checked to agree, so they do the same work on the same batches.
Also timed: serializing the cohort's datasets to graphs (`DatasetToGraphV2`), which is how TFF
ships every client's dataset to the worker each round.

Clients are the speakers of a synthetic espeak-ng corpus (`fedasr_tff.data.synthetic`, made in
a temporary folder unless `--corpus_dir` holds one), a few short utterances each. Cohorts larger
than `--speakers` cycle through the speakers' datasets (cohort 128 over 16 speakers uses each
dataset 8 times); every entry is still a separate client to TFF and to the floors.

For every cohort, after `--warmup_rounds` untimed rounds of each (tracing, compiling), the
`--rounds` timed rounds of TFF, the floor(s) and the serialization are interleaved, rotating
their order, so machine noise hits all alike. Prints medians, the ratio TFF / floor, the time
per client, and a least-squares line time = fixed + per-client x cohort for TFF and the floor.

Then `--memory_rounds` more TFF rounds at cohort `--memory_cohort` (after the timing above, in
the same process) sample the resident memory (RSS) of this Python process and of its TFF
`worker_binary` children, which do the federated computation, at a few rounds, and print the
growth of each and of the total from round 20 to the last round.

  python -m benchmarks.round_overhead --cohorts=8,32,128 --rounds=5 --memory_rounds=200
"""

import os
import shutil
import statistics
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import psutil
import tensorflow as tf

from fedasr_tff import algorithms
from fedasr_tff import data
from fedasr_tff import models
from fedasr_tff import optimizers
from fedasr_tff.algorithms import local_training
from fedasr_tff.data import synthetic
from fedasr_tff.runtime import execution_context

_COHORTS = flags.DEFINE_list('cohorts', ['8', '32', '128'], 'Clients per round to time.')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed rounds of each per cohort.', lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer(
    'warmup_rounds', 1, 'Untimed rounds of each per cohort before timing (tracing, compiling).',
    lower_bound=1)
_REDUCE_FLOOR_COHORTS = flags.DEFINE_list(
    'reduce_floor_cohorts', ['8'], 'Cohorts (of --cohorts) at which to time the floor with a '
    '`dataset.reduce` loop too (slow).')
_LOCAL_STEPS = flags.DEFINE_integer('local_steps', 2, 'Local SGD steps (batches) per client.',
                                    lower_bound=1)
_SPEAKERS = flags.DEFINE_integer('speakers', 16, 'Distinct synthetic speakers (client datasets); '
                                 'larger cohorts cycle through them.', lower_bound=1)
_UTTERANCES = flags.DEFINE_integer('utterances_per_speaker', 4, 'Utterances of every speaker.',
                                   lower_bound=1)
_MAX_BATCH_SECONDS = flags.DEFINE_float('max_batch_seconds', 4.0,
                                        'Audio per client batch (dynamic batching).',
                                        lower_bound=0.1)
_MEMORY_ROUNDS = flags.DEFINE_integer('memory_rounds', 200,
                                      'TFF rounds of the memory measurement (0: skip it).',
                                      lower_bound=0)
_MEMORY_COHORT = flags.DEFINE_integer('memory_cohort', 32,
                                      'Clients per round while measuring memory.', lower_bound=1)
_CORPUS_DIR = flags.DEFINE_string(
    'corpus_dir', None, 'Folder of a synthetic corpus (made there if it has none); default: a '
    'temporary folder, removed once the features are computed.')

_MODEL = 'tiny'
_CLIENT_LEARNING_RATE = 0.05
_CLIP_NORM = 1.0
_SERVER_LEARNING_RATE = 1.0
_MEMORY_BASELINE_ROUND = 20
_MAX_FIRST_ROUND_DIFFERENCE = 1e-4
_SEED = 0


def _client_datasets(corpus_dir, vocab):
  """One dataset (padded batches held as constants) per synthetic speaker."""
  root = os.path.join(corpus_dir, 'librispeech')
  if not os.path.isdir(os.path.join(root, 'train')):
    synthetic.make_corpus(corpus_dir, num_speakers=_SPEAKERS.value,
                          mean_utterances=_UTTERANCES.value, skew=0.0, seed=_SEED)
  client_data = data.SpeechClientData(data.read_librispeech(root, 'train', strict=True), vocab,
                                      max_batch_seconds=_MAX_BATCH_SECONDS.value, strict=True)
  ids = client_data.client_ids[:_SPEAKERS.value]
  if len(ids) < _SPEAKERS.value:
    raise app.UsageError(f'{corpus_dir} has {len(ids)} speakers, --speakers={_SPEAKERS.value}.')
  return [client_data.create_tf_dataset_for_client(c, seed=i) for i, c in enumerate(ids)]


def _cohort(datasets, size):
  return [datasets[i % len(datasets)] for i in range(size)]


class _Floor:
  """The round's arithmetic as plain TensorFlow in this process (module docstring)."""

  def __init__(self, model, local_steps, reduce_loop):
    self._model = model
    self._local_steps = local_steps
    self._reduce_loop = reduce_loop

  def _step(self, batch, step):
    variables = self._model.trainable_variables
    with tf.GradientTape() as tape:
      logits = self._model((batch['features'], batch['feature_lengths']), training=True,
                           seed=local_training.local_step_seed(batch['seed'], step))
      loss = models.ctc_loss(batch['labels'], batch['label_lengths'], logits,
                             models.output_lengths(batch['feature_lengths'], _MODEL))
    grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), _CLIP_NORM)
    for variable, grad in zip(variables, grads, strict=True):
      variable.assign_sub(_CLIENT_LEARNING_RATE * grad)

  @tf.function(reduce_retracing=True)
  def _client_update(self, initial_weights, dataset):
    variables = self._model.trainable_variables
    for variable, value in zip(variables, initial_weights, strict=True):
      variable.assign(value)
    if self._reduce_loop:

      def body(count, batch):
        self._step(batch, count)
        return count + 1

      dataset.repeat().take(self._local_steps).reduce(tf.constant(0), body)
    else:
      batches = iter(dataset.repeat())
      for step in tf.range(self._local_steps):
        self._step(next(batches), step)
    return [w0 - w for w0, w in zip(initial_weights, variables, strict=True)]

  def next(self, weights, datasets):
    deltas = [self._client_update(weights, dataset) for dataset in datasets]
    count = float(len(deltas))
    return [w - _SERVER_LEARNING_RATE * tf.add_n(list(d)) / count
            for w, d in zip(weights, zip(*deltas, strict=True), strict=True)]


def _serialize(datasets):
  """Every client's dataset as a GraphDef, as TFF ships it to the worker; total bytes."""
  return sum(
      len(tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(d)).numpy())
      for d in datasets)


def _rss_mb():
  """(this process, its TFF workers) resident memory in MB."""
  workers = 0
  for child in psutil.Process().children(recursive=True):
    try:
      if child.name() == execution_context.WORKER_PROCESS_NAME:
        workers += child.memory_info().rss
    except psutil.NoSuchProcess:
      pass
  return psutil.Process().memory_info().rss / 2**20, workers / 2**20


def _check_first_round(process, state, floors, clients):
  """The floors' first round from the TFF initial weights must give TFF's new weights."""
  tff_new = process.next(state, clients).state.global_model_weights.trainable
  weights = [tf.constant(w) for w in state.global_model_weights.trainable]
  for name, floor in floors.items():
    floor_new = floor.next(weights, clients)
    difference = max(float(np.max(np.abs(a - b.numpy())))
                     for a, b in zip(tff_new, floor_new, strict=True))
    print(f'first round, {len(clients)} clients: largest |TFF - {name}| weight difference '
          f'{difference:.1e}')
    if difference > _MAX_FIRST_ROUND_DIFFERENCE:
      raise RuntimeError(f'The {name} does not compute what the federated round computes.')


def _summary(values):
  return f'{statistics.median(values):7.3f} [{min(values):.3f}, {max(values):.3f}]'


def _measure_rounds(process, floors, datasets, cohorts, reduce_cohorts):
  """Times TFF, the floors and serialization per cohort; returns the TFF state at the end."""
  state = process.initialize()
  weights = [tf.constant(w) for w in state.global_model_weights.trainable]
  _check_first_round(process, state, floors, _cohort(datasets, cohorts[0]))
  print(f'{_ROUNDS.value} timed rounds of each per cohort after {_WARMUP_ROUNDS.value} '
        f'warm-up, interleaved; {_LOCAL_STEPS.value} local steps per client; seconds, '
        'median [min, max]')
  medians = {'tff': [], 'floor': []}
  for cohort in cohorts:
    clients = _cohort(datasets, cohort)
    names = ['tff', 'floor', 'serialize'] + (['reduce floor'] if cohort in reduce_cohorts else [])
    times = {name: [] for name in names}
    floor_weights = {name: weights for name in floors}
    serialized_bytes = 0
    for round_num in range(_WARMUP_ROUNDS.value + _ROUNDS.value):
      shift = round_num % len(names)
      for name in names[shift:] + names[:shift]:
        start = time.perf_counter()
        if name == 'tff':
          state = process.next(state, clients).state
        elif name == 'serialize':
          serialized_bytes = _serialize(clients)
        else:
          floor_weights[name] = floors[name].next(floor_weights[name], clients)
        if round_num >= _WARMUP_ROUNDS.value:
          times[name].append(time.perf_counter() - start)
    row = {name: statistics.median(values) for name, values in times.items()}
    for name in medians:
      medians[name].append(row[name])
    print(f'cohort {cohort} ({serialized_bytes / cohort / 1e3:.0f} kB of serialized dataset '
          'per client):')
    for name, label in (('tff', 'TFF round'), ('floor', 'floor'),
                        ('reduce floor', 'floor, dataset.reduce loop'),
                        ('serialize', 'serializing the datasets')):
      if name in times:
        print(f'  {label:28s} {_summary(times[name])}  {row[name] / cohort * 1e3:7.1f} ms/client')
    print(f'  ratio TFF / floor            {row["tff"] / row["floor"]:7.2f}')
    if 'reduce floor' in row:
      print(f'  ratio TFF / reduce floor     {row["tff"] / row["reduce floor"]:7.2f}')
  if len(cohorts) > 1:
    sizes = np.array(cohorts, float)
    for name, label in (('tff', 'TFF'), ('floor', 'floor')):
      per_client, fixed = np.polyfit(sizes, np.array(medians[name]), 1)
      worst = float(np.max(np.abs((fixed + per_client * sizes) / np.array(medians[name]) - 1.0)))
      print(f'{label:5s} line: {fixed:6.3f} s + {per_client * 1e3:6.1f} ms x cohort (largest '
            f'deviation of a median from the line {worst:.1%})')
  return state


def _measure_memory(process, state, datasets):
  rounds = _MEMORY_ROUNDS.value
  clients = _cohort(datasets, _MEMORY_COHORT.value)
  marks = {1, 10, _MEMORY_BASELINE_ROUND, 50, 100, 150, rounds} & set(range(1, rounds + 1))
  print(f'resident memory over {rounds} TFF rounds at cohort {_MEMORY_COHORT.value}, MB (after '
        'the timing above, in the same process)')
  print(f'  {"round":>5s}  {"python":>8s}  {"worker":>8s}  {"total":>8s}  {"train loss":>10s}')
  samples = {}
  start = time.perf_counter()
  for round_num in range(1, rounds + 1):
    output = process.next(state, clients)
    state = output.state
    if round_num in marks:
      samples[round_num] = _rss_mb()
      python_mb, worker_mb = samples[round_num]
      loss = float(output.metrics['client_work']['train']['loss'])
      print(f'  {round_num:5d}  {python_mb:8.1f}  {worker_mb:8.1f}  {python_mb + worker_mb:8.1f}  '
            f'{loss:10.3f}')
  print(f'  {rounds} rounds in {time.perf_counter() - start:.0f} s')
  if rounds > _MEMORY_BASELINE_ROUND:
    (p0, w0), (p1, w1) = samples[_MEMORY_BASELINE_ROUND], samples[rounds]
    print(f'  growth round {_MEMORY_BASELINE_ROUND} -> {rounds}: python {p1 / p0 - 1:+.1%}, '
          f'worker {w1 / w0 - 1:+.1%}, total {(p1 + w1) / (p0 + w0) - 1:+.1%}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  try:
    cohorts = [int(c) for c in _COHORTS.value]
    reduce_cohorts = {int(c) for c in _REDUCE_FLOOR_COHORTS.value}
  except ValueError as e:
    raise app.UsageError(f'--cohorts and --reduce_floor_cohorts take integers: {e}') from e
  if not cohorts or min(cohorts) < 1:
    raise app.UsageError(f'--cohorts must be positive integers, got {_COHORTS.value}.')
  execution_context.set_local_cpp_execution_context()
  started = time.perf_counter()
  tf.keras.utils.set_random_seed(_SEED)
  vocab = data.Vocabulary('en')
  corpus_dir = _CORPUS_DIR.value or tempfile.mkdtemp(prefix='round_overhead_')
  try:
    datasets = _client_datasets(corpus_dir, vocab)
  finally:
    if not _CORPUS_DIR.value:
      shutil.rmtree(corpus_dir, ignore_errors=True)  # The datasets hold the features.
  shapes = [tuple(b['features'].shape) for b in datasets[0]]
  print(f'{_MODEL} model; {len(datasets)} distinct clients of {_UTTERANCES.value} synthetic '
        f'utterances (the first one\'s batches: {shapes}); {os.cpu_count()} CPUs, load average '
        f'{os.getloadavg()[0]:.1f}')

  process = algorithms.build_fed_avg_process(
      models.build_tff_model_fn(_MODEL, vocab.tokens),
      client_learning_rate=_CLIENT_LEARNING_RATE,
      local_steps=_LOCAL_STEPS.value,
      local_clip_norm=_CLIP_NORM,
      server_optimizer=optimizers.build('sgd', _SERVER_LEARNING_RATE))
  # After the process: TFF builds models in graphs, which invalidates Keras models made before.
  model = models.build_ctc_transformer(_MODEL, vocab.size)
  floors = {'floor': _Floor(model, _LOCAL_STEPS.value, reduce_loop=False)}
  if reduce_cohorts & set(cohorts):
    floors['reduce floor'] = _Floor(model, _LOCAL_STEPS.value, reduce_loop=True)
  state = _measure_rounds(process, floors, datasets, cohorts, reduce_cohorts)
  if _MEMORY_ROUNDS.value:
    _measure_memory(process, state, datasets)
  print(f'total {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}')


if __name__ == '__main__':
  app.run(main)
