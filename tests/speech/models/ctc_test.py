"""Tests of CTC decoding, with an exhaustive sum over paths as the oracle of beam search."""

import itertools

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff.speech import data
from fedasr_tff.speech.models import ctc

# Two frames with p(blank) = 0.6 and p(token 1) = 0.4: the best path is "" (0.36), the most
# probable label sequence is [1] (0.4 * 0.4 + 2 * 0.6 * 0.4 = 0.64).
_TWO_FRAMES = np.log(np.array([[[0.6, 0.4], [0.6, 0.4]]], np.float32))


def _sequence_probabilities(probs):
  """{label sequence: p} summed over all T-frame paths (repeats merged, blanks removed)."""
  totals = {}
  for path in itertools.product(range(probs.shape[1]), repeat=probs.shape[0]):
    labels = tuple(k for i, k in enumerate(path)
                   if k != ctc.BLANK_INDEX and (i == 0 or path[i - 1] != k))
    totals[labels] = totals.get(labels, 0.0) + np.prod(probs[np.arange(len(path)), path])
  return totals


class CtcDecodingTest(absltest.TestCase):

  def test_greedy_takes_the_best_path_and_beam_search_the_best_sequence(self):
    greedy, score = ctc.greedy_decode_with_scores(_TWO_FRAMES, [2])
    self.assertEqual(greedy.to_list(), [[]])
    self.assertAlmostEqual(float(score[0]), np.log(0.36), places=5)
    paths, log_probs = ctc.beam_search_decode(_TWO_FRAMES, [2], beam_width=2)
    self.assertEqual(paths[0].to_list(), [[1]])
    self.assertAlmostEqual(float(log_probs[0, 0]), np.log(0.64), places=5)

  def test_beam_width_one_keeps_the_greedy_prefix_here(self):
    paths, log_probs = ctc.beam_search_decode(_TWO_FRAMES, [2], beam_width=1)
    self.assertEqual(paths[0].to_list(), ctc.greedy_decode(_TWO_FRAMES, [2]).to_list())
    self.assertAlmostEqual(float(log_probs[0, 0]), np.log(0.36), places=5)

  def test_a_wide_beam_finds_the_top_sequences_of_the_exhaustive_sum(self):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=[2, 4, 3]).astype(np.float32) * 2
    lengths = [4, 3]
    paths, log_probs = ctc.beam_search_decode(logits, lengths, beam_width=81, top_paths=3)
    for b, length in enumerate(lengths):
      probs = tf.nn.softmax(logits[b, :length]).numpy()
      expected = sorted(_sequence_probabilities(probs).items(), key=lambda kv: -kv[1])[:3]
      self.assertEqual([tuple(p[b].numpy()) for p in paths], [seq for seq, _ in expected])
      np.testing.assert_allclose(log_probs[b], np.log([p for _, p in expected]), rtol=1e-4)

  def test_every_utterance_gets_a_row_even_when_the_last_decode_empty(self):
    logits = np.log(np.array([[[0.1, 0.9]], [[0.9, 0.1]]], np.float32))
    self.assertEqual(ctc.greedy_decode(logits, [1, 1]).to_list(), [[1], []])
    self.assertEqual(ctc.beam_search_decode(logits, [1, 1], 2)[0][0].to_list(), [[1], []])

  def test_beam_arguments_are_checked_by_name(self):
    with self.assertRaisesRegex(ValueError, '`beam_width`'):
      ctc.beam_search_decode(_TWO_FRAMES, [2], beam_width=0)
    with self.assertRaisesRegex(ValueError, '`top_paths`'):
      ctc.beam_search_decode(_TWO_FRAMES, [2], beam_width=2, top_paths=3)

  def test_ids_to_texts_matches_the_vocabulary(self):
    vocab = data.Vocabulary('en')
    space = vocab.tokens.index(' ') + 1
    rows = [[space, 8, 9, space, space, 1, space], [], [3, 0, 99, 1, 20]]
    texts = ctc.ids_to_texts(tf.ragged.constant(rows), vocab.tokens).numpy()
    self.assertEqual([t.decode() for t in texts], [vocab.decode(r) for r in rows])
    self.assertEqual(texts[0].decode(), 'hi a')


if __name__ == '__main__':
  absltest.main()
