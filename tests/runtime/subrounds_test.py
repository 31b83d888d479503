"""Subrounds in cohort order (`runtime.subrounds`): the blocks, the defect of TFF 0.87's own
partitioning that they avoid, and the processes TFF's context ran wrong (mixed FL, the retriever
with per-client local DP states) on two workers against the local worker."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.execution_contexts import (
  mergeable_comp_execution_context as tff_mergeable,
)

from fedasr_tff import aggregators
from fedasr_tff import optimizers
from fedasr_tff import retrieval
from fedasr_tff import runtime
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.runtime import subrounds
from tests.algorithms import linear_model
from tests.runtime import workers as workers_lib

_CLIENTS = tff.FederatedType(np.int32, tff.CLIENTS)
_SERVER = tff.FederatedType(np.int32, tff.SERVER)
_ARGUMENT_TYPE = tff.StructType([('before', _SERVER), ('clients', _CLIENTS),
                                 ('after', _SERVER)])


class BlocksTest(absltest.TestCase):

  def test_blocks_cover_the_cohort_in_order(self):
    self.assertEqual(subrounds.block_bounds(7, 3), [(0, 2), (2, 4), (4, 7)])
    self.assertEqual(subrounds.block_bounds(2, 4), [(0, 1), (1, 2)])
    self.assertEqual(subrounds.block_bounds(0, 2), [(0, 0)])

  def test_every_clients_value_is_cut_to_the_block_and_the_rest_is_shared(self):
    argument = tff.structure.Struct([('before', 1), ('clients', [10, 11, 12, 13, 14]),
                                     ('after', 2)])
    self.assertEqual(subrounds.count_clients(argument, _ARGUMENT_TYPE), 5)
    blocks = [subrounds.slice_clients(argument, _ARGUMENT_TYPE, *bounds)
              for bounds in subrounds.block_bounds(5, 2)]
    self.assertEqual([b.clients for b in blocks], [[10, 11], [12, 13, 14]])
    self.assertEqual([(b.before, b.after) for b in blocks], [(1, 2), (1, 2)])
    self.assertIsNone(subrounds.count_clients(3, _SERVER))

  def test_clients_values_of_different_lengths_are_refused(self):
    argument_type = tff.StructType([_CLIENTS, _CLIENTS])
    with self.assertRaisesRegex(ValueError, r'different numbers of clients: \[2, 3\]'):
      subrounds.count_clients([[1, 2], [1, 2, 3]], argument_type)

  def test_blocks_results_are_joined_in_block_order(self):
    result_type = tff.StructType([('per_client', _CLIENTS), ('total', _SERVER)])
    joined = subrounds.join_blocks([{'per_client': [1, 2], 'total': 9},
                                    {'per_client': [3], 'total': 9}], result_type)
    self.assertEqual(joined.per_client, [1, 2, 3])
    self.assertEqual(joined.total, 9)

  def test_tff_own_partitioning_repeats_the_first_block(self):
    # The defect this module avoids (TFF 0.87): with a SERVER-placed value after the clients',
    # every subround gets clients 0 and 1, and clients 2 and 3 none.
    argument = tff.structure.Struct([('before', 1), ('clients', [10, 11, 12, 13]),
                                     ('after', 2)])
    blocks = tff_mergeable._split_value_into_subrounds(argument, _ARGUMENT_TYPE, 2)
    self.assertEqual([b.clients for b in blocks], [[10, 11], [10, 11]])




def _regression_data(seed, count, batches=2, size=4, shift=0.0):
  rng = np.random.default_rng(seed)

  def dataset():
    x = rng.normal(size=(batches * size, linear_model.FEATURES)).astype(np.float32) + shift
    y = rng.normal(size=(batches * size, 1)).astype(np.float32) + shift
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(size)

  return [dataset() for _ in range(count)]


def _set_weights(process, state, seed=0):
  # Keras draws a new initialisation in every `initialize`: start every run from the same one.
  rng = np.random.default_rng(seed)
  weights = [rng.normal(size=(linear_model.FEATURES, 1)).astype(np.float32),
             rng.normal(size=(1,)).astype(np.float32)]
  return process.set_model_weights(
      state, tff.learning.models.ModelWeights(trainable=weights, non_trainable=[]))


def _mixed_run(algorithm, rounds=2, cohort=5):
  """`rounds` rounds of DP mixed FL; returns the final trainable weights."""
  dp = aggregators.PerLayerDPFactory.gaussian_fixed(0.5, cohort, 1.0, allocation='dim',
                                                    noise_seed=3)
  process = mixed_fl.build_mixed_fl_process(
      linear_model.model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.1,
      local_steps=2, server_optimizer=optimizers.build('sgd', 1.0), model_aggregator=dp)
  state = _set_weights(process, process.initialize())
  for round_num in range(rounds):
    clients = _regression_data(round_num, cohort)
    central = _regression_data(100 + round_num, 1, shift=1.5)[0]
    state = process.next(state, clients, central).state
  return [np.asarray(w) for w in state.global_model_weights.trainable]


_DIM, _CLASSES = 8, 3


def _text_clients(sizes, seed=0):
  """Clients of separable features with a [2] `seed` per batch, as the retriever takes."""
  datasets = []
  for i, size in enumerate(sizes):
    rng = np.random.default_rng(seed + i)
    labels = (np.arange(size) % _CLASSES).astype(np.int32)
    features = rng.normal(size=(size, _DIM)).astype(np.float32)
    features[np.arange(size), labels] += 3.0
    batches = tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(features=features, label=labels)).batch(4)
    datasets.append(batches.enumerate().map(
        lambda j, batch, i=i: collections.OrderedDict(batch, seed=tf.stack(
            [tf.constant(i, tf.int64), j]))))
  return datasets


# The options of each configuration, made when a run starts: under the run's context, not TFF's
# own, which is current when the module is imported.
_RETRIEVER_CONFIGURATIONS = {
    'no_dp': dict,
    'local_dp': lambda: dict(
        local_dp=retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2))),
    'central_dp': lambda: dict(weighting='uniform', model_aggregator=(
        aggregators.PerLayerDPFactory.gaussian_fixed(0.5, 5, 1.0, allocation='global',
                                                     noise_seed=5))),
}


def _retriever_run(configuration, rounds=2):
  """`rounds` rounds of the retriever; returns (final weights, each client's DP state)."""
  options = _RETRIEVER_CONFIGURATIONS[configuration]()
  model_fn = retrieval.build_model_fn(retrieval.CLASSIFIER_ONLY, _CLASSES, head='linear',
                                      feature_dim=_DIM)
  process = retrieval.build_retrieval_process(model_fn, client_learning_rate=0.1,
                                              local_epochs=2, **options)
  rng = np.random.default_rng(1)
  initial = tff.learning.models.ModelWeights(
      trainable=[(0.3 * rng.normal(size=s)).astype(np.float32)
                 for s in ([_DIM, _CLASSES], [_CLASSES])], non_trainable=[])
  state = process_lib.with_model_weights(process.initialize(), initial)
  data = _text_clients([6, 9, 4, 7, 5])
  dp_states = [retrieval.initial_client_dp_state(options.get('local_dp'))] * len(data)
  for round_num in range(rounds):
    seeds = [np.array([7, 10 * round_num + i], np.int64) for i in range(len(data))]
    state, dp_states, _ = retrieval.run_round(process, state, data, dp_states, seeds)
  return [np.asarray(w) for w in state['model'].trainable], dp_states


class SubroundRunsTest(workers_lib.TwoWorkersMixin, parameterized.TestCase):

  def _local_and_distributed(self, run, **kwargs):
    runtime.set_local_cpp_execution_context()
    local = run()
    runtime.set_distributed_execution_context(self.workers.addresses, **kwargs)
    return local, run()

  @parameterized.parameters(*mixed_fl.ALGORITHMS)
  def test_dp_mixed_fl_equals_the_local_run(self, algorithm):
    local, distributed = self._local_and_distributed(lambda: _mixed_run(algorithm))
    # The same clients, the same noise once a round; partial sums only add in another order.
    for a, b in zip(local, distributed, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)

  @parameterized.parameters(*_RETRIEVER_CONFIGURATIONS)
  def test_retriever_equals_the_local_run_and_keeps_each_clients_state(self, configuration):
    (local, local_states), (distributed, states) = self._local_and_distributed(
        lambda: _retriever_run(configuration))
    for a, b in zip(local, distributed, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    self.assertLen(states, 5)
    for want, got in zip(local_states, states, strict=True):
      np.testing.assert_allclose(np.array(got, np.float64), np.array(want, np.float64),
                                 rtol=1e-5, atol=1e-6)
    if configuration == 'local_dp':
      # Each client's adaptive clip moved its own way: a state returned to the wrong client
      # would show.
      self.assertGreater(len({float(s.clip) for s in states}), 1)

  def test_clients_results_come_back_in_cohort_order(self):
    @tff.tensorflow.computation(np.int32)
    def double(x):
      return 2 * x

    @tff.federated_computation(_SERVER, _CLIENTS)
    def per_client_and_total(offset, values):
      doubled = tff.federated_map(double, values)
      return doubled, tff.federated_sum(values), offset

    values = list(range(7))
    # More subrounds than workers: each worker runs its blocks one after another.
    runtime.set_distributed_execution_context(self.workers.addresses, num_subrounds=3)
    doubled, total, offset = per_client_and_total(5, values)
    self.assertEqual(list(doubled), [2 * v for v in values])
    self.assertEqual((total, offset), (21, 5))


if __name__ == '__main__':
  absltest.main()
