"""A loaded frozen backbone whose weights are tensors: built over values given at call time.

TFF traces client work into a serialised computation, and eager variables do not cross into it,
yet the adapter + classifier mode (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated
Learning with Ad-hoc Adapter Insertions: The Case of Soft-Embeddings for Training
Classifier-as-Retriever", webAI 2025, mode B) needs the frozen backbone there with its
pretrained weights. `FrozenBackbone` rebuilds it with no variables at all, over weights passed in
as an argument of the computation; why an argument and not constants, and what it costs:
`docs/retrieval.md`.
"""

import collections
from typing import Callable
from typing import Mapping
from typing import Optional

import numpy as np
import tensorflow as tf

from fedasr_tff.text_models import backbone as backbone_lib

# The protocol buffer limit (2 GiB - 1 bytes) on a serialised TFF value or gRPC message.
MAX_MESSAGE_BYTES = 2**31 - 1


def check_fits(parameter_bytes: int, what: str = 'The backbone') -> None:
  """Checks that a backbone's weights fit in one serialised value.

  The weights travel as one serialised value, and a protocol buffer cannot exceed 2 GiB
  (`MAX_MESSAGE_BYTES`, also TFF's gRPC message limit). A backbone whose float32 weights are
  larger (TinyLlama-1.1B is 4.4 GB) cannot travel this way; the classifier-only mode on cached
  features is the way to use it.

  Args:
    parameter_bytes: the weights' bytes.
    what: what to call them in the error.

  Raises:
    ValueError: naming `parameter_bytes` and the limit if it exceeds 90% of
      `MAX_MESSAGE_BYTES` (headroom for the message's framing).
  """
  limit = int(0.9 * MAX_MESSAGE_BYTES)
  if parameter_bytes > limit:
    raise ValueError(
        f'{what} holds {parameter_bytes:,} bytes of weights ({parameter_bytes / 2**30:.2f} GiB); '
        f'TFF sends them to its workers as one serialised value, which must stay below the '
        f'2 GiB protocol-buffer limit ({MAX_MESSAGE_BYTES:,} bytes; we allow {limit:,} for the '
        'weights). Train the classifier only, on cached features (--mode=classifier_only).')


class FrozenWeight(tf.Module):
  """A weight of a frozen backbone that is a tensor, not a variable: it converts to its value
  wherever a tensor is expected, and it cannot be assigned or trained."""

  def __init__(self, value: tf.Tensor, name: str):
    """Wraps a tensor.

    Args:
      value: the weight's value.
      name: the weight's name, as the variable it stands for would have had.
    """
    super().__init__(name=None)
    self._value = value
    self._weight_name = name

  @property
  def name(self) -> str:
    """The weight's name."""
    return self._weight_name

  @property
  def shape(self) -> tf.TensorShape:
    """The value's shape."""
    return self._value.shape

  @property
  def dtype(self) -> tf.DType:
    """The value's dtype."""
    return self._value.dtype

  @property
  def trainable(self) -> bool:
    """Always False."""
    return False

  def value(self) -> tf.Tensor:
    """Returns the tensor."""
    return self._value

  def numpy(self) -> np.ndarray:
    """Returns the tensor's value as NumPy (eagerly)."""
    return self._value.numpy()


tf.register_tensor_conversion_function(
    FrozenWeight, lambda weight, dtype=None, name=None, as_ref=False: weight.value())


def _variable_key(creator_kwargs) -> Optional[str]:
  """'layer path/name' of a variable being created, without the model's own (possibly
  uniquified) name; None for Keras's unnamed bookkeeping variables (its step counters)."""
  name = creator_kwargs.get('name')
  if name is None:
    return None
  scope = tf.get_current_name_scope().split('/', 1)
  return (scope[1] + '/' if len(scope) > 1 else '') + name


