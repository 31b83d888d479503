from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import optimizers


class RegistryTest(parameterized.TestCase):

  @parameterized.parameters('sgd', 'sgdm', 'adam', 'adagrad', 'yogi', 'lamb', 'lars')
  def test_builds_every_name(self, name):
    optimizer = optimizers.build(name, 0.1)
    self.assertIsInstance(optimizer, tff.learning.optimizers.Optimizer)
    state = optimizer.initialize([tf.TensorSpec([3], tf.float32)])
    state, weights = optimizer.next(state, [tf.ones([3])], [tf.ones([3])])
    self.assertLess(float(weights[0][0]), 1.0)

  def test_sgd_is_plain(self):
    optimizer = optimizers.build('sgd', 0.5)
    state = optimizer.initialize([tf.TensorSpec([2], tf.float32)])
    _, weights = optimizer.next(state, [tf.constant([1.0, 2.0])], [tf.constant([1.0, 1.0])])
    self.assertEqual(weights[0].numpy().tolist(), [0.5, 1.5])

  def test_kwargs_reach_the_builder(self):
    optimizer = optimizers.build('lamb', 0.01, weight_decay=0.1)
    state = optimizer.initialize([tf.TensorSpec([2], tf.float32)])
    self.assertAlmostEqual(float(optimizer.get_hparams(state)['weight_decay']), 0.1)

  def test_unknown_name_lists_known_ones(self):
    with self.assertRaisesRegex(ValueError, 'adamw.*known: adagrad, adam, lamb, lars, sgd'):
      optimizers.build('adamw', 0.1)

  def test_bad_learning_rate_and_kwargs(self):
    with self.assertRaisesRegex(ValueError, 'learning_rate'):
      optimizers.build('adam', 0.0)
    with self.assertRaisesRegex(ValueError, 'lars.*nesterof'):
      optimizers.build('lars', 0.1, nesterof=True)


if __name__ == '__main__':
  absltest.main()
