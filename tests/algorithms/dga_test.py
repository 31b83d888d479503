"""DGA: the testable properties of Dimitriadis et al. (arXiv:2008.02452) on a linear model."""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.algorithms import dga
from fedasr_tff.program import privacy_ledger

_FEATURES = 3
_INPUT_SPEC = (tf.TensorSpec([None, _FEATURES], tf.float32), tf.TensorSpec([None, 1],
                                                                           tf.float32))


def _model_fn():
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(_FEATURES,)),
                               tf.keras.layers.Dense(1)])
  return tff.learning.models.from_keras_model(model, loss=tf.keras.losses.MeanSquaredError(),
                                              input_spec=_INPUT_SPEC)


def _dataset(rng, noise, size=8, batch=4):
  """Linear data; `noise` scales label noise, so noisier clients have larger losses."""
  x = rng.normal(size=(size, _FEATURES)).astype(np.float32)
  y = (x @ np.array([[1.0], [-2.0], [0.5]]) + noise * rng.normal(size=(size, 1))).astype(
      np.float32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def _cohort(seed=0, noises=(0.1, 1.0, 3.0, 0.5)):
  rng = np.random.default_rng(seed)
  return [_dataset(rng, n) for n in noises]


def _trainable(state):
  return [np.asarray(w, np.float64) for w in state.global_model_weights.trainable]


def _sgd(learning_rate):
  return optimizers.build('sgd', learning_rate)


_WEIGHTING = dga.SoftmaxWeighting(beta=0.3, loss_clip=40.0)


def _process(weighting=_WEIGHTING, server_optimizer=None, **kwargs):
  kwargs.setdefault('local_steps', 2)
  kwargs.setdefault('with_client_round', True)
  return dga.build_dga_process(
      _model_fn, weighting=weighting, client_learning_rate=0.05,
      server_optimizer=server_optimizer or _sgd(1.0), **kwargs)


class SoftmaxWeightsTest(parameterized.TestCase):
  """Properties 1-5 of the weights."""

  @parameterized.parameters(0.1, 1.0, 10.0)
  def test_equal_losses_give_uniform_weights(self, beta):
    weighting = dga.SoftmaxWeighting(beta, loss_clip=8.0)
    np.testing.assert_allclose(weighting.weights([2.5] * 5), 0.2, rtol=1e-6)

  def test_beta_zero_gives_uniform_weights(self):
    weighting = dga.SoftmaxWeighting(0.0, loss_clip=8.0)
    np.testing.assert_allclose(weighting.weights([0.1, 3.0, 7.9, 100.0]), 0.25, rtol=1e-6)

  def test_weights_are_a_distribution_and_shift_invariant(self):
    weighting = dga.SoftmaxWeighting(1.3, loss_clip=20.0)
    losses = np.array([0.5, 2.0, 3.5, 1.0, 7.0])
    alpha = weighting.weights(losses)
    self.assertTrue(np.all(alpha >= 0))
    self.assertAlmostEqual(alpha.sum(), 1.0, delta=1e-6)
    np.testing.assert_allclose(weighting.weights(losses + 4.0), alpha, rtol=1e-5)

  def test_monotone_with_the_exact_weight_ratio(self):
    beta = 0.7
    weighting = dga.SoftmaxWeighting(beta, loss_clip=20.0)
    losses = np.array([0.5, 2.0, 3.5, 1.0, 7.0])
    alpha = weighting.weights(losses)
    for i, j in itertools.permutations(range(len(losses)), 2):
      self.assertAlmostEqual(alpha[i] / alpha[j], np.exp(-beta * (losses[i] - losses[j])),
                             delta=1e-5 * alpha[i] / alpha[j])
      if losses[i] < losses[j]:
        self.assertGreater(alpha[i], alpha[j])

  def test_large_beta_tends_to_one_hot_with_ties_split_and_large_losses_stay_finite(self):
    # Losses around 1e4 with beta = 10, over a public range around them.
    weighting = dga.SoftmaxWeighting(10.0, loss_clip=1e4 + 4.0, loss_floor=1e4 - 4.0)
    alpha = weighting.weights([1e4 + 1.0, 1e4 - 1.0, 1e4 - 1.0, 1e4 + 3.0])
    self.assertTrue(np.all(np.isfinite(alpha)))
    np.testing.assert_allclose(alpha, [0.0, 0.5, 0.5, 0.0], atol=1e-8)
    self.assertEqual(alpha[1], alpha[2])

  def test_losses_outside_the_range_saturate_and_nonfinite_losses_weigh_least(self):
    weighting = dga.SoftmaxWeighting(0.5, loss_clip=10.0, loss_floor=1.0)
    w = weighting.client_weight(tf.constant([-5.0, 1.0, 10.0, 1e30, np.nan, np.inf])).numpy()
    np.testing.assert_allclose(w, [1.0, 1.0] + [np.exp(-4.5)] * 4, rtol=1e-6)
    self.assertAlmostEqual(weighting.min_weight, np.exp(-4.5))

  @parameterized.named_parameters(
      ('range_too_wide', dict(beta=10.0, loss_clip=9.0), 'beta'),
      ('clip_below_floor', dict(beta=1.0, loss_clip=1.0, loss_floor=2.0), 'loss_clip'),
      ('negative_beta', dict(beta=-1.0, loss_clip=1.0), 'beta'),
      ('infinite_clip', dict(beta=1.0, loss_clip=float('inf')), 'loss_clip'),
  )
  def test_bad_arguments(self, kwargs, name):
    with self.assertRaisesRegex(ValueError, name):
      dga.SoftmaxWeighting(**kwargs)


class FeaturesAndVarianceTest(absltest.TestCase):

  def test_features_are_loss_mean_and_population_variance_of_magnitudes(self):
    # Property 15.
    features = dga.client_features([tf.constant([1.0, -3.0])], tf.constant(0.7))
    np.testing.assert_allclose(features.numpy(), [0.7, 2.0, 1.0], rtol=1e-6)

  def test_variance_proxy_is_minimised_by_weights_proportional_to_the_norms(self):
    # Property 17 (the caveat of the paper's App. A): not DGA's weights.
    norms = np.array([1.0, 2.0, 4.0, 0.5])
    best = dga.variance_optimal_weights(norms)
    uniform = np.full(4, 0.25)
    self.assertLessEqual(dga.variance_proxy(norms, best), dga.variance_proxy(norms, uniform))
    self.assertAlmostEqual(dga.variance_proxy(norms, best), norms.sum()**2)
    rng = np.random.default_rng(0)
    for _ in range(200):
      alpha = rng.dirichlet(np.ones(4))
      self.assertGreaterEqual(dga.variance_proxy(norms, alpha),
                              dga.variance_proxy(norms, best) * (1 - 1e-12))


class ProcessTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.softmax = _process()
    cls.uniform = _process(weighting=None)

  def _client_round(self, process, data):
    updates, losses, weights, features, _ = process.client_round(process.initialize(), data)
    return ([[np.asarray(t, np.float64) for t in u] for u in updates],
            np.asarray(losses, np.float64), np.asarray(weights, np.float64), features)

  def test_softmax_round_is_the_weighted_mean_of_the_client_deltas(self):
    data = _cohort()
    updates, losses, weights, _ = self._client_round(self.softmax, data)
    self.assertGreater(np.ptp(losses), 1.0)
    beta = _WEIGHTING.beta
    np.testing.assert_allclose(weights, np.exp(-beta * losses), rtol=1e-5)
    state = self.softmax.initialize()
    before = _trainable(state)
    after = _trainable(self.softmax.next(state, data).state)
    alpha = weights / weights.sum()
    for h in range(2):
      want = before[h] - sum(a * u[h] for a, u in zip(alpha, updates, strict=True))
      np.testing.assert_allclose(after[h], want, rtol=1e-5, atol=1e-7)

  def test_noisy_clients_weigh_less(self):
    _, losses, weights, _ = self._client_round(self.softmax, _cohort())
    order = np.argsort(losses)
    self.assertTrue(np.all(np.diff(weights[order]) < 0))

  @parameterized.parameters('softmax', 'uniform')
  def test_permuting_the_cohort_leaves_the_round_unchanged(self, name):
    process = getattr(self, name)
    data = _cohort(1)
    state = process.initialize()
    reference = _trainable(process.next(state, data).state)
    permuted = _trainable(process.next(state, [data[i] for i in (2, 0, 3, 1)]).state)
    for a, b in zip(reference, permuted, strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    _, _, weights, _ = self._client_round(process, data)
    _, _, permuted_weights, _ = self._client_round(process, [data[i] for i in (2, 0, 3, 1)])
    np.testing.assert_array_equal(permuted_weights, weights[[2, 0, 3, 1]])

  def test_identical_deltas_and_a_single_client_give_that_delta(self):
    rng = np.random.default_rng(2)
    one = _dataset(rng, 0.5)
    state = self.softmax.initialize()
    before = _trainable(state)
    updates, _, _, _ = self._client_round(self.softmax, [one])
    for cohort in ([one], [one, one, one]):
      after = _trainable(self.softmax.next(state, cohort).state)
      for h in range(2):
        np.testing.assert_allclose(after[h], before[h] - updates[0][h], rtol=1e-6, atol=1e-7)

  @parameterized.parameters('softmax', 'uniform')
  def test_a_client_drawn_twice_contributes_twice(self, name):
    process = getattr(self, name)
    data = _cohort(3, noises=(0.1, 2.0))
    state = process.initialize()
    before = _trainable(state)
    updates, _, weights, _ = self._client_round(process, data)
    after = _trainable(process.next(state, [data[0], data[0], data[1]]).state)
    w = np.array([2 * weights[0], weights[1]])
    for h in range(2):
      want = before[h] - (w[0] * updates[0][h] + w[1] * updates[1][h]) / w.sum()
      np.testing.assert_allclose(after[h], want, rtol=1e-5, atol=1e-7)

  def test_uniform_with_server_sgd_at_one_is_fedavg(self):
    # Property 9: bit for bit the FedAvg process, and the mean of the client models.
    data = _cohort(4)
    fed_avg = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.05, local_steps=2, server_optimizer=_sgd(1.0))
    ours = _trainable(self.uniform.next(self.uniform.initialize(), data).state)
    theirs = _trainable(fed_avg.next(fed_avg.initialize(), data).state)
    for a, b in zip(ours, theirs, strict=True):
      np.testing.assert_array_equal(a, b)
    updates, _, _, _ = self._client_round(self.uniform, data)
    before = _trainable(self.uniform.initialize())
    for h in range(2):
      client_models = [before[h] - u[h] for u in updates]
      np.testing.assert_allclose(ours[h], np.mean(client_models, 0), rtol=1e-6, atol=1e-7)

  def test_client_round_is_stateless_and_deterministic(self):
    # Property 10.
    data = _cohort(5)
    state = self.softmax.initialize()
    first = self.softmax.client_round(state, data)
    second = self.softmax.client_round(state, data)
    for a, b in zip(tf.nest.flatten(first), tf.nest.flatten(second), strict=True):
      np.testing.assert_array_equal(a, b)

  def test_stages_make_next(self):
    data = _cohort(6)
    state = self.softmax.initialize()
    updates, _, weights, _, _ = self.softmax.client_round(state, data)
    staged = self.softmax.server_step(state, updates, weights).state
    whole = self.softmax.next(state, data).state
    for a, b in zip(_trainable(staged), _trainable(whole), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)

  def test_server_adam_state_changes_only_by_committed_steps(self):
    # Property 11: candidates from one state are identical and leave that state as it was.
    process = _process(server_optimizer=optimizers.build('adam', 0.01))
    data = _cohort(7)
    state = process.initialize()
    state = process.next(state, data).state
    updates, _, weights, _, _ = process.client_round(state, data)
    a = process.server_step(state, updates, weights).state
    b = process.server_step(state, updates, weights).state
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b), strict=True):
      np.testing.assert_array_equal(x, y)
    step_before = [np.asarray(v) for v in tf.nest.flatten(state.finalizer)]
    step_after = [np.asarray(v) for v in tf.nest.flatten(a.finalizer)]
    self.assertTrue(any(not np.array_equal(x, y) for x, y in zip(step_before, step_after,
                                                                   strict=True)))
    # The Adam step count carries across rounds.
    self.assertEqual(int(a.finalizer['step']), 2)

  def test_measurements_hold_client_statistics_only_when_asked(self):
    # The loss statistics and the weights' sum and effective number are client data: only
    # with `diagnostics=True`, in `next` and in `client_round` alike.
    data = _cohort(8)
    metrics = self.softmax.next(self.softmax.initialize(), data).metrics
    self.assertEmpty(metrics['client_work'])
    self.assertEmpty(self.softmax.client_round(self.softmax.initialize(), data)[4])
    asked = _process(diagnostics=True)
    metrics = asked.next(asked.initialize(), data).metrics
    self.assertEqual(set(metrics['client_work']), {'train', 'weights'})
    self.assertEqual(set(asked.client_round(asked.initialize(), data)[4]), {'train', 'weights'})

  def test_unweighted_aggregator_is_refused_with_softmax_weights(self):
    with self.assertRaisesRegex(ValueError, 'weighted `model_aggregator`'):
      _process(model_aggregator=tff.aggregators.UnweightedMeanFactory())

  def test_aggregator_must_bound_weights_no_higher_than_the_weighting(self):
    aggregator = aggregators.BoundedWeightDPFactory.gaussian_fixed(
        1.0, 4, 1.0, min_weight=0.5)
    with self.assertRaisesRegex(ValueError, 'min_weight'):
      _process(model_aggregator=aggregator)