class FrozenBackbone:
  """The recipe of a loaded backbone: its architecture and its weights as NumPy arrays, keyed by
  layer path and name (`weights`).

  `build(weights)` builds the backbone with no variables at all: every weight is a
  `FrozenWeight`, a read-only stand-in whose value is the given tensor. Given as arguments of a
  TFF computation (`weights_spec`), the weights are a value the caller passes in (`weights`),
  not part of the computation: TFF's TensorFlow executor runs each concurrently trained client
  in its own session of the computation, and every session holds its own copy of the graph's
  constants and variables, while a value passed in, then broadcast, is one tensor that every
  client's session reads. So the worker holds the backbone once, whatever the number of clients
  it trains at once, and the computation serialises without it.
  """

  def __init__(self, backbone: backbone_lib.Backbone):
    """Records a loaded backbone.

    Args:
      backbone: a loaded `text_models.Backbone` with a `config` attribute (BERT, Llama).

    Raises:
      ValueError: if its weights do not fit in one serialised value (`check_fits`), or two of
        its variables have one name.
    """
    check_fits(backbone.parameter_bytes)
    config, name, kind = backbone.config, backbone.name, type(backbone)
    self._factory: Callable[[], backbone_lib.Backbone] = lambda: kind(config, name=name)
    self.config = config
    # The keys are seen only as variables are created; `weights` order is what set_weights takes.
    created = collections.OrderedDict()

    def record(next_creator, **kwargs):
      variable = next_creator(**kwargs)
      key = _variable_key(kwargs)
      if key is not None:
        if key in created:
          raise ValueError(f'The backbone creates two variables named {key!r}.')
        created[key] = variable
      return variable

    with tf.init_scope(), tf.variable_creator_scope(record):
      probe = self._factory()
      probe.build_weights()
    probe.set_weights(backbone.get_weights())
    self._weights = collections.OrderedDict(
        (key, variable.numpy()) for key, variable in created.items())
    self.parameter_bytes = sum(value.nbytes for value in self._weights.values())

  @property
  def weights(self) -> 'collections.OrderedDict[str, np.ndarray]':
    """{layer path/name: value}: the value `build` takes (a copy; the recipe stays intact)."""
    return collections.OrderedDict((key, value.copy()) for key, value in self._weights.items())

  @property
  def weights_spec(self) -> 'collections.OrderedDict[str, tf.TensorSpec]':
    """The `tf.TensorSpec` of each weight (e.g. for a TFF computation's argument)."""
    return collections.OrderedDict((key, tf.TensorSpec(value.shape, tf.as_dtype(value.dtype)))
                                   for key, value in self._weights.items())

  def build(self, weights: Optional[Mapping[str, object]] = None) -> backbone_lib.Backbone:
    """A frozen backbone, in the current graph (or eagerly), over given weights.

    Args:
      weights: tensors or arrays keyed as `weights`; default the recorded values, as constants.

    Returns:
      The backbone, not trainable, every weight a `FrozenWeight`.

    Raises:
      ValueError: naming a weight that `weights` lacks or gives with the wrong shape.
    """
    weights = self._weights if weights is None else weights
    unknown = sorted(set(weights) - set(self._weights))
    if unknown:
      raise ValueError(f'`weights` holds {unknown}, which the backbone does not have.')
    supplied = set()

    def supply(next_creator, **kwargs):
      key = _variable_key(kwargs)
      if key is None:
        return next_creator(**kwargs)
      if key not in weights:
        raise ValueError(f'`weights` lacks the backbone weight {key!r}.')
      value = tf.convert_to_tensor(weights[key])
      expected = self._weights[key].shape
      if not value.shape.is_compatible_with(expected):
        raise ValueError(f'`weights`[{key!r}] has shape {value.shape}, the backbone needs '
                         f'{expected}.')
      supplied.add(key)
      return FrozenWeight(tf.ensure_shape(value, expected), kwargs['name'])

    with tf.variable_creator_scope(supply):
      model = self._factory()
      model.build_weights()
    missing = sorted(set(self._weights) - supplied)
    if missing:
      raise ValueError(f'The rebuilt backbone did not create the weights {missing}.')
    model.trainable = False
    return model
