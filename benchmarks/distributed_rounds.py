r"""The DP speech round over TFF's distributed runtime, against the local context, and an estimate
of the speed-up on N machines.

The round is the project's DP FedAvg round (`speech_rounds`: `build_fed_avg_process` on the `tiny`
model, 2 local steps, the cohort built as the runner builds it) with the deltas aggregated by
`fedasr_tff.aggregators.PerLayerDPFactory.gaussian_fixed` ("dim" allocation, z = 1, clip 1,
`clients_per_round` the cohort; no client diagnostics, as under DP by default). It runs in
TFF's local C++ context (`runtime.set_local_cpp_execution_context`, the baseline) and in TFF's
mergeable-computation context (`runtime.create_distributed_execution_context`) over 1, 2 and 4
(`--workers_counts`) TFF workers that this script starts, each in a network namespace of its own
behind a Unix socket (`execution_context.start_local_worker`: killed with it however it ends,
and at its end). Every
context is built once, its workers kept running; rounds switch TFF's default context between
them.

On this 2-core machine, more local workers measure the distributed runtime's overhead, not a
speed-up: the workers share the same 2 cores (each worker alone already trains its clients on
both). The speed-up on N machines is estimated on paper from what is measured (below).

For every cohort (`--cohorts`), one process (its DP aggregator divides by the cohort) and one
chain of states; every round builds the cohort's datasets once (timed apart: "data"), then runs
`process.next` in every context in turn, the order rotating from round to round so machine
noise hits all alike, plus the driver-side serialization of the datasets (`speech_rounds.serialize`,
as TFF ships them). With `--id_mode` (default on) every distributed context also runs the round
as a run with `--client_store_dir` does ("N workers ids"): the same cohort sent as (store index,
seed) per client, the workers building the batches from a client store written before the
rounds (`data.client_store`, `algorithms.with_dataset_computation`); its driver-side data is the
list of keys ("keys"). After `--warmup_rounds` untimed rounds (the first one compiles on every
worker), `--rounds` timed ones. Prints per (context, cohort) the median [min, max] seconds of
`process.next` and its ratio to the local context's median; for the distributed contexts the
bytes sent to and received from the workers per round (median; protobuf payloads, the
`DistributedContext` counters); and per context a least-squares line
time = fixed + per_client x cohort over the cohorts' medians.

The estimate for N machines like this one, one worker each and the driver on its own machine,
at cohort S:

  T(N) = data + serialize + F + (T1 - serialize - F) / N + B(N, S) / bandwidth

with T1, data and serialize the medians at S of the 1-worker `process.next`, of building the
datasets and of serializing them (the last two stay serial in the driver however many machines);
F the fixed cost of the 1-worker line (0 if the fit makes it negative); so T1 - serialize - F is
the clients' work, done by one worker on 2 cores as one machine of 2 cores would, and split over
N. B(N, S) = b0 + b_worker x N + b_client x S are the bytes of a round, least squares over the
measured (workers, cohort) pairs, all through the driver's link at `--assumed_gbps`. It assumes
that F does not grow with N (the merge is a sum of N partial aggregates of the model's size), that
clients are split evenly, that the driver's cores keep up, and that transfer and compute do not
overlap (pessimistic). Speed-up is T(1) / T(N); "vs local" is (data + the local median) / T(N).

  python -m benchmarks.distributed_rounds --cohorts=32,128 --workers_counts=1,2,4 --rounds=3

The estimate is of the shipped mode; the ID mode's measured bytes and driver time say how far
it moves the bound (docs/distributed.md).
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
import tensorflow_federated as tff

from benchmarks import speech_rounds
from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import runtime
from fedasr_tff.runtime import execution_context
from fedasr_tff.speech import data
from fedasr_tff.speech.data import client_store

_LOCAL_STEPS = speech_rounds.LOCAL_STEPS
_SPEAKERS = speech_rounds.SPEAKERS
_UTTERANCES = speech_rounds.UTTERANCES
_MAX_BATCH_SECONDS = speech_rounds.MAX_BATCH_SECONDS
_CORPUS_DIR = speech_rounds.CORPUS_DIR
_COHORTS = flags.DEFINE_list('cohorts', ['32', '128'], 'Clients per round to time.')
_WORKERS_COUNTS = flags.DEFINE_list('workers_counts', ['1', '2', '4'],
                                    'Local TFF workers of each distributed context.')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed rounds of each context per cohort.',
                               lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer(
    'warmup_rounds', 1, 'Untimed rounds of each context per cohort before timing (the first '
    'compiles on the workers).', lower_bound=1)
_ASSUMED_GBPS = flags.DEFINE_float('assumed_gbps', 10.0, 'Bandwidth of the driver\'s link in '
                                   'the estimate, Gbit/s.', lower_bound=1e-3)
_MACHINES = flags.DEFINE_list('machines', ['1', '2', '4', '8', '16', '32'],
                              'Machine counts N of the estimate.')
_ID_MODE = flags.DEFINE_bool('id_mode', True, 'Also time every distributed context with the '
                             'clients built on the workers from a client store.')
_WORKER_TIMEOUT = flags.DEFINE_float('worker_timeout', 60.0, 'Seconds a started worker may '
                                     'take to serve.', lower_bound=1.0)

_LOCAL = 'local'
_IDS = ' ids'   # suffix of a distributed context's ID-mode round
_NOISE_MULTIPLIER = 1.0
_DP_CLIP = 1.0


def _positive_ints(flag):
  try:
    values = [int(v) for v in flag.value]
  except ValueError as e:
    raise app.UsageError(f'--{flag.name} takes integers: {e}') from e
  if not values or min(values) < 1:
    raise app.UsageError(f'--{flag.name} must be positive integers, got {flag.value}.')
  return values


def _name(workers):
  return f'{workers} worker' + ('s' if workers > 1 else '')


def _start_contexts(workers_counts, workers):
  """{name: DistributedContext} over newly started local workers; appends each LocalWorker to
  `workers` as it starts, so the caller stops them whatever fails."""
  contexts = {}
  for count in workers_counts:
    addresses = []
    for _ in range(count):
      workers.append(execution_context.start_local_worker(log=tempfile.TemporaryFile()))
      addresses.append(workers[-1].target)
    contexts[_name(count)] = runtime.create_distributed_execution_context(
        addresses, worker_timeout=_WORKER_TIMEOUT.value)
  return contexts


def _stop(workers):
  for worker in workers:
    worker.stop()


def _measure_cohort(cohort, vocab, cohort_data, contexts, store_dir):
  """{'data'|'keys'|'serialize'|round name: [seconds]}, {distributed round name: [(bytes sent,
  bytes received)]} of the timed rounds at `cohort`; a round name is a context's, or a
  distributed context's with `_IDS` for the ID mode (`store_dir` not None)."""
  aggregator = aggregators.PerLayerDPFactory.gaussian_fixed(
      _NOISE_MULTIPLIER, cohort, _DP_CLIP, 'dim', diagnostics=False, noise_seed=speech_rounds.SEED)
  process = speech_rounds.build_process(vocab, _LOCAL_STEPS.value, model_aggregator=aggregator)
  by_key = None
  rounds = list(contexts)
  if store_dir is not None:
    by_key = algorithms.with_dataset_computation(
        process, cohort_data.client_data.store_dataset_computation(store_dir,
                                                                   cohort_data.max_batches))
    rounds += [name + _IDS for name in contexts if name != _LOCAL]
  tff.framework.set_default_context(contexts[_LOCAL])
  state = process.initialize()
  names = rounds + ['serialize']
  times = {name: [] for name in names + ['data', 'keys']}
  traffic = {name: [] for name in rounds if name != _LOCAL}
  for round_num in range(_WARMUP_ROUNDS.value + _ROUNDS.value):
    start = time.perf_counter()
    clients = cohort_data.build(cohort)
    timed, moved = {'data': time.perf_counter() - start}, {}
    start = time.perf_counter()
    keys = cohort_data.keys(cohort)
    timed['keys'] = time.perf_counter() - start
    shift = round_num % len(names)
    for name in names[shift:] + names[:shift]:
      if name == 'serialize':
        start = time.perf_counter()
        speech_rounds.serialize(clients)
        timed[name] = time.perf_counter() - start
        continue
      context = contexts[name.removesuffix(_IDS)]
      distributed = isinstance(context, runtime.DistributedContext)
      tff.framework.set_default_context(context.context if distributed else context)
      if distributed:
        before = context.bytes_sent(), context.bytes_received()
      start = time.perf_counter()
      if name.endswith(_IDS):
        state = by_key.next(state, keys).state
      else:
        state = process.next(state, clients).state
      timed[name] = time.perf_counter() - start
      if distributed:
        moved[name] = (context.bytes_sent() - before[0], context.bytes_received() - before[1])
    if round_num >= _WARMUP_ROUNDS.value:
      for name, seconds in timed.items():
        times[name].append(seconds)
      for name, counts in moved.items():
        traffic[name].append(counts)
    else:
      # The first round also sends every worker the computations (`CachingRemoteExecutor`).
      print(f'  cohort {cohort}, warm-up round {round_num + 1}: ' + ', '.join(
          f'{name} {seconds:.2f} s' + (f' ({moved[name][0] / 1e6:.2f} MB sent)'
                                       if name in moved else '')
          for name, seconds in timed.items()), flush=True)
  return times, traffic


