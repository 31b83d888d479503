"""Processes whose clients build their datasets from keys (`with_dataset_computation`): the same
round as with the datasets given, for FedAvg, mixed FL and DGA (its client stage too)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.algorithms import dga
from fedasr_tff.algorithms import mixed_fl
from tests.algorithms import linear_model


def _client_dataset(key):
  """A client's batches, a function of its key alone (as a worker would build them)."""
  seed = tf.stack([tf.cast(key, tf.int64), tf.constant(0, tf.int64)])
  x = tf.random.stateless_normal([8, linear_model.FEATURES], seed=seed)
  y = tf.random.stateless_normal([8, 1], seed=seed + 1)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


_DATASET_COMPUTATION = tff.tensorflow.computation(_client_dataset, np.int32)


def _processes():
  sgd = optimizers.build('sgd', 0.5)
  return {
      'fed_avg': algorithms.build_fed_avg_process(linear_model.model_fn, client_learning_rate=0.1,
                                                  local_steps=2, server_optimizer=sgd),
      'mixed_fl': mixed_fl.build_mixed_fl_process(
          linear_model.model_fn, algorithm='two_way', central_weight=0.5, client_learning_rate=0.1,
          local_steps=2, server_optimizer=sgd),
      'dga': dga.build_dga_process(
          linear_model.model_fn, weighting=dga.SoftmaxWeighting(beta=1.0, loss_clip=10.0),
          client_learning_rate=0.1, local_steps=2, server_optimizer=sgd,
          with_client_round=True),
  }


class WithDatasetComputationTest(parameterized.TestCase):

  @parameterized.parameters('fed_avg', 'mixed_fl', 'dga')
  def test_keys_give_the_round_the_datasets_give(self, name):
    process = _processes()[name]
    by_key = algorithms.with_dataset_computation(process, _DATASET_COMPUTATION)
    self.assertIsInstance(by_key, type(process))
    keys = [np.int32(k) for k in (3, 8, 5)]
    datasets = [_client_dataset(k) for k in keys]
    central = ([_client_dataset(np.int32(99))]
               if getattr(process, 'central_data_type', None) is not None else [])
    state = process.initialize()
    want = process.next(state, datasets, *central).state
    got = by_key.next(state, keys, *central).state
    for a, b in zip(process.get_model_weights(want).trainable,
                    by_key.get_model_weights(got).trainable, strict=True):
      np.testing.assert_array_equal(a, b)
    if name == 'dga':
      want_updates = process.client_round(state, datasets)[0]
      got_updates = by_key.client_round(state, keys)[0]
      for a, b in zip(tf.nest.flatten(want_updates), tf.nest.flatten(got_updates),
                      strict=True):
        np.testing.assert_array_equal(a, b)

  def test_other_processes_are_refused(self):
    with self.assertRaisesRegex(TypeError, 'Cannot give clients keys'):
      algorithms.with_dataset_computation(object(), _DATASET_COMPUTATION)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
