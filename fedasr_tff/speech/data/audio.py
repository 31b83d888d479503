"""Audio decoding to 16 kHz mono float32 through tensorflow-io (WAV, FLAC, MP3)."""

import functools
import os
import re

import numpy as np
import tensorflow as tf
import tensorflow_io as tfio

from fedasr_tff.speech.data import features

SUPPORTED_EXTENSIONS = ('.wav', '.flac', '.mp3')


# What a TensorFlow op error adds around its reason: the op's device path and the op's name.
_OP_ERROR_NOISE = re.compile(r'\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]*\]')


def _reason(error: Exception) -> str:
  """The reason an op gives (`unable to read metadata`), without TensorFlow's wrapping."""
  return _OP_ERROR_NOISE.sub('', str(error)).strip()


class AudioError(ValueError):
  """An audio file that could not be turned into a 16 kHz waveform; the message names it."""


@functools.lru_cache(maxsize=None)
def _resampler(rate: int):
  """A `tf.function` resampling any [samples] float32 waveform from `rate` Hz to `SAMPLE_RATE`.

  `tfio.audio.resample` runs `tf.vectorized_map`, which traces a new function on every eager
  call (TF's retracing warning after five files of an 8 kHz corpus); traced once per rate here.
  """
  return tf.function(lambda waveform: tfio.audio.resample(waveform, rate, features.SAMPLE_RATE),
                     input_signature=[tf.TensorSpec([None], tf.float32)])


def load_audio(path: str) -> np.ndarray:
  """Decodes an audio file to a 16 kHz mono waveform.

  Args:
    path: a WAV, FLAC or MP3 file.

  Returns:
    The [samples] float32 waveform in [-1, 1] at `SAMPLE_RATE`, channels averaged.

  Raises:
    AudioError: naming the file, if it cannot be read, decoded or resampled, or decodes to no
      samples or to NaN or Inf; callers can skip and count it (or stop) without losing the rest
      of an epoch.
  """
  extension = os.path.splitext(path)[1].lower()
  if extension not in SUPPORTED_EXTENSIONS:
    raise AudioError(f'{path}: unsupported audio format {extension!r} '
                     f'(supported: {", ".join(SUPPORTED_EXTENSIONS)}).')
  if not os.path.isfile(path):
    raise AudioError(f'{path}: no such audio file.')
  try:
    audio = tfio.audio.AudioIOTensor(path)
    rate = int(audio.rate.numpy())
    samples = audio.to_tensor()
  except (tf.errors.OpError, RuntimeError, ValueError, NotImplementedError) as e:
    raise AudioError(f'{path}: cannot decode audio: {_reason(e)}') from e
  if samples.shape[0] == 0:
    raise AudioError(f'{path}: audio has no samples.')
  if samples.dtype == tf.int16:
    samples = tf.cast(samples, tf.float32) / 32768.0
  elif samples.dtype == tf.int32:
    samples = tf.cast(samples, tf.float32) / 2147483648.0
  else:
    samples = tf.cast(samples, tf.float32)
  waveform = tf.reduce_mean(samples, axis=1)
  if rate != features.SAMPLE_RATE:
    if rate <= 0:
      raise AudioError(f'{path}: invalid sample rate {rate}.')
    try:
      waveform = _resampler(rate)(waveform)
    except (tf.errors.OpError, ValueError) as e:
      raise AudioError(f'{path}: cannot resample from {rate} Hz to {features.SAMPLE_RATE} Hz: '
                       f'{_reason(e)}') from e
  waveform = waveform.numpy()
  if not np.all(np.isfinite(waveform)):
    raise AudioError(f'{path}: decoded audio contains NaN or Inf.')
  return waveform
