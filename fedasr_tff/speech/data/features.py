"""Log-mel features and SpecAugment with `tf.signal`.

As in Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 4
and App. F, and its released code (https://github.com/apple/ml-pfl4asr).
"""

import tensorflow as tf

SAMPLE_RATE = 16000
NUM_MELS = 80
FRAME_LENGTH = 400
FRAME_STEP = 160
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


# How an utterance's log-mels are normalised (`log_mel_features`).
UTTERANCE, CMN = 'utterance', 'cmn'
NORMALIZATIONS = (UTTERANCE, CMN)
# The variance floor of CMN, in squared log-energy units: an utterance of constant spectrum
# (digital silence) stays at 0 instead of having its rounding noise scaled up to unit variance.
_CMN_VARIANCE_FLOOR = 1e-2


def check_normalization(name: str, value: str) -> None:
  """Raises a `ValueError` naming argument `name` unless `value` is one of `NORMALIZATIONS`."""
  if value not in NORMALIZATIONS:
    raise ValueError(f'{name} must be one of {NORMALIZATIONS}, got {value!r}.')


def log_mel_features(waveform: tf.Tensor, normalization: str = UTTERANCE) -> tf.Tensor:
  """Normalised log-mel features of a waveform.

  80 log-mel filterbanks of 16 kHz audio, 25 ms Hann window (400 samples), 10 ms hop (160),
  512-point FFT, mel filters from 20 Hz to 8 kHz; log(mel energy + 1e-6). Then the [T, 80]
  matrix x of the utterance is normalised, by `normalization`:

  - "utterance": x -> (x - m) / sqrt(v + 1e-8), with m and v the mean and variance of all of x:
    the released code's choice (the paper, Sec. 4, says "for each input sequence").
  - "cmn": cepstral mean normalisation, then the utterance's variance: y[:, c] = x[:, c] - m_c
    with m_c the mean of mel channel c over the utterance's frames, and x -> y / sqrt(mean(y^2)
    + 1e-2). It removes a channel's fixed gain (a microphone's colouring, a band limit), so a
    channel the audio never reaches (above 4 kHz in 8 kHz audio) sits at 0 with the speech
    rather than at the log floor far below it, which under "utterance" takes most of the
    variance and squeezes the speech band. Channels keep their relative variance, so one
    holding only noise stays quiet (normalising each channel's variance too scored worse on
    recorded-like audio). Measured: docs/results.md, "The recipe on unseen voices and
    recording conditions".

  Args:
    waveform: [samples] float waveform at 16 kHz in [-1, 1].
    normalization: "utterance" or "cmn" (`NORMALIZATIONS`), as above.

  Returns:
    [frames, 80] float32 features.

  Raises:
    ValueError: for another `normalization`.
  """
  check_normalization('normalization', normalization)
  waveform = tf.convert_to_tensor(waveform, tf.float32)
  stft = tf.signal.stft(waveform, FRAME_LENGTH, FRAME_STEP, FFT_LENGTH, pad_end=False)
  power = tf.math.real(stft * tf.math.conj(stft))
  log_mel = tf.math.log(tf.matmul(power, _mel_matrix()) + _LOG_OFFSET)
  if normalization == CMN:
    centred = log_mel - tf.reduce_mean(log_mel, axis=0, keepdims=True)
    return centred * tf.math.rsqrt(tf.reduce_mean(tf.square(centred)) + _CMN_VARIANCE_FLOOR)
  mean, variance = tf.nn.moments(log_mel, axes=[0, 1])
  return (log_mel - mean) * tf.math.rsqrt(variance + 1e-8)


