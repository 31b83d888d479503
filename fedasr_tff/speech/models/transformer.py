"""The paper's vanilla pre-LN transformer encoder for CTC, in Keras (`CTCTransformer`).

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098: Sec. 4
"Central Training" (pre-LN) and App. F "Model" and "Positional Embedding".

    features [B, T, 80] (normalised log-mels) -> learnable scalar scale and bias
    -> 1-D conv over time (kernel 7, stride 3) to 2d channels, GLU -> d, dropout
    -> + CAPE positional embedding (no parameters; random global shift while training)
    -> N pre-LN blocks: x += Attn(LN1 x); x += MLP(LN2 x) (each dropped whole: `layer_drop`)
    -> final LayerNorm -> linear to vocabulary + CTC blank
"""

import math
import re
from typing import NamedTuple
from typing import Optional

import tensorflow as tf

from fedasr_tff.speech.models import sizes

# The model owns its parameter vocabulary, so that per-layer clipping and the per-layer norm
# plots can address the paper's groups: weights are named `OUTER_LAYERS` outside the blocks and
# `block_XX/<parameter>/<variable>` inside (`block_tensor` reads such a name).
# A pre-LN block's parameters in forward-pass order: x += Attn(LN1 x); x += MLP(LN2 x).
BLOCK_PARAMETERS = ('ln1', 'wqkv', 'wf', 'ln2', 'w1', 'w2')
# The block parameters of the MLP.
MLP_PARAMETERS = ('w1', 'w2')
# The layers outside the blocks, in forward-pass order.
OUTER_LAYERS = ('input_norm', 'conv', 'final_ln', 'output')

_BLOCK_TENSOR = re.compile(r'^block_(?P<block>\d+)/(?P<parameter>[^/]+)/(?P<variable>.+)$')

# LayerNorm's epsilon, as in the released code.
_LN_EPSILON = 1e-5
# Seconds between output frames: the feature hop times the conv stride.
_FEATURE_HOP_SECONDS = 0.01

# The uses of the model's seed, each folded into it to give that use its own stream.
_FRONT_END_DROPOUT = 0
_CAPE_SHIFT = 1
_FIRST_BLOCK = 2  # Block i uses _FIRST_BLOCK + i, then its own uses below.
_LAYER_DROP = 0
_ATTENTION_DROPOUT = 1
_MLP_DROPOUT = 2


class BlockTensor(NamedTuple):
  """Where a tensor sits in the blocks: `block_03/w1/kernel` is (3, 'w1', 'kernel').

  Attributes:
    block: the block's index.
    parameter: one of `BLOCK_PARAMETERS`.
    variable: the Keras variable, such as `kernel`, `gamma` or `beta`.
  """
  block: int
  parameter: str
  variable: str


def block_tensor(tensor_name: str) -> Optional[BlockTensor]:
  """Block index, parameter and variable of a tensor name.

  Args:
    tensor_name: a name as `program.model_io.tensor_names` gives it.

  Returns:
    Its `BlockTensor`; None for the tensors outside the blocks (and names whose parameter is not
    in `BLOCK_PARAMETERS`).
  """
  match = _BLOCK_TENSOR.match(tensor_name)
  if match is None or match['parameter'] not in BLOCK_PARAMETERS:
    return None
  return BlockTensor(int(match['block']), match['parameter'], match['variable'])


def block_parameter(tensor_name: str) -> Optional[str]:
  """Which of `BLOCK_PARAMETERS` a tensor belongs to.

  Args:
    tensor_name: a name as `program.model_io.tensor_names` gives it.

  Returns:
    The parameter (`block_00/w1/kernel` -> 'w1'); None for the tensors outside the blocks.
  """
  tensor = block_tensor(tensor_name)
  return None if tensor is None else tensor.parameter


def is_mlp_tensor(tensor_name: str) -> bool:
  """Whether a tensor is one of a block's MLP weights (`MLP_PARAMETERS`): those the "weighted"
  clipping allocation weighs by `mlp_weight` (`program.dp_config.DPConfig.aggregator`).

  Args:
    tensor_name: a name as `program.model_io.tensor_names` gives it.
  """
  return block_parameter(tensor_name) in MLP_PARAMETERS


