"""Classifier heads theta_c mapping a pooled state h in R^d to D class logits.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025, Secs. 3.2 and 6.1:
each class is one retrievable document.
"""

import tensorflow as tf

from fedasr_tff import validation

HEADS = ('linear', 'pre_classifier')
DEFAULT_DROPOUT_RATE = 0.1


def check_head(head: str) -> None:
  """Checks a head's name.

  Args:
    head: the name.

  Raises:
    ValueError: unless `head` is one of `HEADS`.
  """
  if head not in HEADS:
    raise ValueError(f'`head` must be one of {HEADS}, got {head!r}.')


def build_head(head: str, num_classes: int, input_dim: int, *, hidden_size: int = None,
               dropout_rate: float = DEFAULT_DROPOUT_RATE) -> tf.keras.Sequential:
  """A head from [B, input_dim] features to [B, num_classes] logits, built.

  - `linear`: logits = W h + b, W in R^{D x d}: d D + D parameters.
  - `pre_classifier`: logits = W_2 Dropout_p(W_1 h + b_1) + b_2 with W_1 in R^{h x d} and
    W_2 in R^{D x h}: h d + h + D h + D parameters. The paper reports neither h nor p nor an
    activation; we take h = d, p = 0.1 and none (the paper calls the layer linear).

  Args:
    head: one of `HEADS`.
    num_classes: D.
    input_dim: d.
    hidden_size: h of `pre_classifier`, default `input_dim`; `linear` refuses one.
    dropout_rate: p of `pre_classifier`, in [0, 1).

  Returns:
    The built `tf.keras.Sequential`.

  Raises:
    ValueError: for an unknown head, an argument out of range, or `hidden_size` with `linear`.
  """
  check_head(head)
  validation.check_positive_integer('num_classes', num_classes)
  validation.check_positive_integer('input_dim', input_dim)
  validation.check_unit_interval_right_open('dropout_rate', dropout_rate)
  if head == 'linear':
    if hidden_size is not None:
      raise ValueError(f"`hidden_size` applies to the 'pre_classifier' head only, got "
                       f'{hidden_size!r} with the {head!r} head.')
    layers = [tf.keras.layers.Dense(num_classes, name='classifier')]
  else:
    hidden_size = input_dim if hidden_size is None else hidden_size
    validation.check_positive_integer('hidden_size', hidden_size)
    layers = [tf.keras.layers.Dense(hidden_size, name='pre_classifier'),
              tf.keras.layers.Dropout(dropout_rate, name='dropout'),
              tf.keras.layers.Dense(num_classes, name='classifier')]
  model = tf.keras.Sequential(layers, name=f'{head}_head')
  model.build([None, input_dim])
  return model


def apply_head(head: tf.keras.Sequential, features, training=None, seed=None) -> tf.Tensor:
  """The logits of a head.

  In training with a `seed`, dropout is `tf.nn.experimental.stateless_dropout` drawn from that
  seed, never from TF's global random state, so that a client's update is a function of its data
  and seeds and a replayed round repeats it bit for bit
  (`algorithms.local_training.with_step_seed`). In training without one, Keras's own (stateful)
  dropout; at inference, none.

  Args:
    head: a head from `build_head`.
    features: [B, d] pooled states.
    training: whether to apply dropout.
    seed: a [2] integer seed of the dropout masks, or None.

  Returns:
    [B, D] logits.
  """
  if not training or seed is None:
    return head(features, training=training)
  outputs = features
  for layer in head.layers:
    if isinstance(layer, tf.keras.layers.Dropout):
      outputs = tf.nn.experimental.stateless_dropout(outputs, layer.rate, seed=seed)
    else:
      outputs = layer(outputs, training=training)
  return outputs
