"""Classifier heads: shapes, parameter counts, dropout only in training, argument errors."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from fedasr_tff import retrieval


def _size(model):
  return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


class HeadsTest(parameterized.TestCase):

  def test_linear_is_one_dense_layer(self):
    head = retrieval.build_head('linear', 5, 8)
    self.assertEqual(_size(head), 8 * 5 + 5)
    features = np.random.default_rng(0).normal(size=[3, 8]).astype(np.float32)
    kernel, bias = head.trainable_variables
    np.testing.assert_allclose(head(features).numpy(), features @ kernel.numpy() + bias.numpy(),
                               rtol=1e-5, atol=1e-6)

  def test_pre_classifier_defaults_to_hidden_size_d(self):
    head = retrieval.build_head('pre_classifier', 5, 8)
    self.assertEqual(_size(head), 8 * 8 + 8 + 8 * 5 + 5)
    self.assertEqual(_size(retrieval.build_head('pre_classifier', 5, 8, hidden_size=3)),
                     8 * 3 + 3 + 3 * 5 + 5)

  def test_pre_classifier_is_linear_and_drops_out_only_in_training(self):
    head = retrieval.build_head('pre_classifier', 4, 6, dropout_rate=0.5)
    features = np.random.default_rng(1).normal(size=[64, 6]).astype(np.float32)
    w1, b1, w2, b2 = (v.numpy() for v in head.trainable_variables)
    expected = (features @ w1 + b1) @ w2 + b2  # no activation
    np.testing.assert_allclose(head(features, training=False).numpy(), expected, rtol=1e-4,
                               atol=1e-5)
    self.assertGreater(np.abs(head(features, training=True).numpy() - expected).max(), 1e-3)

  @parameterized.parameters(
      (dict(head='mlp'), '`head`'),
      (dict(num_classes=0), '`num_classes`'),
      (dict(input_dim=2.0), '`input_dim`'),
      (dict(dropout_rate=1.0), '`dropout_rate`'),
      (dict(head='pre_classifier', hidden_size=0), '`hidden_size`'),
      (dict(hidden_size=4), '`hidden_size`'),
  )
  def test_argument_errors_name_the_argument(self, overrides, name):
    kwargs = dict(dict(head='linear', num_classes=3, input_dim=4), **overrides)
    with self.assertRaisesRegex(ValueError, name):
      retrieval.build_head(kwargs.pop('head'), kwargs.pop('num_classes'),
                           kwargs.pop('input_dim'), **kwargs)


if __name__ == '__main__':
  absltest.main()
