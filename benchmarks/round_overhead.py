r"""What a federated round costs, phase by phase, against the same client work in plain TF.

A round is what `fedasr_tff.speech.federated_training` does: build each sampled client's dataset
(`SpeechClientData.create_tf_dataset_for_client` with the client's round seed and
`max_batches=--local_steps`: a seeded sample of the client's utterances, features read from the
run's feature cache), then one step of `fedasr_tff.algorithms.build_fed_avg_process` on the
`tiny` CTC transformer (local SGD with global-norm clipping at 1.0, unweighted mean of the
deltas, SGD server optimizer at learning rate 1), run by `--engine` as the binaries run it: in
process (their default: TFF's compiled round run by TensorFlow here, 2 clients at once) or by
TFF's local C++ execution context (`worker`: the `worker_binary` child process, sent the cohort's
datasets over gRPC).
Its phases, each timed on its own:

* data: building the cohort's datasets (reading cached features, padding, the `tf.data` graph);
* serialize: the datasets as graphs (`DatasetToGraphV2`), as TFF sends them to the worker;
* empty round: the process on the same number of clients with empty datasets: dispatch,
  aggregation and the server step, no client step;
* client steps: the TFF round less serialize and the empty round; the share of the round
  (data + TFF) that is client steps is printed.

Tracing is paid once per run: building the process (Python traces its computations) and its
first round (the worker compiles them) are printed apart.

The floor is the client steps without TFF, in this process: for every client, one `tf.function`
assigns the global weights to a Keras `tiny` model, takes `--local_steps` SGD steps (CTC loss,
gradients clipped to global L2 norm 1.0, the same learning rate, the model's seed the batch's
`seed` with the local step folded in, as the client work does) over the client's batches, cycling
them, and returns the delta; the deltas are averaged with `tf.add_n` and applied. For the cohorts
in `--reduce_floor_cohorts` a second floor runs the loop as `dataset.reduce` (the form the
client work had until this benchmark showed it slow). The first round of each is checked to agree
with TFF's, so they do the same work on the same batches. TFF runs clients on both cores at once,
the floor one after another.

Clients are the speakers of a synthetic espeak-ng corpus (`fedasr_tff.speech.data.synthetic`, made
in a temporary folder unless `--corpus_dir` holds one). Cohorts larger than `--speakers` cycle
through the speakers (every entry draws its own round seed, so its own sample, and is a separate
client to TFF and to the floors). For every cohort, after `--warmup_rounds` untimed rounds, the
`--rounds` timed rounds of each phase and floor are interleaved, rotating their order, so machine
noise hits all alike. Prints medians [min, max], the ratio TFF / floor, and a least-squares line
time = fixed + per-client x cohort.

Client size: `--size_speakers` speakers with `max(--client_sizes)` utterances each; a client of
size n is the first n utterances of one. At cohort `--size_cohort` and `--local_steps` steps,
rounds over clients of each size, timed (data + TFF) as the runner builds them (`max_batches`,
features from the cache, filled before the timing: a run featurises an utterance once, on its
first use) and as the runner did before it shipped only the round's batches (every utterance
decoded and featurised again each round, no cache, the whole dataset shipped): the first must be
flat in the client's size.

Then `--memory_rounds` more TFF rounds at cohort `--memory_cohort` (after the above, in the same
process) sample the resident memory (RSS) of this Python process and of its TFF `worker_binary`
children, at a few rounds, and print the growth of each and of the total from round 20 to the last.

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
import tensorflow as tf

from benchmarks import memory
from benchmarks import speech_rounds
from fedasr_tff.algorithms import local_training
from fedasr_tff.runtime import execution_context
from fedasr_tff.speech import data
from fedasr_tff.speech import models

_LOCAL_STEPS = speech_rounds.LOCAL_STEPS
_SPEAKERS = speech_rounds.SPEAKERS
_UTTERANCES = speech_rounds.UTTERANCES
_MAX_BATCH_SECONDS = speech_rounds.MAX_BATCH_SECONDS
_CORPUS_DIR = speech_rounds.CORPUS_DIR
_COHORTS = flags.DEFINE_list('cohorts', ['8', '32', '128'], 'Clients per round to time.')
_ENGINE = flags.DEFINE_enum('engine', 'inprocess', ['inprocess', 'worker'],
                            'What runs the TFF round, as the binaries\' --engine.')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed rounds of each per cohort.', lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer(
    'warmup_rounds', 1, 'Untimed rounds of each per cohort before timing (tracing, compiling).',
    lower_bound=1)
_REDUCE_FLOOR_COHORTS = flags.DEFINE_list(
    'reduce_floor_cohorts', [], 'Cohorts (of --cohorts) at which to time the floor with a '
    '`dataset.reduce` loop too (slow).')
_CLIENT_SIZES = flags.DEFINE_list('client_sizes', ['10', '100', '500'],
                                  'Utterances per client of the client-size rounds (empty: skip).')
_SIZE_SPEAKERS = flags.DEFINE_integer('size_speakers', 4, 'Speakers of the client-size corpus.',
                                      lower_bound=1)
_SIZE_COHORT = flags.DEFINE_integer('size_cohort', 4, 'Clients per round of the client-size '
                                    'rounds (cycling the speakers).', lower_bound=1)
_SIZE_ROUNDS = flags.DEFINE_integer('size_rounds', 3, 'Timed rounds of each client size and '
                                    'data path.', lower_bound=1)
_MEMORY_ROUNDS = flags.DEFINE_integer('memory_rounds', 200,
                                      'TFF rounds of the memory measurement (0: skip it).',
                                      lower_bound=0)
_MEMORY_COHORT = flags.DEFINE_integer('memory_cohort', 32,
                                      'Clients per round while measuring memory.', lower_bound=1)

_MEMORY_BASELINE_ROUND = 20
_MAX_FIRST_ROUND_DIFFERENCE = 1e-4


def _empty_like(dataset):
  """An empty dataset of `dataset`'s structure (a client with no data) with no constants."""
  zeros = tf.nest.map_structure(
      lambda spec: tf.zeros([1 if d is None else d for d in spec.shape], spec.dtype),
      dataset.element_spec)
  return tf.data.Dataset.from_tensors(zeros).take(0)


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
                             models.output_lengths(batch['feature_lengths'], speech_rounds.MODEL))
    grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), speech_rounds.CLIP_NORM)
    for variable, grad in zip(variables, grads, strict=True):
      variable.assign_sub(speech_rounds.CLIENT_LEARNING_RATE * grad)

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
    return [w - speech_rounds.SERVER_LEARNING_RATE * tf.add_n(list(d)) / count
            for w, d in zip(weights, zip(*deltas, strict=True), strict=True)]


