"""Tests of `decoding`: candidates of hand-made logits, and the word-list restriction."""

import os
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff import reading
from fedasr_tff.speech import data
from fedasr_tff.speech import decoding

_TOKENS = ('a', 'b', ' ')
# Frames of p(blank), p(a): the best path is "" (0.36); the best sequence "a" (0.64).
_LOGITS = np.log(np.array([[[0.6, 0.4, 1e-9, 1e-9], [0.6, 0.4, 1e-9, 1e-9]]], np.float32))


class DecodeTest(absltest.TestCase):

  def test_greedy_gives_the_best_path_with_its_log_probability(self):
    [candidates] = decoding.decode(_LOGITS, [2], _TOKENS)
    self.assertEqual([c.text for c in candidates], [''])
    self.assertAlmostEqual(candidates[0].log_probability, np.log(0.36), places=4)

  def test_beam_gives_sequences_best_first(self):
    [candidates] = decoding.decode(_LOGITS, [2], _TOKENS, 'beam', beam_width=4, top_paths=2)
    self.assertEqual([c.text for c in candidates], ['a', ''])
    np.testing.assert_allclose([c.log_probability for c in candidates], np.log([0.64, 0.36]),
                               atol=1e-4)
    [narrow] = decoding.decode(_LOGITS, [2], _TOKENS, 'beam', beam_width=1)
    self.assertEqual([c.text for c in narrow], [''])

  def test_arguments_are_checked_by_name(self):
    with self.assertRaisesRegex(ValueError, '`decoder`'):
      decoding.decode(_LOGITS, [2], _TOKENS, 'viterbi')
    with self.assertRaisesRegex(ValueError, '`top_paths`'):
      decoding.decode(_LOGITS, [2], _TOKENS, 'greedy', top_paths=2)


class WordListTest(absltest.TestCase):

  def test_the_first_candidate_all_in_the_list_wins(self):
    words = decoding.WordList(['one', 'two', 'three'])
    self.assertEqual(words.restrict(['one tow', 'one two', 'three']), 'one two')
    self.assertEqual(words.restrict(['', 'one']), '')

  def test_otherwise_each_unlisted_word_of_the_best_maps_to_the_nearest(self):
    words = decoding.WordList(['one', 'two', 'three'])
    self.assertEqual(words.restrict(['on twoo thre', 'xx']), 'one two three')
    # "cat" is at distance 1 of both "bat" and "cap": the word listed first wins.
    self.assertEqual(decoding.WordList(['cap', 'bat']).restrict(['cat']), 'cap')
    self.assertEqual(decoding.WordList(['bat', 'cap']).restrict(['cat']), 'bat')

  def _file(self, text):
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'words.txt')
    with open(path, 'w') as f:
      f.write(text)
    return path

  def test_file_words_are_normalised_like_transcripts(self):
    words = decoding.WordList.from_file(self._file('Hello,\n\nWORLD\nhello\n'),
                                        data.Vocabulary('en'))
    self.assertEqual(words.words, ('hello', 'world'))

  def test_file_lines_are_counted_and_repeats_merged_and_counted(self):
    path = self._file('Hello,\n\nWORLD\nhello\n')
    report = reading.ReadReport()
    decoding.WordList.from_file(path, data.Vocabulary('en'), report)
    account = report.files[path]
    account.check(path)
    self.assertEqual((account.lines, account.blank, account.records, account.kept),
                     (4, 1, 3, 2))
    self.assertEqual(report.problems, [(f'{path}:4 (as line 1)',
                                        'repeats an earlier word (merged)')])

  def test_file_errors_name_file_and_line(self):
    vocab = data.Vocabulary('en')
    for text, where in (('one\nnew york\n', ':2'), ('one\n42\n', ':2'), ('!!\n', ':1'),
                        ('\n', ''), ):
      path = self._file(text)
      with self.assertRaisesRegex(ValueError, f'{path}{where}: ', msg=text):
        decoding.WordList.from_file(path, vocab)

  def test_transcript_words_most_frequent_first_and_spellable_only(self):
    words = decoding.WordList.from_transcripts(
        ['Go left.', 'GO RIGHT', 'go 42', 'left, left'], data.Vocabulary('en'))
    # "42" has characters outside the English vocabulary; "go" and "left" are both said three
    # times, and equal counts keep first-seen order.
    self.assertEqual(words.words, ('go', 'left', 'right'))
    self.assertEqual(words.restrict(['go lft']), 'go left')
    with self.assertRaisesRegex(ValueError, 'no word the vocabulary can spell'):
      decoding.WordList.from_transcripts(['', '42'], data.Vocabulary('en'))


if __name__ == '__main__':
  absltest.main()
