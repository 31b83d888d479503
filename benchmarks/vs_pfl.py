r"""Round time of the same DP federated task in apple's pfl-research 0.3.1 and in our TFF process.

pfl (`pfl==0.3.1`, the last release that allows TensorFlow 2.14) runs in its own environment,
.venv-pfl (`make pfl-venv`, from `benchmarks/pfl/requirements.lock`); this driver runs in .venv.
Every run of a side is a fresh process: pfl's under `.venv-pfl/bin/python`
(`benchmarks/pfl/run_pfl.py`: pfl's `FederatedAveraging` on its `SimulatedBackend` with the
central Gaussian mechanism and pfl's `TFModel`), ours under this Python
(`benchmarks/pfl/run_tff.py`: `fedasr_tff.algorithms.build_fed_avg_process` with
`fedasr_tff.aggregators.PerLayerDPFactory.gaussian_fixed` in global clipping mode, run by
`--engine` as the binaries run it: by default in our process, TFF's compiled round run by
TensorFlow (`fedasr_tff.runtime.set_inprocess_execution_context`), 2 clients at once; or by TFF's
C++ worker, all of a cohort's clients at once (TFF's default). `--clients_in_parallel` sets how
many. pfl trains a round's users one after another in its process.

The same for both sides: the Keras model and its initial weights (written once to an .npz that
both load), the clients' data (made once; the MLP's arrays in an .npz that both load; the speech
batches made by our pipeline, see below), the cohort of every round (fixed size, drawn without
replacement from the clients with a seed per cohort size; both get the same lists), the local
work (plain SGD at the same learning rate, the same number of steps over the same batches, no
local clipping), the DP aggregation (every client delta clipped to L2 norm C = 0.5 over all its
tensors, Gaussian noise of std z * C with z = 1.36 on the sum, divided by the cohort size), the
server (SGD at learning rate 1: FedAvg), and no evaluation. The noise itself differs (each side
draws its own). Client datasets are made once per process, before the timing, on both sides.

Two tasks:

* `mlp`: the 2,372-parameter MLP, 32 inputs -> 64 ReLU -> 4 logits (33 * 64 + 65 * 4 = 2,372
  weights), softmax cross-entropy; `--clients` clients of `--mlp_local_steps * --mlp_batch_size`
  examples each (32 standard normal features, the label the argmax of a fixed random linear map
  of them plus noise), so one local epoch is `--mlp_local_steps` batches.
* `speech`: the `tiny` CTC transformer
  (`fedasr_tff.speech.models.build_ctc_transformer('tiny', 29)`, 332,768 parameters), CTC loss,
  on a synthetic espeak-ng corpus (`fedasr_tff.speech.data.synthetic`,
  `--speakers` speakers of `--utterances_per_speaker` utterances, one client per speaker). Client i
  is `SpeechClientData.create_tf_dataset_for_client(speaker_i, seed=i,
  max_batches=--speech_local_steps)`, as the runner makes a round's datasets: our side trains on
  those datasets, and pfl's side on the very batches our client work takes from them (cycled to
  `--speech_local_steps`, the local step folded into each batch's seed as our client work does).
  pfl's SGD step calls `keras_model(inputs, training=True)`, and the transformer refuses a
  training pass without its `seed`: the check run tries the model as it is and prints what stops
  it; pfl then trains a thin Keras model around it that takes the seed as a third input
  (`benchmarks/pfl/run_pfl.py`).

First, per task, a check: `_CHECK_ROUNDS` rounds at the smallest cohort with z = 0 (clipping
still on) by both sides, whose final weights must agree to `_MAX_CHECK_DIFFERENCE` (the same
work on the same batches). Then, for every cohort size, `--runs` runs of `--rounds` rounds per
side, interleaved (run 1 pfl then ours, run 2 ours then pfl, ...) so that machine noise hits
both alike. In process, our side keeps its compiled rounds and built processes on disk as the
binaries do (`--compile_cache`): before the timed runs of a cohort, two untimed runs of ours
fill the cache as a user's first two runs of a configuration would (the first builds the process
and compiles its round, the second builds the process again, which confirms its entry:
`fedasr_tff.runtime.process_cache`), and their figures are printed apart. A side reports its
setup (pfl: the Keras model, its weights and pfl's objects up to the first round; ours: building
the process or reading it from the cache, initialising it and setting its weights), its first
round (pfl: tracing the SGD step; ours: compiling the round or reading it from the cache, and
TensorFlow instantiating it) and its later, warm rounds. Printed per cohort: over the runs,
median [min, max] of the setup, of the first round and of every run's median warm round, the
warm round per client, the median wall time of a side's whole process (start-up, imports and
data loading included), and the ratios ours / pfl of the medians; then a summary of the warm
rounds.

  make pfl-venv
  .venv/bin/python -m benchmarks.vs_pfl --runs=3
  .venv/bin/python -m benchmarks.vs_pfl --tasks=speech --speech_cohorts=10,32
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks.pfl import speech_clients
from benchmarks.pfl import task
from fedasr_tff.algorithms import local_training
from fedasr_tff.runtime import execution_context
from fedasr_tff.speech import data
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_TASKS = flags.DEFINE_list('tasks', ['mlp', 'speech'], 'Tasks to run: mlp, speech.')
_COHORTS = flags.DEFINE_list('cohorts', ['10', '32', '128'], 'Cohort sizes of the mlp task.')
_SPEECH_COHORTS = flags.DEFINE_list('speech_cohorts', ['10', '32'],
                                    'Cohort sizes of the speech task (at most --speakers).')
_RUNS = flags.DEFINE_integer('runs', 3, 'Runs of each side per cohort size, interleaved.',
                             lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 8, 'Rounds per run: the first, then warm ones.',
                               lower_bound=2)
_CHECK = flags.DEFINE_boolean('check', True, 'Check first that both sides compute the same.')
_CLIENTS = flags.DEFINE_integer('clients', 1000, 'Clients of the mlp task (at least the '
                                'largest cohort).', lower_bound=1)
_MLP_LOCAL_STEPS = flags.DEFINE_integer('mlp_local_steps', 5, 'Local SGD steps, mlp task.',
                                        lower_bound=1)
_MLP_BATCH_SIZE = flags.DEFINE_integer('mlp_batch_size', 10, 'Local batch size, mlp task.',
                                       lower_bound=1)
_MLP_LEARNING_RATE = flags.DEFINE_float('mlp_learning_rate', 0.1, 'Client SGD learning rate, '
                                        'mlp task.')
_SPEAKERS = flags.DEFINE_integer('speakers', 40, 'Speakers (clients) of the speech task.',
                                 lower_bound=1)
_UTTERANCES = flags.DEFINE_integer('utterances_per_speaker', 4, 'Synthetic utterances per '
                                   'speaker.', lower_bound=1)
_SPEECH_LOCAL_STEPS = flags.DEFINE_integer('speech_local_steps', 2, 'Local SGD steps, speech '
                                           'task.', lower_bound=1)
_MAX_BATCH_SECONDS = flags.DEFINE_float('max_batch_seconds', 4.0, 'Audio per client batch, '
                                        'speech task (dynamic batching).', lower_bound=0.1)
_SPEECH_LEARNING_RATE = flags.DEFINE_float('speech_learning_rate', 0.05, 'Client SGD learning '
                                           'rate, speech task.')
_CORPUS_DIR = flags.DEFINE_string('corpus_dir', None, 'Folder of the synthetic corpus (made '
                                  'there if it has none); default: in a temporary folder.')
_ENGINE = flags.DEFINE_enum(
    'engine', 'inprocess', ['inprocess', 'worker'], 'What runs our rounds, as the binaries\' '
    '--engine: TFF\'s compiled round in our process (their default), or TFF\'s C++ worker.')
_COMPILE_CACHE = flags.DEFINE_boolean(
    'compile_cache', True, 'In process, keep our compiled rounds and built processes on disk as '
    'the binaries do (--compile_cache_dir; here in the run\'s temporary folder): per cohort, two '
    'untimed runs of ours fill it, and the timed runs find it.')
_CLIENTS_IN_PARALLEL = flags.DEFINE_integer(
    'clients_in_parallel', None, 'Clients our side trains at once (default as '
    'experiments.train_federated has it: 2 in process, no limit on the worker); pfl trains one '
    'after another.', lower_bound=1)
_PFL_PYTHON = flags.DEFINE_string('pfl_python', os.path.join(_ROOT, '.venv-pfl', 'bin', 'python'),
                                  'Python of the pfl environment (`make pfl-venv`).')

_SIDES = ('pfl', 'ours')
_MODULES = {'pfl': 'benchmarks.pfl.run_pfl', 'ours': 'benchmarks.pfl.run_tff'}
_CLIP = 0.5
_NOISE_MULTIPLIER = 1.36
_SPEECH_MODEL = 'tiny'
_LANGUAGE = 'en'
_CHECK_ROUNDS = 2
_MAX_CHECK_DIFFERENCE = 1e-4
_SEED = 0


def _prepare_mlp(work_dir):
  """The mlp task's data and initial weights on disk; (spec entries, population, description)."""
  rng = np.random.default_rng(_SEED)
  inputs, _, classes = task.MLP_LAYOUT
  examples = _MLP_LOCAL_STEPS.value * _MLP_BATCH_SIZE.value
  x = rng.normal(size=(_CLIENTS.value, examples, inputs)).astype(np.float32)
  teacher = rng.normal(size=(inputs, classes))
  y = np.argmax(x @ teacher + rng.normal(size=(*x.shape[:2], classes)), axis=-1).astype(np.int32)
  data_path = os.path.join(work_dir, 'mlp_data.npz')
  task.save_arrays(data_path, [x, y])
  tf.keras.utils.set_random_seed(_SEED)
  model = task.build_mlp()
  if model.count_params() != task.MLP_PARAMETERS:
    raise AssertionError(f'The MLP has {model.count_params()} parameters.')
  weights_path = os.path.join(work_dir, 'mlp_weights.npz')
  task.save_arrays(weights_path, [v.numpy() for v in model.trainable_variables])
  spec = dict(task='mlp', data=data_path, weights=weights_path,
              local_steps=_MLP_LOCAL_STEPS.value, batch_size=_MLP_BATCH_SIZE.value,
              client_learning_rate=_MLP_LEARNING_RATE.value, speech=None)
  description = (f'mlp: {"-".join(map(str, task.MLP_LAYOUT))} MLP, {model.count_params():,} '
                 f'parameters; {_CLIENTS.value} clients of {examples} examples; '
                 f'{_MLP_LOCAL_STEPS.value} local steps of batch {_MLP_BATCH_SIZE.value}, client '
                 f'learning rate {_MLP_LEARNING_RATE.value}')
  return spec, _CLIENTS.value, description


