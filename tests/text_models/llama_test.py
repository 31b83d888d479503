"""The Keras Llama decoder on tiny random checkpoints in Hugging Face's format: against Hugging
Face's TFMistral (Llama 2 style; a test-only dependency) and a NumPy float64 transcription of the
published architecture in Meta's own layout (Llama 2 and Llama 3 style, the latter with RoPE
scaling, tied embeddings and bfloat16 weights)."""

import json
import math
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import transformers

from fedasr_tff import text_models
from fedasr_tff.text_models import llama
from tests.text_models import tiny_bert
from tests.text_models import tiny_llama

# Two sequences, the second right-padded.
_IDS = np.array([[1, 17, 5, 39, 8, 2, 20], [1, 11, 3, 0, 0, 0, 0]], np.int32)
_MASK = np.array([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]], np.int32)
_VALID = _MASK.astype(bool)
_CONFIGS = {'llama2': tiny_llama.LLAMA2_CONFIG, 'llama3': tiny_llama.LLAMA3_CONFIG}


def meta_frequencies(config):
  """Rotary frequencies θ^(-2j/D), with Llama 3's `apply_scaling` transcribed branch by branch
  from Meta's reference code (llama-models, `apply_scaling`)."""
  head_dim = config.get('head_dim') or config['hidden_size'] // config['num_attention_heads']
  frequencies = 1.0 / config['rope_theta'] ** (np.arange(0, head_dim, 2) / head_dim)
  scaling = config.get('rope_scaling')
  if not scaling:
    return frequencies
  factor, low, high = scaling['factor'], scaling['low_freq_factor'], scaling['high_freq_factor']
  old_context = scaling['original_max_position_embeddings']
  low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
  scaled = []
  for frequency in frequencies:
    wavelen = 2 * math.pi / frequency
    if wavelen < high_freq_wavelen:
      scaled.append(frequency)
    elif wavelen > low_freq_wavelen:
      scaled.append(frequency / factor)
    else:
      smooth = (old_context / wavelen - low) / (high - low)
      scaled.append((1 - smooth) * frequency / factor + smooth * frequency)
  return np.array(scaled)


def hf_to_meta_rows(weight, heads):
  """Undoes Hugging Face's permutation of W_q/W_k rows: per head, HF rows j and j + D/2 are
  Meta's rows 2j and 2j + 1."""
  out, fan_in = weight.shape
  return weight.reshape(heads, 2, out // heads // 2, fan_in).transpose(0, 2, 1, 3).reshape(
      out, fan_in)


