"""LAMB as a `tff.learning.optimizers.Optimizer`, with optax's `lamb` defaults.

You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 Minutes", ICLR 2020,
arXiv:1904.00962; the server optimizer of Pelikan et al., "Enabling Differentially Private
Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098, App. E.4.
"""

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import validation
from fedasr_tff.optimizers import hparams
from fedasr_tff.optimizers import trust_ratio


class _Lamb(hparams.HparamsInState):
  """See `build_lamb`."""

  HPARAMS_KEYS = (hparams.LEARNING_RATE_KEY, 'beta_1', 'beta_2', 'epsilon', 'weight_decay')

  def __init__(self, learning_rate, beta_1, beta_2, epsilon, weight_decay):
    self._hparams = collections.OrderedDict(
        learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
        weight_decay=weight_decay)

  def initialize(self, specs: Any) -> collections.OrderedDict:
    def zeros():
      return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)

    return collections.OrderedDict(
        **self._hparams, step=0, first_moment=zeros(), second_moment=zeros())

  def next(self, state, weights, gradients):
    beta_1, beta_2 = state['beta_1'], state['beta_2']
    step = state['step'] + 1
    float_step = tf.cast(step, tf.float32)
    first_correction = 1.0 - tf.pow(tf.cast(beta_1, tf.float32), float_step)
    second_correction = 1.0 - tf.pow(tf.cast(beta_2, tf.float32), float_step)

    def update(w, m, v, g):
      dtype = g.dtype
      m = tf.cast(beta_1, dtype) * m + (1.0 - tf.cast(beta_1, dtype)) * g
      v = tf.cast(beta_2, dtype) * v + (1.0 - tf.cast(beta_2, dtype)) * tf.square(g)
      u = (m / tf.cast(first_correction, dtype)) / (
          tf.sqrt(v / tf.cast(second_correction, dtype)) + tf.cast(state['epsilon'], dtype))
      u = u + tf.cast(state['weight_decay'], dtype) * w
      w = w - tf.cast(state[hparams.LEARNING_RATE_KEY], dtype) * trust_ratio.trust_ratio(w, u) * u
      return w, m, v

    updated = [update(w, m, v, g) for w, m, v, g in zip(
        tf.nest.flatten(weights), tf.nest.flatten(state['first_moment']),
        tf.nest.flatten(state['second_moment']), tf.nest.flatten(gradients), strict=True)]
    new_weights, new_m, new_v = (
        tf.nest.pack_sequence_as(weights, [leaf[i] for leaf in updated]) for i in range(3))
    new_state = self.get_hparams(state)
    new_state.update(step=step, first_moment=new_m, second_moment=new_v)
    return new_state, new_weights


def build_lamb(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               weight_decay=0.0) -> tff.learning.optimizers.Optimizer:
  """LAMB with optax's defaults.

  For every weight tensor θ_h with (pseudo-)gradient g_h, at step t = 1, 2, ...:

      m_h = β1 m_h + (1 − β1) g_h                       v_h = β2 v_h + (1 − β2) g_h²
      m̂_h = m_h / (1 − β1^t)                            v̂_h = v_h / (1 − β2^t)
      u_h = m̂_h / (sqrt(v̂_h) + ξ) + λ θ_h              (weight decay before the trust ratio)
      r_h = ||θ_h|| / ||u_h||                           (1 where either norm is 0)
      θ_h ← θ_h − η r_h u_h

  In FL the server applies it to the (noised) mean client delta, Δ = θ_global − θ_local, which
  acts as a gradient. Each tensor's step has norm η·||θ_h|| whatever the scale of Δ (Pelikan et
  al. 2025, Eq. (E.7) with φ the identity and λ = 0), which is why DP runs can shrink the clip C
  without retuning (ibid., Sec. 4.3 and App. H.3). The paper gives the update without bias
  correction (Eqs. (E.7)-(E.8)); we follow optax, as the paper's released code
  (https://github.com/apple/ml-pfl4asr) does, with ξ = 1e-6 (App. H.3).

  Args:
    learning_rate: η > 0.
    beta_1: β1 in [0, 1).
    beta_2: β2 in [0, 1).
    epsilon: ξ >= 0.
    weight_decay: λ >= 0.

  Returns:
    The optimizer; its hyperparameters sit in its state (`hparams.HparamsInState`).

  Raises:
    ValueError: for an argument out of range.
  """
  validation.check_positive('learning_rate', learning_rate)
  validation.check_unit_interval_right_open('beta_1', beta_1)
  validation.check_unit_interval_right_open('beta_2', beta_2)
  validation.check_non_negative('epsilon', epsilon)
  validation.check_non_negative('weight_decay', weight_decay)
  return _Lamb(learning_rate, beta_1, beta_2, epsilon, weight_decay)
