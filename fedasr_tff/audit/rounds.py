"""Rounds of a DP query run back to back from its initial state, as a run's rounds are.

The driver of the audits that attack the query directly (`distinguishing`, `noise_check`,
`clipping_check`): the state, and with it the noise stream, is carried from round to round.
"""

from typing import Callable
from typing import Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp


def reported_noise_multiplier(query: tfp.DPQuery, template) -> float:
  """z of the query's DP event (a Gaussian mechanism), from one round on an empty cohort.

  Args:
    query: the DP query.
    template: zeros of the value's leaves.

  Returns:
    z of the query's `GaussianDpEvent`.

  Raises:
    ValueError: if the event is not a `GaussianDpEvent`.
  """
  _, _, event = query.get_noised_result(query.initial_sample_state(template),
                                        query.initial_global_state())
  if not isinstance(event, dp_accounting.GaussianDpEvent):
    raise ValueError(f'The query reports {event}; the audit tests one Gaussian mechanism a '
                     'round.')
  return float(event.noise_multiplier)


def run(query: tfp.DPQuery,
        canary: Sequence[tf.Tensor],
        present: np.ndarray,
        observe: Callable,
        *,
        cohort_size: int = 1,
        zero_updates: bool = False) -> np.ndarray:
  """Runs one round per entry of `present` and returns what `observe` saw of each.

  Args:
    query: the DP query.
    canary: the leaves of the canary record.
    present: int [rounds], whether the canary is in the round's cohort.
    observe: (released leaves, global state after the round) -> a 1-D float32 tensor.
    cohort_size: S, the clients reporting with `zero_updates`.
    zero_updates: the cohort is S - 1 zero updates plus the canary or a zero update (client-side
      noise needs exactly S clients); otherwise {} or {canary}.

  Returns:
    [rounds, k] float64, row t what `observe` returned after round t.
  """
  template = [tf.zeros_like(leaf) for leaf in canary]

  @tf.function
  def rounds(present):
    state = query.initial_global_state()
    out = tf.TensorArray(tf.float32, size=tf.shape(present)[0])
    for k in tf.range(tf.shape(present)[0]):
      params = query.derive_sample_params(state)
      sample = query.initial_sample_state(template)
      with_canary = present[k] > 0
      if zero_updates:
        first = [tf.where(with_canary, leaf, tf.zeros_like(leaf)) for leaf in canary]
        sample = query.accumulate_record(params, sample, first)
        for _ in tf.range(cohort_size - 1):
          sample = query.accumulate_record(params, sample, template)
      else:
        empty = sample
        sample = tf.cond(with_canary,
                         lambda p=params, s=empty: query.accumulate_record(p, s, canary),
                         lambda s=empty: s)
      released, state, _ = query.get_noised_result(sample, state)
      out = out.write(k, observe(tf.nest.flatten(released), state))
    return out.stack()

  return rounds(tf.constant(present, tf.int32)).numpy().astype(np.float64)


def released_clips(query: tfp.DPQuery, state):
  """The round's released clips, from the query's metrics.

  Args:
    query: the DP query.
    state: its global state after the round.

  Returns:
    (total C, {group name: C_h}).

  Raises:
    ValueError: if the query's metrics release no clips.
  """
  metrics = query.derive_metrics(state)
  try:
    return metrics['clip'], {name: group['clip'] for name, group in metrics['per_group'].items()}
  except (KeyError, TypeError) as e:
    raise ValueError('The query under audit releases no clips (`clip`, `per_group` in its '
                     'metrics): audit a query such as `PerLayerDPFactory.build_query`.') from e
