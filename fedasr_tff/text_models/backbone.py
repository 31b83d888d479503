"""What every frozen text backbone shares: the embed/encode split, pooling, loading by name.

A backbone maps token ids [B, T] and a mask [B, T] (1 for a token, 0 for padding) to hidden
states [B, T, d] in two steps, so that a trainable adapter can act on the token embeddings
between them (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc
Adapter Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI
2025, Sec. 3.1): `encode(adapter(embed(ids)), mask)`. Subclasses define `embed`, `encode` and
`hf_assignments` (their variables by Hugging Face tensor name); the rest is here.
"""

from typing import Mapping
from typing import Optional

import numpy as np
import tensorflow as tf

from fedasr_tff.text_models import checkpoints
from fedasr_tff.text_models import pooling as pooling_lib


def checked_length(token_embeddings, max_position_embeddings: int) -> tf.Tensor:
  """The sequence length, checked against the model's positions.

  Args:
    token_embeddings: [B, T, d].
    max_position_embeddings: the most positions the model has.

  Returns:
    T, after an assertion that T <= `max_position_embeddings`.
  """
  length = tf.shape(token_embeddings)[1]
  check = tf.debugging.assert_less_equal(
      length, max_position_embeddings, message='Sequence longer than max_position_embeddings.')
  with tf.control_dependencies([check] if check is not None else []):
    return tf.identity(length)


def trim_padding(inputs: Mapping[str, tf.Tensor]) -> dict:
  """A batch cut after its last token: padded to its longest sequence, not to a fixed length.

  Tokenizers pad every text to their `max_length`, most texts are much shorter, and a backbone's
  cost grows with the padded length. The columns after the last token of every sequence change
  nothing that is read: attention gives padding keys a score of -1e9, whose softmax weight is
  exactly 0, positions count from the first column (BERT) or the tokens (Llama), and pooling
  reads tokens only. So the pooled states, and their gradients, are those of the full batch up
  to float rounding. Columns before the first token (left padding) are kept.

  Args:
    inputs: {'token_ids': [B, T], 'mask': [B, T] (1 for a token, 0 for padding), and any
      extras [B, T] such as 'token_type_ids'}.

  Returns:
    A dict of the same entries cut to [B, T'], T' the last column that holds a token in any row
    (at least 1).
  """
  inputs = {key: tf.convert_to_tensor(value) for key, value in inputs.items()}
  mask = inputs['mask']
  columns = tf.range(1, tf.shape(mask)[1] + 1)
  # At least one column, so that a batch of empty sequences still pools (to zeros, or x_0).
  length = tf.maximum(tf.reduce_max(tf.where(mask > 0, columns[tf.newaxis], 0)), 1)
  return {key: value[:, :length] for key, value in inputs.items()}


