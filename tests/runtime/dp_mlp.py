"""A small DP FedAvg process for the runtime tests: a 4-8-3 MLP, the project's per-layer DP with
the adaptive clip, seeded so that runs in different contexts can be compared."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators

LEAF_NAMES = ['hidden/kernel', 'hidden/bias', 'output/kernel', 'output/bias']
ELEMENT_SPEC = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))


def model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dense(3),
  ])
  return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=ELEMENT_SPEC)


def process():
  """The process: noise drawn in the server's update from a fixed seed, clip adapted."""
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=aggregators.PerLayerDPFactory.gaussian_adaptive(
          0.5, 5, 0.1, allocation='dim', clipped_count_stddev=2.0, leaf_names=LEAF_NAMES,
          noise_seed=7))


def datasets(count=5, seed=9):
  """`count` clients' datasets of 6 examples in batches of 3."""
  rng = np.random.default_rng(seed)
  return [tf.data.Dataset.from_tensor_slices(
      (rng.normal(size=(6, 4)).astype(np.float32),
       rng.integers(0, 3, size=6).astype(np.int32))).batch(3) for _ in range(count)]


def initial_state(dp_process):
  """`dp_process`'s initial state with fixed weights (Keras draws new ones in every
  `initialize`): every run starts from the same model."""
  rng = np.random.default_rng(0)
  weights = [(0.3 * rng.normal(size=shape)).astype(np.float32)
             for shape in ((4, 8), (8,), (8, 3), (3,))]
  return dp_process.set_model_weights(
      dp_process.initialize(), tff.learning.models.ModelWeights(trainable=weights,
                                                                non_trainable=[]))
