"""Client work's randomness contract and its measurements (`algorithms.local_training`)."""

import collections

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.algorithms import local_training

_LEARNING_RATE = 0.5
_INITIAL_WEIGHT = 2.0


class _SeededModel(tff.learning.models.VariableModel):
  """loss = w * u with u ~ U[0, 1) drawn from the batch's seed, so ∂loss/∂w = u shows the seed."""

  def __init__(self):
    self._weight = tf.Variable(_INITIAL_WEIGHT, name='w')

  @property
  def trainable_variables(self):
    return [self._weight]

  @property
  def non_trainable_variables(self):
    return []

  @property
  def local_variables(self):
    return []

  @property
  def input_spec(self):
    return collections.OrderedDict(x=tf.TensorSpec([None], tf.float32),
                                   seed=tf.TensorSpec([2], tf.int64))

  @tf.function
  def predict_on_batch(self, batch_input, training=True):
    return tf.random.stateless_uniform([], batch_input['seed'])

  @tf.function
  def forward_pass(self, batch_input, training=True):
    draw = tf.random.stateless_uniform([], batch_input['seed'])
    return tff.learning.models.BatchOutput(
        loss=self._weight * draw, predictions=draw,
        num_examples=tf.size(batch_input['x']))

  @tf.function
  def report_local_unfinalized_metrics(self):
    return collections.OrderedDict()

  def metric_finalizers(self):
    return collections.OrderedDict()

  @tf.function
  def reset_metrics(self):
    pass


def _dataset(seeds):
  """One batch of 2 examples per seed ([2] int64 seeds)."""
  batches = [collections.OrderedDict(x=tf.zeros([2]), seed=tf.constant(s, tf.int64))
             for s in seeds]
  dataset = tf.data.Dataset.from_tensors(batches[0])
  for batch in batches[1:]:
    dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
  return dataset


def _process(**local_work):
  # These tests read the clients' statistics: the opt-in.
  return algorithms.build_fed_avg_process(
      _SeededModel, client_learning_rate=_LEARNING_RATE, local_clip_norm=None,
      server_optimizer=optimizers.build('sgd', 1.0), diagnostics=True, **local_work)


def _expected_client(batch_seeds):
  """(delta, mean loss) of local SGD on w * u_k, u_k drawn from each step's seed, in float32."""
  weight, losses = np.float32(_INITIAL_WEIGHT), []
  for step, seed in enumerate(batch_seeds):
    draw = np.float32(tf.random.stateless_uniform(
        [], local_training.local_step_seed(tf.constant(seed, tf.int64), step)).numpy())
    losses.append(weight * draw)
    weight = np.float32(weight - np.float32(_LEARNING_RATE) * draw)
  return np.float32(_INITIAL_WEIGHT) - weight, np.mean(losses, dtype=np.float32)


