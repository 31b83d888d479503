"""The layer-wise trust ratio shared by LAMB and LARS (optax's `scale_by_trust_ratio`).

For one weight tensor θ_h and its (pre-learning-rate) update u_h:

    r_h = κ · ||θ_h|| / (||u_h|| + ε),   and r_h = 1 where ||θ_h|| = 0 or ||u_h|| = 0,

so a tensor that is all zeros (freshly initialised biases) or receives a zero update keeps the
plain step instead of a zero or undefined one.
"""

import tensorflow as tf


def trust_ratio(weight: tf.Tensor, update: tf.Tensor, coefficient=1.0, epsilon=0.0) -> tf.Tensor:
  """The trust ratio r_h of one tensor (module docstring).

  Args:
    weight: θ_h.
    update: u_h.
    coefficient: κ.
    epsilon: ε.

  Returns:
    r_h, a scalar of `update`'s dtype.
  """
  weight_norm = tf.norm(weight)
  update_norm = tf.norm(update)
  ratio = tf.cast(coefficient, update.dtype) * weight_norm / (
      update_norm + tf.cast(epsilon, update.dtype))
  zero_norm = tf.logical_or(tf.equal(weight_norm, 0.0), tf.equal(update_norm, 0.0))
  return tf.where(zero_norm, tf.ones_like(ratio), ratio)