def _prepare_speech(work_dir):
  """The speech task's corpus, pfl's batches and initial weights on disk; as `_prepare_mlp`."""
  corpus_dir = _CORPUS_DIR.value or os.path.join(work_dir, 'corpus')
  if not os.path.isdir(os.path.join(corpus_dir, 'librispeech', 'train')):
    synthetic.make_corpus(corpus_dir, num_speakers=_SPEAKERS.value,
                          mean_utterances=_UTTERANCES.value, skew=0.0, seed=_SEED)
  vocab = data.Vocabulary(_LANGUAGE)
  speech = dict(model=_SPEECH_MODEL, vocab_size=vocab.size, language=_LANGUAGE,
                corpus_dir=corpus_dir, feature_cache_dir=os.path.join(work_dir, 'features'),
                max_batch_seconds=_MAX_BATCH_SECONDS.value, clients=_SPEAKERS.value)
  steps = _SPEECH_LOCAL_STEPS.value
  clients = []
  for dataset in speech_clients.speech_client_datasets(speech, steps):
    # What our client work takes: the dataset cycled to `steps` batches, the step in the seed.
    clients.append([
        dict({name: value.numpy() for name, value in batch.items()},
             seed=local_training.local_step_seed(batch['seed'], step).numpy())
        for step, batch in enumerate(dataset.repeat().take(steps))])
  data_path = os.path.join(work_dir, 'speech_batches.npz')
  task.save_speech_batches(data_path, clients)
  tf.keras.utils.set_random_seed(_SEED)
  model = models.build_ctc_transformer(_SPEECH_MODEL, vocab.size)
  weights_path = os.path.join(work_dir, 'speech_weights.npz')
  task.save_arrays(weights_path, [v.numpy() for v in model.trainable_variables])
  spec = dict(task='speech', data=data_path, weights=weights_path, local_steps=steps,
              batch_size=None, client_learning_rate=_SPEECH_LEARNING_RATE.value, speech=speech)
  shapes = [tuple(b['features'].shape) for b in clients[0]]
  utterances = sum(len(b['feature_lengths']) for c in clients for b in c)
  description = (f'speech: {_SPEECH_MODEL} CTC transformer, {model.count_params():,} parameters; '
                 f'{len(clients)} speakers of {_UTTERANCES.value} synthetic utterances; '
                 f'{steps} local steps of batches up to {_MAX_BATCH_SECONDS.value:g} s of audio '
                 f'({utterances / len(clients) / steps:.1f} utterances a batch on average; the '
                 f'first client\'s feature shapes {shapes}), client learning rate '
                 f'{_SPEECH_LEARNING_RATE.value}')
  return spec, len(clients), description