def output_lengths(lengths, config) -> tf.Tensor:
  """Valid output frames for inputs of `lengths` frames.

  Args:
    lengths: [B] input frames.
    config: a `TransformerConfig` or the name of one.

  Returns:
    [B] int32 output frames, floor(T / stride).
  """
  return tf.math.floordiv(tf.cast(lengths, tf.int32), sizes.get_config(config).conv_stride)


def fold_seed(seed, use: int) -> tf.Tensor:
  """The seed of one use of a seed, so that every use draws from its own stream.

  Args:
    seed: a [2] integer seed.
    use: the use's constant.

  Returns:
    `seed` with `use` folded in, a [2] int64 tensor.
  """
  return tf.random.experimental.stateless_fold_in(seed, tf.constant(use, tf.int64))


def stateless_dropout(x, rate: float, seed, training: bool):
  """Inverted dropout with its mask drawn from `seed`.

  Args:
    x: the input.
    rate: the dropout rate.
    seed: a [2] integer seed, needed when training with `rate` > 0.
    training: whether to drop.

  Returns:
    `x` with dropout; `x` itself unless training with `rate` > 0.
  """
  if not training or rate == 0:
    return x
  return tf.nn.experimental.stateless_dropout(x, rate, seed)


class InputNormalization(tf.keras.layers.Layer):
  """x * scale + bias with one learnable scalar of each."""

  def build(self, input_shape):
    """Creates the scale (1) and bias (0).

    Args:
      input_shape: unused (both are scalars).
    """
    self.scale = self.add_weight(name='scale', shape=[], initializer='ones')
    self.bias = self.add_weight(name='bias', shape=[], initializer='zeros')

  def call(self, x):
    """Applies the normalisation.

    Args:
      x: the features.

    Returns:
      x * scale + bias.
    """
    return x * self.scale + self.bias