def numpy_llama(tensors, config, ids, mask):
  """Llama's final-norm hidden states in float64, for right-padded `ids`, as Meta's reference
  computes them: rotary embeddings on adjacent pairs as complex rotations, key/value heads
  repeated for grouped-query attention, padding keys excluded from the softmax."""
  w = {name: np.asarray(value, np.float64) for name, value in tensors.items()}
  d, heads, kv_heads = (config['hidden_size'], config['num_attention_heads'],
                        config['num_key_value_heads'])
  head_dim = config.get('head_dim') or d // heads
  eps = config['rms_norm_eps']
  batch, length = ids.shape

  def rms_norm(x, gain):
    return gain * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)

  rotation = np.exp(1j * np.outer(np.arange(length), meta_frequencies(config)))  # [T, D/2]

  def rotate(x):   # [B, T, heads, D], Meta's layout.
    pairs = x.reshape(*x.shape[:-1], head_dim // 2, 2)
    turned = (pairs[..., 0] + 1j * pairs[..., 1]) * rotation[None, :, None, :]
    return np.stack([turned.real, turned.imag], -1).reshape(x.shape)

  allowed = np.tril(np.ones([length, length], bool))[None] & mask.astype(bool)[:, None, :]
  x = w['model.embed_tokens.weight'][ids]
  for i in range(config['num_hidden_layers']):
    p = f'model.layers.{i}.'
    h = rms_norm(x, w[p + 'input_layernorm.weight'])
    q = h @ hf_to_meta_rows(w[p + 'self_attn.q_proj.weight'], heads).T
    k = h @ hf_to_meta_rows(w[p + 'self_attn.k_proj.weight'], kv_heads).T
    v = h @ w[p + 'self_attn.v_proj.weight'].T
    q = rotate(q.reshape(batch, length, heads, head_dim))
    k = np.repeat(rotate(k.reshape(batch, length, kv_heads, head_dim)), heads // kv_heads, 2)
    v = np.repeat(v.reshape(batch, length, kv_heads, head_dim), heads // kv_heads, 2)
    scores = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(head_dim)
    scores = np.where(allowed[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum('bhqk,bkhd->bqhd', probs, v).reshape(batch, length, heads * head_dim)
    x = x + context @ w[p + 'self_attn.o_proj.weight'].T
    h = rms_norm(x, w[p + 'post_attention_layernorm.weight'])
    gate = h @ w[p + 'mlp.gate_proj.weight'].T
    x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + 'mlp.up_proj.weight'].T)) @ w[
        p + 'mlp.down_proj.weight'].T
  return rms_norm(x, w['model.norm.weight'])


def _inputs(ids=_IDS, mask=_MASK):
  return {'token_ids': tf.constant(ids), 'mask': tf.constant(mask)}


class LlamaDecoderTest(parameterized.TestCase):

  def _checkpoint(self, config=None, **kwargs):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    config, tensors = tiny_llama.write_tiny_llama(directory, config, **kwargs)
    return directory, config, tensors

  @parameterized.named_parameters(*_CONFIGS.items())
  def test_matches_numpy_reference(self, config):
    directory, config, tensors = self._checkpoint(config, seed=1)
    decoder = text_models.build_llama_decoder(directory)
    actual = decoder(_inputs()).numpy()
    expected = numpy_llama(tensors, config, _IDS, _MASK)
    self.assertGreater(np.abs(expected).max(), 1.0)
    # Measured: 2.5e-6 (llama2) and 9.1e-7 (llama3), float32 against float64, on 2026-11-24.
    self.assertLess(np.abs(actual - expected)[_VALID].max(), 1e-5)

  def test_llama3_frequency_scaling(self):
    config = llama.LlamaConfig.from_hf_config(tiny_llama.LLAMA3_CONFIG)
    unscaled = 500000.0 ** -(np.arange(4) / 4)
    ours = llama.rope_frequencies(config)
    np.testing.assert_allclose(ours, meta_frequencies(tiny_llama.LLAMA3_CONFIG), rtol=1e-12)
    # One frequency in each band: kept (λ = 2π < 256/4), interpolated, divided by 8 (λ > 256).
    wavelengths = 2 * math.pi / unscaled
    self.assertLess(wavelengths[0], 64)
    self.assertTrue(64 < wavelengths[1] < 256)
    self.assertGreater(wavelengths[2], 256)
    self.assertEqual(ours[0], unscaled[0])
    self.assertTrue(unscaled[1] / 8 < ours[1] < unscaled[1])
    np.testing.assert_allclose(ours[2:], unscaled[2:] / 8, rtol=1e-12)
    # The scaling reaches the hidden states.
    directory, _, _ = self._checkpoint(tiny_llama.LLAMA3_CONFIG, seed=2)
    other, _, _ = self._checkpoint(tiny_llama.LLAMA3_CONFIG, seed=2, rope_scaling=None)
    self.assertGreater(np.abs(text_models.build_llama_decoder(directory)(_inputs()).numpy() -
                              text_models.build_llama_decoder(other)(_inputs()).numpy()).max(),
                       1e-3)

  def test_llama2_style_matches_transformers_tf_mistral(self):
    # Mistral without a sliding window is the Llama 2 architecture; TFMistral reads the same
    # tensor names (Hugging Face has no TF Llama).
    directory, config, _ = self._checkpoint(tiny_llama.LLAMA2_CONFIG, seed=3)
    ours = text_models.build_llama_decoder(directory)(_inputs()).numpy()
    mistral = self.enterContext(tempfile.TemporaryDirectory())
    shutil.copytree(directory, mistral, dirs_exist_ok=True)
    with open(os.path.join(mistral, 'config.json'), 'w') as f:
      json.dump(dict(config, model_type='mistral', sliding_window=None,
                     architectures=['MistralForCausalLM']), f)
    model = transformers.TFMistralForCausalLM.from_pretrained(mistral)
    theirs = model.model(input_ids=_IDS, attention_mask=_MASK).last_hidden_state.numpy()
    # Measured: 1.4e-6 on 2026-11-24.
    self.assertLess(np.abs(ours - theirs)[_VALID].max(), 1e-4)
    # Our reading of the `mistral` copy is the same model.
    np.testing.assert_array_equal(
        text_models.build_llama_decoder(mistral)(_inputs()).numpy(), ours)

  def test_sharded_and_unprefixed_checkpoints_load_the_same_weights(self):
    directory, config, tensors = self._checkpoint(tiny_llama.LLAMA3_CONFIG, seed=4)
    expected = text_models.build_llama_decoder(directory)(_inputs()).numpy()
    sharded, _, _ = self._checkpoint(tiny_llama.LLAMA3_CONFIG, seed=4, num_shards=3)
    self.assertFalse(os.path.exists(os.path.join(sharded, 'model.safetensors')))
    np.testing.assert_array_equal(text_models.build_llama_decoder(sharded)(_inputs()).numpy(),
                                  expected)
    # A LlamaModel (no LM head) saves its names without `model.`.
    bare = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_checkpoint(bare, config, {
        name.removeprefix('model.'): value for name, value in tensors.items()}, num_shards=2)
    np.testing.assert_array_equal(text_models.build_llama_decoder(bare)(_inputs()).numpy(),
                                  expected)

  def test_padding_does_not_change_the_states_of_tokens(self):
    directory, _, _ = self._checkpoint(tiny_llama.LLAMA3_CONFIG, seed=5)
    decoder = text_models.build_llama_decoder(directory)
    short = _inputs(_IDS[1:, :3], _MASK[1:, :3])
    expected = decoder(short).numpy()
    for pad, tokens in (([[0, 0], [0, 6]], slice(0, 3)), ([[0, 0], [4, 0]], slice(4, 7))):
      padded = _inputs(np.pad(_IDS[1:, :3], pad, constant_values=7),
                       np.pad(_MASK[1:, :3], pad))
      np.testing.assert_allclose(decoder(padded).numpy()[:, tokens], expected, atol=2e-6,
                                 err_msg=str(pad))
      for pooling in text_models.POOLINGS:
        np.testing.assert_allclose(decoder.pooled(padded, pooling).numpy(),
                                   decoder.pooled(short, pooling).numpy(), atol=2e-6,
                                   err_msg=f'{pad} {pooling}')
    np.testing.assert_array_equal(decoder.pooled(short, 'last').numpy(), expected[:, 2])

  def test_causal(self):
    directory, _, _ = self._checkpoint(seed=6)
    decoder = text_models.build_llama_decoder(directory)
    full = decoder(_inputs(_IDS[:1], _MASK[:1])).numpy()
    changed = _IDS[:1].copy()
    changed[0, 4:] = [30, 31, 32]
    states = decoder(_inputs(changed, _MASK[:1])).numpy()
    np.testing.assert_array_equal(states[:, :4], full[:, :4])
    self.assertGreater(np.abs(states[:, 4:] - full[:, 4:]).min(), 0)

  def test_missing_or_misshaped_tensors_are_named(self):
    _, config, tensors = self._checkpoint()
    for name in ('model.layers.1.self_attn.k_proj.weight', 'lm_head.weight',
                 'model.norm.weight'):
      directory = self.enterContext(tempfile.TemporaryDirectory())
      tiny_bert.write_checkpoint(directory, config,
                                 {k: v for k, v in tensors.items() if k != name})
      with self.assertRaisesRegex(KeyError, f"'{name}' is missing"):
        text_models.build_llama_decoder(directory)
    name = 'model.layers.0.self_attn.v_proj.weight'   # [kv_heads·D, d] = [8, 16].
    directory = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_checkpoint(directory, config, dict(tensors, **{name: tensors[name].T}))
    with self.assertRaisesRegex(ValueError, rf"'{name}' has shape \(16, 8\), expected \(8, 16\)"):
      text_models.build_llama_decoder(directory)
    directory = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_checkpoint(directory, config, dict(
        tensors, **{'lm_head.weight': tensors['lm_head.weight'][:-1]}))
    with self.assertRaisesRegex(ValueError, r"'lm_head.weight' has shape \(47, 16\)"):
      text_models.build_llama_decoder(directory)
    # A tied checkpoint needs no LM head (the tiny Llama 3 has none).
    directory, _, tensors = self._checkpoint(tiny_llama.LLAMA3_CONFIG)
    self.assertNotIn('lm_head.weight', tensors)
    text_models.build_llama_decoder(directory)

  def test_config_checks(self):
    config = tiny_llama.LLAMA2_CONFIG
    parsed = llama.LlamaConfig.from_hf_config(config)
    self.assertEqual((parsed.num_key_value_heads, parsed.head_dim), (2, 4))
    no_gqa = {k: v for k, v in config.items() if k != 'num_key_value_heads'}
    self.assertEqual(llama.LlamaConfig.from_hf_config(no_gqa).num_key_value_heads, 4)
    self.assertEqual(llama.LlamaConfig.from_hf_config(
        dict(config, model_type='mistral', sliding_window=None)), parsed)
    for rope_scaling in ({'rope_type': 'linear', 'factor': 2.0}, {'type': 'dynamic',
                                                                   'factor': 2.0},
                         {'rope_type': 'yarn', 'factor': 4.0}):
      with self.assertRaisesRegex(ValueError, '`rope_scaling` has rope_type'):
        llama.LlamaConfig.from_hf_config(dict(config, rope_scaling=rope_scaling))
    self.assertEqual(llama.LlamaConfig.from_hf_config(
        dict(config, rope_scaling={'rope_type': 'default'})).rope_scaling['rope_type'], 'default')
    llama3 = tiny_llama.LLAMA3_CONFIG['rope_scaling']
    with self.assertRaisesRegex(ValueError, "lacks \\['original_max_position_embeddings'\\]"):
      llama.LlamaConfig.from_hf_config(dict(config, rope_scaling={
          k: v for k, v in llama3.items() if k != 'original_max_position_embeddings'}))
    with self.assertRaisesRegex(ValueError, 'low_freq_factor < high_freq_factor'):
      llama.LlamaConfig.from_hf_config(dict(config, rope_scaling=dict(llama3,
                                                                       high_freq_factor=1.0)))
    errors = {'`sliding_window` 4096': dict(config, model_type='mistral', sliding_window=4096),
              "model_type 'bert'": dict(config, model_type='bert'),
              'multiple of `num_key_value_heads`': dict(config, num_key_value_heads=3),
              "`hidden_act` must be 'silu'": dict(config, hidden_act='gelu'),
              '`attention_bias`': dict(config, attention_bias=True),
              '`head_dim` must be even': dict(config, head_dim=5),
              '`rope_theta`': dict(config, rope_theta=0.0)}
    for message, bad in errors.items():
      with self.assertRaisesRegex(ValueError, message):
        llama.LlamaConfig.from_hf_config(bad)

  def test_longer_than_max_position_embeddings_is_an_error(self):
    directory, _, _ = self._checkpoint()
    decoder = text_models.build_llama_decoder(directory)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'max_position_embeddings'):
      decoder(_inputs(np.ones([1, 33], np.int32), np.ones([1, 33], np.int32)))

  @parameterized.named_parameters(*_CONFIGS.items())
  def test_size_without_the_lm_head(self, config):
    directory, config, tensors = self._checkpoint(config)
    decoder = text_models.build_llama_decoder(directory)
    parsed = llama.LlamaConfig.from_hf_config(config)
    self.assertEqual(decoder.count_params(), parsed.num_parameters)
    self.assertEqual(decoder.count_params(), sum(
        v.size for k, v in tensors.items() if k != 'lm_head.weight'))
    self.assertEqual(decoder.parameter_bytes, 4 * parsed.num_parameters)
    self.assertLen(decoder.weights, len(decoder.hf_assignments()))

  def test_published_sizes(self):
    # TinyLlama-1.1B (1,100,048,384 parameters with its untied LM head) and Llama-3.2-3B
    # (3,212,749,824, tied), from their config.json.
    tinyllama = llama.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                  num_hidden_layers=22, num_attention_heads=32,
                                  num_key_value_heads=4)
    self.assertEqual(tinyllama.num_parameters + 32000 * 2048, 1_100_048_384)
    llama32 = llama.LlamaConfig(vocab_size=128256, hidden_size=3072, intermediate_size=8192,
                                num_hidden_layers=28, num_attention_heads=24,
                                num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
    self.assertEqual(llama32.num_parameters, 3_212_749_824)

  @parameterized.named_parameters(*_CONFIGS.items())
  def test_identity_adapter_and_gradients_reach_only_the_adapter(self, config):
    directory, config, _ = self._checkpoint(config, seed=7)
    decoder = text_models.build_llama_decoder(directory)
    self.assertEmpty(decoder.trainable_weights)
    frozen = [v.numpy() for v in decoder.weights]
    inputs = _inputs()
    expected = decoder(inputs).numpy()
    d = config['hidden_size']
    adapter = tf.Variable(tf.eye(d))
    embeddings = decoder.embed(inputs['token_ids'])
    np.testing.assert_array_equal(
        decoder.encode(tf.einsum('btd,ed->bte', embeddings, adapter), inputs['mask']).numpy(),
        expected)
    adapter.assign_add(0.1 * tf.random.stateless_normal([d, d], seed=[1, 2]))
    with tf.GradientTape() as tape:
      states = decoder.encode(tf.einsum('btd,ed->bte', decoder.embed(inputs['token_ids']),
                                        adapter), inputs['mask'])
      loss = tf.reduce_sum(text_models.pool(states, inputs['mask'], 'last')**2)
    gradient, backbone_gradients = tape.gradient(loss, (adapter, decoder.trainable_weights))
    self.assertEqual(backbone_gradients, [])
    gradient = gradient.numpy()
    self.assertTrue(np.all(np.isfinite(gradient)))
    self.assertGreater(np.abs(gradient).max(), 0)
    self.assertGreater(np.abs(states.numpy() - expected).max(), 1e-2)
    for before, after in zip(frozen, decoder.weights, strict=True):
      np.testing.assert_array_equal(after.numpy(), before)


if __name__ == '__main__':
  absltest.main()
