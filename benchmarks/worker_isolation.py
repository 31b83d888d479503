r"""What the local worker's network isolation costs a round, against the worker as TFF starts it.

Two of TFF's local C++ contexts over one `worker_binary` each, built at start and kept:
* isolated: the default (`execution_context.start_local_worker`): the worker in a network
  namespace of its own, reached through an owner-only Unix socket and the namespace's splice
  bridge (`fedasr_tff/runtime/namespace_bridge.py`);
* exposed: the same worker as TFF 0.87 starts it, on a TCP port of every interface, reached over
  loopback TCP: the baseline, what every run did before.
The whole benchmark runs in a network namespace that it makes first (it re-executes itself under
`unshare --net`), so even the exposed baseline is reachable from nothing but this process.

The round: the speech round of `speech_rounds` (the `tiny` CTC transformer, FedAvg,
`--local_steps` steps) with DP (`PerLayerDPFactory.gaussian_fixed`, dim allocation), at each of
`--cohorts`. After `--warmup_rounds` untimed rounds per context, `--rounds` rounds alternate
between the contexts, the order swapped every round, so machine noise hits both alike. Prints
per context the median [min, max] of `process.next` seconds, and the median of the per-round
ratio isolated / exposed (the two rounds of a pair run back to back).

  python -m benchmarks.worker_isolation --cohorts=1,16 --rounds=10
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import grpc
import portpicker
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import speech_rounds
from fedasr_tff import aggregators
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import namespace_bridge
from fedasr_tff.speech import data

_COHORTS = flags.DEFINE_list('cohorts', ['1', '16'], 'Cohort sizes to time.')
_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Timed rounds per context and cohort.',
                               lower_bound=1)
_WARMUP_ROUNDS = flags.DEFINE_integer('warmup_rounds', 2, 'Untimed rounds first, per context.',
                                      lower_bound=1)
_IN_NAMESPACE = 'FEDASR_TFF_BENCHMARK_IN_NAMESPACE'  # set in the re-executed benchmark
_NOISE_MULTIPLIER, _DP_CLIP = 1.0, 1.0


def _exposed_worker(log) -> execution_context.LocalWorker:
  """TFF's worker as TFF starts it: every interface (of this benchmark's own namespace)."""
  port = portpicker.pick_unused_port()
  command = execution_context.dying_with_parent(execution_context.worker_command(port),
                                                'the TFF worker')
  process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
  return execution_context.LocalWorker(process, f'localhost:{port}', isolated=False)


def _context(worker):
  stub = tff.framework.RemoteExecutorGrpcStub(
      grpc.insecure_channel(worker.target, execution_context.CHANNEL_OPTIONS))
  deadline = time.monotonic() + 120
  while not stub.is_ready:
    if worker.process.poll() is not None or time.monotonic() > deadline:
      raise RuntimeError(f'the worker at {worker.target} did not start')
    time.sleep(0.01)
  return execution_context.remote_context(stub)


def _time_cohort(cohort, vocab, cohort_data, contexts):
  """{context name: [seconds of process.next]} of the timed rounds at `cohort`."""
  aggregator = aggregators.PerLayerDPFactory.gaussian_fixed(
      _NOISE_MULTIPLIER, cohort, _DP_CLIP, 'dim', noise_seed=speech_rounds.SEED)
  process = speech_rounds.build_process(vocab, speech_rounds.LOCAL_STEPS.value,
                                        model_aggregator=aggregator)
  names = list(contexts)
  states = {}
  for name in names:  # each context's own state, so both run the same rounds
    tff.framework.set_default_context(contexts[name])
    states[name] = process.initialize()
  times = {name: [] for name in names}
  for round_num in range(_WARMUP_ROUNDS.value + _ROUNDS.value):
    clients = cohort_data.build(cohort)
    for name in (names if round_num % 2 == 0 else names[::-1]):
      tff.framework.set_default_context(contexts[name])
      start = time.perf_counter()
      states[name] = process.next(states[name], clients).state
      if round_num >= _WARMUP_ROUNDS.value:
        times[name].append(time.perf_counter() - start)
  return times


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  if os.environ.get(_IN_NAMESPACE) != '1':
    namespace = execution_context.network_namespace_prefix()
    if namespace is None:
      raise app.UsageError('This benchmark runs its exposed baseline inside a network '
                           'namespace of its own, and none can be made here.')
    os.execvpe(namespace[0], [*namespace, sys.executable, '-m', 'benchmarks.worker_isolation',
                              *sys.argv[1:]], dict(os.environ, **{_IN_NAMESPACE: '1'}))
  namespace_bridge.bring_up_loopback()
  cohorts = [int(c) for c in _COHORTS.value]
  tf.keras.utils.set_random_seed(speech_rounds.SEED)
  root = speech_rounds.CORPUS_DIR.value or tempfile.mkdtemp(prefix='worker_isolation_')
  log = tempfile.TemporaryFile()
  workers = {'isolated': execution_context.start_local_worker(log=log),
             'exposed': _exposed_worker(log)}
  try:
    contexts = {name: _context(worker) for name, worker in workers.items()}
    vocab = data.Vocabulary('en')
    client_data = data.SpeechClientData(
        speech_rounds.corpus(root, f'speakers{speech_rounds.SPEAKERS.value}x'
                             f'{speech_rounds.UTTERANCES.value}', speech_rounds.SPEAKERS.value,
                             speech_rounds.UTTERANCES.value),
        vocab, max_batch_seconds=speech_rounds.MAX_BATCH_SECONDS.value, strict=True,
        feature_cache_dir=tempfile.mkdtemp(prefix='worker_isolation_cache_'))
    speech_rounds.fill_cache(client_data)
    cohort_data = speech_rounds.Cohorts(client_data, speech_rounds.LOCAL_STEPS.value)
    print(f'{speech_rounds.MODEL} model, DP FedAvg, {speech_rounds.LOCAL_STEPS.value} local '
          f'steps; {_ROUNDS.value} timed rounds per context after {_WARMUP_ROUNDS.value}, '
          f'alternating; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}',
          flush=True)
    for cohort in cohorts:
      times = _time_cohort(cohort, vocab, cohort_data, contexts)
      ratios = [i / e for i, e in zip(times['isolated'], times['exposed'], strict=True)]
      print(f'cohort {cohort}: process.next seconds, median [min, max]')
      for name, values in times.items():
        print(f'  {name:9s} {speech_rounds.summary(values)}')
      print(f'  isolated / exposed, per round pair: median {statistics.median(ratios):.3f} '
            f'[{min(ratios):.3f}, {max(ratios):.3f}]; load average {os.getloadavg()[0]:.1f}',
            flush=True)
  finally:
    for worker in workers.values():
      worker.stop()


if __name__ == '__main__':
  app.run(main)
