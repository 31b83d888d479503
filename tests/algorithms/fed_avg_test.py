from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime

_INPUT_SPEC = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))


def _keras_model():
  tf.keras.utils.set_random_seed(0)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(6, activation='tanh'),
      tf.keras.layers.Dense(3),
  ])


def _loss():
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _model_fn():
  return tff.learning.models.from_keras_model(_keras_model(), loss=_loss(),
                                              input_spec=_INPUT_SPEC)


def _client_data(seed, clients=3, examples=6, batch=3, learnable=False):
  rng = np.random.default_rng(seed)
  data = []
  for _ in range(clients):
    x = rng.normal(size=(examples, 4)).astype(np.float32)
    y = (np.argmax(x[:, :3], axis=1) if learnable else rng.integers(0, 3, examples))
    data.append(tf.data.Dataset.from_tensor_slices((x, y.astype(np.int32))).batch(batch))
  return data


def _sgd_server():
  return optimizers.build('sgd', 1.0)


class FedAvgProcessTest(parameterized.TestCase):

  def test_one_step_round_is_central_sgd_on_the_union(self):
    data = _client_data(1, clients=3, examples=4, batch=4)
    process = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.3, local_steps=1, local_clip_norm=None,
        server_optimizer=_sgd_server())
    state = process.initialize()
    new_weights = process.next(state, data).state.global_model_weights.trainable

    model = _keras_model()
    tf.nest.map_structure(lambda v, w: v.assign(w), model.trainable_variables,
                          list(state.global_model_weights.trainable))
    union = [batch for d in data for batch in d]
    x = tf.concat([b[0] for b in union], 0)
    y = tf.concat([b[1] for b in union], 0)
    with tf.GradientTape() as tape:
      loss = _loss()(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    for got, w, g in zip(new_weights, model.trainable_variables, grads, strict=True):
      np.testing.assert_allclose(got, w.numpy() - 0.3 * g.numpy(), rtol=1e-5, atol=1e-6)

  def test_without_clipping_matches_tff_fed_avg(self):
    # One local epoch of SGD without local clipping is TFF's own FedAvg.
    data = _client_data(2)
    theirs = tff.learning.algorithms.build_unweighted_fed_avg(
        _model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
    ours = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.2, local_epochs=1, local_clip_norm=None,
        server_optimizer=_sgd_server())
    our_state = ours.next(ours.initialize(), data).state
    their_state = theirs.next(theirs.initialize(), data).state
    for a, b in zip(our_state.global_model_weights.trainable,
                    their_state.global_model_weights.trainable, strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

  def test_fedprox_matches_a_direct_computation(self):
    # Local SGD on loss + (mu/2)||w - w0||^2, written out with Keras for one client.
    mu, lr, steps = 0.5, 0.2, 3
    data = _client_data(8, clients=1, examples=9, batch=3)
    process = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=lr, local_steps=steps, local_clip_norm=None,
        fedprox_mu=mu, server_optimizer=_sgd_server())
    state = process.initialize()
    got = process.next(state, data).state.global_model_weights.trainable

    model = _keras_model()
    initial = [np.asarray(w) for w in state.global_model_weights.trainable]
    for v, w in zip(model.trainable_variables, initial, strict=True):
      v.assign(w)
    for x, y in data[0].take(steps):
      with tf.GradientTape() as tape:
        loss = _loss()(y, model(x)) + 0.5 * mu * tf.add_n(
            [tf.reduce_sum(tf.square(v - w)) for v, w in zip(model.trainable_variables, initial,
                                                            strict=True)])
      for v, g in zip(model.trainable_variables,
                      tape.gradient(loss, model.trainable_variables), strict=True):
        v.assign_sub(lr * g)
    for a, v in zip(got, model.trainable_variables, strict=True):
      np.testing.assert_allclose(a, v.numpy(), rtol=1e-5, atol=1e-6)

  def test_fedprox_pulls_towards_the_global_model(self):
    data = _client_data(3)
    norms = {}
    for mu in (0.0, 5.0):
      process = algorithms.build_fed_avg_process(
          _model_fn, client_learning_rate=0.1, local_steps=20, fedprox_mu=mu,
          server_optimizer=_sgd_server(), diagnostics=True)
      norms[mu] = process.next(process.initialize(), data).metrics['client_work']['train'][
          'delta_norm']
    self.assertLess(norms[5.0], norms[0.0])

  def test_local_gradient_clipping(self):
    data = _client_data(4)
    clip, lr = 0.05, 0.1
    process = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=lr, local_steps=1, local_clip_norm=clip,
        server_optimizer=_sgd_server(), diagnostics=True)
    train = process.next(process.initialize(), data).metrics['client_work']['train']
    self.assertGreater(train['max_grad_norm'], clip)  # Clipping had something to do ...
    self.assertLessEqual(train['max_clipped_grad_norm'], clip * (1 + 1e-5))  # ... on every step,
    # and the step taken is the clipped one: one step of lr * clipped gradient.
    self.assertAlmostEqual(train['delta_norm'], lr * clip, delta=1e-6)

  def test_local_steps_cycle_short_data(self):
    data = _client_data(5, clients=2, examples=6, batch=3)  # Two batches a client.
    process = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.1, local_steps=5, server_optimizer=_sgd_server(),
        diagnostics=True)
    train = process.next(process.initialize(), data).metrics['client_work']['train']
    self.assertEqual(train['steps'], 10)
    self.assertEqual(train['examples'], 30)
    epochs = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.1, local_epochs=3, server_optimizer=_sgd_server(),
        diagnostics=True)
    self.assertEqual(epochs.next(epochs.initialize(), data).metrics['client_work']['train']
                     ['steps'], 12)

  def test_learning_rate_follows_the_schedule(self):
    schedule = optimizers.schedules.exponential_decay(0.01, 0.5, 2, start_round=1)
    process = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.1, local_steps=1, server_optimizer=optimizers.build(
            'lamb', 0.01), server_lr_schedule=schedule)
    state = process.initialize()
    data = _client_data(6)
    for round_num in range(5):
      optimizer_state = state.finalizer['optimizer']
      self.assertAlmostEqual(optimizer_state['learning_rate'], float(schedule(round_num)),
                             places=7)
      state = process.next(state, data).state

  def test_dp_process_learns(self):
    data = _client_data(7, clients=8, examples=32, batch=8, learnable=True)
    cohort = len(data)
    process = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.2, local_steps=4,
        server_optimizer=optimizers.build('lamb', 0.1),
        server_lr_schedule=optimizers.schedules.exponential_decay(0.1, 0.6, 5, start_round=2),
        model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(
            noise_multiplier=0.05, clients_per_round=cohort, clip=0.5, allocation='dim'))
    evaluation = algorithms.build_evaluation_process(_model_fn)
    state = process.initialize()

    def eval_loss(learning_state):
      eval_state = evaluation.set_model_weights(evaluation.initialize(),
                                                learning_state.global_model_weights)
      metrics = evaluation.next(eval_state, data).metrics['client_work']['eval']
      return metrics['current_round_metrics']['loss']

    before = eval_loss(state)
    for _ in range(5):
      output = process.next(state, data)
      state = output.state
    after = eval_loss(state)
    self.assertLess(after, 0.8 * before)
    self.assertIn('dp_query_metrics', output.metrics['aggregator'])

  def test_measurements_hold_client_statistics_only_when_asked(self):
    # The private choice is the default: a process dropped into a `tff.learning` pipeline
    # releases no un-noised client statistic unless `diagnostics=True` asks for them.
    data = _client_data(6)
    kwargs = dict(client_learning_rate=0.1, local_steps=1, server_optimizer=_sgd_server(),
                  model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(1.0, 3, 0.5))
    private = algorithms.build_fed_avg_process(_model_fn, **kwargs)
    metrics = private.next(private.initialize(), data).metrics
    self.assertEmpty(metrics['client_work'])
    self.assertNotIn('client_statistics', metrics['aggregator']['dp_query_metrics'])
    asked = algorithms.build_fed_avg_process(_model_fn, diagnostics=True, **kwargs)
    train = asked.next(asked.initialize(), data).metrics['client_work']['train']
    self.assertEqual(train['clients'], 3)

  @parameterized.named_parameters(
      ('both', dict(local_steps=1, local_epochs=1), 'local_steps'),
      ('neither', dict(), 'local_steps'),
      ('zero_steps', dict(local_steps=0), 'local_steps'),
      ('client_lr', dict(local_steps=1, client_learning_rate=0.0), 'client_learning_rate'),
      ('mu', dict(local_steps=1, fedprox_mu=-0.1), 'fedprox_mu'),
      ('clip', dict(local_steps=1, local_clip_norm=0.0), 'local_clip_norm'),
      ('server_optimizer', dict(local_steps=1, server_optimizer='lamb'), 'server_optimizer'),
  )
  def test_bad_input(self, override, name):
    kwargs = dict(client_learning_rate=0.1, server_optimizer=_sgd_server())
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      algorithms.build_fed_avg_process(_model_fn, **kwargs)