class LocalTrainingRandomnessTest(absltest.TestCase):

  def test_each_local_step_folds_its_number_into_the_batch_seed(self):
    # One batch seen 3 times (local_steps cycles it) draws 3 different numbers, and two batches
    # over 2 local epochs are seen at steps 0, 2 and 1, 3.
    for local_work, seeds, steps in ((dict(local_steps=3), [[7, 0]], [[7, 0]] * 3),
                                     (dict(local_epochs=2), [[7, 0], [7, 1]],
                                      [[7, 0], [7, 1]] * 2)):
      process = _process(**local_work)
      state = process.initialize()
      output = process.next(state, [_dataset(seeds)])
      delta = float(state.global_model_weights.trainable[0] -
                    output.state.global_model_weights.trainable[0])
      want_delta, want_loss = _expected_client(steps)
      self.assertAlmostEqual(delta, want_delta, places=5, msg=local_work)
      self.assertAlmostEqual(output.metrics['client_work']['train']['loss'], want_loss, places=5)
    draws = [float(tf.random.stateless_uniform(
        [], local_training.local_step_seed(tf.constant([7, 0], tf.int64), step)))
             for step in range(3)]
    self.assertLen(set(draws), 3)

  def test_client_update_is_a_function_of_the_dataset_seeds(self):
    process = _process(local_steps=3)
    state = process.initialize()

    def new_weight(*client_seeds):
      output = process.next(state, [_dataset(seeds) for seeds in client_seeds])
      return output.state.global_model_weights.trainable[0]

    first = new_weight([[1, 0], [1, 1]], [[2, 0]])
    self.assertEqual(first, new_weight([[1, 0], [1, 1]], [[2, 0]]))
    self.assertNotEqual(first, new_weight([[1, 0], [1, 1]], [[3, 0]]))

  def test_a_model_that_needs_autograph_trains_as_the_others(self):
    # Client work is traced without AutoGraph unless the model needs it, as this one does.
    process = algorithms.build_fed_avg_process(
        _BranchingModel, client_learning_rate=_LEARNING_RATE, local_clip_norm=None,
        server_optimizer=optimizers.build('sgd', 1.0), local_steps=3)
    state = process.initialize()
    output = process.next(state, [_dataset([[7, 0]])])
    delta = float(state.global_model_weights.trainable[0] -
                  output.state.global_model_weights.trainable[0])
    self.assertAlmostEqual(delta, _expected_client([[7, 0]] * 3)[0], places=5)

  def test_means_are_over_clients_and_zero_without_clients(self):
    process = _process(local_steps=2)
    state = process.initialize()
    train = process.next(state, [_dataset([[1, 0]]), _dataset([[2, 0]])]).metrics[
        'client_work']['train']
    (delta_1, loss_1), (delta_2, loss_2) = (_expected_client([[s, 0]] * 2) for s in (1, 2))
    self.assertEqual(train['clients'], 2)
    self.assertAlmostEqual(train['loss'], (loss_1 + loss_2) / 2, places=5)
    self.assertAlmostEqual(train['delta_norm'], (abs(delta_1) + abs(delta_2)) / 2, places=5)

    # Poisson sampling may draw no client at all.
    empty = process.next(state, []).metrics['client_work']['train']
    self.assertEqual(set(empty), {'loss', 'examples', 'steps', 'clients', 'delta_norm',
                                  'max_grad_norm', 'max_clipped_grad_norm'})
    for name, value in empty.items():
      self.assertTrue(np.isfinite(value), msg=name)
      self.assertEqual(value, 0, msg=name)

  def test_update_weight_fn_maps_each_clients_mean_loss_and_measures_the_weights(self):
    client_work = local_training.build_local_training_client_work(
        _SeededModel, client_learning_rate=_LEARNING_RATE, local_steps=2,
        local_clip_norm=None, update_weight_fn=lambda loss: tf.exp(-loss),
        start_gradient=True, diagnostics=True)
    weights = tff.learning.models.ModelWeights(
        trainable=[np.float32(_INITIAL_WEIGHT)], non_trainable=[])
    output = client_work.next(client_work.initialize(), [weights, weights],
                              [_dataset([[1, 0]]), _dataset([[2, 0]])])
    want = np.exp(-np.array([_expected_client([[s, 0]] * 2)[1] for s in (1, 2)], np.float32))
    np.testing.assert_allclose([r.update_weight for r in output.result], want, rtol=1e-6)
    measured = output.measurements['weights']
    self.assertAlmostEqual(measured['weight_sum'], want.sum(), places=5)
    self.assertAlmostEqual(measured['effective_clients'],
                           want.sum() ** 2 / np.sum(want ** 2), places=4)
    self.assertIn('start_gradient', output.measurements)   # Both extras are kept.
    plain = local_training.build_local_training_client_work(
        _SeededModel, client_learning_rate=_LEARNING_RATE, local_steps=2, local_clip_norm=None,
        diagnostics=True)
    output = plain.next(plain.initialize(), [weights], [_dataset([[1, 0]])])
    self.assertEqual(output.result[0].update_weight, 1.0)
    self.assertNotIn('weights', output.measurements)


class _BranchingModel(_SeededModel):
  """`_SeededModel` whose forward pass branches in Python on a tensor: it needs AutoGraph."""

  @tf.function
  def forward_pass(self, batch_input, training=True):
    draw = tf.random.stateless_uniform([], batch_input['seed'])
    if draw >= 0.0:  # always: the loss is `_SeededModel`'s
      loss = self._weight * draw
    else:
      loss = -self._weight * draw
    return tff.learning.models.BatchOutput(loss=loss, predictions=draw,
                                           num_examples=tf.size(batch_input['x']))

class _UnlistedVariableModel(_SeededModel):
  """A model that makes a trainable variable it does not list."""

  def __init__(self):
    super().__init__()
    self._hidden = tf.Variable(tf.ones([2]), shape=[2], dtype=tf.float32, trainable=True)


class ClientModelTest(absltest.TestCase):

  def test_trainable_variables_start_at_zero_and_the_others_as_the_model_makes_them(self):
    def model_fn():
      keras_model = tf.keras.Sequential([
          tf.keras.layers.InputLayer(input_shape=(3,)),
          tf.keras.layers.Dense(4, kernel_initializer='glorot_uniform',
                                bias_initializer='ones'),
          tf.keras.layers.BatchNormalization(),
      ])
      return tff.learning.models.from_keras_model(
          keras_model, loss=tf.keras.losses.MeanSquaredError(),
          input_spec=(tf.TensorSpec([None, 3]), tf.TensorSpec([None, 4])))

    model = local_training.client_model(model_fn)
    self.assertLen(model.trainable_variables, 4)  # kernel, bias, gamma, beta
    for variable in model.trainable_variables:
      np.testing.assert_array_equal(variable.numpy(), 0.0, err_msg=variable.name)
    by_name = {v.name.split('/')[-1]: v.numpy() for v in model.non_trainable_variables}
    np.testing.assert_array_equal(by_name['moving_variance:0'], 1.0)

  def test_a_trainable_variable_the_model_does_not_list_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'does not list in `trainable_variables`'):
      local_training.client_model(_UnlistedVariableModel)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
