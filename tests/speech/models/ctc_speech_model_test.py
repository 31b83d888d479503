"""The model on real (synthetic, espeak-ng) speech: overfitting, and the TFF wrapper."""

import collections
import dataclasses
import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.speech import data
from fedasr_tff.speech import metrics
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic


class SpeechModelTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=2, mean_utterances=4, skew=0.0, seed=0)
    cls.utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    cls.vocab = data.Vocabulary('en')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def test_tiny_model_overfits_eight_utterances(self):
    self.assertLen(self.utterances, 8)
    # One client holding all 8 utterances in one batch.
    one_client = [dataclasses.replace(u, speaker='all') for u in self.utterances]
    client_data = data.SpeechClientData(one_client, self.vocab, max_batch_seconds=1000.0)
    (batch,) = list(client_data.create_tf_dataset_for_client('all'))
    self.assertEqual(int(batch['features'].shape[0]), 8)
    tf.keras.utils.set_random_seed(0)
    model = models.build_ctc_transformer('tiny', self.vocab.size)
    optimizer = tf.keras.optimizers.Adam(2e-3)
    out_lengths = models.output_lengths(batch['feature_lengths'], 'tiny')

    @tf.function
    def train_step():
      with tf.GradientTape() as tape:
        logits = model((batch['features'], batch['feature_lengths']), training=True,
                       seed=batch['seed'])
        loss = models.ctc_loss(batch['labels'], batch['label_lengths'], logits, out_lengths)
      optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights),
                                    model.trainable_weights, strict=True))
      return loss

    for _ in range(250):
      train_step()
    decoded = models.greedy_decode(model((batch['features'], batch['feature_lengths'])),
                                   out_lengths).to_list()
    hypotheses = [self.vocab.decode(ids) for ids in decoded]
    references = [data.normalize_transcript(u.transcript) for u in self.utterances]
    self.assertLess(metrics.character_error_rate(references, hypotheses), 0.05)

  def test_tff_model_metrics_match_python_scoring(self):
    client_data = data.SpeechClientData(self.utterances, self.vocab, max_batch_seconds=1000.0)
    model_fn = models.build_tff_model_fn('tiny', self.vocab.tokens)
    model = model_fn()
    references, hypotheses = [], []
    for client in client_data.client_ids:
      for batch in client_data.create_tf_dataset_for_client(client):
        output = model.forward_pass(batch, training=False)
        lengths = models.output_lengths(batch['feature_lengths'], 'tiny')
        hypotheses += [self.vocab.decode(ids)
                       for ids in models.greedy_decode(output.predictions, lengths).to_list()]
        references += [self.vocab.decode(ids[:n]) for ids, n in zip(
            batch['labels'].numpy(), batch['label_lengths'].numpy(), strict=True)]
    unfinalized = model.report_local_unfinalized_metrics()
    finalized = {name: float(fn(unfinalized[name]))
                 for name, fn in model.metric_finalizers().items()}
    self.assertEqual(finalized['num_examples'], 8)
    self.assertAlmostEqual(finalized['cer'], metrics.character_error_rate(references, hypotheses),
                           places=5)
    self.assertAlmostEqual(finalized['wer'], metrics.word_error_rate(references, hypotheses),
                           places=5)
    model.reset_metrics()
    self.assertEqual(float(model.report_local_unfinalized_metrics()['loss'][1]), 0.0)

  def test_federated_round_on_speech(self):
    client_data = data.SpeechClientData(self.utterances, self.vocab, max_batch_seconds=4.0,
                                        spec_augment=True)
    model_fn = models.build_tff_model_fn('tiny', self.vocab.tokens)
    process = algorithms.build_fed_avg_process(
        model_fn, client_learning_rate=0.2, local_steps=2,
        server_optimizer=optimizers.build('lamb', 0.01), diagnostics=True)
    datasets = [client_data.create_tf_dataset_for_client(c) for c in client_data.client_ids]
    output = process.next(process.initialize(), datasets)
    train = output.metrics['client_work']['train']
    self.assertEqual(train['steps'], 4)
    self.assertTrue(np.isfinite(train['loss']))
    evaluation = algorithms.build_evaluation_process(model_fn)
    eval_state = evaluation.set_model_weights(evaluation.initialize(),
                                              output.state.global_model_weights)
    eval_metrics = evaluation.next(eval_state, datasets).metrics['client_work']['eval'][
        'current_round_metrics']
    self.assertEqual(eval_metrics['num_examples'], 8)
    self.assertBetween(eval_metrics['cer'], 0.0, 5.0)


