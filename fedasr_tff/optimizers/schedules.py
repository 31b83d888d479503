"""Learning-rate schedules: callables from round number (0-based) to learning rate.

They accept Python ints and `tf.Tensor`s alike (TFF's `schedule_learning_rate` calls them inside
a TensorFlow computation) and return a float32 tensor; `float(schedule(t))` gives the number.

* `constant(η0)`:                     η0.
* `exponential_decay(η0, ρ, τ, t0)`:  η0 for t < t0, then η0 · ρ^((t − t0)/τ) ([1], Figs. 3-4), or
                                      ρ^floor((t − t0)/τ) with `staircase=True`.
* `step_decay(η0, factor, every, t0)`: η0 · factor^floor((t − t0)/every + 1) once t >= t0 (the
                                      seed recipe of [1], App. F: halve every 50k steps).
* `linear_warmup(schedule, rounds)`:  schedule(t) · min(1, (t + 1)/rounds).
* `by_name(name, η0, ρ, period, t0)`: one of the first three by its name in `NAMES` (what the
                                      experiment binaries' schedule flags hold).

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
"""

from typing import Callable
from typing import Union

import tensorflow as tf

from fedasr_tff import validation

Schedule = Callable[[Union[int, tf.Tensor]], tf.Tensor]

NAMES = ('constant', 'exponential', 'step')


def _rounds_since(round_num, start_round):
  return tf.cast(round_num, tf.float32) - float(start_round)


def constant(learning_rate: float) -> Schedule:
  validation.check_positive('learning_rate', learning_rate)
  return lambda round_num: tf.constant(learning_rate, tf.float32)


def exponential_decay(learning_rate: float, decay_rate: float, transition_rounds: int,
                      start_round: int = 0, staircase: bool = False) -> Schedule:
  """η0 until `start_round`, then η0 · decay_rate^((t − start_round) / transition_rounds)."""
  validation.check_positive('learning_rate', learning_rate)
  validation.check_positive('decay_rate', decay_rate)
  validation.check_positive_integer('transition_rounds', transition_rounds)
  validation.check_non_negative_integer('start_round', start_round)

  def schedule(round_num):
    exponent = tf.maximum(_rounds_since(round_num, start_round), 0.0) / transition_rounds
    if staircase:
      exponent = tf.floor(exponent)
    return learning_rate * tf.pow(tf.constant(decay_rate, tf.float32), exponent)

  return schedule


def step_decay(learning_rate: float, factor: float, every_rounds: int,
               start_round: int) -> Schedule:
  """η0 before `start_round`; from then on multiplied by `factor` every `every_rounds` rounds."""
  validation.check_positive('learning_rate', learning_rate)
  validation.check_positive('factor', factor)
  validation.check_positive_integer('every_rounds', every_rounds)
  validation.check_non_negative_integer('start_round', start_round)

  def schedule(round_num):
    since = _rounds_since(round_num, start_round)
    steps = tf.where(since >= 0, tf.floor(since / every_rounds) + 1.0, 0.0)
    return learning_rate * tf.pow(tf.constant(factor, tf.float32), steps)

  return schedule


def linear_warmup(schedule: Schedule, warmup_rounds: int) -> Schedule:
  """`schedule` scaled by min(1, (t + 1) / warmup_rounds)."""
  validation.check_positive_integer('warmup_rounds', warmup_rounds)
  if not callable(schedule):
    raise ValueError(f'`schedule` must be a callable from round to learning rate, got '
                     f'{schedule!r}.')

  def warmed_up(round_num):
    scale = tf.minimum(1.0, (tf.cast(round_num, tf.float32) + 1.0) / warmup_rounds)
    return scale * schedule(round_num)

  return warmed_up


def by_name(name: str, learning_rate: float, decay_rate: float, period: int,
            start_round: int) -> Schedule:
  """`constant(η0)`, `exponential_decay(η0, ρ, period, t0)` or `step_decay(η0, ρ, period, t0)`.

  The decay arguments are checked only for the schedules that use them.
  """
  if name == 'exponential':
    return exponential_decay(learning_rate, decay_rate, period, start_round=start_round)
  if name == 'step':
    return step_decay(learning_rate, decay_rate, period, start_round)
  if name == 'constant':
    return constant(learning_rate)
  raise ValueError(f'`name` must be one of {NAMES}, got {name!r}.')
