r"""Our side of `benchmarks.vs_pfl`: the rounds of a spec by our TFF process, under .venv.

The process is `fedasr_tff.algorithms.build_fed_avg_process`: local SGD without local clipping,
the deltas aggregated by `fedasr_tff.aggregators.PerLayerDPFactory.gaussian_fixed` with global
clipping (one group: every delta clipped to L2 norm C, Gaussian noise of std z * C on the sum,
divided by the cohort size; no client diagnostics, as a run with noise has them), SGD at learning
rate 1 on the server; run by the spec's `engine` (`fedasr_tff.runtime.execution_context`): in
process (the binaries' default: TFF's compiled round run by TensorFlow here, `clients_in_parallel`
clients at once, None: 2) or by TFF's C++ worker (`clients_in_parallel` at once, None: all of the
cohort, TFF's default); then, as the binaries do, the objects the imports made are frozen out of
the garbage collector's way (`gc.freeze`, experiments/local_worker.py). In process with the
spec's `compile_cache_dir`, the process is built through `fedasr_tff.runtime.process_cache` as
experiments/train_federated.py builds its own (read back from the cache once two runs built the
same process), and its rounds' compiled forms are kept there too.

The client datasets are made once, before the process: the MLP's from its arrays
(`from_tensor_slices`, batched), the speech task's by `fedasr_tff.speech.data.SpeechClientData`
from the corpus (`speech_clients`, which the driver uses too). Prints (`task.print_result`) the
setup time (building the process or reading it from the cache, initialising it and setting the
initial weights) and the time of every round (`process.next`).

  python -m benchmarks.pfl.run_tff --spec=spec.json
"""

import gc
import sys
import time

from absl import app
from absl import flags
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks.pfl import speech_clients
from benchmarks.pfl import task
from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.runtime import compile_cache
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import process_cache
from fedasr_tff.speech import data
from fedasr_tff.speech import models

_SPEC = flags.DEFINE_string('spec', None, 'The run\'s spec (JSON, see benchmarks.pfl.task).',
                            required=True)

_SERVER_LEARNING_RATE = 1.0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  spec = task.read_spec(_SPEC.value)
  cache = None
  if spec.get('engine', 'inprocess') == 'inprocess':
    cache_dir = spec.get('compile_cache_dir')
    cache = compile_cache.CompileCache(cache_dir) if cache_dir else None
    execution_context.set_inprocess_execution_context(spec['clients_in_parallel'],
                                                      compile_cache=cache)
  else:
    execution_context.set_local_cpp_execution_context(spec['clients_in_parallel'])
  gc.freeze()  # as the binaries do after setting the context (experiments/local_worker.py)
  if spec['task'] == 'mlp':
    x, y = task.load_arrays(spec['data'])
    datasets = [tf.data.Dataset.from_tensor_slices((x[c], y[c])).batch(spec['batch_size'])
                for c in range(len(x))]
    model_fn = task.mlp_model_fn
  else:
    speech = spec['speech']
    datasets = speech_clients.speech_client_datasets(speech, spec['local_steps'])
    model_fn = models.build_tff_model_fn(speech['model'],
                                         data.Vocabulary(speech['language']).tokens)
  weights = task.load_arrays(spec['weights'])

  start = time.perf_counter()
  cohort_size = len(spec['cohorts'][0])

  def build():
    return algorithms.build_fed_avg_process(
        model_fn,
        client_learning_rate=spec['client_learning_rate'],
        local_steps=spec['local_steps'],
        local_clip_norm=None,
        server_optimizer=optimizers.build('sgd', _SERVER_LEARNING_RATE),
        model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(
            spec['noise_multiplier'], cohort_size, spec['clip'], allocation='global',
            diagnostics=False, noise_seed=spec['seed']))

  if cache is None:
    process = build()
  else:
    # As the binaries build theirs (experiments/train_federated.py): everything `build` reads.
    speech = spec['speech'] or {}
    recipe = dict({name: spec[name] for name in (
        'task', 'client_learning_rate', 'local_steps', 'batch_size', 'noise_multiplier', 'clip',
        'seed')}, cohort_size=cohort_size, server_learning_rate=_SERVER_LEARNING_RATE,
                  model=speech.get('model'), language=speech.get('language'))
    process = process_cache.learning_process(cache, recipe, build,
                                             modules=[task, sys.modules[__name__]])
  state = process.initialize()
  state = process.set_model_weights(
      state, tff.learning.models.ModelWeights(trainable=weights, non_trainable=[]))
  setup = time.perf_counter() - start

  round_times = []
  for cohort in spec['cohorts']:
    start = time.perf_counter()
    state = process.next(state, [datasets[c] for c in cohort]).state
    round_times.append(time.perf_counter() - start)
  if spec['weights_out']:
    task.save_arrays(spec['weights_out'], state.global_model_weights.trainable)
  task.print_result(setup_s=setup, round_s=round_times)


if __name__ == '__main__':
  app.run(main)