def _check_first_round(process, state, floors, clients):
  """The floors' first round from the TFF initial weights must give TFF's new weights."""
  start = time.perf_counter()
  tff_new = process.next(state, clients).state.global_model_weights.trainable
  print(f'first TFF round, {len(clients)} clients (the worker compiles the computation): '
        f'{time.perf_counter() - start:.2f} s')
  weights = [tf.constant(w) for w in state.global_model_weights.trainable]
  for name, floor in floors.items():
    floor_new = floor.next(weights, clients)
    difference = max(float(np.max(np.abs(a - b.numpy())))
                     for a, b in zip(tff_new, floor_new, strict=True))
    print(f'first round, {len(clients)} clients: largest |TFF - {name}| weight difference '
          f'{difference:.1e}')
    if difference > _MAX_FIRST_ROUND_DIFFERENCE:
      raise RuntimeError(f'The {name} does not compute what the federated round computes.')


def _measure_rounds(process, floors, cohort_data, cohorts, reduce_cohorts):
  """Times the phases of a round and the floors per cohort; returns the TFF state at the end."""
  state = process.initialize()
  weights = [tf.constant(w) for w in state.global_model_weights.trainable]
  _check_first_round(process, state, floors, cohort_data.build(cohorts[0]))
  print(f'{_ROUNDS.value} timed rounds of each per cohort after {_WARMUP_ROUNDS.value} '
        f'warm-up, interleaved; {_LOCAL_STEPS.value} local steps per client; seconds, '
        'median [min, max]')
  medians = {'round': [], 'floor': []}
  for cohort in cohorts:
    names = ['tff', 'empty', 'floor', 'serialize']
    names += ['reduce floor'] if cohort in reduce_cohorts else []
    times = {name: [] for name in names + ['data']}
    floor_weights = {name: weights for name in floors}
    serialized_bytes = 0
    for round_num in range(_WARMUP_ROUNDS.value + _ROUNDS.value):
      start = time.perf_counter()
      clients = cohort_data.build(cohort)
      timed = {'data': time.perf_counter() - start}
      empty = [_empty_like(d) for d in clients]
      shift = round_num % len(names)
      for name in names[shift:] + names[:shift]:
        start = time.perf_counter()
        if name == 'tff':
          state = process.next(state, clients).state
        elif name == 'empty':
          process.next(state, empty)
        elif name == 'serialize':
          serialized_bytes = speech_rounds.serialize(clients)
        else:
          floor_weights[name] = floors[name].next(floor_weights[name], clients)
        timed[name] = time.perf_counter() - start
      if round_num >= _WARMUP_ROUNDS.value:
        for name, seconds in timed.items():
          times[name].append(seconds)
    times['round'] = [d + t for d, t in zip(times['data'], times['tff'], strict=True)]
    times['client steps'] = [max(0.0, t - e - s) for t, e, s in
                             zip(times['tff'], times['empty'], times['serialize'], strict=True)]
    row = {name: statistics.median(values) for name, values in times.items()}
    for name in medians:
      medians[name].append(row[name])
    print(f'cohort {cohort} ({serialized_bytes / cohort / 1e3:.0f} kB of serialized dataset '
          'per client):')
    for name, label in (('round', 'round (data + TFF)'), ('data', '  data'),
                        ('tff', '  TFF round'), ('serialize', '    serialize'),
                        ('empty', '    empty round'), ('client steps', '    client steps'),
                        ('floor', 'floor'), ('reduce floor', 'floor, dataset.reduce loop')):
      if name in times:
        print(f'  {label:28s} {speech_rounds.summary(times[name])}  '
              f'{row[name] / cohort * 1e3:7.1f} ms/client')
    print(f'  client steps / round         {row["client steps"] / row["round"]:7.1%}')
    print(f'  ratio round / floor          {row["round"] / row["floor"]:7.2f}')
    if 'reduce floor' in row:
      print(f'  ratio TFF / reduce floor     {row["tff"] / row["reduce floor"]:7.2f}')
  if len(cohorts) > 1:
    sizes = np.array(cohorts, float)
    for name, label in (('round', 'round'), ('floor', 'floor')):
      per_client, fixed = np.polyfit(sizes, np.array(medians[name]), 1)
      worst = float(np.max(np.abs((fixed + per_client * sizes) / np.array(medians[name]) - 1.0)))
      print(f'{label:5s} line: {fixed:6.3f} s + {per_client * 1e3:6.1f} ms x cohort (largest '
            f'deviation of a median from the line {worst:.1%})')
  return state


