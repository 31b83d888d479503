"""Class prototypes released under user-level central DP, to start the classifier head.

The MIPS baseline of Fofonjka, Zehtabi, Behtash, Mauer and Stout (webAI 2025, Sec. 6.2) scores a
query by its inner product with class prototypes (the classes' mean pooled states), and gets
most of a trained head's accuracy before any training. Under DP the same idea costs one release:

    client i:  P_i = Σ_{j ∈ i} e_{y_j} (x̂_j, 1) / √2          [D, d + 1]: per-class sums of the
                                                              unit-normalised features x̂ and counts
    server:    P = (Σ_{i ∈ cohort} clip_C(P_i) + N(0, z²C² I)) / S     (the run's DP aggregator)
    head:      W_c = s · F_c / ||F_c||,  b_c = 0,   F_c = P[c, :d]

Each example adds a unit vector to one row, so a client of n examples has ||P_i|| ≤ n; the
aggregator clips P_i to C (`prototype_clip`, in examples) whatever its values. The head then
ranks classes by the cosine between a query's features and the noised class sums (the logit
x·W_c = s ||x|| cos(x, F_c), and ||x|| is common to all classes), training starts from there.

Privacy: the release is the run's central DP aggregator (`program.dp_config.DPConfig`:
`aggregators.PerLayerDPFactory`, global clip C, noise z C on the sum, non-finite values handled
there) on a Poisson-sampled cohort drawn like a round's: one more round of the mechanism the
ledger accounts (same z, same sampling rate), so a run with prototypes accounts T + 1 rounds.
Its noise is seeded apart from the rounds' (`release_secret`), since the composition needs
independent noise.
The noised counts P[:, d] and the sums are released only through the head's initial weights.
"""

import math
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import validation
from fedasr_tff.program import cohorts

# The stream of the noise secret that seeds the release's noise and nothing else.
_STREAM = 'dp_prototypes'
# s: logits s·||x||·cos; MiniLM's pooled states have norms of about 5-6, so a cosine gap of 0.1
# is a logit gap of about 3 at the start of training.
LOGIT_SCALE = 5.0
_BATCH = 256


def release_secret(noise_secret: int) -> int:
  """The secret that seeds the release's noise: drawn from the run's noise secret, apart from
  the rounds' noise.

  The central aggregator starts its noise from its seed, so the release and round 1, given the
  same seed, would draw the same Gaussian values, and the difference of two releases would
  cancel them: the two mechanisms the ledger composes must have independent noise.

  Args:
    noise_secret: the run's noise secret (an integer >= 0).

  Returns:
    A 63-bit secret, a function of `noise_secret` only, never equal to it.
  """
  validation.check_non_negative_integer('noise_secret', noise_secret)
  secret = cohorts.client_seed(noise_secret, 0, _STREAM)  # No client is named so, at round 0.
  return secret if secret != noise_secret else secret ^ 1


def client_prototype_sums(features: tf.Tensor, labels: tf.Tensor, num_classes: int) -> tf.Tensor:
  """P_i of the module docstring for one batch of a client's examples.

  Args:
    features: [B, d] pooled states.
    labels: [B] class ids in [0, num_classes).
    num_classes: D.

  Returns:
    [D, d + 1]: each example's (x̂, 1)/√2, a unit vector, added to its class's row; a
    non-finite or zero feature vector adds (0, 1)/√2 (it still counts).
  """
  features = tf.convert_to_tensor(features, tf.float32)
  finite = tf.reduce_all(tf.math.is_finite(features), axis=1, keepdims=True)
  unit = tf.where(finite, tf.math.l2_normalize(tf.where(finite, features, 0.0), axis=1), 0.0)
  rows = tf.concat([unit, tf.ones_like(unit[:, :1])], axis=1) / math.sqrt(2.0)
  return tf.math.unsorted_segment_sum(rows, labels, num_classes)


def build_prototype_release(feature_dim: int, num_classes: int,
                            aggregator_factory) -> tff.Computation:
  """A federated computation from the cohort's (features, labels) datasets to the noised mean P.

  Args:
    feature_dim: d.
    num_classes: D.
    aggregator_factory: an unweighted TFF aggregation factory: the run's central DP aggregator
      (`DPConfig.aggregator`, a fixed clip of C = the prototype clip).

  Returns:
    `release(client_data) -> (P [D, d + 1] at the server, aggregator state, measurements)`;
    `client_data` are datasets of (features [B, d], labels [B]) batches.
  """
  validation.check_positive_integer('feature_dim', feature_dim)
  validation.check_positive_integer('num_classes', num_classes)
  value_type = tff.TensorType(np.float32, [num_classes, feature_dim + 1])
  aggregator = aggregator_factory.create(value_type)
  data_type = tff.SequenceType((tff.TensorType(np.float32, [None, feature_dim]),
                                tff.TensorType(np.int32, [None])))

  @tff.tensorflow.computation(data_type)
  def client_sums(dataset):
    return dataset.reduce(
        tf.zeros([num_classes, feature_dim + 1]),
        lambda total, batch: total + client_prototype_sums(batch[0], batch[1], num_classes))

  @tff.federated_computation(tff.FederatedType(data_type, tff.CLIENTS))
  def release(client_data):
    output = aggregator.next(aggregator.initialize(), tff.federated_map(client_sums, client_data))
    return output.result, output.state, output.measurements

  return release


def client_datasets(features: np.ndarray, labels: np.ndarray,
                    client_indices: Sequence[np.ndarray]) -> list:
  """The cohort's `build_prototype_release` inputs: each client's (features, labels) batches."""
  return [tf.data.Dataset.from_tensor_slices((features[index].astype(np.float32),
                                              labels[index].astype(np.int32))).batch(_BATCH)
          for index in client_indices]


def linear_head_weights(prototypes: np.ndarray, scale: float = LOGIT_SCALE):
  """The linear head's (kernel [d, D], bias [D]) from a released P (module docstring).

  Args:
    prototypes: [D, d + 1], the noised mean P.
    scale: s > 0.

  Returns:
    kernel = s · (F_c / ||F_c||) as columns, bias = 0 (a zero row stays zero).
  """
  validation.check_positive('scale', scale)
  sums = np.asarray(prototypes, np.float64)[:, :-1]
  norms = np.linalg.norm(sums, axis=1, keepdims=True)
  directions = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
  return ((scale * directions.T).astype(np.float32),
          np.zeros([len(sums)], np.float32))