class ConvGLUFrontEnd(tf.keras.layers.Layer):
  """Strided 1-D convolution to 2d channels, then a gated linear unit down to d."""

  def __init__(self, model_dim, kernel, stride, dropout, **kwargs):
    """Initializes the layer.

    Args:
      model_dim: d, the output width.
      kernel: the convolution's kernel, in frames.
      stride: its stride, in frames.
      dropout: dropout rate on the output.
      **kwargs: passed to `tf.keras.layers.Layer`.
    """
    super().__init__(**kwargs)
    # Padding kernel - stride frames in total makes the output floor(T / stride) frames long.
    total_padding = kernel - stride
    self._padding = (total_padding // 2, total_padding - total_padding // 2)
    self.conv = tf.keras.layers.Conv1D(2 * model_dim, kernel, strides=stride, name='conv')
    self._dropout = dropout

  def call(self, x, training=False, seed=None):
    """Applies the front-end.

    Args:
      x: [B, T, M] features.
      training: apply dropout.
      seed: a [2] integer seed of the dropout mask, needed when training.

    Returns:
      [B, floor(T / stride), d].
    """
    x = tf.pad(x, [[0, 0], list(self._padding), [0, 0]])
    value, gate = tf.split(self.conv(x), 2, axis=-1)
    return stateless_dropout(value * tf.sigmoid(gate), self._dropout, seed, training)


def cape_embedding(mask, model_dim, frame_seconds, freq_scale, max_global_shift, training,
                   seed=None):
  """CAPE sinusoidal embedding of frame times in seconds, mean-centred over valid frames.

  Likhomanenko et al., "CAPE: Encoding Relative Positions with Continuous Augmented Positional
  Embeddings", NeurIPS 2021, with its global shift only. While training every utterance's
  positions move by one global shift ~ U(-max, max) seconds.

  Args:
    mask: [B, T] valid frames.
    model_dim: d, the embedding's width.
    frame_seconds: seconds between frames.
    freq_scale: scale on positions (seconds) before the sinusoids.
    max_global_shift: the largest shift, in seconds (0: none).
    training: apply the shift.
    seed: a [2] integer seed of the shifts, required when training with a shift.

  Returns:
    [B, T, d] float32 embeddings.
  """
  mask = tf.cast(mask, tf.float32)
  frames = tf.shape(mask)[1]
  positions = tf.cast(tf.range(frames), tf.float32)[tf.newaxis, :] * frame_seconds
  valid = tf.maximum(tf.reduce_sum(mask, axis=1, keepdims=True), 1.0)
  positions -= tf.reduce_sum(positions * mask, axis=1, keepdims=True) / valid
  if training and max_global_shift > 0:
    positions += tf.random.stateless_uniform([tf.shape(mask)[0], 1], seed, -max_global_shift,
                                             max_global_shift)
  half = model_dim // 2
  frequencies = tf.exp(tf.range(half, dtype=tf.float32) * (-math.log(1e4) / half))
  angles = (positions * freq_scale)[:, :, tf.newaxis] * frequencies
  embedding = tf.concat([tf.cos(angles), tf.sin(angles)], axis=-1)
  if model_dim % 2:
    embedding = tf.pad(embedding, [[0, 0], [0, 0], [0, 1]])
  return embedding


class TransformerBlock(tf.keras.layers.Layer):
  """Pre-LN block with fused QKV attention and a ReLU MLP; optional layer drop."""

  def __init__(self, model_dim, mlp_dim, num_heads, dropout, layer_drop, **kwargs):
    """Initializes the block.

    Args:
      model_dim: d, the residual stream's width.
      mlp_dim: the MLP's hidden width.
      num_heads: attention heads (dividing d).
      dropout: dropout on the attention weights and the MLP's hidden layer.
      layer_drop: probability of skipping the whole block in training.
      **kwargs: passed to `tf.keras.layers.Layer`.
    """
    super().__init__(**kwargs)
    self._num_heads = num_heads
    self._head_dim = model_dim // num_heads
    self._dropout = dropout
    self._layer_drop = layer_drop
    self.ln1 = tf.keras.layers.LayerNormalization(epsilon=_LN_EPSILON, name='ln1')
    # The block's linear layers have no biases, as in the released code.
    self.wqkv = tf.keras.layers.Dense(3 * model_dim, use_bias=False, name='wqkv')
    self.wf = tf.keras.layers.Dense(model_dim, use_bias=False, name='wf')
    self.ln2 = tf.keras.layers.LayerNormalization(epsilon=_LN_EPSILON, name='ln2')
    self.w1 = tf.keras.layers.Dense(mlp_dim, use_bias=False, activation='relu', name='w1')
    self.w2 = tf.keras.layers.Dense(model_dim, use_bias=False, name='w2')

  def _attention(self, x, mask, training, seed):
    batch, frames = tf.shape(x)[0], tf.shape(x)[1]
    qkv = tf.reshape(self.wqkv(x), [batch, frames, 3, self._num_heads, self._head_dim])
    q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))  # each [B, heads, T, head_dim]
    scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self._head_dim)
    scores += (1.0 - tf.cast(mask, scores.dtype))[:, tf.newaxis, tf.newaxis, :] * -1e9
    weights = stateless_dropout(tf.nn.softmax(scores, axis=-1), self._dropout, seed, training)
    context = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]),
                         [batch, frames, self._num_heads * self._head_dim])
    return self.wf(context)

  def call(self, x, mask, training=False, seed=None):
    """Applies the block.

    Args:
      x: [B, T, d] residual stream.
      mask: [B, T] valid frames (attention ignores the others).
      training: apply dropout and layer drop.
      seed: this block's [2] integer seed, required when training.

    Returns:
      [B, T, d].
    """
    keep = 1.0
    if training and self._layer_drop > 0:
      keep = tf.cast(tf.random.stateless_uniform([], fold_seed(seed, _LAYER_DROP))
                     >= self._layer_drop, x.dtype)
    attention_seed = fold_seed(seed, _ATTENTION_DROPOUT) if training else None
    x = x + keep * self._attention(self.ln1(x), mask, training, attention_seed)
    hidden = stateless_dropout(self.w1(self.ln2(x)), self._dropout,
                               fold_seed(seed, _MLP_DROPOUT) if training else None, training)
    return x + keep * self.w2(hidden)


