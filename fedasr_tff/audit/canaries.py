"""Canary clients: client work whose update is a known random direction, for privacy audits.

A canary's update in a round is, in every leaf tensor ℓ of the model, an exact-norm random
direction: g_ℓ = λ · u_ℓ with u_ℓ = n_ℓ / ||n_ℓ||, n_ℓ ~ N(0, I) drawn statelessly from the
canary's seed for that round. Every leaf has norm λ, so a clipping group of k leaves has norm
λ·sqrt(k), and with λ at or above the total clip C every group is at or above its own C_h <= C:
clipping makes the canary exactly C_h in every group (per-layer clipping, normalize) or C
(global clipping), and the auditor knows the clipped canary's direction exactly
(`clipped_canary_weights`).
"""

import collections
from typing import Mapping
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

_ELEMENT_SPEC = collections.OrderedDict(seed=tf.TensorSpec([2], tf.int64),
                                        norm=tf.TensorSpec([], tf.float32))


def canary_seed(audit_seed: int, canary: int, round_num: int) -> np.ndarray:
  """The seed of a canary's direction in a round: a fresh direction every round.

  Args:
    audit_seed: the audit's seed.
    canary: the canary's index.
    round_num: the round.

  Returns:
    A [2] int64 seed (non-negative words).
  """
  words = np.random.SeedSequence([audit_seed, canary, round_num]).generate_state(2, np.uint64)
  return (words >> np.uint64(1)).astype(np.int64)


def canary_dataset(seed: np.ndarray, norm: float) -> tf.data.Dataset:
  """The dataset of a canary client, one element {'seed': int64[2], 'norm': float32 λ}.

  Args:
    seed: the seed of its direction (`canary_seed`).
    norm: λ, the norm of every leaf; 0 for a client whose update is zero (an absent canary
      where the mechanism needs a fixed number of reporting clients).

  Returns:
    A one-element `tf.data.Dataset`.
  """
  return tf.data.Dataset.from_tensors(collections.OrderedDict(
      seed=tf.constant(seed, tf.int64), norm=tf.constant(norm, tf.float32)))


def canary_directions(leaf_shapes: Sequence[Sequence[int]], seed) -> list:
  """The unit leaves u_ℓ of a canary (module docstring).

  Args:
    leaf_shapes: the shape of every leaf.
    seed: the canary's seed, [2] int64; leaf i's draw folds i into it.

  Returns:
    A list of float32 tensors of unit norm, one per leaf.
  """
  directions = []
  for i, shape in enumerate(leaf_shapes):
    noise = tf.random.stateless_normal(
        shape, tf.random.experimental.stateless_fold_in(seed, i), dtype=tf.float32)
    directions.append(noise / tf.norm(noise))
  return directions


def build_canary_client_work(
    model_weights_type: tff.Type) -> tff.learning.templates.ClientWorkProcess:
  """Client work returning each client's canary delta (module docstring), weight 1.

  The canary enters the TFF process as an ordinary client whose client work returns its delta,
  so everything after the client work (aggregator, noise, server step) is the process under
  audit.

  Args:
    model_weights_type: the process's `tff.learning.models.ModelWeights` type; the canary lives
      in its trainable tensors.

  Returns:
    A stateless `ClientWorkProcess` over `canary_dataset` datasets, with no measurements.
  """
  trainable_type = model_weights_type.trainable
  specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(trainable_type))
  shapes = [spec.shape for spec in specs]
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(_ELEMENT_SPEC))

  @tff.federated_computation
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.tensorflow.computation(model_weights_type, data_type)
  def canary_update(weights, dataset):
    del weights  # A canary's update does not depend on the model.
    # Its one element (`canary_dataset`; any other count is an error). Not `Dataset.reduce`,
    # which instantiates its reduce function again on every call, once per canary.
    element = dataset.get_single_element()
    leaves = [element['norm'] * u for u in canary_directions(shapes, element['seed'])]
    update = tf.nest.pack_sequence_as(tff.types.type_to_tf_tensor_specs(trainable_type), leaves)
    return tff.learning.templates.ClientResult(update=update, update_weight=tf.constant(1.0))

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(model_weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    result = tff.federated_map(canary_update, (weights, client_data))
    return tff.templates.MeasuredProcessOutput(state, result, tff.federated_value((), tff.SERVER))

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)


def clipped_canary_weights(leaf_groups: Sequence[int], group_clips: Sequence[float],
                           norm, normalize: bool) -> np.ndarray:
  """w_ℓ such that a canary of leaf norms λ_ℓ = `norm` leaves the clipping as Σ_ℓ w_ℓ u_ℓ.

  A group h of leaves ℓ has norm n_h = sqrt(Σ_ℓ λ_ℓ^2); it leaves as min(1, C_h / n_h) times
  itself (clip), or as C_h / n_h times itself once the total norm reaches C = sqrt(Σ C_h^2)
  (normalize; a zero group stays zero), so each of its leaves leaves as w_ℓ u_ℓ with w_ℓ its
  share.

  Args:
    leaf_groups: the clipping group of every leaf.
    group_clips: C_h of the round.
    norm: λ, one for every leaf or a leaf norm each (λ_ℓ >= 0).
    normalize: the clipping rescales to C_h (per_layer_query's normalize).

  Returns:
    w_ℓ for every leaf, float64.
  """
  groups = np.asarray(leaf_groups)
  clips = np.asarray(group_clips, np.float64)
  norms = np.broadcast_to(np.asarray(norm, np.float64), groups.shape)
  group_norms = np.sqrt(np.bincount(groups, norms**2, minlength=len(clips)))
  # C_h / n_h, and 0 for a zero group (whose leaves are zero whatever the factor).
  to_bound = np.divide(clips, group_norms, out=np.zeros_like(clips), where=group_norms > 0)
  if normalize:
    total = np.sqrt(np.sum(group_norms**2))
    scale = to_bound if total >= np.sqrt(np.sum(clips**2)) else np.ones_like(clips)
  else:
    scale = np.minimum(1.0, to_bound)
  return norms * scale[groups]


def leaf_groups_and_clips(per_group: Mapping[str, Mapping[str, float]],
                          leaf_names: Sequence[str]):
  """The clipping groups and clips of a round, from its released `per_group` clips.

  `aggregators.PerLayerDPFactory` names the groups by the leaves (one group per leaf) or
  `GLOBAL_GROUP` (one group of all leaves).

  Args:
    per_group: the round's `per_group` measurements, {group name: {'clip': C_h, ...}}.
    leaf_names: the model's leaf names, in flatten order.

  Returns:
    (the group of every leaf, C_h of every group).

  Raises:
    ValueError: if the groups are neither one group nor one per leaf.
  """
  names = list(per_group)
  if len(names) == 1 and names[0] not in leaf_names:
    return [0] * len(leaf_names), [float(per_group[names[0]]['clip'])]
  if sorted(names) != sorted(leaf_names):
    raise ValueError(f'The released clipping groups {names} are neither one group nor one per '
                     f'leaf of {list(leaf_names)}.')
  return ([names.index(n) for n in leaf_names], [float(per_group[n]['clip']) for n in names])
