"""A Llama decoder in Keras that loads Hugging Face checkpoints, split for an embedding adapter.

Llama (Touvron et al., "LLaMA: Open and Efficient Foundation Language Models",
arXiv:2302.13971, Sec. 2.2; "Llama 2", arXiv:2307.09288; Grattafiori et al., "The Llama 3 Herd
of Models", arXiv:2407.21783) is a pre-norm causal transformer (`LlamaDecoder`). Mistral without
a sliding window (`model_type` mistral, `sliding_window` null) is the same architecture, and is
accepted.
"""

import dataclasses
import math
from typing import Mapping
from typing import Optional

import numpy as np
import tensorflow as tf

from fedasr_tff import validation
from fedasr_tff.text_models import backbone
from fedasr_tff.text_models import checkpoints

MODEL_TYPES = ('llama', 'mistral')
# rope_scaling's rope_type values implemented; 'default' is no scaling.
ROPE_TYPES = ('default', 'llama3')
_LLAMA3_ROPE_KEYS = ('factor', 'low_freq_factor', 'high_freq_factor',
                     'original_max_position_embeddings')
_MASKED_SCORE = -1e9
# The tensor whose name tells a checkpoint's prefix, and the untied LM head (outside the prefix).
_ANCHOR = 'embed_tokens.weight'
LM_HEAD_TENSOR = 'lm_head.weight'

# Checkpoint tensor names (without the model prefix) -> (our layer, weight, transpose).
HF_TENSORS = {
    'embed_tokens.weight': ('embed_tokens', 'embeddings', False),
    'norm.weight': ('norm', 'weight', False),
}
# Layer N's names start with `layers.N.`.
HF_LAYER_TENSORS = {
    'input_layernorm.weight': ('input_layernorm', 'weight', False),
    'self_attn.q_proj.weight': ('q_proj', 'kernel', True),
    'self_attn.k_proj.weight': ('k_proj', 'kernel', True),
    'self_attn.v_proj.weight': ('v_proj', 'kernel', True),
    'self_attn.o_proj.weight': ('o_proj', 'kernel', True),
    'post_attention_layernorm.weight': ('post_attention_layernorm', 'weight', False),
    'mlp.gate_proj.weight': ('gate_proj', 'kernel', True),
    'mlp.up_proj.weight': ('up_proj', 'kernel', True),
    'mlp.down_proj.weight': ('down_proj', 'kernel', True),
}


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  """A Llama architecture, with the field names of Hugging Face's `config.json`.

  `num_key_value_heads` defaults to `num_attention_heads` and `head_dim` to
  `hidden_size // num_attention_heads`, as in Hugging Face's LlamaConfig.

  Attributes:
    vocab_size: tokens of the vocabulary.
    hidden_size: d.
    intermediate_size: the feed-forward network's width.
    num_hidden_layers: decoder layers.
    num_attention_heads: H, query heads.
    num_key_value_heads: G, key/value heads, dividing H.
    head_dim: D, each head's width (even).
    rms_norm_eps: RMSNorm's ε.
    rope_theta: θ of the rotary frequencies.
    rope_scaling: Hugging Face's `rope_scaling` (None, or rope_type `llama3`).
    tie_word_embeddings: whether the LM head is the embedding table.
    max_position_embeddings: the most positions.
    hidden_act: 'silu' (the only one implemented).
    attention_bias: False (Llama has no biases).
    mlp_bias: False (Llama has no biases).
  """
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_hidden_layers: int
  num_attention_heads: int
  num_key_value_heads: Optional[int] = None
  head_dim: Optional[int] = None
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_scaling: Optional[Mapping] = None
  tie_word_embeddings: bool = False
  max_position_embeddings: int = 2048
  hidden_act: str = 'silu'
  attention_bias: bool = False
  mlp_bias: bool = False

  def __post_init__(self):
    if self.num_key_value_heads is None:
      object.__setattr__(self, 'num_key_value_heads', self.num_attention_heads)
    if self.head_dim is None:
      object.__setattr__(self, 'head_dim', self.hidden_size // self.num_attention_heads)
    for name in ('vocab_size', 'hidden_size', 'intermediate_size', 'num_hidden_layers',
                 'num_attention_heads', 'num_key_value_heads', 'head_dim',
                 'max_position_embeddings'):
      validation.check_positive_integer(name, getattr(self, name))
    validation.check_positive('rms_norm_eps', self.rms_norm_eps)
    validation.check_positive('rope_theta', self.rope_theta)
    if self.num_attention_heads % self.num_key_value_heads:
      raise ValueError(f'`num_attention_heads` ({self.num_attention_heads}) must be a multiple '
                       f'of `num_key_value_heads` ({self.num_key_value_heads}).')
    if self.head_dim % 2:
      raise ValueError(f'`head_dim` must be even for rotary embeddings, got {self.head_dim}.')
    if self.hidden_act != 'silu':
      raise ValueError(f"`hidden_act` must be 'silu', got {self.hidden_act!r}.")
    for name in ('attention_bias', 'mlp_bias'):
      if getattr(self, name):
        raise ValueError(f'`{name}` true is not implemented (Llama has no biases).')
    _check_rope_scaling(self.rope_scaling)

  @classmethod
  def from_hf_config(cls, config: Mapping) -> 'LlamaConfig':
    """The architecture of a Hugging Face Llama (or Mistral without sliding window) config.

    Args:
      config: the parsed `config.json`; keys that are not fields are ignored.

    Returns:
      The `LlamaConfig`.

    Raises:
      ValueError: for another model type, a sliding window or an unimplemented setting.
    """
    model_type = config.get('model_type')
    if model_type not in MODEL_TYPES:
      raise ValueError(f'`config` is not a Llama config: model_type {model_type!r} is not one '
                       f'of {MODEL_TYPES}.')
    if config.get('sliding_window') is not None:
      raise ValueError(f'`sliding_window` {config["sliding_window"]!r} is not implemented; only '
                       'full causal attention (sliding_window null).')
    fields = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in config.items() if key in fields})

  @property
  def num_parameters(self) -> int:
    """Parameters of the decoder without the LM head (embeddings, layers, final norm)."""
    d, f = self.hidden_size, self.intermediate_size
    q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
    per_layer = 2 * d * q + 2 * d * kv + 3 * d * f + 2 * d
    return self.vocab_size * d + self.num_hidden_layers * per_layer + d


