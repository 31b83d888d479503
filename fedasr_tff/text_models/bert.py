"""A BERT encoder in Keras that loads Hugging Face checkpoints, split for an embedding adapter.

BERT (Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019, arXiv:1810.04805, Sec. 3) is the post-LN transformer encoder of
Vaswani et al. ("Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762, Sec. 3). The pass is
split in two so that a trainable adapter can act on the token embeddings before the frozen
transformer (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter
Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025, Sec. 1:
adapters "after the token embeddings and before the transformer blocks").
"""

import dataclasses
import math
from typing import Mapping
from typing import Optional

import tensorflow as tf

from fedasr_tff import validation
from fedasr_tff.text_models import backbone

# hidden_act -> activation; the names are Hugging Face's.
ACTIVATIONS = {
    'gelu': lambda x: tf.nn.gelu(x, approximate=False),
    'gelu_new': lambda x: tf.nn.gelu(x, approximate=True),
    'gelu_pytorch_tanh': lambda x: tf.nn.gelu(x, approximate=True),
    'relu': tf.nn.relu,
}
# The score a padding key gets before the softmax: exp(-1e9 - max) is exactly 0 in float32.
_MASKED_SCORE = -1e9
# The tensor whose name tells a checkpoint's prefix.
_ANCHOR = 'embeddings.word_embeddings.weight'

# Checkpoint tensor names (without the model prefix) -> (our layer, weight), Linear weights
# marked for transposition. Layer N's names start with `encoder.layer.N.`.
HF_EMBEDDING_TENSORS = {
    'embeddings.word_embeddings.weight': ('word_embeddings', 'embeddings', False),
    'embeddings.position_embeddings.weight': ('position_embeddings', 'embeddings', False),
    'embeddings.token_type_embeddings.weight': ('token_type_embeddings', 'embeddings', False),
    'embeddings.LayerNorm.weight': ('embeddings_ln', 'gamma', False),
    'embeddings.LayerNorm.bias': ('embeddings_ln', 'beta', False),
}
HF_LAYER_TENSORS = {
    'attention.self.query.weight': ('query', 'kernel', True),
    'attention.self.query.bias': ('query', 'bias', False),
    'attention.self.key.weight': ('key', 'kernel', True),
    'attention.self.key.bias': ('key', 'bias', False),
    'attention.self.value.weight': ('value', 'kernel', True),
    'attention.self.value.bias': ('value', 'bias', False),
    'attention.output.dense.weight': ('attention_output', 'kernel', True),
    'attention.output.dense.bias': ('attention_output', 'bias', False),
    'attention.output.LayerNorm.weight': ('attention_ln', 'gamma', False),
    'attention.output.LayerNorm.bias': ('attention_ln', 'beta', False),
    'intermediate.dense.weight': ('intermediate', 'kernel', True),
    'intermediate.dense.bias': ('intermediate', 'bias', False),
    'output.dense.weight': ('output_dense', 'kernel', True),
    'output.dense.bias': ('output_dense', 'bias', False),
    'output.LayerNorm.weight': ('output_ln', 'gamma', False),
    'output.LayerNorm.bias': ('output_ln', 'beta', False),
}


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """A BERT architecture, with the field names of Hugging Face's `config.json`.

  Attributes:
    vocab_size: tokens of the vocabulary.
    hidden_size: d.
    num_hidden_layers: encoder layers.
    num_attention_heads: H, dividing d.
    intermediate_size: the feed-forward network's width.
    hidden_act: the feed-forward activation, a key of `ACTIVATIONS`.
    max_position_embeddings: the most positions.
    type_vocab_size: segment types.
    layer_norm_eps: LayerNorm's ε.
  """
  vocab_size: int
  hidden_size: int
  num_hidden_layers: int
  num_attention_heads: int
  intermediate_size: int
  hidden_act: str = 'gelu'
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12

  def __post_init__(self):
    for name in ('vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads',
                 'intermediate_size', 'max_position_embeddings', 'type_vocab_size'):
      validation.check_positive_integer(name, getattr(self, name))
    validation.check_positive('layer_norm_eps', self.layer_norm_eps)
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f'`hidden_size` ({self.hidden_size}) must be a multiple of '
                       f'`num_attention_heads` ({self.num_attention_heads}).')
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f'`hidden_act` must be one of {sorted(ACTIVATIONS)}, got '
                       f'{self.hidden_act!r}.')

  @classmethod
  def from_hf_config(cls, config: Mapping) -> 'BertConfig':
    """The architecture of a Hugging Face BERT `config.json`.

    Args:
      config: the parsed `config.json`; keys that are not fields are ignored.

    Returns:
      The `BertConfig`.

    Raises:
      ValueError: for a config of another model type or with non-absolute positions.
    """
    if config.get('model_type', 'bert') != 'bert':
      raise ValueError(f'`config` is not a BERT config: model_type {config["model_type"]!r}.')
    position_type = config.get('position_embedding_type', 'absolute')
    if position_type != 'absolute':
      raise ValueError(f'`config` has position_embedding_type {position_type!r}; only '
                       "'absolute' is implemented.")
    fields = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in config.items() if key in fields})


