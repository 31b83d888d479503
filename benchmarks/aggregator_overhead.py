r"""Round time of federated averaging with `PerLayerDPFactory` against TFF's `gaussian_fixed`.

Both processes are `tff.learning.algorithms.build_unweighted_fed_avg` on the same Keras model
(an MLP with `--layers` dense layers, 2 weight tensors each) and the same client datasets, with
the same noise multiplier and clip; ours uses per-layer "dim" clipping. Rounds of the two
processes are interleaved so machine noise hits both alike. Prints the median round time of each
and the ratio ours/TFF.

  python -m benchmarks.aggregator_overhead --rounds=20
"""

import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import runtime

_ROUNDS = flags.DEFINE_integer('rounds', 20, 'Timed rounds per process.', lower_bound=1)
_CLIENTS = flags.DEFINE_integer('clients', 16, 'Clients per round.', lower_bound=1)
_LAYERS = flags.DEFINE_integer('layers', 12, 'Dense layers (2 weight tensors each).',
                               lower_bound=10)
_WIDTH = flags.DEFINE_integer('width', 64, 'Width of the hidden layers.', lower_bound=1)
_NOISE_MULTIPLIER = 1.0
_CLIP = 0.1


def _model_fn():
  layers = [tf.keras.layers.InputLayer(input_shape=(32,))]
  layers += [tf.keras.layers.Dense(_WIDTH.value, activation='relu')
             for _ in range(_LAYERS.value - 1)]
  layers.append(tf.keras.layers.Dense(10))
  return tff.learning.models.from_keras_model(
      tf.keras.Sequential(layers),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 32], tf.float32), tf.TensorSpec([None], tf.int32)))


def _process(aggregator):
  return tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      model_aggregator=aggregator)


def main(argv):
  del argv
  runtime.set_local_cpp_execution_context()  # a worker that dies with this process
  rng = np.random.default_rng(0)
  clients = _CLIENTS.value
  data = [
      tf.data.Dataset.from_tensor_slices(
          (rng.normal(size=(32, 32)).astype(np.float32),
           rng.integers(0, 10, size=32).astype(np.int32))).batch(16) for _ in range(clients)
  ]
  processes = {
      'tff gaussian_fixed':
          _process(tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
              _NOISE_MULTIPLIER, float(clients), _CLIP)),
      'per-layer dim':
          _process(aggregators.PerLayerDPFactory.gaussian_fixed(
              _NOISE_MULTIPLIER, clients, _CLIP, allocation='dim')),
  }
  states = {name: p.initialize() for name, p in processes.items()}
  tensors = len(states['per-layer dim'].global_model_weights.trainable)
  times = {name: [] for name in processes}
  for round_num in range(_ROUNDS.value + 2):
    for name, process in processes.items():
      start = time.perf_counter()
      states[name] = process.next(states[name], data).state
      if round_num >= 2:  # The first rounds trace and warm up.
        times[name].append(time.perf_counter() - start)
  print(f'{clients} clients, model with {tensors} weight tensors, {_ROUNDS.value} rounds each '
        '(after 2 warm-up rounds), interleaved')
  medians = {}
  for name, values in times.items():
    medians[name] = statistics.median(values)
    print(f'  {name:20s} median {medians[name] * 1e3:7.1f} ms  '
          f'[min {min(values) * 1e3:.1f}, max {max(values) * 1e3:.1f}]')
  print(f'  ratio per-layer / tff: {medians["per-layer dim"] / medians["tff gaussian_fixed"]:.3f}')


if __name__ == '__main__':
  app.run(main)
