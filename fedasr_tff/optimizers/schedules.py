"""Learning-rate schedules: callables from round number (0-based) to learning rate.

They accept Python ints and `tf.Tensor`s alike (TFF's `schedule_learning_rate` calls them inside
a TensorFlow computation) and return a float32 tensor; `float(schedule(t))` gives the number. The
decays are those of Pelikan et al., "Enabling Differentially Private Federated Learning for
Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098 (Figs. 3-4, App. F).
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
  """A constant learning rate.

  Args:
    learning_rate: η0 > 0.

  Returns:
    The schedule t -> η0.
  """
  validation.check_positive('learning_rate', learning_rate)
  return lambda round_num: tf.constant(learning_rate, tf.float32)


def exponential_decay(learning_rate: float, decay_rate: float, transition_rounds: int,
                      start_round: int = 0, staircase: bool = False) -> Schedule:
  """Exponential decay (the paper's Figs. 3-4).

  Args:
    learning_rate: η0 > 0.
    decay_rate: ρ > 0.
    transition_rounds: τ, rounds per factor ρ.
    start_round: t0, the round the decay starts.
    staircase: decay in whole steps, ρ^floor((t − t0)/τ).

  Returns:
    The schedule: η0 until t0, then η0 · ρ^((t − t0)/τ).
  """
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
  """Step decay (the seed recipe of the paper, App. F: halve every 50k steps).

  Args:
    learning_rate: η0 > 0.
    factor: the factor per step, > 0.
    every_rounds: rounds per step.
    start_round: t0, the round of the first step.

  Returns:
    The schedule: η0 before t0, then η0 · factor^floor((t − t0)/every_rounds + 1).
  """
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
  """A schedule with a linear warm-up.

  Args:
    schedule: the schedule to warm up.
    warmup_rounds: rounds of the warm-up.

  Returns:
    The schedule t -> schedule(t) · min(1, (t + 1) / warmup_rounds).

  Raises:
    ValueError: if `schedule` is not callable or `warmup_rounds` not a positive integer.
  """
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
  """A schedule by its name in `NAMES`, what the experiment binaries' schedule flags hold.

  The decay arguments are checked only for the schedules that use them.

  Args:
    name: "constant", "exponential" or "step".
    learning_rate: η0.
    decay_rate: ρ, the factor of the decays.
    period: rounds per factor ρ.
    start_round: t0, the round the decay starts.

  Returns:
    `constant(η0)`, `exponential_decay(η0, ρ, period, t0)` or `step_decay(η0, ρ, period, t0)`.

  Raises:
    ValueError: for an unknown name or an argument out of range.
  """
  if name == 'exponential':
    return exponential_decay(learning_rate, decay_rate, period, start_round=start_round)
  if name == 'step':
    return step_decay(learning_rate, decay_rate, period, start_round)
  if name == 'constant':
    return constant(learning_rate)
  raise ValueError(f'`name` must be one of {NAMES}, got {name!r}.')
