"""Scoring a model (`fedasr_tff.speech.evaluation`): greedy as federated evaluation counts, beam
search and a word list, and one trace however often it runs."""

import os
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff.program import model_io
from fedasr_tff.speech import data
from fedasr_tff.speech import decoding
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic


class _RecordingWordList(decoding.WordList):
  """A word list that keeps every transcript it returns."""

  def __init__(self, words):
    super().__init__(words)
    self.transcripts = []

  def restrict(self, candidates):
    self.transcripts.append(super().restrict(candidates))
    return self.transcripts[-1]


class EvaluateTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    root = tempfile.mkdtemp()
    synthetic.make_corpus(root, num_speakers=2, mean_utterances=3, seed=3, skew=0.0,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    utterances = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
    # Short batches: each speaker's batches differ in shape.
    cls.data = data.SpeechClientData(utterances, cls.vocab, max_batch_seconds=2.0, strict=True)
    cls.model = models.build_tff_model_fn('tiny', cls.vocab.tokens)()
    # A model that emits letters: random weights, with a bias away from the blank.
    weights = model_io.model_weights(cls.model.keras_model)
    rng = np.random.default_rng(0)
    cls.weights = type(weights)(
        trainable=[w + rng.normal(0, 0.2, w.shape).astype(w.dtype) for w in weights.trainable],
        non_trainable=weights.non_trainable)

  def _federated_counts(self):
    """The old scoring: the TFF model's own forward_pass and metric sums, per speaker."""
    self.weights.assign_weights_to(self.model)
    counts = {}
    for speaker in self.data.client_ids:
      self.model.reset_metrics()
      for batch in self.data.create_tf_dataset_for_client(speaker, seed=0):
        self.model.forward_pass(batch, training=False)
      sums = self.model.report_local_unfinalized_metrics()
      counts[speaker] = evaluation.ErrorCounts(
          float(sums['loss'][1]), float(sums['loss'][0]), float(sums['wer'][0]),
          float(sums['wer'][1]), float(sums['cer'][0]), float(sums['cer'][1]))
    return counts

  def test_greedy_gives_federated_evaluations_numbers_from_either_model(self):
    want = self._federated_counts()
    self.assertGreater(sum(c.word_edits for c in want.values()), 0)
    for model in (self.model, self.model.keras_model):
      result = evaluation.evaluate(model, self.data, self.weights)
      self.assertEqual(result.per_speaker, want)
      self.assertEqual(result.overall, sum(want.values(), evaluation.ErrorCounts()))

  def test_beam_search_and_a_word_list(self):
    greedy = evaluation.evaluate(self.model, self.data, self.weights)
    beam = evaluation.evaluate(self.model, self.data, self.weights, decoder='beam', beam_width=4)
    self.assertTrue(np.isfinite([beam.overall.wer, beam.overall.cer]).all())
    self.assertEqual(beam.overall.words, greedy.overall.words)
    self.assertEqual(beam.overall.loss_sum, greedy.overall.loss_sum)
    words = _RecordingWordList(['yes', 'no'])
    listed = evaluation.evaluate(self.model, self.data, self.weights, decoder='beam',
                                 beam_width=4, top_paths=2, word_list=words)
    self.assertLen(words.transcripts, int(listed.overall.utterances))
    self.assertTrue(any(words.transcripts))
    for transcript in words.transcripts:
      self.assertContainsSubset(transcript.split(), {'yes', 'no'})
    # More candidates than a one-frame, one-token input has (its argument check used to decode
    # one, and TF's beam search failed: "Less leaves in the beam search than requested").
    many = evaluation.evaluate(self.model, self.data, self.weights, decoder='beam',
                               beam_width=16, top_paths=8, word_list=_RecordingWordList(['yes']))
    self.assertEqual(many.overall.words, greedy.overall.words)
    with self.assertRaisesRegex(ValueError, '`top_paths`'):
      evaluation.evaluate(self.model, self.data, decoder='greedy', top_paths=2)
    with self.assertRaisesRegex(ValueError, r'`top_paths` must be .* \[1, `beam_width`=4\]'):
      evaluation.evaluate(self.model, self.data, decoder='beam', beam_width=4, top_paths=5)

  def test_evaluating_in_a_loop_traces_once_and_warns_of_no_retracing(self):
    # A user's loop: the same model, then a fresh model per checkpoint (TF warned of
    # retracing every few calls).
    fresh = [models.build_tff_model_fn('tiny', self.vocab.tokens)() for _ in range(6)]
    # Once first: TF's deprecation notices of the CTC ops are logged at first use, and the
    # scorer is traced for these batches (their first shapes, then relaxed ones).
    evaluation.evaluate(self.model, self.data, self.weights)
    key = (self.model.keras_model.config, self.vocab.size + 1, tuple(self.vocab.tokens))
    _, scorer = evaluation._SCORERS[key]  # pylint: disable=protected-access
    traces = scorer.experimental_get_tracing_count()
    with self.assertNoLogs(tf.get_logger(), 'WARNING'):
      results = [evaluation.evaluate(self.model, self.data, self.weights) for _ in range(3)]
      results += [evaluation.evaluate(model, self.data, self.weights) for model in fresh]
    # The scorer is shared by every model of the architecture (and by the other tests of a
    # process): the loop traces nothing new.
    self.assertEqual(scorer.experimental_get_tracing_count(), traces)
    # Each model scored with its own weights: the same weights, the same figures.
    for result in results[1:]:
      self.assertEqual(result.overall, results[0].overall)

  def test_scoring_copies_each_models_weights(self):
    weights = model_io.model_weights(self.model.keras_model)
    other = type(weights)(trainable=[np.zeros_like(w) for w in weights.trainable],
                          non_trainable=weights.non_trainable)
    scored = evaluation.evaluate(self.model, self.data, self.weights).overall
    zeroed = models.build_tff_model_fn('tiny', self.vocab.tokens)()
    self.assertNotEqual(evaluation.evaluate(zeroed, self.data, other).overall, scored)
    self.assertEqual(evaluation.evaluate(self.model, self.data, self.weights).overall, scored)


if __name__ == '__main__':
  absltest.main()
