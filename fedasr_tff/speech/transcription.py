"""Transcribing audio with a trained CTC transformer, in this process or as a TF SavedModel.

`Transcriber` puts the whole recognizer (features, model, greedy decoding) in one TF graph;
`export_saved_model` writes it as a SavedModel; `transcribe_files` runs it, or a loaded one,
over audio files and decodes with `fedasr_tff.speech.decoding`.
"""

import dataclasses
import os
from typing import Callable
from typing import Iterator
from typing import Optional
from typing import Sequence

import numpy as np
import tensorflow as tf

from fedasr_tff.speech import decoding
from fedasr_tff.speech.data import audio as audio_lib
from fedasr_tff.speech.data import corpora
from fedasr_tff.speech.data import features as features_lib
from fedasr_tff.speech.models import ctc
from fedasr_tff.speech.models import transformer

_WAVEFORM_SPECS = (tf.TensorSpec([None, None], tf.float32, name='waveforms'),
                   tf.TensorSpec([None], tf.int32, name='lengths'))


class _Untracked:
  """Holds a value that `tf.Module` attribute tracking leaves alone."""

  def __init__(self, value):
    self.value = value


class Transcriber(tf.Module):
  """The CTC transformer with feature extraction and decoding in its graph.

  `transcribe(waveforms, lengths)` is the whole recognizer:

      waveforms [B, S] float32, 16 kHz mono in [-1, 1], utterance b in waveforms[b, :lengths[b]]
      -> log-mels of each utterance alone (`data.log_mel_features`, normalised as the model's
         training features were)
      -> the CTC transformer (inference mode) -> greedy decoding -> text

  Every utterance needs at least one analysis frame (`data.features.FRAME_LENGTH` samples), else
  the call fails. The module also carries its vocabulary (`tokens`, a [V] string variable).
  """

  def __init__(self, keras_model: transformer.CTCTransformer, tokens: Sequence[str],
               beam_width: Optional[int] = None,
               feature_normalization: str = features_lib.UTTERANCE):
    """Wraps a trained model.

    Args:
      keras_model: the `CTCTransformer`.
      tokens: its vocabulary (blank excluded).
      beam_width: if given, also a `transcribe_beam` function with that beam width: the same
        inputs, and `transcripts` of the best beam-search sequence and their
        `log_probabilities` [B].
      feature_normalization: the normalisation of the features the model was trained on
        (`data.log_mel_features`; `speech.data_config.model_features` reads it from a
        `model.npz`).

    Raises:
      ValueError: if the model's outputs do not match `tokens`, or for a bad `beam_width` or
        `feature_normalization`.
    """
    features_lib.check_normalization('feature_normalization', feature_normalization)
    super().__init__(name='transcriber')
    tokens = list(tokens)
    outputs = keras_model.output_layer.units
    if outputs != len(tokens) + 1:
      raise ValueError(f'The model has {outputs} outputs; `tokens` needs {len(tokens) + 1} '
                       f'({len(tokens)} tokens and the CTC blank).')
    # The Keras model out of the module's object graph (saving it would make Keras trace its
    # training call too, which needs a seed); its variables are in the graph, which the
    # SavedModel needs.
    self._model = _Untracked(keras_model)
    self.weights = list(keras_model.variables)
    self.tokens = tf.Variable(tokens, trainable=False, name='tokens')
    self._token_list = tokens
    self._feature_normalization = feature_normalization
    # Recorded in the SavedModel too, so that it states the features it computes.
    self.feature_normalization = tf.Variable(feature_normalization, trainable=False,
                                             name='feature_normalization')
    if beam_width is not None:
      ctc.beam_search_decode(tf.zeros([1, 1, outputs]), [1], beam_width)  # Checks the width.
      self.transcribe_beam = tf.function(
          lambda waveforms, lengths: self._beam(waveforms, lengths, beam_width),
          input_signature=_WAVEFORM_SPECS)

  def _logits(self, waveforms, lengths):
    tf.debugging.assert_greater_equal(
        lengths, features_lib.FRAME_LENGTH,
        message=f'every waveform needs at least {features_lib.FRAME_LENGTH} samples (25 ms)')
    features = tf.map_fn(
        lambda args: features_lib.log_mel_features(args[0][:args[1]],
                                                   self._feature_normalization),
        (waveforms, lengths),
        fn_output_signature=tf.RaggedTensorSpec([None, features_lib.NUM_MELS], tf.float32,
                                                ragged_rank=0))
    feature_lengths = tf.cast(features.row_lengths(), tf.int32)
    model = self._model.value
    logits = model((features.to_tensor(), feature_lengths), training=False)
    return logits, transformer.output_lengths(feature_lengths, model.config)

  @tf.function(input_signature=_WAVEFORM_SPECS)
  def transcribe(self, waveforms, lengths):
    """Transcribes a batch of waveforms (class docstring).

    Args:
      waveforms: [B, S] float32, 16 kHz mono in [-1, 1].
      lengths: [B] int32 valid samples of each.

    Returns:
      {'transcripts': greedy [B] tf.string, 'logits': [B, T, V + 1],
       'logit_lengths': [B]}.
    """
    logits, logit_lengths = self._logits(waveforms, lengths)
    texts = ctc.ids_to_texts(ctc.greedy_decode(logits, logit_lengths), self._token_list)
    return {'transcripts': texts, 'logits': logits, 'logit_lengths': logit_lengths}

  def _beam(self, waveforms, lengths, beam_width):
    logits, logit_lengths = self._logits(waveforms, lengths)
    paths, log_probabilities = ctc.beam_search_decode(logits, logit_lengths, beam_width)
    return {'transcripts': ctc.ids_to_texts(paths[0], self._token_list),
            'log_probabilities': log_probabilities[:, 0]}