def _measure_client_sizes(process, state, utterances, vocab, cache_dir):
  """Round time against the client's size, with today's data path and the one before."""
  sizes = sorted(int(n) for n in _CLIENT_SIZES.value)
  by_speaker = {}
  for utterance in utterances:
    by_speaker.setdefault(utterance.speaker, []).append(utterance)
  if min(len(u) for u in by_speaker.values()) < sizes[-1]:
    raise app.UsageError(f'The client-size corpus has speakers of fewer than {sizes[-1]} '
                         'utterances.')
  paths = {
      'cached sample (today)': dict(feature_cache_dir=cache_dir, max_batches=_LOCAL_STEPS.value),
      'whole dataset, no cache (before)': dict(feature_cache_dir=None, max_batches=None),
  }
  print(f'client size: {_SIZE_COHORT.value} clients per round, {_LOCAL_STEPS.value} local steps, '
        f'{_SIZE_ROUNDS.value} timed rounds each after 1 warm-up, features cached before, '
        'seconds (data + TFF), median [min, max]')
  medians = {name: [] for name in paths}
  speech_rounds.fill_cache(data.SpeechClientData(utterances, vocab, feature_cache_dir=cache_dir))
  for size in sizes:
    clients = [data.Utterance(u.path, u.transcript, f'{speaker}-{size}')
               for speaker, speaker_utterances in by_speaker.items()
               for u in speaker_utterances[:size]]
    for name, path in paths.items():
      client_data = data.SpeechClientData(clients, vocab,
                                          max_batch_seconds=_MAX_BATCH_SECONDS.value,
                                          feature_cache_dir=path['feature_cache_dir'])
      cohort_data = speech_rounds.Cohorts(client_data, path['max_batches'])
      times = []
      for round_num in range(1 + _SIZE_ROUNDS.value):
        start = time.perf_counter()
        state = process.next(state, cohort_data.build(_SIZE_COHORT.value)).state
        if round_num:
          times.append(time.perf_counter() - start)
      medians[name].append(statistics.median(times))
      print(f'  {size:4d} utterances per client, {name:33s} {speech_rounds.summary(times)}')
  for name, values in medians.items():
    print(f'  {name}: largest / smallest client {values[-1] / values[0]:.2f}')
  return state


