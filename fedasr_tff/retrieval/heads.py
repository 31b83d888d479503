"""Classifier heads theta_c mapping a pooled state h in R^d to D class logits.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025 (each class
is one retrievable document):
- `linear`: logits = W h + b, W in R^{D x d}: d D + D parameters.
- `pre_classifier`: logits = W_2 Dropout_p(W_1 h + b_1) + b_2 with W_1 in R^{h x d} and
  W_2 in R^{D x h}: h d + h + D h + D parameters. The paper reports neither h nor p nor an
  activation; we take h = d, p = 0.1 and none (the paper calls the layer linear).

Dropout in federated training draws from a seed (`apply_head`), never from TF's global random
state, so that a client's update is a function of its data and seeds and a replayed round repeats
it bit for bit (`fedasr_tff.algorithms.local_training`).
"""

import tensorflow as tf

from fedasr_tff import validation

HEADS = ('linear', 'pre_classifier')
DEFAULT_DROPOUT_RATE = 0.1


def check_head(head: str) -> None:
  """Raises ValueError unless `head` is one of `HEADS`."""
  if head not in HEADS:
    raise ValueError(f'`head` must be one of {HEADS}, got {head!r}.')


def build_head(head: str, num_classes: int, input_dim: int, *, hidden_size: int = None,
               dropout_rate: float = DEFAULT_DROPOUT_RATE) -> tf.keras.Sequential:
  """The head `head` (one of `HEADS`) from [B, input_dim] features to [B, num_classes] logits,
  built. `hidden_size` (h, default `input_dim`) and `dropout_rate` (p, in [0, 1)) are those of
  `pre_classifier`; `linear` refuses a `hidden_size`."""
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
  """[B, D] logits of `head` (from `build_head`) on [B, d] `features`.

  In training with a `seed` (a [2] integer tensor), dropout is
  `tf.nn.experimental.stateless_dropout` drawn from that seed; in training without one, Keras's
  own (stateful) dropout; at inference, none.
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