# Every kind of training-time randomness of the model: dropout, layer drop, CAPE's global shift.
_RANDOM_CONFIG = models.TransformerConfig(num_blocks=2, model_dim=48, mlp_dim=96, dropout=0.3,
                                          layer_drop=0.3, cape_max_global_shift=5.0)


class SeededClientWorkTest(absltest.TestCase):
  """A round's client work is a function of the datasets' seeds (the privacy fix it tests).

  A DP run resumed from its checkpoint replays a round's noise; were client work random (TF's
  stateful RNG in dropout, layer drop and CAPE), two executions of one round would differ by the
  noise-free difference of the client updates, and subtracting them would cancel the noise.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=2, skew=0.0, seed=1,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    cls.client_data = data.SpeechClientData(
        data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train'), cls.vocab,
        max_batch_seconds=1.0, spec_augment=True, strict=True)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def _datasets(self, seeds):
    return [self.client_data.create_tf_dataset_for_client(client, seed=seed)
            for client, seed in zip(self.client_data.client_ids, seeds, strict=True)]

  def test_forward_pass_is_a_function_of_the_batch_seed(self):
    model = models.build_tff_model_fn(_RANDOM_CONFIG, self.vocab.tokens)()
    client = self.client_data.client_ids[0]
    (batch,) = list(self.client_data.create_tf_dataset_for_client(client, seed=5).take(1))
    logits = model.forward_pass(batch, training=True).predictions.numpy()
    np.testing.assert_array_equal(logits, model.forward_pass(batch, training=True).predictions)
    reseeded = collections.OrderedDict(batch, seed=batch['seed'] + [0, 1])
    self.assertFalse(np.array_equal(logits, model.forward_pass(reseeded, training=True)
                                    .predictions))
    np.testing.assert_array_equal(model.forward_pass(batch, training=False).predictions,
                                  model.forward_pass(reseeded, training=False).predictions)
    # The same draws in another traced graph (equal up to float rounding, not bit for bit).
    np.testing.assert_allclose(model.predict_on_batch(batch), logits, rtol=1e-4, atol=1e-5)

  def test_replayed_round_is_bit_identical(self):
    process = algorithms.build_fed_avg_process(
        models.build_tff_model_fn(_RANDOM_CONFIG, self.vocab.tokens), client_learning_rate=0.1,
        local_steps=3,
        server_optimizer=optimizers.build('sgd', 1.0), diagnostics=True)
    state = process.initialize()

    def round_output(seeds):
      output = process.next(state, self._datasets(seeds))
      return output.state.global_model_weights.trainable, output.metrics['client_work']['train']

    weights, train = round_output([11, 12, 13])
    self.assertEqual(train['clients'], 3)
    replayed, replayed_train = round_output([11, 12, 13])
    for a, b in zip(weights, replayed, strict=True):
      np.testing.assert_array_equal(a, b)
    self.assertEqual(train, replayed_train)
    other, _ = round_output([11, 12, 14])
    self.assertTrue(any(not np.array_equal(a, b) for a, b in zip(weights, other, strict=True)))

  def test_replayed_two_way_mixed_round_is_bit_identical(self):
    # The server's central steps train with the same randomness, drawn from the central batches'
    # seeds, and round 2 adds both augmenting gradients of round 1: a resumed mixed FL run
    # replays its rounds only if all of it is a function of the seeds and the state.
    process = algorithms.build_mixed_fl_process(
        models.build_tff_model_fn(_RANDOM_CONFIG, self.vocab.tokens), algorithm='two_way',
        central_weight=0.3, client_learning_rate=0.1, local_steps=2,
        server_optimizer=optimizers.build('sgd', 1.0),
        central_optimizer=optimizers.build('sgd', 0.1),
        merge_optimizer=optimizers.build('sgd', 1.0), central_steps=2)
    central = self.client_data.client_ids[0]

    def round_output(state, seeds, central_seed):
      return process.next(state, self._datasets(seeds), self.client_data
                          .create_tf_dataset_for_client(central, seed=central_seed)).state

    state = round_output(process.initialize(), [1, 2, 3], 4)
    weights = round_output(state, [11, 12, 13], 14).global_model_weights.trainable
    replayed = round_output(state, [11, 12, 13], 14).global_model_weights.trainable
    for a, b in zip(weights, replayed, strict=True):
      np.testing.assert_array_equal(a, b)
    other = round_output(state, [11, 12, 13], 15).global_model_weights.trainable
    self.assertTrue(any(not np.array_equal(a, b) for a, b in zip(weights, other, strict=True)))


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
