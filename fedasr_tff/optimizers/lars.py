"""LARS as a `tff.learning.optimizers.Optimizer`, optax's `lars` with its defaults.

You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks", arXiv:1708.03888.
Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, compare
it with LAMB as the server optimizer (App. G.4) and train their central seed models with it
(Sec. 4, App. F) without defining it; we follow optax's `lars`, which the paper's released code
(https://github.com/apple/ml-pfl4asr) calls.
"""

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import validation
from fedasr_tff.optimizers import hparams
from fedasr_tff.optimizers import trust_ratio


class _Lars(hparams.HparamsInState):
  """See `build_lars`."""

  HPARAMS_KEYS = (hparams.LEARNING_RATE_KEY, 'momentum', 'trust_coefficient', 'epsilon',
                  'weight_decay')

  def __init__(self, learning_rate, momentum, trust_coefficient, epsilon, weight_decay,
               nesterov):
    self._hparams = collections.OrderedDict(
        learning_rate=learning_rate, momentum=momentum, trust_coefficient=trust_coefficient,
        epsilon=epsilon, weight_decay=weight_decay)
    self._nesterov = nesterov

  def initialize(self, specs: Any) -> collections.OrderedDict:
    trace = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
    return collections.OrderedDict(**self._hparams, trace=trace)

  def next(self, state, weights, gradients):

    def update(w, trace, g):
      dtype = g.dtype
      u = g + tf.cast(state['weight_decay'], dtype) * w
      ratio = trust_ratio.trust_ratio(w, u, state['trust_coefficient'], state['epsilon'])
      step = -tf.cast(state[hparams.LEARNING_RATE_KEY], dtype) * ratio * u
      momentum = tf.cast(state['momentum'], dtype)
      trace = step + momentum * trace
      return w + (step + momentum * trace if self._nesterov else trace), trace

    updated = [update(w, t, g) for w, t, g in zip(
        tf.nest.flatten(weights), tf.nest.flatten(state['trace']), tf.nest.flatten(gradients),
        strict=True)]
    new_weights, new_trace = (
        tf.nest.pack_sequence_as(weights, [leaf[i] for leaf in updated]) for i in range(2))
    new_state = self.get_hparams(state)
    new_state['trace'] = new_trace
    return new_state, new_weights


def build_lars(learning_rate, momentum=0.9, trust_coefficient=0.001, epsilon=0.0,
               weight_decay=0.0, nesterov=False) -> tff.learning.optimizers.Optimizer:
  """LARS with optax's defaults.

  For every weight tensor θ_h with (pseudo-)gradient g_h:

      u_h = g_h + λ θ_h                                 (weight decay before the trust ratio)
      r_h = κ ||θ_h|| / (||u_h|| + ε)                   (1 where either norm is 0)
      s_h = −η r_h u_h                                  (learning-rate scaled step)
      τ_h = s_h + μ τ_h                                 (momentum trace, after the LR scaling)
      θ_h ← θ_h + τ_h            or, with Nesterov,  θ_h ← θ_h + s_h + μ τ_h

  Because the trace accumulates LR-scaled steps, changing η mid-run (a schedule) only affects
  new steps, as in optax.

  Args:
    learning_rate: η > 0.
    momentum: μ in [0, 1).
    trust_coefficient: κ > 0.
    epsilon: ε >= 0.
    weight_decay: λ >= 0.
    nesterov: use Nesterov momentum.

  Returns:
    The optimizer; its hyperparameters sit in its state (`hparams.HparamsInState`).

  Raises:
    ValueError: for an argument out of range.
  """
  validation.check_positive('learning_rate', learning_rate)
  validation.check_unit_interval_right_open('momentum', momentum)
  validation.check_positive('trust_coefficient', trust_coefficient)
  validation.check_non_negative('epsilon', epsilon)
  validation.check_non_negative('weight_decay', weight_decay)
  return _Lars(learning_rate, momentum, trust_coefficient, epsilon, weight_decay, bool(nesterov))