def _cohorts(population, size, rounds):
  """The clients of every round: `size` of `population` without replacement, seeded by size."""
  if size > population:
    raise app.UsageError(f'Cohort {size} is larger than the {population} clients.')
  rng = np.random.default_rng([_SEED, size])
  return [rng.choice(population, size, replace=False).tolist() for _ in range(rounds)]


def _run(side, spec_path):
  """One run of `side` in a fresh process: its result, with the process's wall time."""
  python = _PFL_PYTHON.value if side == 'pfl' else sys.executable
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  start = time.perf_counter()
  result = subprocess.run([python, '-m', _MODULES[side], f'--spec={spec_path}'], cwd=_ROOT,
                          env=env, capture_output=True, text=True, check=False)
  wall = time.perf_counter() - start
  lines = result.stdout.strip().splitlines()
  if result.returncode or not lines:
    raise RuntimeError(f'The {side} side failed (exit status {result.returncode}):\n'
                       f'{result.stderr[-4000:]}')
  return dict(json.loads(lines[-1]), wall_s=wall)


def _check(spec, population, cohort, work_dir):
  """Both sides, `_CHECK_ROUNDS` rounds without noise: their final weights must agree."""
  weights = {}
  cohorts = _cohorts(population, cohort, _CHECK_ROUNDS)
  for side in _SIDES:
    spec_path = os.path.join(work_dir, f'check_{side}.json')
    weights_out = os.path.join(work_dir, f'check_{side}_weights.npz')
    # Without the cache, which the timed runs find cold in their first run.
    task.write_spec(spec_path, **dict(spec, compile_cache_dir=None), cohorts=cohorts, clip=_CLIP,
                    noise_multiplier=0.0, seed=_SEED, weights_out=weights_out,
                    probe=side == 'pfl' and spec['task'] == 'speech',
                    clients_in_parallel=_CLIENTS_IN_PARALLEL.value, engine=_ENGINE.value)
    result = _run(side, spec_path)
    weights[side] = task.load_arrays(weights_out)
    if result.get('unwrapped_error'):
      print('  pfl with the transformer as it is (its training pass needs a seed) stops at:')
      for line in result['unwrapped_error'].splitlines():
        print(f'    {line}')
      print('  so pfl trains it wrapped in a Keras model whose inputs carry the seed.')
  initial = task.load_arrays(spec['weights'])
  difference = max(float(np.max(np.abs(a - b)))
                   for a, b in zip(weights['pfl'], weights['ours'], strict=True))
  change = max(float(np.max(np.abs(a - b)))
               for a, b in zip(weights['ours'], initial, strict=True))
  print(f'  check, {_CHECK_ROUNDS} rounds at cohort {cohort} without noise: largest |pfl - ours| '
        f'weight difference {difference:.1e} (largest change from the initial weights '
        f'{change:.1e})')
  if not difference <= _MAX_CHECK_DIFFERENCE:
    raise RuntimeError('pfl and our process do not compute the same rounds.')