class CTCTransformer(tf.keras.Model):
  """The encoder of the module docstring.

  Call on (features [B, T, M], lengths [B]); the output has floor(T / 3) frames
  (`output_lengths`). A training pass also takes `seed`, a [2] integer tensor:
  `model((features, lengths), training=True, seed=seed)`. Every random number it draws (dropout
  masks, layer drop, CAPE's global shift) is a stateless function of that seed: each use draws
  from its own seed, `seed` with a constant of that use folded in (`fold_seed`). So a training
  pass is a deterministic function of (weights, batch, seed), and a replayed federated round
  repeats its clients' work bit for bit (in federated training the seed is the batch's `seed`
  with the local step folded in, `algorithms.local_training.with_step_seed`). A training pass
  without a seed is an error, never a draw from TF's global random state. Inference
  (`training=False`) takes no seed.
  """

  def __init__(self, config, vocab_size, **kwargs):
    """Initializes the layers (`build_ctc_transformer` also builds the weights).

    Args:
      config: a `TransformerConfig` or the name of one.
      vocab_size: tokens without the blank.
      **kwargs: passed to `tf.keras.Model`.
    """
    super().__init__(**kwargs)
    self.config = sizes.get_config(config)
    c = self.config
    self.input_norm = InputNormalization(name='input_norm')
    self.front_end = ConvGLUFrontEnd(c.model_dim, c.conv_kernel, c.conv_stride, c.dropout,
                                     name='conv')
    self.blocks = [
        TransformerBlock(c.model_dim, c.mlp_dim, c.num_heads, c.dropout, c.layer_drop,
                         name=f'block_{i:02d}') for i in range(c.num_blocks)
    ]
    self.final_ln = tf.keras.layers.LayerNormalization(epsilon=_LN_EPSILON, name='final_ln')
    self.output_layer = tf.keras.layers.Dense(vocab_size + 1, name='output')

  def call(self, inputs, training=False, seed=None):
    """Runs the encoder.

    Args:
      inputs: (features [B, T, M], lengths [B]).
      training: a training pass (dropout, layer drop, CAPE's shift).
      seed: a [2] integer seed, required when training (class docstring).

    Returns:
      [B, floor(T / stride), vocab_size + 1] logits.

    Raises:
      ValueError: for a training pass without a seed.
    """
    if training and seed is None:
      raise ValueError(
          'A training pass of the CTC transformer needs `seed` (a [2] integer tensor, e.g. the '
          "batch's `seed` field): model((features, lengths), training=True, seed=seed). Every "
          'random draw of training is made from it, so that a replayed round repeats itself.')

    def use(number):
      return fold_seed(seed, number) if training else None

    features, lengths = inputs
    c = self.config
    # Zero the padding after the input normalisation, so a padded utterance sees the same zeros
    # at its end as the front-end's own padding gives it alone.
    input_mask = tf.sequence_mask(lengths, tf.shape(features)[1], dtype=features.dtype)
    x = self.input_norm(features) * input_mask[:, :, tf.newaxis]
    x = self.front_end(x, training=training, seed=use(_FRONT_END_DROPOUT))
    out_lengths = output_lengths(lengths, c)
    mask = tf.sequence_mask(out_lengths, tf.shape(x)[1])
    x += cape_embedding(mask, c.model_dim, c.conv_stride * _FEATURE_HOP_SECONDS,
                        c.cape_freq_scale, c.cape_max_global_shift, training,
                        use(_CAPE_SHIFT))
    for i, block in enumerate(self.blocks):
      x = block(x, mask, training=training, seed=use(_FIRST_BLOCK + i))
    return self.output_layer(self.final_ln(x))


def build_ctc_transformer(config, vocab_size: int) -> CTCTransformer:
  """Builds the model for `config` (a name in `CONFIGS` or a `TransformerConfig`).

  Args:
    config: model size.
    vocab_size: tokens without the blank (29 for English); the model outputs vocab_size + 1
      logits per frame, the CTC blank included.

  Returns:
    The built `CTCTransformer`.

  Raises:
    ValueError: for a `vocab_size` below 1 or an unknown config.
  """
  if not isinstance(vocab_size, int) or vocab_size < 1:
    raise ValueError(f'`vocab_size` must be an integer >= 1, got {vocab_size!r}.')
  config = sizes.get_config(config)
  model = CTCTransformer(config, vocab_size)
  model((tf.zeros([1, 3 * config.conv_stride, config.num_mels]),
         tf.constant([3 * config.conv_stride])))
  return model
