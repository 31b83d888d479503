"""The retriever's end-of-run report (`experiments.retriever_report`)."""

import errno
import os
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from experiments import retriever_report
from fedasr_tff.retrieval import classification_report
from tests.experiments import png


class RetrieverReportTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enterContext(tempfile.TemporaryDirectory())

  def path(self, name):
    return os.path.join(self.dir, name)

  def test_retriever_report(self):
    logits = np.array([[3.0, 1.0, 0.0], [0.0, 3.0, 1.0], [3.0, 0.0, 2.0], [1.0, 3.0, 2.0]])
    scores = classification_report.score(logits, np.array([0, 1, 2, 0]), 2)
    path = retriever_report.write_retriever_report(
        self.dir, title='Retriever', scores=scores, class_names=('ham', 'spam', 'eggs'),
        privacy_statement='No DP.', notes=['a note'])
    with open(path) as f:
      text = f.read()
    self.assertIn('**Top-1 50.0%, top-2 75.0% (K = 2: the documents retrieved per query), '
                  'macro-F1 38.9% on 4 held-out examples of 3 classes.**', text)
    self.assertIn('| spam | 1 | 50.0 | 100.0 | 66.7 |', text)
    self.assertIn('![Confusion matrix](confusion.png)', text)
    self.assertIn('## Privacy\n\nNo DP.', text)
    self.assertIn('- a note', text)
    self.assertNotIn('## Input files', text)
    png.assert_png(self, self.path('confusion.png'))

  def test_retriever_report_lists_confusions_beyond_twenty_classes(self):
    names = tuple(f'class{i}' for i in range(21))
    labels = np.arange(21).repeat(2)
    logits = np.eye(21)[labels]
    logits[0] = np.eye(21)[5]   # class0 -> class5, twice
    logits[1] = np.eye(21)[5]
    logits[2] = np.eye(21)[0]   # class1 -> class0, once
    scores = classification_report.score(logits, labels, 3)
    out_dir = os.path.join(self.dir, 'many')
    os.makedirs(out_dir)
    with open(retriever_report.write_retriever_report(
        out_dir, title='Many', scores=scores, class_names=names, privacy_statement='-')) as f:
      text = f.read()
    self.assertIn('Not drawn for more than 20 classes', text)
    self.assertIn('- class0 → class5: 2\n- class1 → class0: 1\n\n## Privacy', text)
    self.assertNotIn('confusion.png', os.listdir(out_dir))

  def test_a_full_disk_names_the_figure_or_report_it_could_not_write(self):
    # write() fails on a full disk, naming no file: the binary's one line must say which.
    logits = np.array([[3.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    scores = classification_report.score(logits, np.array([0, 1]), 2)
    no_space = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    savefig = 'matplotlib.figure.Figure.savefig'
    for failing, written in ((savefig, 'confusion.png'), ('builtins.open', 'report.md')):
      with self.subTest(written):
        with mock.patch(savefig), mock.patch(failing, side_effect=no_space), \
            self.assertRaises(OSError) as raised:
          retriever_report.write_retriever_report(self.dir, title='Retriever', scores=scores,
                                        class_names=('ham', 'spam', 'eggs'),
                                        privacy_statement='-')
        self.assertEqual((raised.exception.errno, raised.exception.filename),
                         (errno.ENOSPC, self.path(written)))


if __name__ == '__main__':
  absltest.main()