class DPTest(absltest.TestCase):

  def test_bounded_weight_dp_round_with_infinite_clip_and_no_noise_is_the_softmax_round(self):
    aggregator = aggregators.BoundedWeightDPFactory.gaussian_fixed(
        0.0, 4, 1e9, min_weight=_WEIGHTING.min_weight, allocation='global')
    private = _process(model_aggregator=aggregator)
    plain = _process()
    data = _cohort(8)
    a = _trainable(private.next(private.initialize(), data).state)
    b = _trainable(plain.next(plain.initialize(), data).state)
    for x, y in zip(a, b, strict=True):
      np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)

  def test_the_ledger_accounts_the_event_the_round_reports(self):
    z = 1.2
    aggregator = aggregators.BoundedWeightDPFactory.gaussian_fixed(
        z, 4, 0.1, min_weight=_WEIGHTING.min_weight, allocation='dim')
    process = _process(model_aggregator=aggregator)
    output = process.next(process.initialize(), _cohort(9))
    event = tff.aggregators.differential_privacy.extract_dp_event_from_state(
        output.state.aggregator)
    self.assertAlmostEqual(event.noise_multiplier, z, places=5)
    self.assertAlmostEqual(privacy_ledger.applied_noise_multiplier(output.state.aggregator), z,
                           places=5)


