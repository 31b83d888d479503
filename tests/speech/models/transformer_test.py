from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from fedasr_tff.speech import models
from fedasr_tff.speech.models import transformer


class ConfigTest(parameterized.TestCase):

  def test_baseline_size_and_groups(self):
    # Pelikan et al. 2025 (arXiv:2310.00098), App. F: the baseline has 255M parameters; our
    # count of that architecture with 30 outputs (29 tokens + blank) is 255,800,864 in 296
    # tensors.
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

  def test_tensor_names_use_the_model_vocabulary(self):
    model = models.build_ctc_transformer(models.TransformerConfig(
        num_blocks=2, model_dim=32, mlp_dim=64, num_heads=4), vocab_size=29)
    # `model_io.tensor_name`: the variable name without the model scope and the `:0`.
    names = [v.name.split(':')[0].split('/', 1)[1] for v in model.trainable_variables]
    inside = [name for name in names if name.startswith('block_')]
    self.assertLen(inside, 2 * 8)   # ln1, ln2 (gamma and beta) and four kernels per block.
    for name in inside:
      self.assertIn(models.block_parameter(name), models.BLOCK_PARAMETERS, msg=name)
    # Every block holds every parameter, in forward-pass order.
    self.assertEqual(list(dict.fromkeys(models.block_parameter(n) for n in inside[:8])),
                     list(models.BLOCK_PARAMETERS))
    self.assertEqual(models.block_tensor('block_01/ln2/beta'),
                     transformer.BlockTensor(1, 'ln2', 'beta'))
    self.assertEqual(models.block_parameter('block_00/w1/kernel'), 'w1')
    self.assertTrue(set(models.MLP_PARAMETERS) <= set(models.BLOCK_PARAMETERS))
    outside = [name for name in names if name not in inside]
    for name in outside:
      self.assertIsNone(models.block_parameter(name), msg=name)
    # The layers outside the blocks, in forward-pass order.
    self.assertEqual(list(dict.fromkeys(name.split('/')[0] for name in outside)),
                     list(models.OUTER_LAYERS))
    self.assertIsNone(models.block_parameter('block_00/unknown/kernel'))

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

    seed = tf.constant([0, 0], tf.int64)  # `tiny` draws nothing at random.

    @tf.function
    def train_step():
      with tf.GradientTape() as tape:
        loss = models.ctc_loss(labels, label_lengths,
                               model((features, lengths), training=True, seed=seed), out_lengths)
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


def _random_model(**randomness):
  """A 2-block model drawing only the given randomness (dropout, layer_drop, CAPE shift)."""
  config = models.TransformerConfig(
      num_blocks=2, model_dim=32, mlp_dim=64, **{'dropout': 0.0, 'layer_drop': 0.0,
                                                 'cape_max_global_shift': 0.0, **randomness})
  tf.keras.utils.set_random_seed(3)
  return models.build_ctc_transformer(config, vocab_size=29)


def _seed(*words):
  return tf.constant(words, tf.int64)


class SeededTrainingTest(absltest.TestCase):
  """A training pass draws everything from its seed (the module's randomness contract)."""

  def setUp(self):
    super().setUp()
    self.inputs = (tf.random.stateless_normal([2, 60, 80], seed=[1, 2]), tf.constant([60, 45]))

  def test_training_pass_is_a_function_of_the_seed(self):
    model = _random_model(dropout=0.3, layer_drop=0.3, cape_max_global_shift=5.0)
    first = model(self.inputs, training=True, seed=_seed(4, 5)).numpy()
    tf.keras.utils.set_random_seed(99)  # TF's global random state plays no part.
    np.testing.assert_array_equal(first, model(self.inputs, training=True, seed=_seed(4, 5)))
    self.assertFalse(np.array_equal(first, model(self.inputs, training=True, seed=_seed(4, 6))))
    # Inference takes no seed and is deterministic.
    np.testing.assert_array_equal(model(self.inputs), model(self.inputs, training=False))

  def test_training_without_a_seed_is_an_error(self):
    with self.assertRaisesRegex(ValueError, 'needs `seed`'):
      _random_model()(self.inputs, training=True)

  def test_dropout_masks_follow_the_seed(self):
    ones = tf.ones([64, 64])
    masks = [transformer.stateless_dropout(ones, 0.5, _seed(s, 0), training=True).numpy() != 0
             for s in (1, 1, 2)]
    np.testing.assert_array_equal(masks[0], masks[1])
    self.assertFalse(np.array_equal(masks[0], masks[2]))
    self.assertBetween(masks[0].mean(), 0.45, 0.55)
    np.testing.assert_array_equal(transformer.stateless_dropout(ones, 0.5, None, False), ones)
    # Through the model: dropout alone makes seeds differ, and a seed repeats itself.
    model = _random_model(dropout=0.3)
    outputs = [model(self.inputs, training=True, seed=_seed(s, 0)).numpy() for s in (1, 1, 2)]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    self.assertFalse(np.array_equal(outputs[0], outputs[2]))

  def test_layer_drop_follows_the_seed_with_a_stream_per_block(self):
    model = _random_model(layer_drop=0.5)
    outcomes = []  # The distinct outputs: which of the 2 blocks were skipped.
    for seed in range(32):
      output = model(self.inputs, training=True, seed=_seed(seed, 0)).numpy()
      np.testing.assert_array_equal(output, model(self.inputs, training=True,
                                                  seed=_seed(seed, 0)))
      if not any(np.allclose(output, known, rtol=1e-5, atol=1e-5) for known in outcomes):
        outcomes.append(output)
    # Both blocks kept, both skipped, and each alone: the blocks draw independently.
    self.assertLen(outcomes, 4)
    self.assertTrue(any(np.allclose(model(self.inputs), known, rtol=1e-5, atol=1e-5)
                        for known in outcomes))

  def test_cape_shift_follows_the_seed(self):
    mask = tf.sequence_mask([10, 6], 10)

    def embedding(seed=None):
      return transformer.cape_embedding(mask, 16, 0.03, 30.0, 5.0, training=seed is not None,
                                        seed=seed).numpy()

    shifted = embedding(_seed(1, 0))
    np.testing.assert_array_equal(shifted, embedding(_seed(1, 0)))
    self.assertFalse(np.array_equal(shifted, embedding(_seed(2, 0))))
    self.assertFalse(np.allclose(shifted, embedding(), atol=1e-3))
    model = _random_model(cape_max_global_shift=5.0)
    outputs = [model(self.inputs, training=True, seed=_seed(s, 0)).numpy() for s in (1, 1, 2)]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    self.assertFalse(np.array_equal(outputs[0], outputs[2]))


if __name__ == '__main__':
  absltest.main()
