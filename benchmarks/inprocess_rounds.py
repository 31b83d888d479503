r"""The DP FedAvg round run in process from TFF's map-reduce form, against TFF's C++ worker.

The task is `vs_pfl`'s MLP (`benchmarks.pfl.task.build_mlp`, 2,372 parameters; `--local_steps`
batches of 10 examples a client, 32 standard normal features, random labels): our
`fedasr_tff.algorithms.build_fed_avg_process` without local clipping, the deltas aggregated by
`PerLayerDPFactory.gaussian_fixed` in global clipping mode (z = 1.36, C = 0.5, divided by the
cohort), SGD at learning rate 1 on the server. For every cohort (`--cohorts`) one process, run
by three engines from the same initial state on the same clients:

* `worker`: TFF's local C++ worker (`runtime.set_local_cpp_execution_context`), all of the
  cohort's clients at once (TFF's default);
* `inprocess`: `runtime.inprocess.MapReduceRound(process.next)`, one client at a time;
* `inprocess xK`: the same with `lanes=K` (`--lanes`), K clients at once.

Printed per cohort: the setup of each in-process engine (compiling the map-reduce form and
importing its graphs; the process itself is built once, for all), the first round, the median
[min, max] of `--rounds` warm rounds (engines interleaved, their order rotating from round to
round), the ratio to the worker's median, and the largest difference of the final weights from
the worker's (DP noise included: the same seed). Run it on an idle machine and say the load
printed beside the figures.

  python -m benchmarks.inprocess_rounds --cohorts=10,32,128 --rounds=7
"""

import os
import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks.pfl import task
from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.runtime import inprocess

_COHORTS = flags.DEFINE_list('cohorts', ['10', '32', '128'], 'Clients per round.')
_ROUNDS = flags.DEFINE_integer('rounds', 7, 'Warm rounds per engine and cohort.', lower_bound=1)
_LANES = flags.DEFINE_list('lanes', ['2'], 'Lanes of the extra in-process engines.')
_LOCAL_STEPS = flags.DEFINE_integer('local_steps', 5, 'Local SGD steps (batches of 10).',
                                    lower_bound=1)

_BATCH_SIZE = 10
_NOISE_MULTIPLIER = 1.36
_CLIP = 0.5


def _datasets(count, local_steps):
  rng = np.random.default_rng(0)
  examples = local_steps * _BATCH_SIZE
  return [tf.data.Dataset.from_tensor_slices(
      (rng.normal(size=(examples, task.MLP_LAYOUT[0])).astype(np.float32),
       rng.integers(0, task.MLP_LAYOUT[-1], examples).astype(np.int32))).batch(_BATCH_SIZE)
          for _ in range(count)]


def _summary(values):
  return f'{statistics.median(values):.4f} [{min(values):.4f}, {max(values):.4f}]'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cohorts = [int(c) for c in _COHORTS.value]
  lanes = [int(k) for k in _LANES.value]
  runtime.set_local_cpp_execution_context()
  datasets = _datasets(max(cohorts), _LOCAL_STEPS.value)
  print(f'MLP of vs_pfl, {_LOCAL_STEPS.value} local steps, DP FedAvg (global clip {_CLIP}, z '
        f'{_NOISE_MULTIPLIER}); {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}',
        flush=True)
  for cohort in cohorts:
    process = algorithms.build_fed_avg_process(
        task.mlp_model_fn, client_learning_rate=0.1, local_steps=_LOCAL_STEPS.value,
        local_clip_norm=None, server_optimizer=optimizers.build('sgd', 1.0),
        model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(
            _NOISE_MULTIPLIER, cohort, _CLIP, allocation='global', diagnostics=False,
            noise_seed=1))
    initial = process.initialize()
    engines, setup = {'worker': process.next}, {}
    for count in [1] + lanes:
      name = 'inprocess' if count == 1 else f'inprocess x{count}'
      start = time.perf_counter()
      engines[name] = inprocess.MapReduceRound(process.next, lanes=count)
      setup[name] = time.perf_counter() - start
    clients = datasets[:cohort]
    states = dict.fromkeys(engines, initial)
    first, warm = {}, {name: [] for name in engines}
    names = list(engines)
    for round_num in range(_ROUNDS.value + 1):
      shift = round_num % len(names)
      for name in names[shift:] + names[:shift]:
        start = time.perf_counter()
        states[name] = engines[name](states[name], clients).state
        seconds = time.perf_counter() - start
        if round_num:
          warm[name].append(seconds)
        else:
          first[name] = seconds
    worker_median = statistics.median(warm['worker'])
    print(f'cohort {cohort}: round seconds, median [min, max] of {_ROUNDS.value} warm rounds')
    for name in names:
      difference = max(
          float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(
              states['worker'].global_model_weights.trainable,
              states[name].global_model_weights.trainable, strict=True))
      setup_text = f'setup {setup[name]:.2f} s, ' if name in setup else ''
      print(f'  {name:14s} {setup_text}first {first[name]:.3f} s, warm {_summary(warm[name])}, '
            f'{statistics.median(warm[name]) / worker_median:.2f} x worker, '
            f'{statistics.median(warm[name]) / cohort * 1e3:.2f} ms/client, weights off the '
            f'worker\'s by {difference:.1e}')
    print(f'  load average {os.getloadavg()[0]:.1f}', flush=True)


if __name__ == '__main__':
  app.run(main)