class Backbone(tf.keras.Model):
  """A text backbone: inputs are dicts with `token_ids` and `mask` (plus whatever extra keyword
  arguments the subclass's `encode` takes); the output is the hidden states [B, T, d]."""

  def embed(self, token_ids) -> tf.Tensor:
    """The token embeddings: the adapter's input.

    Args:
      token_ids: [B, T] token ids.

    Returns:
      [B, T, d] embeddings.
    """
    raise NotImplementedError

  def encode(self, token_embeddings, mask, **kwargs) -> tf.Tensor:
    """The hidden states from (adapted) token embeddings.

    Args:
      token_embeddings: [B, T, d].
      mask: [B, T], 1 for a token, 0 for padding.
      **kwargs: what the subclass takes besides (such as token ids for positions).

    Returns:
      [B, T, d] hidden states.
    """
    raise NotImplementedError

  def hf_assignments(self) -> dict:
    """Returns {checkpoint tensor name without prefix: (variable, transpose)} of every weight."""
    raise NotImplementedError

  def call(self, inputs):
    """The hidden states of a batch.

    Args:
      inputs: a dict with `token_ids` and `mask`, and the subclass's extras.

    Returns:
      [B, T, d]: `encode(embed(token_ids), mask, **extras)`.
    """
    extras = {key: value for key, value in inputs.items() if key not in ('token_ids', 'mask')}
    return self.encode(self.embed(inputs['token_ids']), inputs['mask'], **extras)

  def pooled(self, inputs, pooling: str) -> tf.Tensor:
    """The output states pooled over the non-padding tokens.

    Args:
      inputs: a dict with `token_ids` and `mask` (and the subclass's extras).
      pooling: one of `pooling.POOLINGS`.

    Returns:
      [B, d].
    """
    inputs = trim_padding(inputs)
    return pooling_lib.pool(self(inputs), inputs['mask'], pooling)

  def build_weights(self) -> None:
    """Creates every weight (a pass over a one-token batch), if not yet created."""
    if not self.built:
      self({'token_ids': tf.zeros([1, 1], tf.int32), 'mask': tf.ones([1, 1], tf.int32)})

  @property
  def parameter_bytes(self) -> int:
    """Bytes of all weights as held in memory (float32: 4 per parameter), the size a TFF
    computation that carries the backbone must serialise."""
    self.build_weights()
    return sum(int(np.prod(v.shape)) * v.dtype.size for v in self.weights)

  def load_hf_tensors(self, tensors: Mapping, prefix: str = '') -> None:
    """Assigns every weight from a Hugging Face checkpoint.

    Args:
      tensors: the checkpoint's {name: array}.
      prefix: prepended to the names of `hf_assignments`.

    Raises:
      KeyError: for a missing tensor, or ValueError for a mis-shaped one
        (`checkpoints.get_tensor`), naming it, before any weight is assigned.
    """
    assignments = self.hf_assignments()
    values = []
    for name, (var, transpose) in assignments.items():
      shape = var.shape[::-1] if transpose else var.shape
      array = checkpoints.get_tensor(tensors, prefix + name, shape)
      values.append(array.T if transpose else array)
    for (var, _), value in zip(assignments.values(), values, strict=True):
      var.assign(value)


def build_from_checkpoint(backbone_class, config_class, model_dir: str,
                          expected_sha256: Optional[Mapping[str, str]], trainable: bool,
                          name: str) -> Backbone:
  """A backbone loaded from a Hugging Face model folder.

  Args:
    backbone_class: the `Backbone` subclass.
    config_class: its configuration class, with `from_hf_config`.
    model_dir: the folder (`config.json` and safetensors weights).
    expected_sha256: {weight file: SHA-256} to check (`checkpoints.load_tensors`), or None.
    trainable: whether the weights train; frozen if False.
    name: the Keras model's name.

  Returns:
    `backbone_class(config_class.from_hf_config(config.json))` with the folder's weights.
  """
  config = config_class.from_hf_config(checkpoints.read_config(model_dir))
  tensors = checkpoints.load_tensors(model_dir, expected_sha256)
  model = backbone_class(config, name=name)
  model.load_hf_tensors(tensors)
  model.trainable = trainable
  return model


def model_prefix(tensors: Mapping, anchor: str) -> str:
  """The prefix of the checkpoint's tensor names, found from one name.

  Args:
    tensors: the checkpoint's {name: array}.
    anchor: a tensor name every checkpoint of the model has.

  Returns:
    '' when `anchor` is there as it is, 'bert.' when `bert.<anchor>` is (a checkpoint of a model
    with heads).

  Raises:
    KeyError: naming `anchor` when it is missing or found under several prefixes.
  """
  if anchor in tensors:
    return ''
  prefixes = sorted(name[:-len(anchor)] for name in tensors if name.endswith('.' + anchor))
  if len(prefixes) != 1:
    raise KeyError(f'Checkpoint tensor {anchor!r} is missing' +
                   (f' (found it under several prefixes: {prefixes}).' if prefixes else '.'))
  return prefixes[0]
