from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from fedasr_tff import models


class ConfigTest(parameterized.TestCase):

  def test_baseline_size_and_groups(self):
    # Spec §4 / §9.10: 255,800,864 parameters with 30 outputs, in 296 tensors.
    model = models.build_ctc_transformer('baseline', vocab_size=29)
    self.assertEqual(model.count_params(), 255_800_864)
    self.assertLen(model.trainable_weights, 296)
    self.assertEqual(model.output_layer.units, 30)

  @parameterized.parameters(('narrow', 113.9e6), ('wide', 454.3e6), ('shallow', 114.2e6),
                            ('deep', 510.7e6))
  def test_named_sizes(self, name, expected):
    model = models.build_ctc_transformer(name, vocab_size=29)
    self.assertAlmostEqual(model.count_params() / expected, 1.0, delta=0.02)

  def test_weight_names_select_the_paper_groups(self):
    model = models.build_ctc_transformer('tiny', vocab_size=29)
    names = [w.name for w in model.trainable_weights]
    for group in ('wqkv', 'wf', 'w1', 'w2', 'ln1', 'ln2'):
      self.assertLen([n for n in names if f'/{group}/' in n and 'block_01' in n],
                     2 if group.startswith('ln') else 1, msg=group)
    self.assertTrue(any('input_norm' in n for n in names))
    self.assertTrue(any('final_ln' in n for n in names))

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, 'Unknown model config.*baseline'):
      models.build_ctc_transformer('huge', 29)
    with self.assertRaisesRegex(ValueError, 'model_dim'):
      models.TransformerConfig(num_blocks=1, model_dim=10, mlp_dim=8, num_heads=4)
    with self.assertRaisesRegex(ValueError, 'vocab_size'):
      models.build_ctc_transformer('tiny', 0)


class ModelTest(absltest.TestCase):

  def test_output_frames_are_a_third(self):
    model = models.build_ctc_transformer('tiny', vocab_size=29)
    logits = model((tf.zeros([2, 100, 80]), tf.constant([100, 61])))
    self.assertEqual(logits.shape, (2, 33, 30))
    self.assertEqual(models.output_lengths([100, 61], 'tiny').numpy().tolist(), [33, 20])

  def test_padding_does_not_change_valid_outputs(self):
    tf.keras.utils.set_random_seed(1)
    model = models.build_ctc_transformer('tiny', vocab_size=29)
    features = tf.random.normal([1, 60, 80])
    alone = model((features, tf.constant([60])))
    padded = tf.concat([features, 5.0 * tf.ones([1, 30, 80])], axis=1)
    batch = model((padded, tf.constant([60])))
    np.testing.assert_allclose(batch[:, :20], alone, rtol=1e-4, atol=1e-4)

  def test_overfits_a_few_utterances(self):
    # Memorising 4 random "utterances" checks the loss, the masks and the decoder together.
    tf.keras.utils.set_random_seed(2)
    model = models.build_ctc_transformer('tiny', vocab_size=29)
    features = tf.random.normal([4, 90, 80])
    lengths = tf.constant([90, 84, 75, 90])
    labels = tf.constant([[3, 4, 5, 6], [7, 7, 8, 0], [9, 10, 0, 0], [11, 12, 13, 0]])
    label_lengths = tf.constant([4, 3, 2, 3])
    optimizer = tf.keras.optimizers.Adam(5e-3)
    out_lengths = models.output_lengths(lengths, 'tiny')

    @tf.function
    def train_step():
      with tf.GradientTape() as tape:
        loss = models.ctc_loss(labels, label_lengths, model((features, lengths), training=True),
                               out_lengths)
      optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights),
                                    model.trainable_weights, strict=True))
      return loss

    for _ in range(80):
      loss = train_step()
    decoded = models.greedy_decode(model((features, lengths)), out_lengths).to_list()
    want = [row[:n] for row, n in zip(labels.numpy().tolist(), label_lengths.numpy(),
                                      strict=True)]
    self.assertEqual(decoded, want)
    self.assertLess(float(loss), 0.5)


if __name__ == '__main__':
  absltest.main()