class RehearsalTest(absltest.TestCase):

  def test_no_rehearsal_takes_no_data_and_zero_rate_is_no_rehearsal(self):
    # Property 16: 0 steps or η_w = 0 is plain hierarchical optimization.
    for kwargs in (dict(rehearsal_steps=0, rehearsal_learning_rate=0.1),
                   dict(rehearsal_steps=3, rehearsal_learning_rate=0.0)):
      process = _process(**kwargs)
      self.assertIsNone(process.central_data_type)
      self.assertIsNone(process.rehearse)

  def test_rehearsal_lowers_the_held_out_loss_and_reuses_the_central_component(self):
    rng = np.random.default_rng(10)
    held_out = _dataset(rng, 0.0, size=16, batch=8)
    steps, learning_rate = 2, 0.05
    process = _process(rehearsal_steps=steps, rehearsal_learning_rate=learning_rate)
    self.assertIsNotNone(process.central_data_type)
    data = _cohort(11)
    state = process.initialize()
    output = process.next(state, data, held_out)
    updates, _, weights, _, _ = process.client_round(state, data)
    stepped = process.server_step(state, updates, weights).state
    rehearsed = process.rehearse(stepped, held_out)
    for a, b in zip(_trainable(rehearsed.state), _trainable(output.state), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    # The same SGD steps as the central component of mixed FL.
    central = algorithms.build_central_work(_model_fn, optimizer=_sgd(learning_rate),
                                            steps=steps, clip_norm=1.0)
    _, delta, _, loss = central.steps(central.initialize(), stepped.global_model_weights,
                                      held_out)
    for a, w, d in zip(_trainable(rehearsed.state), _trainable(stepped), delta, strict=True):
      np.testing.assert_allclose(a, w - d, rtol=1e-6, atol=1e-8)
    self.assertAlmostEqual(float(rehearsed.metrics['rehearsal']['loss']), float(loss),
                           places=5)

    def held_out_loss(weights):
      kernel, bias = [np.asarray(w, np.float64) for w in weights.trainable]
      losses = [np.mean(np.square(x.numpy() @ kernel + bias - y.numpy()))
                for x, y in held_out]
      return np.mean(losses)

    self.assertLess(held_out_loss(rehearsed.state.global_model_weights),
                    held_out_loss(stepped.global_model_weights))


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