class _BranchingSgd(tff.learning.optimizers.Optimizer):
  """SGD that skips a step of zero gradient by a Python `if` on a tensor: needs AutoGraph."""

  def initialize(self, specs):
    return ()

  def next(self, state, weights, gradients):
    if tf.linalg.global_norm(tf.nest.flatten(gradients)) > 0.0:
      weights = tf.nest.map_structure(lambda w, g: w - 0.5 * g, weights, gradients)
    return state, weights


class BuildFinalizerTest(parameterized.TestCase):
  """`fed_avg.build_finalizer` computes what TFF's `build_apply_optimizer_finalizer` computes."""

  @parameterized.named_parameters(
      ('sgd', lambda: optimizers.build('sgd', 0.5)),
      ('sgdm', lambda: optimizers.build('sgdm', 0.5)),
      ('adam', lambda: optimizers.build('adam', 0.01)),
      ('lamb', lambda: optimizers.build('lamb', 0.01)),
      ('lars', lambda: optimizers.build('lars', 0.01)),
      ('scheduled', lambda: tff.learning.optimizers.schedule_learning_rate(
          optimizers.build('sgdm', 0.5), lambda round_num: 0.5 / (1.0 + tf.cast(round_num,
                                                                                 tf.float32)))),
      # Built as TFF builds it: tracing its `next` without AutoGraph raises.
      ('needs_autograph', _BranchingSgd),
  )
  def test_same_state_weights_and_measurements_as_tff(self, optimizer_fn):
    weights_type = tff.learning.models.weights_type_from_model(_model_fn)
    ours = algorithms.fed_avg.build_finalizer(optimizer_fn(), weights_type)
    theirs = tff.learning.templates.build_apply_optimizer_finalizer(optimizer_fn(), weights_type)
    self.assertEqual(ours.next.type_signature, theirs.next.type_signature)
    rng = np.random.default_rng(0)
    weights = tff.learning.models.ModelWeights.from_model(_model_fn())
    weights = tff.learning.models.ModelWeights(
        trainable=[v.numpy() for v in weights.trainable], non_trainable=[])
    ours_state, theirs_state = ours.initialize(), theirs.initialize()
    ours_weights = theirs_weights = weights
    for step in range(4):
      update = [rng.normal(size=w.shape).astype(np.float32) for w in weights.trainable]
      if step == 2:
        update[0][0, 0] = np.nan  # rejected: state and weights stay
      if step == 3:
        update = [np.zeros_like(u) for u in update]
      ours_out = ours.next(ours_state, ours_weights, update)
      theirs_out = theirs.next(theirs_state, theirs_weights, update)
      tf.nest.map_structure(np.testing.assert_array_equal, ours_out.result, theirs_out.result)
      tf.nest.map_structure(np.testing.assert_array_equal, ours_out.state, theirs_out.state)
      self.assertEqual(ours_out.measurements, theirs_out.measurements)
      ours_state, ours_weights = ours_out.state, ours_out.result
      theirs_state, theirs_weights = theirs_out.state, theirs_out.result
    self.assertEqual(ours_out.measurements['update_non_finite'], 0)
    # The weights moved, so the comparison compared something.
    self.assertGreater(np.abs(ours_weights.trainable[0] - weights.trainable[0]).max(), 0.0)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
