"""TFF 0.87's TensorFlow computations run in this process (`tff_graphs`), and a DP round run from
its map-reduce form (`inprocess`), against TFF's C++ worker. Pins the proto layout `tff_graphs`
reads: if TFF changes it, these fail."""

import collections

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import inprocess
from fedasr_tff.runtime import tff_graphs
from tests.runtime import dp_mlp

_ELEMENT = tff.types.tensorflow_to_type(dp_mlp.ELEMENT_SPEC)


@tff.tensorflow.computation(
    collections.OrderedDict(scale=np.float32, offset=tff.TensorType(np.float32, [4])),
    tff.SequenceType(_ELEMENT))
def _weighted_sums(weights, dataset):
  # A variable set by the graph's initialize_op, a reduction of the dataset, a named struct.
  total = tf.Variable(tf.zeros([4]))
  sums, count = dataset.reduce(
      (tf.zeros([4]), tf.constant(0)),
      lambda state, batch: (state[0] + tf.reduce_sum(batch[0], 0), state[1] + tf.size(batch[1])))
  with tf.control_dependencies([total.assign_add(weights['scale'] * sums + weights['offset'])]):
    return collections.OrderedDict(total=total.read_value(), count=count)


def _dataset(seed):
  return dp_mlp.datasets(1, seed)[0]


class InProcessComputationTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    execution_context.set_local_cpp_execution_context()

  def test_equals_the_worker_on_structs_datasets_and_variables(self):
    weights = collections.OrderedDict(scale=np.float32(2.0),
                                      offset=np.arange(4, dtype=np.float32))
    computation = tff_graphs.InProcessComputation(_weighted_sums)
    for seed in range(3):  # called again: the variable starts from its initial value each time
      expected = _weighted_sums(weights, _dataset(seed))
      result = computation((weights, _dataset(seed)))
      np.testing.assert_allclose(result.total, expected['total'], rtol=1e-6)
      self.assertEqual(int(result.count), expected['count'])

  def test_two_imports_keep_their_variables_and_functions_apart(self):
    first, second = (tff_graphs.InProcessComputation(_weighted_sums) for _ in range(2))
    weights = (collections.OrderedDict(scale=np.float32(1.0), offset=np.zeros(4, np.float32)))
    a = first((weights, _dataset(0)))
    b = second((weights, _dataset(1)))
    np.testing.assert_allclose(first((weights, _dataset(0))).total, a.total)
    self.assertFalse(np.allclose(a.total, b.total))

  def test_refuses_what_is_not_a_tensorflow_computation(self):
    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def total(values):
      return tff.federated_sum(values)

    with self.assertRaisesRegex(ValueError, 'total is a .* computation, not a TensorFlow one'):
      tff_graphs.InProcessComputation(total, 'total')

  def test_names_a_sequence_argument_that_is_not_a_dataset(self):
    computation = tff_graphs.InProcessComputation(_weighted_sums, 'sums')
    weights = collections.OrderedDict(scale=np.float32(1.0), offset=np.zeros(4, np.float32))
    with self.assertRaisesRegex(TypeError, 'sums: a sequence argument must be a tf.data.Dataset'):
      computation((weights, [1.0, 2.0]))


class MapReduceRoundTest(absltest.TestCase):

  def test_dp_rounds_equal_the_worker_up_to_summation_order(self):
    execution_context.set_local_cpp_execution_context()
    process = dp_mlp.process()
    datasets = [_dataset(seed) for seed in range(5)]
    worker_state = in_process_state = dp_mlp.initial_state(process)
    in_process = inprocess.MapReduceRound(process.next)
    # Two clients at a time (the second lane idle beside the fifth): the same sums, same order.
    two_lanes, two_lanes_state = inprocess.MapReduceRound(process.next, lanes=2), worker_state
    for _ in range(3):
      worker_output = process.next(worker_state, datasets)
      worker_state = worker_output.state
      output = in_process(in_process_state, datasets)
      in_process_state = output.state
      two_lanes_state = two_lanes(two_lanes_state, datasets).state
    for a, b in zip(in_process_state.global_model_weights.trainable,
                    two_lanes_state.global_model_weights.trainable, strict=True):
      np.testing.assert_array_equal(a, b)
    for a, b in zip(worker_state.global_model_weights.trainable,
                    in_process_state.global_model_weights.trainable, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    # The clip adapted, and the noise was drawn, as on the worker.
    np.testing.assert_allclose(
        tf.nest.flatten(output.metrics['aggregator']['dp_query_metrics']['per_group']),
        tf.nest.flatten(worker_output.metrics['aggregator']['dp_query_metrics']['per_group']),
        rtol=1e-5)
    initial = dp_mlp.initial_state(process).global_model_weights.trainable
    self.assertGreater(np.abs(np.asarray(worker_state.global_model_weights.trainable[0]) -
                              initial[0]).max(), 0.01)
    # A round of no clients (Poisson sampling draws them) aggregates nothing, as on the worker.
    worker_empty = process.next(worker_state, []).state
    in_process_empty = in_process(in_process_state, []).state
    for a, b in zip(tf.nest.flatten(worker_empty.aggregator),
                    tf.nest.flatten(in_process_empty.aggregator), strict=True):
      if isinstance(a, bytes):  # the DP event's names
        self.assertEqual(a, b)
      else:
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for a, b in zip(worker_empty.global_model_weights.trainable,
                    in_process_empty.global_model_weights.trainable, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    with self.assertRaisesRegex(TypeError, r'client_data\[1\]: a sequence argument must be'):
      in_process(in_process_state, [datasets[0], [1.0]])

  def test_refuses_a_computation_without_a_map_reduce_form(self):
    @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                               tff.FederatedType(np.float32, tff.CLIENTS),
                               tff.FederatedType(np.float32, tff.SERVER))
    def three_arguments(state, values, other):
      return state, tff.federated_sum(values), other

    with self.assertRaisesRegex(ValueError, 'has no map-reduce form'):
      inprocess.MapReduceRound(three_arguments)
    with self.assertRaisesRegex(ValueError, '`lanes` must be an int >= 1, got 0'):
      inprocess.MapReduceRound(dp_mlp.process().next, lanes=0)


if __name__ == '__main__':
  absltest.main()