def _line(cohorts, medians):
  """(fixed seconds, seconds per client) of the least-squares line through the medians."""
  per_client, fixed = np.polyfit(np.array(cohorts, float), np.array(medians), 1)
  return fixed, per_client


def _estimate(cohorts, machines, medians, round_bytes, workers_counts):
  """Prints T(N) and the speed-up on N machines (module docstring)."""
  one = _name(1)
  if len(cohorts) < 2 or one not in medians:
    print('estimate: needs two cohorts or more and 1 in --workers_counts')
    return
  fixed = max(0.0, _line(cohorts, medians[one])[0])
  rows = [(1.0, w, c) for w in workers_counts for c in cohorts]
  (b0, b_worker, b_client), *_ = np.linalg.lstsq(
      np.array(rows), np.array([round_bytes[_name(w)][c] for w in workers_counts for c in cohorts],
                               float), rcond=None)
  bandwidth = _ASSUMED_GBPS.value * 1e9 / 8   # bytes per second
  print('estimate on N machines like this one (one worker each, the driver apart): T(N) = data + '
        'serialize + F + (T1 - serialize - F) / N + B(N, S) / bandwidth')
  print(f'  F = {fixed:.3f} s: the fixed cost of the {one} line (0 if negative); T1, data, '
        f'serialize: the medians at cohort S ({one}; data and serialize stay serial in the '
        'driver)')
  print(f'  B(N, S) = {b0 / 1e6:.2f} MB + {b_worker / 1e6:.2f} MB x N + '
        f'{b_client / 1e6:.3f} MB x S, bytes sent + received, least squares over the measured '
        f'workers x cohorts, all through the driver\'s link at an assumed '
        f'{_ASSUMED_GBPS.value:g} Gbit/s')
  print('  assumed: F does not grow with N; clients split evenly; the driver keeps up; transfer '
        'and compute do not overlap. vs local: (data + the local median) / T(N)')
  header = ''.join(f'  {f"S={s}: T(N)":>12s} {"xfer":>6s} {"T(1)/T(N)":>9s} {"vs local":>8s}'
                   for s in cohorts)
  print(f'  {"N":>4s}{header}')

  def total(n, i, s):
    serial = medians['data'][i] + medians['serialize'][i] + fixed
    parallel = max(0.0, medians[one][i] - medians['serialize'][i] - fixed)
    transfer = max(0.0, b0 + b_worker * n + b_client * s) / bandwidth
    return serial + parallel / n + transfer, transfer

  for n in machines:
    cells = []
    for i, s in enumerate(cohorts):
      t, transfer = total(n, i, s)
      local = medians['data'][i] + medians[_LOCAL][i]
      cells.append(f'  {t:10.3f} s {transfer:6.3f} {total(1, i, s)[0] / t:9.2f} {local / t:8.2f}')
    print(f'  {n:4d}{"".join(cells)}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cohorts = _positive_ints(_COHORTS)
  workers_counts = sorted(set(_positive_ints(_WORKERS_COUNTS)))
  machines = _positive_ints(_MACHINES)
  started = time.perf_counter()
  tf.keras.utils.set_random_seed(speech_rounds.SEED)
  root = _CORPUS_DIR.value or tempfile.mkdtemp(prefix='distributed_rounds_')
  cache_dir = tempfile.mkdtemp(prefix='distributed_rounds_cache_')
  workers = []
  try:
    runtime.set_local_cpp_execution_context()
    contexts = {_LOCAL: tff.framework.get_context_stack().current}
    contexts.update(_start_contexts(workers_counts, workers))
    print(f'{sum(workers_counts)} TFF workers started (pids '
          f'{", ".join(str(w.process.pid) for w in workers)}) for the distributed contexts '
          f'{", ".join(_name(w) for w in workers_counts)}; {os.cpu_count()} CPUs, load average '
          f'{os.getloadavg()[0]:.1f}', flush=True)
    vocab = data.Vocabulary('en')
    client_data = data.SpeechClientData(
        speech_rounds.corpus(root, f'speakers{_SPEAKERS.value}x{_UTTERANCES.value}',
                             _SPEAKERS.value, _UTTERANCES.value),
        vocab, max_batch_seconds=_MAX_BATCH_SECONDS.value, strict=True,
        feature_cache_dir=cache_dir)
    speech_rounds.fill_cache(client_data)
    cohort_data = speech_rounds.Cohorts(client_data, _LOCAL_STEPS.value)
    store_dir = None
    if _ID_MODE.value:
      store_dir = os.path.join(cache_dir, 'client_store')
      start = time.perf_counter()
      client_store.write_client_store(client_data, store_dir)
      print(f'client store written in {time.perf_counter() - start:.1f} s', flush=True)
    print(f'{speech_rounds.MODEL} model, DP FedAvg (PerLayerDPFactory.gaussian_fixed, z '
          f'{_NOISE_MULTIPLIER:g}, clip {_DP_CLIP:g}, dim), {_LOCAL_STEPS.value} local steps; '
          f'{len(client_data.client_ids)} distinct clients of {_UTTERANCES.value} synthetic '
          f'utterances; {_ROUNDS.value} timed rounds per context and cohort after '
          f'{_WARMUP_ROUNDS.value} warm-up, contexts interleaved. The workers share this '
          'machine\'s cores: more of them measure overhead, not speed-up', flush=True)
    rounds = list(contexts) + ([name + _IDS for name in contexts if name != _LOCAL]
                               if store_dir is not None else [])
    medians = {name: [] for name in rounds + ['data', 'keys', 'serialize']}
    round_bytes = {name: {} for name in rounds if name != _LOCAL}
    for cohort in cohorts:
      times, traffic = _measure_cohort(cohort, vocab, cohort_data, contexts, store_dir)
      for name, values in times.items():
        medians[name].append(statistics.median(values))
      local = medians[_LOCAL][-1]
      print(f'cohort {cohort}: process.next seconds, median [min, max]; ratio to local; per '
            'round (median), MB sent to / received from the workers')
      for name in rounds:
        line = (f'  {name:14s} {speech_rounds.summary(times[name])}  '
                f'{medians[name][-1] / local:5.2f} x local  '
                f'{medians[name][-1] / cohort * 1e3:6.1f} ms/client')
        if name in traffic:
          sent, received = (statistics.median(c) for c in zip(*traffic[name], strict=True))
          round_bytes[name][cohort] = statistics.median(a + b for a, b in traffic[name])
          line += f'  sent {sent / 1e6:7.2f} MB, received {received / 1e6:6.3f} MB'
        print(line)
      for name, where in (('data', 'not in process.next'), ('keys', 'ID mode, not in next'),
                          ('serialize', 'in process.next')):
        print(f'  {name:14s} {speech_rounds.summary(times[name])}  (driver, {where})')
      print(f'  load average {os.getloadavg()[0]:.1f}', flush=True)
    if len(cohorts) > 1:
      print('lines time = fixed + per_client x cohort (least squares over the cohorts\' medians)')
      for name in rounds:
        fixed, per_client = _line(cohorts, medians[name])
        print(f'  {name:14s} {fixed:7.3f} s + {per_client * 1e3:6.2f} ms x cohort')
      if store_dir is not None:
        print('bytes per client, sent + received (slope over the cohorts, per context)')
        for name in round_bytes:
          slope = np.polyfit(np.array(cohorts, float),
                             np.array([round_bytes[name][c] for c in cohorts], float), 1)[0]
          print(f'  {name:14s} {slope:12,.0f} B/client')
    _estimate(cohorts, machines, medians, round_bytes, workers_counts)
  finally:
    _stop(workers)
    shutil.rmtree(cache_dir, ignore_errors=True)
    if not _CORPUS_DIR.value:
      shutil.rmtree(root, ignore_errors=True)
  print(f'total {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}')


if __name__ == '__main__':
  app.run(main)
