"""Deliberately broken DP mechanisms for the audit tests, the correct ones, and the layout.

Each bug is the production `PerLayerClipGaussianSumQuery` with one thing broken, still reporting
`GaussianDpEvent(z)`, so the ledger claims the ε of the correct mechanism. `BUGS` break its
scale (caught by the ε audits), `STRUCTURE_BUGS` its structure (caught by the direct checks).
"""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from fedasr_tff.aggregators import allocation
from fedasr_tff.aggregators import per_layer_query
from fedasr_tff.speech import models

# A transformer block's worth of tensors (16,640 parameters), named as the model names them so
# the "weighted" allocation finds its MLP weights.
LEAF_NAMES = ('block_00/ln1/gamma', 'block_00/w1/kernel', 'block_00/w1/bias',
              'block_00/w2/kernel', 'block_00/w2/bias')
LEAF_SHAPES = ((64,), (64, 128), (128,), (128, 64), (64,))
# The same tensors at a sixteenth of the size (1,088 parameters), for the many-run audit, which
# needs no room between canaries.
SMALL_LEAF_SHAPES = ((16,), (16, 32), (32,), (32, 16), (16,))
# Which of them the "weighted" allocation weighs by `mlp_weight` (`DPConfig.aggregator`).
is_mlp_tensor = models.is_mlp_tensor


class TenthNoise(per_layer_query.PerLayerClipGaussianSumQuery):
  """Noise std z·C/10."""

  def _value_stddev(self, group_clips):
    return super()._value_stddev(group_clips) / 10


class FirstGroupNoiseOnly(per_layer_query.PerLayerClipGaussianSumQuery):
  """Noise on the leaves of group 0 only; the others are released un-noised."""

  def get_noised_result(self, sample_state, global_state):
    noised, new_state, event = super().get_noised_result(sample_state, global_state)
    leaves = [n if self._group_ids[i] == 0 else plain for i, (n, plain) in enumerate(
        zip(tf.nest.flatten(noised), tf.nest.flatten(sample_state[0]), strict=True))]
    return tf.nest.pack_sequence_as(noised, leaves), new_state, event


class TripleBounds(per_layer_query.PerLayerClipGaussianSumQuery):
  """Per-group bounds 3 C_h (sensitivity 3C), noise still calibrated to C."""

  def preprocess_record(self, params, record):
    return super().preprocess_record(params * 3.0, record)


class ReplayedNoise(per_layer_query.PerLayerClipGaussianSumQuery):
  """The noise seed is never advanced: every round adds the same noise."""

  def get_noised_result(self, sample_state, global_state):
    result, new_state, event = super().get_noised_result(sample_state, global_state)
    return result, new_state._replace(noise_seed=global_state.noise_seed), event


# Bugs of the mechanism's structure, which no ε lower bound catches; each is
# caught by a direct check (`noise_check`, `clipping_check`).


class SharedNoiseSeed(per_layer_query.PerLayerClipGaussianSumQuery):
  """Every tensor's noise drawn from one seed: equal-shaped tensors get identical noise."""

  def get_noised_result(self, sample_state, global_state):
    _, new_state, event = super().get_noised_result(sample_state, global_state)
    stddev = self._value_stddev(global_state.group_clips)
    leaves = [x + per_layer_query.gaussian_noise(tf.shape(x), stddev, x.dtype,
                                                 global_state.noise_seed)
              for x in tf.nest.flatten(sample_state[0])]
    return tf.nest.pack_sequence_as(sample_state[0], leaves), new_state, event


class GroupClipNoise(per_layer_query.PerLayerClipGaussianSumQuery):
  """The largest tensor's noise calibrated to its own group clip, std z·C_h instead of z·C."""

  def get_noised_result(self, sample_state, global_state):
    noised, new_state, event = super().get_noised_result(sample_state, global_state)
    clips = global_state.group_clips
    plain = tf.nest.flatten(sample_state[0])
    largest = int(np.argmax([x.shape.num_elements() for x in plain]))
    scale = clips[self._group_ids[largest]] / tf.norm(clips)
    leaves = [p + (n - p) * scale if i == largest else n
              for i, (n, p) in enumerate(zip(tf.nest.flatten(noised), plain, strict=True))]
    return tf.nest.pack_sequence_as(noised, leaves), new_state, event