def _check_rope_scaling(rope_scaling: Optional[Mapping]) -> None:
  if rope_scaling is None:
    return
  # Older configs call the field `type`.
  rope_type = rope_scaling.get('rope_type', rope_scaling.get('type'))
  if rope_type not in ROPE_TYPES:
    raise ValueError(f'`rope_scaling` has rope_type {rope_type!r}; only {ROPE_TYPES} are '
                     'implemented.')
  if rope_type == 'llama3':
    missing = [key for key in _LLAMA3_ROPE_KEYS if key not in rope_scaling]
    if missing:
      raise ValueError(f'`rope_scaling` of rope_type llama3 lacks {missing}.')
    for key in _LLAMA3_ROPE_KEYS:
      validation.check_positive(f'rope_scaling.{key}', rope_scaling[key])
    if rope_scaling['low_freq_factor'] >= rope_scaling['high_freq_factor']:
      raise ValueError('`rope_scaling` must have low_freq_factor < high_freq_factor, got '
                       f'{rope_scaling["low_freq_factor"]} and {rope_scaling["high_freq_factor"]}.')


def rope_frequencies(config: LlamaConfig) -> np.ndarray:
  """The rotary frequencies ω_j = θ^(-2j/D), j = 0..D/2-1, scaled as `rope_scaling` says.

  Llama 3.1+ scales the frequencies for long context (`rope_scaling` with rope_type `llama3`,
  Meta's reference `apply_scaling`): with factor s, low/high frequency factors l < h and the
  original context L, a frequency of wavelength λ = 2π/ω is kept if λ < L/h, divided by s if
  λ > L/l, and in between interpolated, ω ← (1 - a) ω/s + a ω with a = (L/λ - l)/(h - l).

  Args:
    config: the architecture (`head_dim`, `rope_theta`, `rope_scaling`).

  Returns:
    [head_dim / 2] float64 frequencies.
  """
  exponents = np.arange(0, config.head_dim, 2, dtype=np.float64) / config.head_dim
  frequencies = config.rope_theta ** -exponents
  scaling = config.rope_scaling or {}
  if scaling.get('rope_type', scaling.get('type')) != 'llama3':
    return frequencies
  factor, low, high = scaling['factor'], scaling['low_freq_factor'], scaling['high_freq_factor']
  context = scaling['original_max_position_embeddings']
  wavelengths = 2 * math.pi / frequencies
  blend = np.clip((context / wavelengths - low) / (high - low), 0.0, 1.0)
  # blend is 0 where λ ≥ L/l (divided by the factor) and 1 where λ ≤ L/h (kept).
  return (1 - blend) * frequencies / factor + blend * frequencies