def export_saved_model(transcriber: Transcriber, directory: str) -> None:
  """Writes a transcriber as a SavedModel.

  Signatures: `serving_default`, `Transcriber.transcribe` (greedy decoding); `transcribe_beam`
  if the transcriber has a beam width.

  Args:
    transcriber: the `Transcriber`.
    directory: the SavedModel's folder, which must not hold files yet.

  Raises:
    ValueError: if `directory` is not empty.
  """
  if os.path.isdir(directory) and os.listdir(directory):
    raise ValueError(f'SavedModel directory {directory!r} is not empty.')
  signatures = {'serving_default': transcriber.transcribe}
  if hasattr(transcriber, 'transcribe_beam'):
    signatures['transcribe_beam'] = transcriber.transcribe_beam
  tf.saved_model.save(transcriber, directory, signatures=signatures)


@dataclasses.dataclass(frozen=True)
class Transcript:
  """The transcript of one listed file.

  Attributes:
    entry: the listed file.
    text: its transcript; None when it was skipped.
    error: why it was skipped; None when it was transcribed.
  """
  entry: corpora.AudioListEntry
  text: Optional[str] = None
  error: Optional[str] = None


def load_waveform(path: str) -> np.ndarray:
  """`data.load_audio`, refusing audio shorter than one analysis frame.

  Args:
    path: the audio file.

  Returns:
    The [samples] float32 waveform at 16 kHz.

  Raises:
    AudioError: naming the file, as `data.load_audio`, or if it is shorter than one frame.
  """
  waveform = audio_lib.load_audio(path)
  if waveform.shape[0] < features_lib.FRAME_LENGTH:
    raise audio_lib.AudioError(f'{path}: audio shorter than one 25 ms frame '
                               f'({waveform.shape[0]} samples at 16 kHz).')
  return waveform


def transcribe_files(transcribe: Callable[..., dict], tokens: Sequence[str],
                     entries: Sequence[corpora.AudioListEntry], decoder: str = 'greedy',
                     beam_width: int = 16, top_paths: int = 1,
                     word_list: Optional[decoding.WordList] = None,
                     skip_unreadable: bool = False) -> Iterator[Transcript]:
  """Transcribes `entries` one file at a time, in order, yielding each transcript when done.

  Args:
    transcribe: `Transcriber.transcribe` or a loaded SavedModel's (waveforms, lengths) -> dict
      with `logits` and `logit_lengths`.
    tokens: the model's vocabulary.
    entries: the files.
    decoder: as `decoding.decode`.
    beam_width: as `decoding.decode`.
    top_paths: as `decoding.decode`.
    word_list: if given, each transcript is `word_list.restrict` of the candidates.
    skip_unreadable: a file that cannot be read as audio gives a `Transcript` with `error`
      instead of raising the `data.AudioError` that names it.

  Yields:
    A `Transcript` per entry, in order.

  Raises:
    AudioError: for an unreadable file, unless `skip_unreadable`.
  """
  for entry in entries:
    try:
      waveform = load_waveform(entry.path)
    except audio_lib.AudioError as e:
      if not skip_unreadable:
        raise
      yield Transcript(entry, error=str(e))
      continue
    outputs = transcribe(waveforms=tf.constant(waveform[np.newaxis]),
                         lengths=tf.constant([waveform.shape[0]], tf.int32))
    candidates = decoding.decode(outputs['logits'], outputs['logit_lengths'], tokens, decoder,
                                 beam_width, top_paths)[0]
    texts = [c.text for c in candidates]
    yield Transcript(entry, word_list.restrict(texts) if word_list else texts[0])