def _measure_memory(process, state, cohort_data):
  rounds = _MEMORY_ROUNDS.value
  marks = {1, 10, _MEMORY_BASELINE_ROUND, 50, 100, 150, rounds} & set(range(1, rounds + 1))
  print(f'resident memory over {rounds} TFF rounds at cohort {_MEMORY_COHORT.value}, MB (after '
        'the timing above, in the same process)')
  print(f'  {"round":>5s}  {"python":>8s}  {"worker":>8s}  {"total":>8s}  {"train loss":>10s}')
  samples = {}
  start = time.perf_counter()
  for round_num in range(1, rounds + 1):
    output = process.next(state, cohort_data.build(_MEMORY_COHORT.value))
    state = output.state
    if round_num in marks:
      samples[round_num] = memory.rss_mb()
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
    [int(n) for n in _CLIENT_SIZES.value]  # pylint: disable=expression-not-assigned
  except ValueError as e:
    raise app.UsageError('--cohorts, --reduce_floor_cohorts and --client_sizes take integers: '
                         f'{e}') from e
  if not cohorts or min(cohorts) < 1:
    raise app.UsageError(f'--cohorts must be positive integers, got {_COHORTS.value}.')
  {'inprocess': execution_context.set_inprocess_execution_context,
   'worker': execution_context.set_local_cpp_execution_context}[_ENGINE.value]()
  print(f'engine: {_ENGINE.value}')
  started = time.perf_counter()
  tf.keras.utils.set_random_seed(speech_rounds.SEED)
  vocab = data.Vocabulary('en')
  root = _CORPUS_DIR.value or tempfile.mkdtemp(prefix='round_overhead_')
  cache_dir = tempfile.mkdtemp(prefix='round_overhead_cache_')
  try:
    client_data = data.SpeechClientData(
        speech_rounds.corpus(root, f'speakers{_SPEAKERS.value}x{_UTTERANCES.value}',
                             _SPEAKERS.value, _UTTERANCES.value),
        vocab, max_batch_seconds=_MAX_BATCH_SECONDS.value, strict=True,
        feature_cache_dir=cache_dir)
    cohort_data = speech_rounds.Cohorts(client_data, _LOCAL_STEPS.value)
    speech_rounds.fill_cache(client_data)
    shapes = [tuple(b['features'].shape) for b in cohort_data.build(1)[0]]
    print(f'{speech_rounds.MODEL} model; {len(client_data.client_ids)} distinct clients of '
          f'{_UTTERANCES.value} synthetic utterances (a round\'s batches of one: {shapes}); '
          f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}')
    start = time.perf_counter()
    process = speech_rounds.build_process(vocab, _LOCAL_STEPS.value)
    print(f'building the process (tracing its computations): {time.perf_counter() - start:.1f} s')
    # After the process: TFF builds models in graphs, which invalidates Keras models made before.
    model = models.build_ctc_transformer(speech_rounds.MODEL, vocab.size)
    floors = {'floor': _Floor(model, _LOCAL_STEPS.value, reduce_loop=False)}
    if reduce_cohorts & set(cohorts):
      floors['reduce floor'] = _Floor(model, _LOCAL_STEPS.value, reduce_loop=True)
    state = _measure_rounds(process, floors, cohort_data, cohorts, reduce_cohorts)
    if _CLIENT_SIZES.value:
      sizes = max(int(n) for n in _CLIENT_SIZES.value)
      utterances = speech_rounds.corpus(root, f'speakers{_SIZE_SPEAKERS.value}x{sizes}',
                                        _SIZE_SPEAKERS.value, sizes)
      state = _measure_client_sizes(process, state, utterances, vocab, cache_dir)
    if _MEMORY_ROUNDS.value:
      _measure_memory(process, state, cohort_data)
  finally:
    shutil.rmtree(cache_dir, ignore_errors=True)
    if not _CORPUS_DIR.value:
      shutil.rmtree(root, ignore_errors=True)
  print(f'total {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}')


if __name__ == '__main__':
  app.run(main)