class RMSNorm(tf.keras.layers.Layer):
  """w ⊙ x / √(mean(x²) + ε) over the last axis (Zhang and Sennrich, arXiv:1910.07467)."""

  def __init__(self, epsilon: float, **kwargs):
    """Initializes the layer.

    Args:
      epsilon: ε.
      **kwargs: passed to `tf.keras.layers.Layer`.
    """
    super().__init__(**kwargs)
    self.epsilon = epsilon

  def build(self, input_shape):
    """Creates w.

    Args:
      input_shape: the input's shape; w has its last axis, initialised to ones.
    """
    self.weight = self.add_weight(name='weight', shape=[input_shape[-1]], initializer='ones')
    super().build(input_shape)

  def call(self, x):
    """Normalises over the last axis.

    Args:
      x: [..., d].

    Returns:
      w ⊙ x / √(mean(x²) + ε).
    """
    return self.weight * x * tf.math.rsqrt(tf.reduce_mean(x * x, -1, keepdims=True) +
                                           self.epsilon)


def _rotate(x, cos, sin):
  """R_k x in the rotate-half layout: x ⊙ cos + [-x₂, x₁] ⊙ sin.

  Hugging Face's checkpoints pair dimension j of a head with j + D/2. Meta's original
  checkpoints pair adjacent dimensions (2j, 2j+1) instead; Hugging Face's conversion permutes the
  rows of W_q and W_k so that the two agree, so checkpoints in Hugging Face format need this
  layout.
  """
  first, second = tf.split(x, 2, axis=-1)
  return x * cos + tf.concat([-second, first], axis=-1) * sin


def _dense(units, name):
  return tf.keras.layers.Dense(units, use_bias=False, name=name)


