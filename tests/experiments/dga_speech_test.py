"""The DGA speech study's table (`experiments/dga_speech.py`): what it labels."""

from absl.testing import absltest

from experiments import dga_speech
from fedasr_tff.speech import evaluation


class TableTest(absltest.TestCase):

  def test_n_alpha_of_dp_rows_is_labelled_outside_the_guarantee(self):
    # N·α is the clients' exact losses under the model, a client statistic.
    scores = evaluation.ErrorCounts(utterances=1, words=10, word_edits=2, chars=40, char_edits=4)
    rows = [dict(model='seed', dp='-', scores=scores, epsilons=None, weights=(0.4, 1.1)),
            dict(model='dga_softmax_no_dp', dp='no_dp', scores=scores, epsilons=None,
                 weights=(0.3, 1.2)),
            dict(model='dga_softmax_dp', dp='dp', scores=scores, epsilons=(3.0, 50.0),
                 weights=(0.5, 1.1))]
    lines = dga_speech.table(rows).splitlines()
    dp_row = next(line for line in lines if line.startswith('| dga_softmax_dp '))
    self.assertIn('0.500 / 1.100 (OUTSIDE the DP guarantee)', dp_row)
    for line in lines:
      if line.startswith(('| seed ', '| dga_softmax_no_dp ')):
        self.assertNotIn('OUTSIDE', line)
    self.assertTrue([line for line in lines if 'N·α' in line and 'OUTSIDE the DP guarantee'
                     in line and not line.startswith('|')])


if __name__ == '__main__':
  absltest.main()
