from absl.testing import absltest

from fedasr_tff.speech import metrics


class ErrorRateTest(absltest.TestCase):

  def test_word_error_rate_counts_every_edit_kind(self):
    # 1 substitution + 1 deletion in the first, 1 insertion in the second; 7 reference words.
    refs = ['the cat sat on the mat', 'hello']
    hyps = ['the bat sat on mat', 'hello world']
    self.assertAlmostEqual(metrics.word_error_rate(refs, hyps), 3 / 7)

  def test_perfect_and_empty_hypotheses(self):
    self.assertEqual(metrics.word_error_rate(['a b c'], ['a b c']), 0.0)
    self.assertEqual(metrics.word_error_rate(['a b c'], ['']), 1.0)
    self.assertEqual(metrics.character_error_rate(['ab'], ['']), 1.0)

  def test_corpus_level_not_mean_of_utterances(self):
    # Utterance rates 1/1 and 0/9 average to 0.5; the corpus rate is 1/10.
    refs = ['one', 'a b c d e f g h i']
    hyps = ['two', 'a b c d e f g h i']
    self.assertAlmostEqual(metrics.word_error_rate(refs, hyps), 0.1)

  def test_character_error_rate_includes_spaces(self):
    # "ab cd" has 5 characters; dropping the space is one deletion.
    self.assertAlmostEqual(metrics.character_error_rate(['ab cd'], ['abcd']), 1 / 5)
    self.assertAlmostEqual(metrics.character_error_rate(['ab  cd '], ['ab cd']), 0.0)
    self.assertAlmostEqual(metrics.character_error_rate(['héllo'], ['hello']), 1 / 5)

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, 'same length'):
      metrics.word_error_rate(['a'], ['a', 'b'])
    with self.assertRaisesRegex(ValueError, 'references'):
      metrics.word_error_rate([], [])
    with self.assertRaisesRegex(ValueError, 'no tokens'):
      metrics.character_error_rate([' '], ['x'])


if __name__ == '__main__':
  absltest.main()
