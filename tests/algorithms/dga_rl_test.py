"""DGA-RL: the reward table, the replay buffer, the network and one orchestrated round."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.algorithms import dga
from fedasr_tff.algorithms import dga_rl

_FEATURES = 3
_INPUT_SPEC = (tf.TensorSpec([None, _FEATURES], tf.float32), tf.TensorSpec([None, 1],
                                                                           tf.float32))


class RewardTest(parameterized.TestCase):

  # Property 12, R = 1 and θ = 0.25 (exactly representable), the prose's sign.
  @parameterized.parameters(
      ((5.0, 5.5), (True, 1.0)),
      ((5.0, 5.125), (True, 0.1)),
      ((5.5, 5.0), (False, -1.0)),
      ((5.0, 5.25), (True, 0.1)),
  )
  def test_reward_table(self, errors, expected):
    self.assertEqual(dga_rl.reward(*errors, theta=0.25, reward_scale=1.0), expected)

  def test_reward_scale(self):
    self.assertEqual(dga_rl.reward(1.0, 2.0, 0.1, reward_scale=3.0), (True, 3.0))


class ReplayBufferTest(absltest.TestCase):

  def test_fifo_with_capacity(self):
    buffer = dga_rl.ReplayBuffer()
    self.assertEqual(buffer.capacity, 1000)
    for i in range(1005):
      buffer.push(i)
    self.assertLen(buffer, 1000)
    self.assertEqual(buffer.entries[0], 5)
    self.assertEqual(buffer.entries[-1], 1004)

  def test_sample_is_without_replacement_and_at_most_the_contents(self):
    rng = np.random.default_rng(0)
    buffer = dga_rl.ReplayBuffer(capacity=100)
    for i in range(10):
      buffer.push(i)
    small = buffer.sample(rng)
    self.assertCountEqual(small, range(10))
    for i in range(10, 100):
      buffer.push(i)
    for _ in range(20):
      batch = buffer.sample(rng)
      self.assertLen(batch, 32)
      self.assertLen(set(batch), 32)


class NetworkTest(absltest.TestCase):

  def test_shapes_and_bottleneck(self):
    # Property 13.
    n = 7
    network = dga_rl.build_weight_network(n)
    dense = [layer for layer in network.layers if isinstance(layer, tf.keras.layers.Dense)]
    self.assertLen(dense, 5)
    self.assertEqual(network.input_shape, (None, 3 * n))
    self.assertEqual(network.output_shape, (None, n))
    hidden = [layer.units for layer in dense[:-1]]
    self.assertEqual(int(np.argmin(hidden)), 3)
    # By name: a process that built a Hugging Face TF model (tests/text_models, under one pytest)
    # resolves 'relu' to tf_keras's function object, the same ReLU.
    self.assertEqual([layer.get_config()['activation'] for layer in dense[:-1]], ['relu'] * 4)
    policy = dga_rl.WeightPolicy(n)
    weights = policy.weights(np.random.default_rng(0).normal(size=3 * n))
    self.assertTrue(np.all(weights >= 0))
    self.assertAlmostEqual(float(weights.sum()), 1.0, places=5)

  def test_standardized_features(self):
    features = np.array([[1.0, 2.0, 5.0], [3.0, 2.0, 7.0]])
    x = dga_rl.standardized_features(features)
    np.testing.assert_allclose(x, [-1.0, 0.0, -1.0, 1.0, 0.0, 1.0])
    with self.assertRaisesRegex(ValueError, 'features'):
      dga_rl.standardized_features(np.zeros([3, 2]))

  def test_positive_rewards_pull_the_policy_towards_the_action(self):
    n = 4
    policy = dga_rl.WeightPolicy(n, exploration=0.5, exploration_decay=1.0, learning_rate=1e-3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=3 * n).astype(np.float32)
    target = np.array([3.0, -3.0, 0.0, 0.0], np.float32)
    before = np.linalg.norm(policy.logits(x)[0].numpy() - target)
    for _ in range(100):
      policy.update([(x, target, 1.0)])
    after = np.linalg.norm(policy.logits(x)[0].numpy() - target)
    self.assertLess(after, 0.2 * before)

  def test_exploration_anneals_to_its_floor(self):
    policy = dga_rl.WeightPolicy(2, exploration=0.1, exploration_decay=0.5,
                                 min_exploration=0.02)
    x = np.zeros(6, np.float32)
    for _ in range(5):
      policy.update([(x, np.zeros(2, np.float32), 0.1)])
    self.assertAlmostEqual(policy.exploration, 0.02)


def _model_fn():
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(_FEATURES,)),
                               tf.keras.layers.Dense(1)])
  return tff.learning.models.from_keras_model(model, loss=tf.keras.losses.MeanSquaredError(),
                                              input_spec=_INPUT_SPEC)


def _dataset(rng, noise):
  x = rng.normal(size=(8, _FEATURES)).astype(np.float32)
  y = (x @ np.array([[1.0], [-2.0], [0.5]]) + noise * rng.normal(size=(8, 1))).astype(
      np.float32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


class RoundTest(absltest.TestCase):

  def test_candidates_share_the_pre_step_state_and_the_kept_one_is_committed(self):
    # Property 11 under DGA-RL, with server Adam and rehearsal.
    process = dga.build_dga_process(
        _model_fn, weighting=dga.SoftmaxWeighting(0.3, loss_clip=40.0),
        client_learning_rate=0.05, local_steps=2,
        server_optimizer=optimizers.build('adam', 0.01), rehearsal_steps=1,
        rehearsal_learning_rate=0.01, with_client_round=True)
    rng = np.random.default_rng(0)
    data = [_dataset(rng, n) for n in (0.1, 1.0, 3.0)]
    held_out = _dataset(rng, 0.0)
    x_val = rng.normal(size=(32, _FEATURES))
    y_val = x_val @ np.array([[1.0], [-2.0], [0.5]])

    def validation_error(weights):
      kernel, bias = [np.asarray(w, np.float64) for w in weights.trainable]
      return float(np.mean(np.square(x_val @ kernel + bias - y_val)))

    runner = dga_rl.DGARL(process, 3, validation_error, theta=1e-4, seed=0)
    state = process.initialize()
    result = runner.round(state, data, held_out)
    self.assertLen(runner.buffer, 1)
    self.assertAlmostEqual(result.rl_weights.sum(), 1.0, places=5)
    np.testing.assert_allclose(result.softmax_weights.sum(), 1.0, rtol=1e-6)
    # Recompute the kept candidate from the same state and the weights the round used.
    updates, _, weights, _, _ = process.client_round(state, data)
    kept_weights = (list(result.rl_weights / result.rl_weights.max()) if result.kept_rl
                    else weights)
    kept = process.server_step(state, updates, kept_weights).state
    rehearsed = process.rehearse(kept, held_out).state
    for a, b in zip(tf.nest.flatten(rehearsed), tf.nest.flatten(result.state), strict=True):
      np.testing.assert_array_equal(a, b)
    expected_error = validation_error(process.get_model_weights(kept))
    self.assertEqual(result.errors[0 if result.kept_rl else 1], expected_error)
    self.assertEqual(result.reward, dga_rl.reward(*result.errors, theta=1e-4)[1])
    self.assertIn('rehearsal', result.measurements)
    self.assertIn('client_work', result.measurements)

  def test_restored_state_continues_exactly(self):
    process = dga.build_dga_process(
        _model_fn, weighting=dga.SoftmaxWeighting(0.3, loss_clip=40.0),
        client_learning_rate=0.05, local_steps=1, server_optimizer=optimizers.build('sgd', 1.0),
        with_client_round=True)
    rng = np.random.default_rng(1)
    data = [_dataset(rng, n) for n in (0.1, 2.0)]

    def error(weights):
      return float(np.sum(np.square(np.asarray(weights.trainable[0]))))

    original = dga_rl.DGARL(process, 2, error, seed=4, hidden_units=(8, 8, 8, 4))
    state = process.initialize()
    state = original.round(state, data, round_num=1).state
    saved = original.state()
    restored = dga_rl.DGARL(process, 2, error, seed=4, hidden_units=(8, 8, 8, 4))
    restored.set_state(saved)
    a = original.round(state, data, round_num=2)
    b = restored.round(state, data, round_num=2)
    np.testing.assert_array_equal(a.rl_weights, b.rl_weights)
    for x, y in zip(original.state(), restored.state(), strict=True):
      np.testing.assert_array_equal(x, y)
    self.assertLen(restored.buffer, 2)

  def test_cohort_size_must_match_the_network(self):
    process = dga.build_dga_process(_model_fn, weighting=None, client_learning_rate=0.05,
                                    local_steps=1, server_optimizer=optimizers.build('sgd', 1.0),
                                    with_client_round=True)
    runner = dga_rl.DGARL(process, 3, lambda weights: 0.0)
    rng = np.random.default_rng(0)
    with self.assertRaisesRegex(ValueError, 'exactly 3 clients'):
      runner.round(process.initialize(), [_dataset(rng, 0.1)] * 2)

  def test_a_process_without_its_client_round_stage_is_refused(self):
    process = dga.build_dga_process(_model_fn, weighting=None, client_learning_rate=0.05,
                                    local_steps=1, server_optimizer=optimizers.build('sgd', 1.0))
    self.assertIsNone(process.client_round)
    with self.assertRaisesRegex(ValueError, 'with_client_round=True'):
      dga_rl.DGARL(process, 3, lambda weights: 0.0)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
