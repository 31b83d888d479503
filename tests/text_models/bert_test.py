"""The Keras BERT encoder against a NumPy transcription of BERT's equations (float64) and Hugging
Face's TFBertModel (a test-only dependency), on tiny random checkpoints in Hugging Face's format."""

import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import special
import tensorflow as tf
import transformers

from fedasr_tff import text_models
from fedasr_tff.text_models import bert
from tests.text_models import tiny_bert

# Two sequences, the second right-padded; token types on the first.
_IDS = np.array([[2, 17, 5, 39, 8, 3], [2, 11, 3, 0, 0, 0]], np.int32)
_MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], np.int32)
_TYPES = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]], np.int32)


def _layer_norm(x, gamma, beta, eps):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + eps) * gamma + beta


_NUMPY_ACTIVATIONS = {
    'gelu': lambda x: 0.5 * x * (1 + special.erf(x / np.sqrt(2))),
    'gelu_new': lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    'relu': lambda x: np.maximum(x, 0),
}


def numpy_bert(tensors, config, ids, mask, types):
  """BERT's last hidden states in float64: Devlin et al. 2019 (arXiv:1810.04805) on Vaswani et al.
  2017 (arXiv:1706.03762), padding keys excluded from the softmax."""
  w = {name: np.asarray(value, np.float64) for name, value in tensors.items()}
  eps, heads = config['layer_norm_eps'], config['num_attention_heads']
  act = _NUMPY_ACTIVATIONS[config['hidden_act']]
  batch, length = ids.shape
  x = (w['embeddings.word_embeddings.weight'][ids]
       + w['embeddings.position_embeddings.weight'][np.arange(length)]
       + w['embeddings.token_type_embeddings.weight'][types])
  x = _layer_norm(x, w['embeddings.LayerNorm.weight'], w['embeddings.LayerNorm.bias'], eps)
  for i in range(config['num_hidden_layers']):

    def linear(name, h, i=i):
      return h @ w[f'encoder.layer.{i}.{name}.weight'].T + w[f'encoder.layer.{i}.{name}.bias']

    def heads_of(h):
      return h.reshape(batch, length, heads, -1)

    q, k, v = (heads_of(linear(f'attention.self.{n}', x)) for n in ('query', 'key', 'value'))
    scores = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
    scores = np.where(mask[:, None, None, :] > 0, scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum('bhqk,bkhd->bqhd', probs, v).reshape(batch, length, -1)
    ln = f'encoder.layer.{i}.attention.output.LayerNorm'
    x = _layer_norm(x + linear('attention.output.dense', context), w[f'{ln}.weight'],
                    w[f'{ln}.bias'], eps)
    ln = f'encoder.layer.{i}.output.LayerNorm'
    x = _layer_norm(x + linear('output.dense', act(linear('intermediate.dense', x))),
                    w[f'{ln}.weight'], w[f'{ln}.bias'], eps)
  return x


def _inputs(ids=_IDS, mask=_MASK, types=None):
  inputs = {'token_ids': tf.constant(ids), 'mask': tf.constant(mask)}
  if types is not None:
    inputs['token_type_ids'] = tf.constant(types)
  return inputs


class BertEncoderTest(parameterized.TestCase):

  def _checkpoint(self, **kwargs):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    config, tensors = tiny_bert.write_tiny_bert(directory, **kwargs)
    return directory, config, tensors

  @parameterized.parameters('gelu', 'gelu_new', 'relu')
  def test_matches_numpy_reference(self, hidden_act):
    directory, config, tensors = self._checkpoint(seed=1, hidden_act=hidden_act)
    encoder = text_models.build_bert_encoder(directory)
    actual = encoder(_inputs(types=_TYPES)).numpy()
    expected = numpy_bert(tensors, config, _IDS, _MASK, _TYPES)
    valid = _MASK.astype(bool)
    self.assertLess(np.abs(actual - expected)[valid].max(), 1e-5)
    # Padding positions are computed too (queries at padding attend to the real tokens).
    self.assertLess(np.abs(actual - expected).max(), 1e-5)

  def test_sharded_and_prefixed_checkpoints_load_the_same_weights(self):
    directory, _, _ = self._checkpoint(seed=2)
    expected = text_models.build_bert_encoder(directory)(_inputs()).numpy()
    for kwargs in ({'num_shards': 3}, {'prefix': 'bert.'}, {'num_shards': 2, 'prefix': 'bert.'}):
      other, _, _ = self._checkpoint(seed=2, **kwargs)
      np.testing.assert_array_equal(text_models.build_bert_encoder(other)(_inputs()).numpy(),
                                    expected, err_msg=str(kwargs))

  def test_missing_or_misshaped_tensor_is_named(self):
    _, config, tensors = self._checkpoint()
    name = 'encoder.layer.1.output.dense.weight'
    for prefix in ('', 'bert.'):
      directory = self.enterContext(tempfile.TemporaryDirectory())
      tiny_bert.write_checkpoint(
          directory, config, {prefix + k: v for k, v in tensors.items() if k != name})
      with self.assertRaisesRegex(KeyError, f"'{prefix}{name}' is missing"):
        text_models.build_bert_encoder(directory)
    directory = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_checkpoint(directory, config, dict(tensors, **{name: tensors[name].T}))
    with self.assertRaisesRegex(ValueError, rf"'{name}' has shape \(24, 16\), expected "
                                r'\(16, 24\)'):
      text_models.build_bert_encoder(directory)
    directory = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_checkpoint(directory, config, {
        k: v for k, v in tensors.items() if k != 'embeddings.word_embeddings.weight'})
    with self.assertRaisesRegex(KeyError, "'embeddings.word_embeddings.weight' is missing"):
      text_models.build_bert_encoder(directory)

  def test_sha256_pin_refuses_a_tampered_checkpoint(self):
    directory, _, _ = self._checkpoint()
    path = os.path.join(directory, 'model.safetensors')
    digest = text_models.sha256_of_file(path)
    text_models.build_bert_encoder(directory, {'model.safetensors': digest})
    with open(path, 'r+b') as f:
      f.seek(-4, os.SEEK_END)
      f.write(b'\x00\x00\x80\x7f')   # The last float becomes +inf.
    with self.assertRaisesRegex(ValueError, 'SHA-256 mismatch for .*model.safetensors'):
      text_models.build_bert_encoder(directory, {'model.safetensors': digest})

  def test_frozen_by_default_with_every_weight_from_the_checkpoint(self):
    directory, config, tensors = self._checkpoint()
    encoder = text_models.build_bert_encoder(directory)
    self.assertEmpty(encoder.trainable_weights)
    assignments = encoder.hf_assignments()
    self.assertLen(encoder.weights, len(assignments))
    # Everything but `position_ids` and the pooler.
    self.assertEqual(set(assignments), set(tensors) - {'embeddings.position_ids',
                                                       'pooler.dense.weight', 'pooler.dense.bias'})
    d, f, layers = config['hidden_size'], config['intermediate_size'], config['num_hidden_layers']
    self.assertEqual(encoder.count_params(),
                     (config['vocab_size'] + config['max_position_embeddings']
                      + config['type_vocab_size'] + 2) * d
                     + layers * (4 * (d * d + d) + 2 * d * f + f + d + 4 * d))
    self.assertEqual(encoder.parameter_bytes, 4 * encoder.count_params())
    self.assertNotEmpty(text_models.build_bert_encoder(directory, trainable=True)
                        .trainable_weights)

  def test_adapter_acts_on_token_embeddings_before_the_transformer(self):
    directory, _, _ = self._checkpoint(seed=3)
    encoder = text_models.build_bert_encoder(directory)
    inputs = _inputs()
    expected = encoder(inputs).numpy()
    embeddings = encoder.embed(inputs['token_ids'])
    np.testing.assert_array_equal(
        embeddings.numpy(), encoder.word_embeddings.embeddings.numpy()[_IDS])
    identity = tf.eye(16)
    np.testing.assert_allclose(
        encoder.encode(tf.einsum('btd,ed->bte', embeddings, identity), inputs['mask']).numpy(),
        expected, atol=1e-6)
    adapter = tf.eye(16) + 0.1 * tf.random.stateless_normal([16, 16], seed=[1, 2])
    with tf.GradientTape() as tape:
      tape.watch(adapter)
      states = encoder.encode(tf.einsum('btd,ed->bte', embeddings, adapter), inputs['mask'])
      loss = tf.reduce_sum(text_models.pool(states, inputs['mask'], 'mean')**2)
    self.assertGreater(np.abs(states.numpy() - expected).max(), 1e-2)
    gradient = tape.gradient(loss, adapter)
    self.assertTrue(np.all(np.isfinite(gradient.numpy())))
    self.assertGreater(np.abs(gradient.numpy()).max(), 0)

  def test_padding_does_not_change_token_states_or_pooled_outputs(self):
    directory, _, _ = self._checkpoint(seed=4)
    encoder = text_models.build_bert_encoder(directory)
    short = _inputs(_IDS[1:, :3], _MASK[1:, :3])
    seven_more = [[0, 0], [0, 7]]
    padded = _inputs(np.pad(_IDS[1:, :3], seven_more), np.pad(_MASK[1:, :3], seven_more))
    np.testing.assert_allclose(encoder(padded).numpy()[:, :3], encoder(short).numpy(), atol=1e-6)
    for pooling in text_models.POOLINGS:
      np.testing.assert_allclose(encoder.pooled(padded, pooling).numpy(),
                                 encoder.pooled(short, pooling).numpy(), atol=1e-6,
                                 err_msg=pooling)
    np.testing.assert_allclose(encoder.pooled(short, 'last').numpy(),
                               encoder(short).numpy()[:, 2], atol=0)

  def test_longer_than_the_position_table_is_an_error(self):
    directory, _, _ = self._checkpoint()
    encoder = text_models.build_bert_encoder(directory)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'max_position_embeddings'):
      encoder(_inputs(np.ones([1, 13], np.int32), np.ones([1, 13], np.int32)))

  def test_config_checks(self):
    config = dict(tiny_bert.TINY_CONFIG)
    self.assertEqual(bert.BertConfig.from_hf_config(config).intermediate_size, 24)
    with self.assertRaisesRegex(ValueError, 'model_type'):
      bert.BertConfig.from_hf_config(dict(config, model_type='llama'))
    with self.assertRaisesRegex(ValueError, 'position_embedding_type'):
      bert.BertConfig.from_hf_config(dict(config, position_embedding_type='relative_key'))
    with self.assertRaisesRegex(ValueError, 'multiple of `num_attention_heads`'):
      bert.BertConfig.from_hf_config(dict(config, num_attention_heads=5))
    with self.assertRaisesRegex(ValueError, '`hidden_act`'):
      bert.BertConfig.from_hf_config(dict(config, hidden_act='swish'))
    with self.assertRaisesRegex(ValueError, '`num_hidden_layers`'):
      bert.BertConfig.from_hf_config(dict(config, num_hidden_layers=0))

  def test_matches_transformers_tf_bert_model(self):
    directory, _, _ = self._checkpoint(seed=5)
    ours = text_models.build_bert_encoder(directory)(_inputs(types=_TYPES)).numpy()
    theirs = transformers.TFBertModel.from_pretrained(directory)(
        input_ids=_IDS, attention_mask=_MASK, token_type_ids=_TYPES).last_hidden_state.numpy()
    self.assertLess(np.abs(ours - theirs)[_MASK.astype(bool)].max(), 1e-5)


if __name__ == '__main__':
  absltest.main()