def _dense(units, name):
  return tf.keras.layers.Dense(units, name=name)


class BertLayer(tf.keras.layers.Layer):
  """One post-LN block: self-attention, then the feed-forward network (`BertEncoder`)."""

  def __init__(self, config: BertConfig, **kwargs):
    """Initializes the block's layers.

    Args:
      config: the architecture.
      **kwargs: passed to `tf.keras.layers.Layer`.
    """
    super().__init__(**kwargs)
    d = config.hidden_size
    self._heads = config.num_attention_heads
    self._head_dim = d // config.num_attention_heads
    self._act = ACTIVATIONS[config.hidden_act]
    eps = config.layer_norm_eps
    self.query = _dense(d, 'query')
    self.key = _dense(d, 'key')
    self.value = _dense(d, 'value')
    self.attention_output = _dense(d, 'attention_output')
    self.attention_ln = tf.keras.layers.LayerNormalization(epsilon=eps, name='attention_ln')
    self.intermediate = _dense(config.intermediate_size, 'intermediate')
    self.output_dense = _dense(d, 'output')
    self.output_ln = tf.keras.layers.LayerNormalization(epsilon=eps, name='output_ln')

  def _split_heads(self, x):
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    x = tf.reshape(x, [batch, length, self._heads, self._head_dim])
    return tf.transpose(x, [0, 2, 1, 3])   # [B, H, T, d_h]

  def call(self, x, key_bias):
    """Applies the block.

    Args:
      x: [B, T, d] states.
      key_bias: [B, 1, 1, T], 0 for tokens and -1e9 for padding.

    Returns:
      [B, T, d] states.
    """
    q, k, v = (self._split_heads(layer(x)) for layer in (self.query, self.key, self.value))
    scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self._head_dim) + key_bias
    context = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    context = tf.transpose(context, [0, 2, 1, 3])
    context = tf.reshape(context, tf.shape(x))
    x = self.attention_ln(x + self.attention_output(context))
    return self.output_ln(x + self.output_dense(self._act(self.intermediate(x))))


