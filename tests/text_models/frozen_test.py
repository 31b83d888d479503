"""FrozenBackbone: the rebuilt backbone equals its source eagerly and inside a graph (as TFF
traces it) over weights given as tensors, holds no variables, is frozen, and the 2 GiB check
refuses what cannot travel as one TFF value."""

import collections
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from fedasr_tff import text_models
from fedasr_tff.text_models import frozen
from tests.retrieval import backbones

_KINDS = (('bert',), ('llama',))
_MINILM_BYTES = 90_261_504   # all-MiniLM-L6-v2's float32 weights
_LIMIT = int(0.9 * text_models.MAX_MESSAGE_BYTES)


class FrozenBackboneTest(parameterized.TestCase):

  @parameterized.parameters(*_KINDS)
  def test_eager_build_is_bit_identical_and_frozen(self, kind):
    source = backbones.tiny_backbone(kind, seed=4)
    recipe = text_models.FrozenBackbone(source)
    self.assertEqual(recipe.parameter_bytes, source.parameter_bytes)
    inputs = backbones.inputs()
    expected = source(inputs).numpy()
    # Twice: the second copy has a uniquified model name, which the weights' keys leave out.
    for _ in range(2):
      rebuilt = recipe.build()
      self.assertIsInstance(rebuilt, type(source))
      self.assertFalse(rebuilt.trainable)
      self.assertEmpty(rebuilt.trainable_variables)
      self.assertLen(rebuilt.weights, len(source.weights))
      for a, b in zip(rebuilt.weights, source.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=b.name)
      np.testing.assert_array_equal(rebuilt(inputs).numpy(), expected)

  @parameterized.parameters(*_KINDS)
  def test_graph_build_over_given_tensors_has_no_variables(self, kind):
    source = backbones.tiny_backbone(kind, seed=5)
    recipe = text_models.FrozenBackbone(source)
    inputs = backbones.inputs()
    expected = source(inputs).numpy()
    graph = tf.Graph()
    with graph.as_default():
      placeholders = collections.OrderedDict(
          (key, tf.compat.v1.placeholder(spec.dtype, spec.shape))
          for key, spec in recipe.weights_spec.items())
      rebuilt = recipe.build(placeholders)
      states = rebuilt(inputs)
    self.assertEmpty(graph.get_collection('variables'))
    self.assertTrue(all(isinstance(w, text_models.FrozenWeight) for w in rebuilt.weights))
    constants = [tf.make_ndarray(node.attr['value'].tensor) for node in graph.as_graph_def().node
                 if node.op == 'Const']
    for key, value in recipe.weights.items():
      self.assertFalse(any(c.shape == value.shape and np.array_equal(c, value)
                           for c in constants), msg=key)
    feed = {placeholders[key]: value for key, value in recipe.weights.items()}
    with tf.compat.v1.Session(graph=graph) as session:
      actual = session.run(states, feed)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5)
    # Other weights, other states: the backbone reads what it is given.
    feed = {placeholders[key]: 0.5 * value for key, value in recipe.weights.items()}
    with tf.compat.v1.Session(graph=graph) as session:
      self.assertGreater(np.abs(session.run(states, feed) - expected).max(), 1e-3)

  def test_default_graph_build_holds_the_weights_as_constants(self):
    source = backbones.tiny_backbone('bert', seed=5)
    recipe = text_models.FrozenBackbone(source)
    graph = tf.Graph()
    with graph.as_default():
      recipe.build()
    constants = [tf.make_ndarray(node.attr['value'].tensor) for node in graph.as_graph_def().node
                 if node.op == 'Const']
    for weight in source.weights:
      value = weight.numpy()
      self.assertTrue(any(c.shape == value.shape and np.array_equal(c, value)
                          for c in constants), msg=weight.name)

  def test_weights_are_read_only_and_the_recipe_keeps_its_values(self):
    source = backbones.tiny_backbone('bert', seed=6)
    recipe = text_models.FrozenBackbone(source)
    rebuilt = recipe.build()
    with self.assertRaises(AttributeError):
      rebuilt.weights[0].assign(tf.zeros_like(rebuilt.weights[0]))
    given = recipe.weights
    for value in given.values():
      value[...] = 0.0
    for value, weight in zip(recipe.weights.values(), source.weights, strict=True):
      np.testing.assert_array_equal(value, weight.numpy(), err_msg=weight.name)

  def test_wrong_weights_are_refused_by_name(self):
    recipe = text_models.FrozenBackbone(backbones.tiny_backbone('bert', seed=7))
    weights = recipe.weights
    key, value = next(iter(weights.items()))
    with self.assertRaisesRegex(ValueError, 'lacks the backbone weight'):
      recipe.build(collections.OrderedDict(list(weights.items())[1:]))
    with self.assertRaisesRegex(ValueError, "holds \\['extra'\\]"):
      recipe.build(collections.OrderedDict(weights, extra=value))
    with self.assertRaisesRegex(ValueError, 'has shape'):
      recipe.build(collections.OrderedDict(weights, **{key: value[:1]}))

  def test_too_large_backbone_is_refused(self):
    source = backbones.tiny_backbone('bert')
    with mock.patch.object(type(source), 'parameter_bytes', new_callable=mock.PropertyMock,
                           return_value=4_400_000_000):
      with self.assertRaisesRegex(ValueError, '4,400,000,000'):
        text_models.FrozenBackbone(source)


class CheckFitsTest(parameterized.TestCase):

  @parameterized.parameters(_LIMIT + 1, 2**31, 4_400_000_000)
  def test_refuses_above_the_limit(self, parameter_bytes):
    with self.assertRaises(ValueError) as raised:
      frozen.check_fits(parameter_bytes)
    message = str(raised.exception)
    self.assertIn(f'{parameter_bytes:,} bytes', message)
    self.assertIn('2 GiB', message)
    self.assertIn('--mode=classifier_only', message)

  @parameterized.parameters(_MINILM_BYTES, _LIMIT, 0)
  def test_accepts_up_to_the_limit(self, parameter_bytes):
    frozen.check_fits(parameter_bytes)

  def test_names_what_is_checked(self):
    with self.assertRaisesRegex(ValueError, '^TinyLlama holds 4,400,000,000 bytes'):
      frozen.check_fits(4_400_000_000, what='TinyLlama')


if __name__ == '__main__':
  absltest.main()
