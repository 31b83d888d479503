"""Retrieval from class scores: top-K, top-K accuracy, and the MIPS baseline.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025: retrieval
RET(x, K) = topK(logits, K), the K classes (documents) of highest score (Sec. 3.2, Eq. 1), and
the maximum inner-product search it is compared with (Sec. 6.2).
"""

import numpy as np
import tensorflow as tf

from fedasr_tff import validation


def _check_k(k: int, num_classes) -> None:
  validation.check_positive_integer('k', k)
  if num_classes is not None and k > num_classes:
    raise ValueError(f'`k` must be at most the number of classes ({num_classes}), got {k}.')


def top_k(logits, k: int) -> tf.Tensor:
  """RET(x, k): the k classes of highest score, best first.

  Args:
    logits: [B, D] scores.
    k: 1 <= k <= D.

  Returns:
    [B, k] int32 distinct indices in non-increasing score order; the first is the argmax. Ties
    go to the lower class index (as `tf.math.top_k` and `tf.argmax` break them).

  Raises:
    ValueError: for k out of range.
  """
  logits = tf.convert_to_tensor(logits)
  _check_k(k, logits.shape[-1])
  return tf.math.top_k(logits, k, sorted=True).indices


def top_k_accuracy(logits, labels, k: int = 1) -> tf.Tensor:
  """Top-k accuracy, (1/B) sum_b [y_b in RET(x_b, k)]; the paper reports top-1.

  Args:
    logits: [B, D] scores.
    labels: [B] true classes.
    k: as in `top_k`.

  Returns:
    The float32 fraction of rows whose label is among `top_k(logits, k)`.
  """
  retrieved = top_k(logits, k)
  labels = tf.cast(tf.reshape(labels, [-1, 1]), retrieved.dtype)
  hits = tf.reduce_any(tf.equal(retrieved, labels), axis=1)
  return tf.reduce_mean(tf.cast(hits, tf.float32))


def class_prototypes(features, labels, num_classes: int) -> tf.Tensor:
  """Class prototypes, the candidates of the MIPS baseline.

  The paper leaves the candidates undefined; we take p_c = (1/|S_c|) sum_{i in S_c} h(x_i), the
  mean pooled embedding of the training queries S_c of class c.

  Args:
    features: [N, d] pooled embeddings.
    labels: [N] their classes.
    num_classes: D.

  Returns:
    [D, d]: row c is the mean of the rows of `features` with label c.

  Raises:
    ValueError: naming `labels` if there is not one per row, a label lies outside
      [0, num_classes), or a class has no example (its prototype would be undefined).
  """
  validation.check_positive_integer('num_classes', num_classes)
  features = tf.convert_to_tensor(features)
  label_values = np.asarray(labels).reshape(-1)
  if label_values.size != features.shape[0]:
    raise ValueError(f'`labels` must hold one label per row of `features` '
                     f'({features.shape[0]}), got {label_values.size}.')
  if label_values.size and (label_values.min() < 0 or label_values.max() >= num_classes):
    raise ValueError(f'`labels` must lie in [0, {num_classes}), got values in '
                     f'[{label_values.min()}, {label_values.max()}].')
  counts = np.bincount(label_values, minlength=num_classes)
  missing = np.flatnonzero(counts == 0)
  if missing.size:
    raise ValueError(f'`labels` has no example of classes {missing.tolist()}, so their '
                     'prototypes are undefined.')
  sums = tf.math.unsorted_segment_sum(features, label_values, num_classes)
  return sums / tf.cast(counts, features.dtype)[:, tf.newaxis]


def mips_scores(features, prototypes) -> tf.Tensor:
  """The MIPS scores score_c(x) = <h(x), p_c>.

  Args:
    features: [B, d] pooled query embeddings h(x).
    prototypes: [D, d] candidates p_c (`class_prototypes`).

  Returns:
    [B, D] inner products; `top_k` of them retrieves.
  """
  return tf.linalg.matmul(features, prototypes, transpose_b=True)
