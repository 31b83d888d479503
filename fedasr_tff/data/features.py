"""Log-mel features and SpecAugment with `tf.signal` (spec §4).

* 80 log-mel filterbanks of 16 kHz audio, 25 ms Hann window (400 samples), 10 ms hop (160),
  512-point FFT, mel filters from 20 Hz to 8 kHz; log(mel energy + 1e-6).
* Each utterance is normalised to zero mean and unit variance over its whole (time x mel) matrix
  (the released code's choice; spec §4).
* SpecAugment, training only: 2 frequency masks of width U[0, 30] and 10 time masks of width
  U[0, min(50, 0.1 T)], no time warping. Masked values are set to 0, the normalised mean.
"""

import tensorflow as tf

SAMPLE_RATE = 16000
NUM_MELS = 80
FRAME_LENGTH = 400  # 25 ms
FRAME_STEP = 160  # 10 ms
FFT_LENGTH = 512
_LOG_OFFSET = 1e-6

_MEL_MATRIX = None


def _mel_matrix():
  # Computed once, eagerly, and kept as a NumPy array: a cached tensor would belong to
  # whichever graph first built it.
  global _MEL_MATRIX
  if _MEL_MATRIX is None:
    with tf.init_scope():
      _MEL_MATRIX = tf.signal.linear_to_mel_weight_matrix(
          num_mel_bins=NUM_MELS,
          num_spectrogram_bins=FFT_LENGTH // 2 + 1,
          sample_rate=SAMPLE_RATE,
          lower_edge_hertz=20.0,
          upper_edge_hertz=SAMPLE_RATE / 2).numpy()
  return tf.constant(_MEL_MATRIX)


def log_mel_features(waveform: tf.Tensor) -> tf.Tensor:
  """[samples] float waveform at 16 kHz in [-1, 1] -> [frames, 80] normalised log-mels."""
  waveform = tf.convert_to_tensor(waveform, tf.float32)
  stft = tf.signal.stft(waveform, FRAME_LENGTH, FRAME_STEP, FFT_LENGTH, pad_end=False)
  power = tf.math.real(stft * tf.math.conj(stft))
  log_mel = tf.math.log(tf.matmul(power, _mel_matrix()) + _LOG_OFFSET)
  mean, variance = tf.nn.moments(log_mel, axes=[0, 1])
  return (log_mel - mean) * tf.math.rsqrt(variance + 1e-8)


def spec_augment(features: tf.Tensor, num_freq_masks: int = 2, max_freq_width: int = 30,
                 num_time_masks: int = 10, max_time_width: int = 50,
                 max_time_fraction: float = 0.1, seed=None) -> tf.Tensor:
  """SpecAugment without time warping on [frames, mels] features (module docstring).

  `seed`: an optional shape-[2] int tensor for stateless, reproducible masks.
  """
  frames = tf.shape(features)[0]
  mels = tf.shape(features)[1]
  max_time = tf.minimum(max_time_width,
                        tf.cast(max_time_fraction * tf.cast(frames, tf.float32), tf.int32))
  seeds = (None if seed is None else
           tf.random.experimental.stateless_split(seed, 2 * (num_freq_masks + num_time_masks)))

  def uniform_int(i, maxval):
    # Uniform integer in [0, maxval] (inclusive).
    if seeds is None:
      return tf.random.uniform([], 0, maxval + 1, dtype=tf.int32)
    return tf.random.stateless_uniform([], seeds[i], 0, maxval + 1, dtype=tf.int32)

  def mask(values, axis_len, width, start, axis):
    positions = tf.range(axis_len)
    keep = tf.logical_or(positions < start, positions >= start + width)
    keep = keep[tf.newaxis, :] if axis == 1 else keep[:, tf.newaxis]
    return tf.where(keep, values, tf.zeros_like(values))

  for i in range(num_freq_masks + num_time_masks):
    is_freq = i < num_freq_masks
    axis_len = mels if is_freq else frames
    width = uniform_int(2 * i, tf.minimum(max_freq_width, mels) if is_freq else max_time)
    start = uniform_int(2 * i + 1, axis_len - width)
    features = mask(features, axis_len, width, start, axis=1 if is_freq else 0)
  return features