class LlamaLayer(tf.keras.layers.Layer):
  """One pre-norm block: grouped-query self-attention with rotary embeddings, then SwiGLU."""

  def __init__(self, config: LlamaConfig, **kwargs):
    """Initializes the block's layers.

    Args:
      config: the architecture.
      **kwargs: passed to `tf.keras.layers.Layer`.
    """
    super().__init__(**kwargs)
    d, head_dim = config.hidden_size, config.head_dim
    self._heads, self._kv_heads, self._head_dim = (config.num_attention_heads,
                                                   config.num_key_value_heads, head_dim)
    self.input_layernorm = RMSNorm(config.rms_norm_eps, name='input_layernorm')
    self.q_proj = _dense(self._heads * head_dim, 'q_proj')
    self.k_proj = _dense(self._kv_heads * head_dim, 'k_proj')
    self.v_proj = _dense(self._kv_heads * head_dim, 'v_proj')
    self.o_proj = _dense(d, 'o_proj')
    self.post_attention_layernorm = RMSNorm(config.rms_norm_eps, name='post_attention_layernorm')
    self.gate_proj = _dense(config.intermediate_size, 'gate_proj')
    self.up_proj = _dense(config.intermediate_size, 'up_proj')
    self.down_proj = _dense(d, 'down_proj')

  def _heads_of(self, x, heads):
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    return tf.reshape(x, [batch, length, heads, self._head_dim])   # [B, T, heads, D]

  def _attention(self, x, cos, sin, bias):
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    group = self._heads // self._kv_heads
    # Query head i = g * group + r uses key/value head g.
    q = tf.reshape(_rotate(self._heads_of(self.q_proj(x), self._heads), cos, sin),
                   [batch, length, self._kv_heads, group, self._head_dim])
    k = _rotate(self._heads_of(self.k_proj(x), self._kv_heads), cos, sin)
    v = self._heads_of(self.v_proj(x), self._kv_heads)
    scores = tf.einsum('bqgrd,bkgd->bgrqk', q, k) / math.sqrt(self._head_dim) + bias
    context = tf.einsum('bgrqk,bkgd->bqgrd', tf.nn.softmax(scores, axis=-1), v)
    return self.o_proj(tf.reshape(context, [batch, length, self._heads * self._head_dim]))

  def call(self, x, cos, sin, bias):
    """Applies the block.

    Args:
      x: [B, T, d] states.
      cos: [B, T, 1, D] cosines of the rotary angles.
      sin: [B, T, 1, D] sines.
      bias: [B, 1, 1, T, T], the attention mask M (`LlamaDecoder`).

    Returns:
      [B, T, d] states.
    """
    x = x + self._attention(self.input_layernorm(x), cos, sin, bias)
    h = self.post_attention_layernorm(x)
    return x + self.down_proj(tf.nn.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaDecoder(backbone.Backbone):
  """Llama's token embeddings, layers and final norm (no LM head).

      e_k = E[x_k]                                           (`embed`: the token embedding lookup)
      per layer, with H query heads and G key/value heads of width D:
        h = RMSNorm(x)
        q_i = R_k (h W_q,iᵀ),  k_g = R_k (h W_k,gᵀ),  v_g = h W_v,gᵀ
        A_i = softmax(q_i k_g(i)ᵀ / √D + M),  g(i) = ⌊i / (H/G)⌋
        x = x + concat_i(A_i v_g(i)) W_oᵀ
        x = x + (silu(h' W_gateᵀ) ⊙ (h' W_upᵀ)) W_downᵀ,   h' = RMSNorm(x)
      output = RMSNorm(x)                                    (the final norm; no LM head)

  - RMSNorm (`RMSNorm`), ε = `rms_norm_eps`.
  - R_k is the rotary embedding at position k (Su et al., "RoFormer", arXiv:2104.09864, Sec.
    3.4) with frequencies ω (`rope_frequencies`), in the "rotate half" layout of Hugging Face's
    checkpoints: R_k y = y ⊙ cos(k ω̃) + rotate_half(y) ⊙ sin(k ω̃), ω̃ = [ω, ω],
    rotate_half([a, b]) = [-b, a].
  - Grouped-query attention (Ainslie et al., arXiv:2305.13245): G = `num_key_value_heads` key
    and value heads, each shared by H/G consecutive query heads; G = H is multi-head attention.
  - SwiGLU feed-forward (Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202),
    silu(z) = z·σ(z).
  - M[q, k] = 0 if key k is a token and k ≤ q (causal), else -1e9.

  Inputs are dicts with `token_ids` [B, T] and `mask` [B, T] (1 for a token, 0 for padding);
  the output is the final-norm hidden states [B, T, d].
  """

  def __init__(self, config: LlamaConfig, **kwargs):
    """Initializes the layers.

    Args:
      config: the architecture.
      **kwargs: passed to `tf.keras.Model`.
    """
    super().__init__(**kwargs)
    self.config = config
    self.embed_tokens = tf.keras.layers.Embedding(config.vocab_size, config.hidden_size,
                                                  name='embed_tokens')
    self.decoder_layers = [LlamaLayer(config, name=f'layer_{i}')
                           for i in range(config.num_hidden_layers)]
    self.norm = RMSNorm(config.rms_norm_eps, name='norm')
    self._frequencies = tf.constant(rope_frequencies(config), tf.float32)

  def embed(self, token_ids) -> tf.Tensor:
    """The token embeddings e_k = E[x_k]: the adapter's input.

    Args:
      token_ids: [B, T] token ids.

    Returns:
      [B, T, d] embeddings.
    """
    return self.embed_tokens(token_ids)

  def encode(self, token_embeddings, mask) -> tf.Tensor:
    """The final-norm hidden states from (adapted) token embeddings.

    Positions count tokens: k = (number of tokens up to and including this one) - 1. With right
    padding that is 0..n-1 as usual; with left padding the first token is at position 0 too, so
    right and left padding both leave the states of the tokens as without padding (the states
    at padding positions are not meaningful and are masked by pooling).

    Args:
      token_embeddings: [B, T, d].
      mask: [B, T], 1 for a token, 0 for padding.

    Returns:
      [B, T, d] states.
    """
    # The length check gates the length, so it also runs in TF1-style graphs (TFF's), which
    # have no automatic control dependencies.
    length = backbone.checked_length(token_embeddings, self.config.max_position_embeddings)
    is_token = tf.cast(mask, tf.bool)
    positions = tf.maximum(tf.cumsum(tf.cast(is_token, tf.int32), axis=1) - 1, 0)
    angles = tf.cast(positions, tf.float32)[..., tf.newaxis] * self._frequencies   # [B, T, D/2]
    angles = tf.concat([angles, angles], axis=-1)[:, :, tf.newaxis, :]             # [B, T, 1, D]
    cos, sin = tf.cos(angles), tf.sin(angles)
    causal = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)   # key ≤ query
    allowed = tf.logical_and(causal[tf.newaxis], is_token[:, tf.newaxis, :])     # [B, T, T]
    bias = tf.where(allowed, 0.0, _MASKED_SCORE)[:, tf.newaxis, tf.newaxis]      # [B,1,1,T,T]
    x = token_embeddings
    for layer in self.decoder_layers:
      x = layer(x, cos, sin, bias)
    return self.norm(x)

  def hf_assignments(self) -> dict:
    """The weights by Hugging Face tensor name.

    Returns:
      {checkpoint tensor name without prefix: (variable, transpose)} of every weight
      (`HF_TENSORS`, and `HF_LAYER_TENSORS` of every layer); Linear weights are stored
      [out, in] and so marked for transposition.
    """
    self.build_weights()
    assignments = {name: (getattr(getattr(self, layer), weight), transpose)
                   for name, (layer, weight, transpose) in HF_TENSORS.items()}
    for i, block in enumerate(self.decoder_layers):
      for name, (layer, weight, transpose) in HF_LAYER_TENSORS.items():
        assignments[f'layers.{i}.{name}'] = (getattr(getattr(block, layer), weight), transpose)
    return assignments

  def load_hf_tensors(self, tensors: Mapping) -> None:
    """Assigns every weight from a Hugging Face Llama checkpoint.

    The LM head is not needed for features: an untied checkpoint must hold `lm_head.weight`
    [vocab_size, hidden_size] (checked, not loaded); with `tie_word_embeddings` the LM head is
    the embedding table and need not be in the file.

    Args:
      tensors: the checkpoint's {name: array}, with or without the `model.` prefix of a
        `LlamaForCausalLM` checkpoint.

    Raises:
      KeyError: naming a missing tensor; ValueError: naming a mis-shaped one.
    """
    if not self.config.tie_word_embeddings:
      checkpoints.check_tensor(tensors, LM_HEAD_TENSOR,
                               (self.config.vocab_size, self.config.hidden_size))
    super().load_hf_tensors(tensors, backbone.model_prefix(tensors, _ANCHOR))


def build_llama_decoder(model_dir: str, expected_sha256: Optional[Mapping[str, str]] = None,
                        trainable: bool = False) -> LlamaDecoder:
  """A `LlamaDecoder` with the architecture and weights of a Hugging Face model folder.

  Args:
    model_dir: the folder (`checkpoints.load_tensors` reads it).
    expected_sha256: {weight file: SHA-256} to check, or None.
    trainable: whether the weights train; frozen if False.

  Returns:
    The loaded `LlamaDecoder` (`backbone.build_from_checkpoint`).
  """
  return backbone.build_from_checkpoint(LlamaDecoder, LlamaConfig, model_dir, expected_sha256,
                                        trainable, name='llama_decoder')
