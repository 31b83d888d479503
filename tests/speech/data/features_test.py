from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff.speech import data


def _tone(seconds, hertz, rate=data.SAMPLE_RATE):
  t = np.arange(int(seconds * rate)) / rate
  return (0.5 * np.sin(2 * np.pi * hertz * t)).astype(np.float32)


class LogMelTest(absltest.TestCase):

  def test_shape_and_normalisation(self):
    features = data.log_mel_features(_tone(1.0, 440.0)).numpy()
    # 25 ms windows every 10 ms over 1 s: 1 + (16000 - 400) // 160 = 98 frames.
    self.assertEqual(features.shape, (98, 80))
    self.assertAlmostEqual(features.mean(), 0.0, places=4)
    self.assertAlmostEqual(features.std(), 1.0, places=3)

  def test_cmn_centres_each_channel_and_keeps_their_relative_variance(self):
    # 8 kHz audio upsampled to 16 kHz has nothing above 4 kHz: those mel channels sit at the log
    # floor. "utterance" leaves them far below the speech; "cmn" centres every channel.
    rate = data.SAMPLE_RATE
    t = np.arange(rate) / rate
    rng = np.random.default_rng(0)
    wideband = (0.3 * np.sin(2 * np.pi * 440.0 * t * (1 + 0.3 * t))
                + 0.05 * rng.standard_normal(t.size))
    spectrum = np.fft.rfft(wideband)
    spectrum[np.fft.rfftfreq(t.size, 1 / rate) >= 4000] = 0  # What 8 kHz audio holds.
    upsampled = np.fft.irfft(spectrum, t.size).astype(np.float32)
    cmn = data.log_mel_features(upsampled, 'cmn').numpy()
    utterance = data.log_mel_features(upsampled, 'utterance').numpy()
    self.assertEqual(cmn.shape, utterance.shape)
    # The formula: y = x - (channel means over frames), then y / sqrt(mean(y^2) + 1e-2). Both
    # normalisations are affine in the log-mels x, so "cmn" is "utterance" centred per channel
    # and scaled by one factor: channels keep their relative variance.
    centred = utterance - utterance.mean(axis=0)
    scale = float((cmn * centred).sum() / (centred ** 2).sum())
    np.testing.assert_allclose(cmn, scale * centred, atol=2e-3)
    np.testing.assert_allclose(cmn.mean(axis=0), 0.0, atol=1e-4)
    self.assertAlmostEqual(float(np.mean(cmn ** 2)), 1.0, delta=0.01)
    # The empty band is centred with the speech; under "utterance" it lies far below it.
    top = 79  # Around 7.5 kHz: only interpolation residue.
    self.assertLess(utterance[:, top].mean(), utterance[:, :40].mean() - 1.0)
    self.assertLess(np.abs(cmn[:, top]).mean(), 1.0)
    # A fixed gain (a microphone's level) is removed, up to the log offset's 1e-6.
    louder = data.log_mel_features(2.0 * upsampled, 'cmn').numpy()
    np.testing.assert_allclose(louder[:, :40], cmn[:, :40], atol=1e-2)

  def test_unknown_normalisation_is_refused_naming_it(self):
    with self.assertRaisesRegex(ValueError, "normalization must be one of .*'cmvn'"):
      data.log_mel_features(_tone(0.1, 440.0), 'cmvn')

  def test_energy_lands_in_the_right_mel_band(self):
    low = data.log_mel_features(_tone(0.5, 300.0)).numpy().mean(axis=0)
    high = data.log_mel_features(_tone(0.5, 4000.0)).numpy().mean(axis=0)
    self.assertLess(np.argmax(low), np.argmax(high))
    self.assertLess(np.argmax(low), 20)
    self.assertGreater(np.argmax(high), 50)

  def test_inside_several_graphs(self):
    # Features are computed in tf.data / tf.function graphs; each must build its own constants.
    batch = tf.constant(np.stack([_tone(0.3, 500.0)] * 2))
    eager = data.log_mel_features(batch[0]).numpy()
    for _ in range(2):
      mapped = tf.function(lambda a: tf.map_fn(data.log_mel_features, a))(batch).numpy()
      np.testing.assert_allclose(mapped[1], eager, rtol=1e-4, atol=1e-4)


class SpecAugmentTest(absltest.TestCase):

  def test_masks_within_bounds_and_reproducible(self):
    features = tf.random.normal([300, 80]) + 10.0  # No zeros of its own.
    seed = tf.constant([1, 2])
    masked = data.spec_augment(features, seed=seed).numpy()
    np.testing.assert_array_equal(masked, data.spec_augment(features, seed=seed).numpy())
    zero_rows = np.all(masked == 0, axis=1)
    zero_cols = np.all(masked == 0, axis=0)
    # At most 2 frequency masks of <= 30 bins and 10 time masks of <= min(50, 30) frames.
    self.assertLessEqual(zero_cols.sum(), 60)
    self.assertLessEqual(zero_rows.sum(), 300)
    changed = masked != features.numpy()
    self.assertTrue(np.all(masked[changed] == 0))
    self.assertGreater(changed.sum(), 0)

  def test_time_masks_capped_at_ten_percent(self):
    features = tf.ones([40, 80])
    for i in range(20):
      masked = data.spec_augment(features, num_freq_masks=0, num_time_masks=1,
                                 seed=tf.constant([i, 0])).numpy()
      self.assertLessEqual(np.all(masked == 0, axis=1).sum(), 4)


  def test_batch_masks_each_utterance_within_its_own_frames(self):
    lengths = np.array([300, 120, 40], np.int32)
    features = np.zeros([3, 300, 80], np.float32)
    for b, length in enumerate(lengths):
      features[b, :length] = 10.0 + np.random.default_rng(b).normal(size=[length, 80])
    seed = tf.constant([5, 6], tf.int64)
    masked = data.spec_augment_batch(features, lengths, seed=seed).numpy()
    np.testing.assert_array_equal(
        masked, data.spec_augment_batch(features, lengths, seed=seed).numpy())
    changed = masked != features
    self.assertTrue(np.all(masked[changed] == 0))
    for b, length in enumerate(lengths):
      valid = masked[b, :length]
      # Time masks lie within the valid frames; each of the 10 has at most
      # min(50, 0.1 * length) frames.
      self.assertLessEqual(np.all(valid == 0, axis=1).sum(), 10 * min(50, length // 10))
      self.assertLessEqual(np.all(valid == 0, axis=0).sum(), 60)
      np.testing.assert_array_equal(masked[b, length:], 0.0)
    # Utterances draw their own masks.
    self.assertFalse(np.array_equal(changed[0, :40], changed[2, :40]))


if __name__ == '__main__':
  absltest.main()