def spec_augment(features: tf.Tensor, num_freq_masks: int = 2, max_freq_width: int = 30,
                 num_time_masks: int = 10, max_time_width: int = 50,
                 max_time_fraction: float = 0.1, seed=None) -> tf.Tensor:
  """SpecAugment without time warping on one utterance (`spec_augment_batch`).

  The paper's training setting is the default: 2 frequency masks of width U[0, 30] and 10 time
  masks of width U[0, min(50, 0.1 T)]. Masked values are set to 0, the normalised mean.

  Args:
    features: [frames, mels] features.
    num_freq_masks: frequency masks.
    max_freq_width: the widest frequency mask.
    num_time_masks: time masks.
    max_time_width: the widest time mask.
    max_time_fraction: the widest time mask as a fraction of the frames, if narrower.
    seed: an optional shape-[2] int tensor for stateless, reproducible masks.

  Returns:
    The masked [frames, mels] features.
  """
  features = tf.convert_to_tensor(features, tf.float32)
  return spec_augment_batch(features[tf.newaxis], tf.shape(features)[:1], num_freq_masks,
                            max_freq_width, num_time_masks, max_time_width, max_time_fraction,
                            seed)[0]


def spec_augment_batch(features: tf.Tensor, lengths: tf.Tensor, num_freq_masks: int = 2,
                       max_freq_width: int = 30, num_time_masks: int = 10,
                       max_time_width: int = 50, max_time_fraction: float = 0.1,
                       seed=None) -> tf.Tensor:
  """SpecAugment of every utterance of a padded [batch, frames, mels] batch, all at once.

  Utterance b has `lengths[b]` valid frames. Each of its masks draws a width w uniform on
  {0, ..., W} and a start uniform on {0, ..., N - w}, with W = `max_freq_width` (capped at the
  mels) and N the mels for a frequency mask, W = min(`max_time_width`,
  floor(`max_time_fraction` * lengths[b])) and N = lengths[b] for a time mask; masked values
  become 0. Masks are drawn independently for every utterance and built by comparing position
  ranges with the intervals, with no loop over utterances or masks.

  Args:
    features: [batch, frames, mels] padded features.
    lengths: [batch] valid frames of every utterance.
    num_freq_masks: frequency masks per utterance.
    max_freq_width: W of the frequency masks.
    num_time_masks: time masks per utterance.
    max_time_width: the widest time mask.
    max_time_fraction: the widest time mask as a fraction of the utterance's frames, if
      narrower.
    seed: an optional shape-[2] int tensor for stateless, reproducible masks.

  Returns:
    The masked [batch, frames, mels] features.
  """
  features = tf.convert_to_tensor(features, tf.float32)
  lengths = tf.cast(lengths, tf.int32)
  batch, frames, mels = tf.unstack(tf.shape(features))
  max_time = tf.minimum(max_time_width, tf.cast(
      max_time_fraction * tf.cast(lengths, tf.float32), tf.int32))
  draws = [num_freq_masks, num_freq_masks, num_time_masks, num_time_masks]
  if seed is None:
    uniforms = [tf.random.uniform([batch, n]) for n in draws]
  else:
    seeds = tf.random.experimental.stateless_split(seed, len(draws))
    uniforms = [tf.random.stateless_uniform([batch, n], seeds[i]) for i, n in enumerate(draws)]

  def uniform_int(u, maxval):
    # Uniform on {0, ..., maxval} from u ~ U[0, 1); min() guards float rounding at u -> 1.
    return tf.minimum(tf.cast(u * tf.cast(maxval + 1, tf.float32), tf.int32), maxval)

  def masked(width, start, size):
    # [batch, size]: whether a position lies in any of the [batch, masks] intervals.
    positions = tf.range(size)[tf.newaxis, tf.newaxis, :]
    inside = (positions >= start[..., tf.newaxis]) & (positions < (start + width)[..., tf.newaxis])
    return tf.reduce_any(inside, axis=1)

  freq_width = uniform_int(uniforms[0], tf.minimum(max_freq_width, mels))
  freq_start = uniform_int(uniforms[1], mels - freq_width)
  time_width = uniform_int(uniforms[2], max_time[:, tf.newaxis])
  time_start = uniform_int(uniforms[3], lengths[:, tf.newaxis] - time_width)
  drop = (masked(freq_width, freq_start, mels)[:, tf.newaxis, :] |
          masked(time_width, time_start, frames)[:, :, tf.newaxis])
  return tf.where(drop, tf.zeros_like(features), features)