class NonFiniteSkipsClip(per_layer_query.PerLayerClipGaussianSumQuery):
  """A delta holding NaN or Inf skips the clip: its finite entries pass unclipped."""

  def preprocess_record(self, params, record):
    value, below, diagnostics = super().preprocess_record(params, record)
    leaves = tf.nest.flatten(record)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(x)) for x in leaves])
    leaves = [tf.where(finite, v, tf.where(tf.math.is_finite(x), x, tf.zeros_like(x)))
              for v, x in zip(tf.nest.flatten(value), leaves, strict=True)]
    return tf.nest.pack_sequence_as(value, leaves), below, diagnostics


class WithinClipFastPath(per_layer_query.PerLayerClipGaussianSumQuery):
  """A fast path that skips clipping when every group is within the total clip C (instead of
  the record's norm within C): a record of H groups of norm C passes with norm sqrt(H) C."""

  def preprocess_record(self, params, record):
    value, below, diagnostics = super().preprocess_record(params, record)
    leaves = tf.nest.flatten(record)
    sq_norms = tf.stack([tf.reduce_sum(tf.square(x)) for x in leaves])
    group_norms = tf.sqrt(tf.math.unsorted_segment_sum(sq_norms, self._group_ids,
                                                       self._num_groups))
    fast = tf.reduce_all(group_norms <= tf.norm(params))
    leaves = [tf.where(fast, x, v) for v, x in zip(tf.nest.flatten(value), leaves, strict=True)]
    return tf.nest.pack_sequence_as(value, leaves), below, diagnostics


# The runner's DP flags (`config.DPConfig`) of every correct mechanism the tests audit.
CORRECT_DP_FLAGS = (
    ('global', {'clipping': 'global'}),
    ('uniform', {'clipping': 'uniform'}),
    ('dim', {'clipping': 'dim'}),
    ('weighted', {'clipping': 'weighted'}),
    ('dim_normalize', {'clipping': 'dim', 'normalize': True}),
    ('dim_adaptive', {'clipping': 'dim', 'adaptive_clipping': True}),
)

BUGS = {'tenth_noise': TenthNoise, 'first_group_noise_only': FirstGroupNoiseOnly,
        'triple_bounds': TripleBounds, 'replayed_noise': ReplayedNoise}

# Each structural bug and the check that catches it.
STRUCTURE_BUGS = {'shared_noise_seed': (SharedNoiseSeed, 'noise'),
                  'group_clip_noise': (GroupClipNoise, 'noise'),
                  'non_finite_skips_clip': (NonFiniteSkipsClip, 'clipping/non_finite'),
                  'within_clip_fast_path': (WithinClipFastPath, 'clipping/at_total_clip')}


def query(bug, noise_multiplier, clients_per_round, *, leaf_shapes=LEAF_SHAPES,
          allocation_name='dim', noise_seed=1):
  """The normalized query of `bug` (a class of `BUGS`, or the correct query), clip C = 1."""
  sizes = [int(np.prod(shape)) for shape in leaf_shapes]
  clips = allocation.group_clips(1.0, sizes, allocation_name)
  group_ids = (list(range(len(sizes))) if allocation_name != 'global' else [0] * len(sizes))
  inner = bug(group_ids, clips, noise_multiplier, clients_per_round, diagnostics=False,
              noise_seed=noise_seed,
              group_names=list(LEAF_NAMES) if allocation_name != 'global' else ['all'])
  return tfp.NormalizedQuery(inner, denominator=clients_per_round)


def factory(bug, noise_multiplier, clients_per_round, **kwargs):
  """A TFF aggregation factory running `query(...)`."""
  return tff.aggregators.DifferentiallyPrivateFactory(
      query(bug, noise_multiplier, clients_per_round, **kwargs))
