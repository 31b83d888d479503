"""Held-out evaluation of a retriever: top-K accuracy, macro-F1, per-class precision and recall,
the confusion matrix, and a predictions file.

The classifier's top-K classes are the documents it retrieves (Fofonjka et al., webAI 2025), so
top-K accuracy is the retrieval figure; precision, recall and F1 are those of its top-1 class,
the usual classification report (macro-F1: the unweighted mean of the per-class F1 over the
classes that occur in the labels or the predictions, as scikit-learn's `f1_score(average='macro')`
computes it), so a rare class the model never predicts weighs as much as a common one.
"""

import csv
import dataclasses
from typing import Dict
from typing import Sequence

import numpy as np
import tensorflow as tf

from fedasr_tff import private_files
from fedasr_tff.retrieval import retrieve


@dataclasses.dataclass(frozen=True)
class Scores:
  """What a retriever scored on the held-out examples.

  Attributes:
    k: K of the top-K accuracy.
    top1: the fraction whose top-1 class is the label.
    topk: the fraction whose label is among the top K classes.
    macro_f1: the mean per-class F1 (module docstring).
    precision: float [C]: of the examples predicted (top-1) as each class, the fraction of it.
      0 for a class never predicted.
    recall: float [C]: of each class's examples, the fraction predicted as it (top-1); 0 for a
      class without held-out examples.
    f1: float [C]: 2PR / (P + R), 0 where P + R = 0.
    support: int [C]: held-out examples of each class.
    confusion: int [C, C]: examples of class i (row) predicted (top-1) as class j (column).
  """
  k: int
  top1: float
  topk: float
  macro_f1: float
  precision: np.ndarray
  recall: np.ndarray
  f1: np.ndarray
  support: np.ndarray
  confusion: np.ndarray

  def metrics(self) -> Dict[str, float]:
    """{'top1', 'topK', 'macro_f1'}: the figures a run releases at every evaluation."""
    return {'top1': self.top1, f'top{self.k}': self.topk, 'macro_f1': self.macro_f1}


def score(logits, labels, k: int) -> Scores:
  """The `Scores` of class scores `logits` [N, C] against `labels` [N].

  Args:
    logits: the scores of each held-out example for each class (any monotone score: logits,
      probabilities, inner products).
    labels: the true class of each, in [0, C).
    k: K, 1 <= K <= C.

  Returns:
    The `Scores`.

  Raises:
    ValueError: naming the argument, for mismatched shapes, an empty set or K out of range.
  """
  logits = np.asarray(logits)
  labels = np.asarray(labels)
  if logits.ndim != 2 or labels.shape != logits.shape[:1] or not len(labels):
    raise ValueError(f'`logits` must be [N, C] and `labels` [N] with N > 0, got shapes '
                     f'{logits.shape} and {labels.shape}.')
  num_classes = logits.shape[1]
  topk = float(retrieve.top_k_accuracy(logits, labels, k))  # checks `k` (`retrieve.top_k`)
  predicted = retrieve.top_k(logits, 1).numpy()[:, 0]
  confusion = tf.math.confusion_matrix(labels, predicted, num_classes=num_classes).numpy()
  support = confusion.sum(axis=1)
  predicted_count = confusion.sum(axis=0)
  correct = np.diag(confusion).astype(np.float64)
  precision = np.divide(correct, predicted_count, out=np.zeros(num_classes),
                        where=predicted_count > 0)
  recall = np.divide(correct, support, out=np.zeros(num_classes), where=support > 0)
  f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(num_classes),
                 where=precision + recall > 0)
  present = (support > 0) | (predicted_count > 0)
  return Scores(k=k, top1=float(correct.sum() / len(labels)),
                topk=topk,
                macro_f1=float(f1[present].mean()), precision=precision, recall=recall, f1=f1,
                support=support, confusion=confusion)


def write_predictions(path: str, texts: Sequence[str], labels, class_names: Sequence[str],
                      logits, k: int) -> None:
  """Writes a TSV of each held-out example's top-K classes, owner-only (it holds the texts).

  Columns: `text`, `label` (the true class's name), `correct` (1 if the top-1 class is the
  label), then `class_1`, `score_1`, ... `class_K`, `score_K`: the retrieved classes, best
  first, each with its softmax probability.

  Args:
    path: the file.
    texts: the held-out texts.
    labels: their classes, indices into `class_names`.
    class_names: the name of each class.
    logits: [N, C] class scores (logits: the probabilities are their softmax).
    k: K.
  """
  logits = np.asarray(logits, np.float32)
  probabilities = tf.nn.softmax(logits).numpy()
  retrieved = retrieve.top_k(logits, k).numpy()
  header = ['text', 'label', 'correct']
  for rank in range(1, k + 1):
    header += [f'class_{rank}', f'score_{rank}']
  with private_files.open_private(path) as f:
    writer = csv.writer(f, delimiter='\t', lineterminator='\n')
    writer.writerow(header)
    for text, label, top, row in zip(texts, labels, retrieved, probabilities, strict=True):
      fields = [text, class_names[label], int(top[0] == label)]
      for index in top:
        fields += [class_names[index], f'{row[index]:.4f}']
      writer.writerow(fields)
