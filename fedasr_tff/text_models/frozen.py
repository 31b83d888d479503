"""A loaded frozen backbone that can be rebuilt, weights included, inside any graph.

TFF traces client work into a serialised computation (a `GraphDef` in a protocol buffer), built
by calling a model function in a fresh graph; Python objects and eager variables do not cross
into it. A frozen backbone must still be there, with its pretrained weights, for the adapter +
classifier mode (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc
Adapter Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI
2025, mode B). `FrozenBackbone.build` creates the backbone with every variable initialised from
a constant holding its pretrained value (`tf.variable_creator_scope`), so the weights travel
inside the computation: serialised once when the computation is built, placed once in the
runtime's graph, and re-initialised from those constants each time the runtime instantiates the
computation. Nothing of the backbone is part of the model weights TFF broadcasts or aggregates.

A protocol buffer cannot exceed 2 GiB (`MAX_COMPUTATION_BYTES`), so a backbone whose float32
weights are larger (TinyLlama-1.1B is 4.4 GB) cannot travel this way: `check_fits` refuses it
with the sizes, and the classifier-only mode on cached features is the way to use it.
"""

from typing import Callable
from typing import Dict
from typing import Optional

import tensorflow as tf

from fedasr_tff.text_models import backbone as backbone_lib

# The protocol buffer limit (2 GiB - 1 bytes) on a serialised TFF computation.
MAX_COMPUTATION_BYTES = 2**31 - 1


def check_fits(parameter_bytes: int, what: str = 'The backbone') -> None:
  """Raises ValueError naming `parameter_bytes` and the limit if it exceeds
  `MAX_COMPUTATION_BYTES` (with headroom for the rest of the computation: 90% of it)."""
  limit = int(0.9 * MAX_COMPUTATION_BYTES)
  if parameter_bytes > limit:
    raise ValueError(
        f'{what} holds {parameter_bytes:,} bytes of weights ({parameter_bytes / 2**30:.2f} GiB); '
        f'a TFF computation that carries it must serialise below the 2 GiB protocol-buffer '
        f'limit ({MAX_COMPUTATION_BYTES:,} bytes; we allow {limit:,} for the weights). Train '
        'the classifier only, on cached features (--mode=classifier_only).')


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
  layer path and name.

  Args:
    backbone: a loaded `text_models.Backbone` with a `config` attribute (BERT, Llama).
  """

  def __init__(self, backbone: backbone_lib.Backbone):
    check_fits(backbone.parameter_bytes)
    config, name, kind = backbone.config, backbone.name, type(backbone)
    self._factory: Callable[[], backbone_lib.Backbone] = lambda: kind(config, name=name)
    self.config = config
    # The keys are seen only as variables are created; `weights` order is what set_weights takes.
    created: Dict[str, tf.Variable] = {}

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
    self._values = {key: variable.numpy() for key, variable in created.items()}
    self.parameter_bytes = sum(value.nbytes for value in self._values.values())

  def build(self) -> backbone_lib.Backbone:
    """A frozen backbone with the pretrained weights, in the current graph (or eagerly)."""
    supplied = set()

    def supply(next_creator, **kwargs):
      key = _variable_key(kwargs)
      if key is None:
        return next_creator(**kwargs)
      value = self._values.get(key)
      shape = kwargs.get('shape')
      if value is None or (shape is not None and tuple(shape) != value.shape):
        raise ValueError(f'The backbone creates a variable {key!r} of shape {shape} that was not '
                         'recorded with that shape.')
      supplied.add(key)
      kwargs['initial_value'] = tf.constant(value)
      kwargs['trainable'] = False
      return next_creator(**kwargs)

    with tf.variable_creator_scope(supply):
      model = self._factory()
      model.build_weights()
    missing = sorted(set(self._values) - supplied)
    if missing:
      raise ValueError(f'The rebuilt backbone did not create the variables {missing}.')
    model.trainable = False
    return model
