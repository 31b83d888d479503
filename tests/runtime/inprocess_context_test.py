"""The in-process engine as a TFF context (`inprocess_context.InProcessContext`): every process it
runs equals TFF's C++ worker (DP on, adaptive clipping on, 3 rounds, same seeds) with no worker
started; what it cannot run goes to the worker, saying why."""

import collections

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.algorithms import dga
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import inprocess_context
from tests.runtime import dp_mlp

_ROUNDS = 3


def _local_work(model_aggregator):
  return algorithms.build_fed_avg_process(
      dp_mlp.model_fn, client_learning_rate=0.1, local_steps=3, local_clip_norm=1.0,
      server_optimizer=optimizers.build('sgd', 1.0), model_aggregator=model_aggregator)


def _processes():
  """The configurations: our FedAvg with DP in global and per-layer clipping, fixed and
  adaptive; TFF's FedAvg with per-layer adaptive DP; DGA's softmax weighting with DP on the
  weights."""
  fixed = dict(noise_multiplier=0.8, clients_per_round=4, clip=0.3,
               leaf_names=dp_mlp.LEAF_NAMES, noise_seed=11)
  weighting = dga.SoftmaxWeighting(beta=1.0, loss_clip=3.0)
  return collections.OrderedDict([
      ('fed_avg, DP global fixed', _local_work(aggregators.PerLayerDPFactory.gaussian_fixed(
          allocation='global', **fixed))),
      ('fed_avg, DP weighted per-layer', _local_work(aggregators.PerLayerDPFactory.gaussian_fixed(
          allocation='weighted', layer_weights=[4.0, 1.0, 2.0, 1.0], **fixed))),
      ('fed_avg, DP uniform adaptive', _local_work(aggregators.PerLayerDPFactory.gaussian_adaptive(
          0.8, 4, 0.3, allocation='uniform', clipped_count_stddev=2.0,
          leaf_names=dp_mlp.LEAF_NAMES, noise_seed=12))),
      ('TFF fed_avg, DP dim adaptive', dp_mlp.process()),
      ('DGA softmax, DP', algorithms.build_dga_process(
          dp_mlp.model_fn, weighting=weighting, client_learning_rate=0.1, local_steps=2,
          server_optimizer=optimizers.build('sgd', 1.0),
          model_aggregator=aggregators.BoundedWeightDPFactory.gaussian_fixed(
              0.8, 4, 0.3, weighting.min_weight, leaf_names=dp_mlp.LEAF_NAMES,
              noise_seed=13))),
  ])


def _run(process):
  """`_ROUNDS` rounds from fixed weights: the last state's weights and metrics."""
  state = dp_mlp.initial_state(process)
  datasets = dp_mlp.datasets(count=4)
  for _ in range(_ROUNDS):
    output = process.next(state, datasets)
    state = output.state
  return process.get_model_weights(state).trainable, output.metrics


def _numbers(structure):
  return [np.asarray(x, np.float64) for x in tf.nest.flatten(structure)
          if not isinstance(x, (bytes, str))]


class InProcessContextTest(absltest.TestCase):

  def test_each_process_equals_the_worker_and_starts_none(self):
    processes = _processes()
    execution_context.set_local_cpp_execution_context()
    on_worker = {name: _run(process) for name, process in processes.items()}

    execution_context.set_inprocess_execution_context()
    context = tff.framework.get_context_stack().current
    self.assertIsInstance(context, inprocess_context.InProcessContext)
    for name, process in processes.items():
      with self.subTest(name):
        self.assertIsNone(context.fallback_reason(process.next))
        weights, metrics = _run(process)
        want_weights, want_metrics = on_worker[name]
        initial = dp_mlp.initial_state(process).global_model_weights.trainable
        moved = max(np.abs(np.asarray(w) - i).max()
                    for w, i in zip(want_weights, initial, strict=True))
        self.assertGreater(moved, 1e-3)  # the rounds trained
        for a, b in zip(want_weights, weights, strict=True):
          np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        # The DP metrics (noise std, clips, released norms) as the worker's: the noise was
        # drawn once, from the same state, and the clip adapted alike.
        for a, b in zip(_numbers(want_metrics), _numbers(metrics), strict=True):
          np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    self.assertFalse(context.fallback_started)
    self.assertTrue(context.runs_in_process(processes['TFF fed_avg, DP dim adaptive'].initialize))

  def test_what_has_no_map_reduce_form_runs_on_the_worker(self):
    execution_context.set_inprocess_execution_context()
    context = tff.framework.get_context_stack().current

    @tff.tensorflow.computation(np.float32, np.float32)
    def add(a, b):
      return a + b

    @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                               tff.FederatedType(np.float32, tff.CLIENTS),
                               tff.FederatedType(np.float32, tff.SERVER))
    def three_arguments(state, values, central):  # mixed FL's shape
      return (tff.federated_map(add, (state, central)), tff.federated_sum(values))

    @tff.federated_computation(tff.FederatedType(np.float32, tff.SERVER),
                               tff.FederatedType(np.float32, tff.CLIENTS))
    def client_outputs(state, values):  # the retriever's shape: a result at the clients
      return state, values

    self.assertEqual(three_arguments(1.0, [2.0, 3.0], 4.0), (5.0, 5.0))
    self.assertIn('is not a round', context.fallback_reason(three_arguments))
    self.assertEqual(client_outputs(1.0, [2.0, 3.0]), (1.0, [2.0, 3.0]))
    self.assertIn('is not a round', context.fallback_reason(client_outputs))
    self.assertTrue(context.fallback_started)
    self.assertIsNone(context.fallback_reason(add))
    self.assertEqual(add(1.0, 2.0), 3.0)

  def test_refuses_bad_lanes(self):
    for lanes in (0, 1.5, None):
      with self.assertRaisesRegex(ValueError, '`lanes` must be an int >= 1'):
        inprocess_context.InProcessContext(lambda: None, lanes=lanes)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  execution_context.set_local_cpp_execution_context()
  absltest.main()