def _summary(values, digits=3):
  return (f'{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, '
          f'{max(values):.{digits}f}]')


def _measure(spec, population, cohort, work_dir):
  """`--runs` interleaved runs of both sides at `cohort`: {side: {measure: [per run]}}."""
  spec_path = os.path.join(work_dir, f'{spec["task"]}_{cohort}.json')
  task.write_spec(spec_path, **spec, cohorts=_cohorts(population, cohort, _ROUNDS.value),
                  clip=_CLIP, noise_multiplier=_NOISE_MULTIPLIER, seed=_SEED, weights_out=None,
                  probe=False, clients_in_parallel=_CLIENTS_IN_PARALLEL.value,
                  engine=_ENGINE.value)
  runs = {side: {'setup': [], 'first': [], 'warm': [], 'wall': []} for side in _SIDES}
  filling = []  # ours: the runs that filled the cache, untimed above
  if spec['compile_cache_dir']:
    # As a user's first two runs of a configuration: the first builds the process and compiles
    # its round, the second builds it again, which confirms the process entry
    # (fedasr_tff.runtime.process_cache); the timed runs read both.
    filling = [_run('ours', spec_path) for _ in range(2)]
  for run in range(_RUNS.value):
    for side in _SIDES if run % 2 == 0 else _SIDES[::-1]:
      result = _run(side, spec_path)
      runs[side]['setup'].append(result['setup_s'])
      runs[side]['first'].append(result['round_s'][0])
      runs[side]['warm'].append(statistics.median(result['round_s'][1:]))
      runs[side]['wall'].append(result['wall_s'])
  print(f'  cohort {cohort}:  {"setup":>22s}  {"first round":>22s}  {"warm round":>22s}  '
        f'{"ms/client":>9s}  {"process":>7s}')
  for side in _SIDES:
    r = runs[side]
    print(f'    {side:10s}  {_summary(r["setup"]):>22s}  {_summary(r["first"]):>22s}  '
          f'{_summary(r["warm"]):>22s}  {statistics.median(r["warm"]) / cohort * 1e3:9.2f}  '
          f'{statistics.median(r["wall"]):6.1f}s')
  ratios = {m: statistics.median(runs['ours'][m]) / statistics.median(runs['pfl'][m])
            for m in ('setup', 'first', 'warm')}
  print(f'    {"ours / pfl":10s}  {ratios["setup"]:22.2f}  {ratios["first"]:22.2f}  '
        f'{ratios["warm"]:22.2f}')
  if filling:
    pfl_setup, pfl_first = (statistics.median(runs['pfl'][m]) for m in ('setup', 'first'))
    for what, result in zip(('built the process, compiled the round',
                             'built the process again'), filling, strict=True):
      print(f'    ours, untimed above, filling the cache ({what}): setup '
            f'{result["setup_s"]:.3f} s ({result["setup_s"] / pfl_setup:.1f} x pfl), first '
            f'round {result["round_s"][0]:.3f} s ({result["round_s"][0] / pfl_first:.2f} x pfl)')
  return runs


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  try:
    cohorts = {'mlp': [int(c) for c in _COHORTS.value],
               'speech': [int(c) for c in _SPEECH_COHORTS.value]}
  except ValueError as e:
    raise app.UsageError(f'--cohorts and --speech_cohorts take integers: {e}') from e
  unknown = set(_TASKS.value) - set(cohorts)
  if unknown or not _TASKS.value:
    raise app.UsageError(f'--tasks takes mlp and speech, got {_TASKS.value}.')
  if not os.path.isfile(_PFL_PYTHON.value):
    raise app.UsageError(f'{_PFL_PYTHON.value} is missing: run `make pfl-venv` first.')
  # As in every benchmark, though this process runs no TFF computation: TFF's own default
  # context, made when TFF is imported, raises an error at exit. In process: no worker starts.
  execution_context.set_inprocess_execution_context()
  started = time.perf_counter()
  print(f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {_RUNS.value} runs per '
        f'side and cohort of {_ROUNDS.value} rounds (the first, then {_ROUNDS.value - 1} warm), '
        f'interleaved; DP: clip {_CLIP} (global), z = {_NOISE_MULTIPLIER}, server SGD lr 1; ours '
        f'on --engine={_ENGINE.value}, training {_CLIENTS_IN_PARALLEL.value or "the default"} '
        'clients at once; seconds, median [min, max] over runs (warm: of every run\'s median)')
  work_dir = tempfile.mkdtemp(prefix='vs_pfl_')
  summary = []
  try:
    for name in _TASKS.value:
      spec, population, description = (_prepare_mlp if name == 'mlp' else
                                        _prepare_speech)(work_dir)
      print(description)
      spec['compile_cache_dir'] = (os.path.join(work_dir, 'compile_cache') if
                                   _COMPILE_CACHE.value and _ENGINE.value == 'inprocess' else None)
      if _CHECK.value:
        _check(spec, population, min(cohorts[name]), work_dir)
      for cohort in cohorts[name]:
        runs = _measure(spec, population, cohort, work_dir)
        summary.append((name, cohort, runs))
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)
  print('summary, warm round (median over runs), seconds:')
  print(f'  {"task":6s}  {"cohort":>6s}  {"pfl":>7s}  {"ours":>7s}  {"ours / pfl":>10s}')
  for name, cohort, runs in summary:
    pfl, ours = (statistics.median(runs[side]['warm']) for side in _SIDES)
    print(f'  {name:6s}  {cohort:6d}  {pfl:7.3f}  {ours:7.3f}  {ours / pfl:10.2f}')
  print(f'total {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}')


if __name__ == '__main__':
  app.run(main)
