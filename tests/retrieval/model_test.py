"""AdapterClassifier on tiny random BERT and Llama backbones: identity adapter, trainable
variables, cached features, padding invariance, batches trimmed to their longest sequence,
frozen backbone under Keras training."""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from fedasr_tff import retrieval
from fedasr_tff.retrieval import model as model_lib
from fedasr_tff.text_models import backbone as backbone_lib
from tests.retrieval import backbones

_KINDS = (('bert',), ('llama',))


def _size(variables):
  return sum(int(np.prod(v.shape)) for v in variables)


class AdapterClassifierTest(parameterized.TestCase):

  @parameterized.parameters(*_KINDS)
  def test_identity_adapter_leaves_pooled_states_unchanged(self, kind):
    backbone = backbones.tiny_backbone(kind)
    inputs = backbones.inputs()
    for pooling in ('mean', 'last'):
      model = retrieval.AdapterClassifier(backbone, 3, pooling=pooling)
      with_adapter = model._pooled(inputs, with_adapter=True).numpy()
      # Bit-exact: W_a = I multiplies by ones and adds exact zeros.
      np.testing.assert_array_equal(with_adapter, backbone.pooled(inputs, pooling).numpy(),
                                    err_msg=pooling)
      np.testing.assert_array_equal(with_adapter, model.features(inputs).numpy(),
                                    err_msg=pooling)

  @parameterized.parameters(('linear', 16 * 5 + 5), ('pre_classifier', 16 * 16 + 16 + 16 * 5 + 5))
  def test_trainable_variables_are_adapter_and_head(self, head, head_size):
    backbone = backbones.tiny_backbone('bert')
    model = retrieval.AdapterClassifier(backbone, 5, head=head)
    self.assertFalse(backbone.trainable)
    expected = [model.adapter.kernel] + list(model.head.trainable_variables)
    self.assertEqual([v.name for v in model.trainable_variables], [v.name for v in expected])
    self.assertEqual(_size(model.trainable_variables), 16**2 + head_size)
    classifier_only = retrieval.AdapterClassifier(backbone, 5, head=head, adapter=False)
    self.assertIsNone(classifier_only.adapter)
    self.assertEqual(_size(classifier_only.trainable_variables), head_size)
    self.assertEqual(len(classifier_only.trainable_variables),
                     len(classifier_only.head.trainable_variables))
    # Unique names, the same head names in every mode and class (Keras names W_a and the linear
    # head's kernel alike).
    names = model_lib.trainable_weight_names(model)
    self.assertLen(set(names), len(names))
    self.assertEqual(names[0], 'adapter/kernel')
    features_only = retrieval.FeatureClassifier(16, 5, head=head)
    features_only(tf.zeros([1, 16]))
    self.assertEqual(model_lib.trainable_weight_names(classifier_only), names[1:])
    self.assertEqual(model_lib.trainable_weight_names(features_only), names[1:])

  @parameterized.parameters(*_KINDS)
  def test_cached_features_give_the_end_to_end_logits(self, kind):
    backbone = backbones.tiny_backbone(kind)
    inputs = backbones.inputs()
    for adapter in (True, False):
      model = retrieval.AdapterClassifier(backbone, 4, head='pre_classifier', adapter=adapter)
      cached = model.features(inputs)
      np.testing.assert_allclose(model.head_logits(cached, training=False).numpy(),
                                 model(inputs, training=False).numpy(), rtol=0, atol=1e-5)

  @parameterized.parameters(*_KINDS)
  def test_mean_pooling_is_invariant_to_extra_padding(self, kind):
    model = retrieval.AdapterClassifier(backbones.tiny_backbone(kind), 3)
    ids, mask = backbones.IDS, backbones.MASK
    padded_ids = np.pad(ids, [[0, 0], [0, 3]])
    padded_mask = np.pad(mask, [[0, 0], [0, 3]])
    np.testing.assert_allclose(model(backbones.inputs(padded_ids, padded_mask)).numpy(),
                               model(backbones.inputs(ids, mask)).numpy(), rtol=0, atol=1e-5)

  @parameterized.parameters(*_KINDS)
  def test_trimmed_batches_give_the_untrimmed_logits_and_gradients(self, kind):
    backbone = backbones.tiny_backbone(kind)
    # Right padding to 11 columns; the longest sequence has 6 tokens.
    inputs = backbones.inputs(np.pad(backbones.IDS, [[0, 0], [0, 5]]),
                              np.pad(backbones.MASK, [[0, 0], [0, 5]]))
    labels = np.array([2, 0])
    for pooling in ('mean', 'last'):
      model = retrieval.AdapterClassifier(backbone, 3, pooling=pooling)
      model.adapter.kernel.assign(model.adapter.kernel + 0.1)  # Not the identity.
      results = []
      for trim in (backbone_lib.trim_padding, lambda inputs: inputs):
        with mock.patch.object(backbone_lib, 'trim_padding', trim), tf.GradientTape() as tape:
          logits = model(inputs, training=False)
          loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        results.append([logits] + tape.gradient(loss, model.trainable_variables))
      for trimmed, full in zip(*results, strict=True):
        np.testing.assert_allclose(trimmed.numpy(), full.numpy(), rtol=0, atol=1e-5,
                                   err_msg=pooling)

  def test_keras_training_changes_adapter_and_head_only(self):
    backbone = backbones.tiny_backbone('bert', seed=3)
    model = retrieval.AdapterClassifier(backbone, 3, head='pre_classifier')
    frozen = [v.numpy().copy() for v in backbone.weights]
    trainable = [v.numpy().copy() for v in model.trainable_variables]
    model.compile(optimizer=tf.keras.optimizers.SGD(0.5),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(backbones.inputs(), np.array([2, 0]), epochs=3, batch_size=2, verbose=0)
    for before, variable in zip(frozen, backbone.weights, strict=True):
      np.testing.assert_array_equal(variable.numpy(), before, err_msg=variable.name)
    for before, variable in zip(trainable, model.trainable_variables, strict=True):
      self.assertGreater(np.abs(variable.numpy() - before).max(), 0, msg=variable.name)

  def test_argument_errors_name_the_argument(self):
    backbone = backbones.tiny_backbone('bert')
    for kwargs, name in ((dict(num_classes=0), '`num_classes`'),
                         (dict(head='mlp'), '`head`'),
                         (dict(pooling='max'), '`pooling`'),
                         (dict(adapter=1), '`adapter`'),
                         (dict(dropout_rate=-0.1), '`dropout_rate`')):
      kwargs = dict(dict(num_classes=3), **kwargs)
      with self.assertRaisesRegex(ValueError, name):
        retrieval.AdapterClassifier(backbone, kwargs.pop('num_classes'), **kwargs)


if __name__ == '__main__':
  absltest.main()
