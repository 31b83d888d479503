"""The retriever's held-out scores (top-K, precision, recall, macro-F1, confusion matrix) and its
predictions file."""

import csv
import os
import stat
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff.retrieval import classification_report

# Four examples, three classes: 0 and 1 right, 2 predicted as 0 (its label second), 0 predicted as
# 1 (its label third). Class 2 is never predicted.
_LOGITS = np.array([[3.0, 1.0, 0.0],
                    [0.0, 3.0, 1.0],
                    [3.0, 0.0, 2.0],
                    [1.0, 3.0, 2.0]], np.float32)
_LABELS = np.array([0, 1, 2, 0])


class ScoreTest(absltest.TestCase):

  def test_by_hand(self):
    scores = classification_report.score(_LOGITS, _LABELS, 2)
    np.testing.assert_array_equal(scores.confusion, [[1, 1, 0], [0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(scores.support, [2, 1, 1])
    self.assertEqual((scores.top1, scores.topk), (0.5, 0.75))
    # Precision: class 0 predicted twice, once right; class 1 twice, once right; class 2 never.
    np.testing.assert_allclose(scores.precision, [0.5, 0.5, 0.0])
    np.testing.assert_allclose(scores.recall, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(scores.f1, [0.5, 2 / 3, 0.0])
    # Macro-F1 over the three classes (all occur in the labels), the missed class counting 0.
    self.assertAlmostEqual(scores.macro_f1, (0.5 + 2 / 3 + 0.0) / 3)
    self.assertEqual(scores.metrics(), {'top1': 0.5, 'top2': 0.75,
                                        'macro_f1': scores.macro_f1})

  def test_a_class_absent_from_labels_and_predictions_is_not_averaged(self):
    logits = np.concatenate([_LOGITS, np.full([4, 1], -9.0, np.float32)], axis=1)
    self.assertAlmostEqual(classification_report.score(logits, _LABELS, 1).macro_f1,
                           classification_report.score(_LOGITS, _LABELS, 1).macro_f1)

  def test_bad_input_names_the_argument(self):
    for args, name in (((_LOGITS, _LABELS[:3], 1), '`logits`'),
                       ((_LOGITS[:0], _LABELS[:0], 1), '`logits`'),
                       ((_LOGITS, _LABELS, 0), 'k'),
                       ((_LOGITS, _LABELS, 4), '`k`')):
      with self.assertRaisesRegex(ValueError, name):
        classification_report.score(*args)


class WritePredictionsTest(absltest.TestCase):

  def test_top_k_with_probabilities_owner_only(self):
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'predictions.tsv')
    texts = ['first', 'second\twith a tab', 'third', 'fourth']
    classification_report.write_predictions(path, texts, _LABELS, ('a', 'b', 'c'), _LOGITS, 2)
    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f, delimiter='\t'))
    self.assertEqual([r['text'] for r in rows], texts)
    self.assertEqual([(r['label'], r['correct'], r['class_1'], r['class_2']) for r in rows],
                     [('a', '1', 'a', 'b'), ('b', '1', 'b', 'c'), ('c', '0', 'a', 'c'),
                      ('a', '0', 'b', 'c')])
    probabilities = np.exp(_LOGITS[0]) / np.exp(_LOGITS[0]).sum()
    self.assertEqual(rows[0]['score_1'], f'{probabilities[0]:.4f}')
    self.assertEqual(rows[0]['score_2'], f'{probabilities[1]:.4f}')


if __name__ == '__main__':
  absltest.main()