class BertEncoder(backbone.Backbone):
  """BERT's embeddings and encoder layers (no pooler).

      e_k = E_word[x_k]                                      (`embed`: the token embedding lookup)
      x_k = LN(e_k + E_pos[k] + E_type[s_k])                 (`encode` from here on)
      per layer, with heads h = 1..H of width d_h = d / H:
        A_h = softmax(Q_h K_hᵀ / √d_h + M),  Q = x W_qᵀ + b_q (likewise K, V)
        x = LN(x + concat_h(A_h V_h) W_oᵀ + b_o)
        x = LN(x + act(x W_1ᵀ + b_1) W_2ᵀ + b_2)
      M[i, j] = 0 where token j is real and -1e9 where it is padding (the mask of keys).

  `act` is the config's `hidden_act`: `gelu` is the exact GELU x·Φ(x) = x/2·(1 + erf(x/√2))
  (Hendrycks and Gimpel, arXiv:1606.08415); `gelu_new`/`gelu_pytorch_tanh` its tanh
  approximation; `relu`. LN is layer normalisation with the config's `layer_norm_eps`. Positions
  are 0..T-1 and segment ids s_k default to 0. There is no dropout: the encoder is a frozen
  feature extractor. The adapter sees the looked-up embedding alone, as in a decoder without
  absolute positions; positions and segments are added after it, so an identity adapter leaves
  the model unchanged.

  Inputs are dicts with `token_ids` [B, T] and `mask` [B, T] (1 for a token, 0 for padding),
  optionally `token_type_ids` [B, T]; the output is the last layer's states [B, T, d].
  """

  def __init__(self, config: BertConfig, **kwargs):
    """Initializes the layers.

    Args:
      config: the architecture.
      **kwargs: passed to `tf.keras.Model`.
    """
    super().__init__(**kwargs)
    self.config = config
    d = config.hidden_size
    self.word_embeddings = tf.keras.layers.Embedding(config.vocab_size, d,
                                                     name='word_embeddings')
    self.position_embeddings = tf.keras.layers.Embedding(config.max_position_embeddings, d,
                                                         name='position_embeddings')
    self.token_type_embeddings = tf.keras.layers.Embedding(config.type_vocab_size, d,
                                                           name='token_type_embeddings')
    self.embeddings_ln = tf.keras.layers.LayerNormalization(epsilon=config.layer_norm_eps,
                                                            name='embeddings_ln')
    self.encoder_layers = [BertLayer(config, name=f'layer_{i}')
                           for i in range(config.num_hidden_layers)]

  def embed(self, token_ids) -> tf.Tensor:
    """The token embeddings e_k = E_word[x_k]: the adapter's input.

    Args:
      token_ids: [B, T] token ids.

    Returns:
      [B, T, d] embeddings.
    """
    return self.word_embeddings(token_ids)

  def encode(self, token_embeddings, mask, token_type_ids=None) -> tf.Tensor:
    """The last layer's states from (adapted) token embeddings.

    Args:
      token_embeddings: [B, T, d].
      mask: [B, T], 1 for a token, 0 for padding.
      token_type_ids: [B, T] segment ids; None for 0.

    Returns:
      [B, T, d] states.
    """
    # The length check gates the length, so it also runs in TF1-style graphs (TFF's), which
    # have no automatic control dependencies.
    length = backbone.checked_length(token_embeddings, self.config.max_position_embeddings)
    if token_type_ids is None:
      token_type_ids = tf.zeros(tf.shape(token_embeddings)[:2], tf.int32)
    x = (token_embeddings + self.position_embeddings(tf.range(length))[tf.newaxis]
         + self.token_type_embeddings(token_type_ids))
    x = self.embeddings_ln(x)
    mask = tf.cast(mask, x.dtype)
    key_bias = ((1.0 - mask) * _MASKED_SCORE)[:, tf.newaxis, tf.newaxis, :]
    for layer in self.encoder_layers:
      x = layer(x, key_bias)
    return x

  def hf_assignments(self) -> dict:
    """The weights by Hugging Face tensor name.

    Hugging Face stores a Linear weight as [out, in], our Dense kernels are [in, out], so those
    are marked for transposition. Tensors the encoder does not use (the pooler, `position_ids`,
    pre-training heads) are not listed.

    Returns:
      {checkpoint tensor name without prefix: (variable, transpose)} of every weight
      (`HF_EMBEDDING_TENSORS`, and `HF_LAYER_TENSORS` of every layer).
    """
    self.build_weights()
    assignments = {}
    for name, (layer, weight, transpose) in HF_EMBEDDING_TENSORS.items():
      assignments[name] = (getattr(getattr(self, layer), weight), transpose)
    for i, block in enumerate(self.encoder_layers):
      for name, (layer, weight, transpose) in HF_LAYER_TENSORS.items():
        assignments[f'encoder.layer.{i}.{name}'] = (getattr(getattr(block, layer), weight),
                                                    transpose)
    return assignments

  def load_hf_tensors(self, tensors: Mapping) -> None:
    """Assigns every weight from a Hugging Face BERT checkpoint.

    Args:
      tensors: the checkpoint's {name: array}, with or without a model prefix such as `bert.`.

    Raises:
      KeyError: naming a missing tensor; ValueError: naming a mis-shaped one.
    """
    super().load_hf_tensors(tensors, backbone.model_prefix(tensors, _ANCHOR))


def build_bert_encoder(model_dir: str, expected_sha256: Optional[Mapping[str, str]] = None,
                       trainable: bool = False) -> BertEncoder:
  """A `BertEncoder` with the architecture and weights of a Hugging Face model folder.

  Args:
    model_dir: the folder (`checkpoints.load_tensors` reads it).
    expected_sha256: {weight file: SHA-256} to check, or None.
    trainable: whether the weights train; frozen if False.

  Returns:
    The loaded `BertEncoder` (`backbone.build_from_checkpoint`).
  """
  return backbone.build_from_checkpoint(BertEncoder, BertConfig, model_dir, expected_sha256,
                                        trainable, name='bert_encoder')
