"""WER/CER of a model on a set of speakers, overall and per speaker, greedy or beam-search decoded.

The Keras model runs directly (no TFF computation); the loss and the `tf.edit_distance` counts
are those of the TFF model's federated evaluation (`models.CTCSpeechModel`).
"""

import csv
import dataclasses
import os
from typing import TYPE_CHECKING
from typing import Dict
from typing import Optional
from typing import Sequence
from typing import Union

import numpy as np
import tensorflow as tf

from fedasr_tff import private_files
from fedasr_tff.speech import decoding
from fedasr_tff.speech import metrics
from fedasr_tff.speech.models import ctc
from fedasr_tff.speech.models import transformer

# The released metrics a speech run's progress bar shows, by flattened name.
SHOWN_METRICS = ('train/loss', 'client/train/loss', 'eval/cer', 'eval/wer',
                 'privacy/epsilon_run_rdp', 'privacy/epsilon_declared_rdp')

if TYPE_CHECKING:
  import tensorflow_federated as tff

  from fedasr_tff.speech.data import pipeline
  from fedasr_tff.speech.models import ctc_speech_model


@dataclasses.dataclass(frozen=True)
class ErrorCounts:
  """Sums over utterances; the rates are ratios of these (corpus-level).

  Attributes:
    utterances: the utterances scored.
    loss_sum: the sum of their CTC losses.
    word_edits: word-level edit distance to the references, summed.
    words: reference words.
    char_edits: character-level edit distance, summed.
    chars: reference characters.
  """
  utterances: float = 0.0
  loss_sum: float = 0.0
  word_edits: float = 0.0
  words: float = 0.0
  char_edits: float = 0.0
  chars: float = 0.0

  def __add__(self, other: 'ErrorCounts') -> 'ErrorCounts':
    return ErrorCounts(*(a + b for a, b in zip(dataclasses.astuple(self),
                                                dataclasses.astuple(other), strict=True)))

  @property
  def wer(self) -> float:
    """Total word edits over total reference words (NaN without words)."""
    return self.word_edits / self.words if self.words else float('nan')

  @property
  def cer(self) -> float:
    """Total character edits over total reference characters (NaN without characters)."""
    return self.char_edits / self.chars if self.chars else float('nan')

  @property
  def loss(self) -> float:
    """The mean CTC loss per utterance (NaN without utterances)."""
    return self.loss_sum / self.utterances if self.utterances else float('nan')


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
  """An evaluation, overall and per speaker.

  Attributes:
    overall: the sums over all speakers.
    per_speaker: {speaker: its sums}.
  """
  overall: ErrorCounts
  per_speaker: Dict[str, ErrorCounts]

  def metrics(self) -> Dict[str, float]:
    """Returns the overall {'loss', 'wer', 'cer'}."""
    return {'loss': self.overall.loss, 'wer': self.overall.wer, 'cer': self.overall.cer}


def evaluate(model: Union['ctc_speech_model.CTCSpeechModel', transformer.CTCTransformer],
             client_data: 'pipeline.SpeechClientData',
             weights: Optional['tff.learning.models.ModelWeights'] = None,
             speakers: Optional[Sequence[str]] = None,
             *,
             decoder: str = 'greedy',
             beam_width: int = 16,
             top_paths: int = 1,
             word_list: Optional[decoding.WordList] = None) -> EvaluationResult:
  """Scores a model on every speaker's batches.

  Runs the Keras model (in evaluation mode) speaker by speaker in this process, which is what a
  server does with held-out data and what gives the per-speaker breakdown. The loss and the
  greedy scoring are those of the TFF model's `forward_pass(training=False)`, in the same
  float32 sums, so greedy decoding without a word list gives federated evaluation's numbers.
  Other decoders and the word list decode with `fedasr_tff.speech.decoding`, as the transcription
  binary does, and are scored with the same `metrics.error_counts`.

  Args:
    model: the `CTCTransformer`, or the TFF model wrapping it.
    client_data: the speakers' data; its vocabulary decodes the model's output.
    weights: assigned to `model` first, if given. The scoring graph is traced once per
      architecture and vocabulary in a process, not per model: scoring many models or weights
      in a loop (checkpoints, say) traces nothing again.
    speakers: the speakers to score; default all of `client_data`.
    decoder: one of `decoding.DECODERS`.
    beam_width: prefixes kept per frame by beam search.
    top_paths: beam-search candidates per utterance `word_list` chooses from (1 for greedy).
    word_list: if given, each transcript is `word_list.restrict` of the candidates.

  Returns:
    The `EvaluationResult`; rates are corpus-level, total edits over total reference words
    (characters), summed over speakers.

  Raises:
    ValueError: for no speakers, none with a usable utterance, or decoding arguments
      `decoding.decode` refuses.
  """
  keras_model = getattr(model, 'keras_model', model)
  if weights is not None:
    weights.assign_weights_to(keras_model)
  speakers = client_data.client_ids if speakers is None else list(speakers)
  if not speakers:
    raise ValueError('No speakers to evaluate on.')
  decoding.check_decoder(decoder, beam_width, top_paths)
  custom = decoder != 'greedy' or word_list is not None
  tokens = client_data.vocabulary.tokens
  scorer = _scorer_with_weights_of(keras_model, tokens)
  per_speaker = {}
  for speaker in speakers:
    # float32 sums, as the TFF model's metric variables, so the numbers are the same.
    sums = np.zeros(6, np.float32)
    # A fixed seed: the model draws nothing at random in evaluation, and SpecAugment, should the
    # data have it on, then masks alike in every evaluation.
    for batch in client_data.create_tf_dataset_for_client(speaker, seed=0):
      out = scorer(batch)
      counts = [out['loss_sum'], out['utterances']]
      if custom:
        candidates = decoding.decode(out['logits'], out['logit_lengths'], tokens, decoder,
                                     beam_width, top_paths)
        texts = [[c.text for c in found] or [''] for found in candidates]
        hypotheses = tf.constant([word_list.restrict(t) if word_list else t[0] for t in texts])
        for unit in metrics.UNITS:
          counts += metrics.error_counts(out['references'], hypotheses, unit)
      else:
        counts += [out['word_edits'], out['words'], out['char_edits'], out['chars']]
      for i, value in enumerate(counts):
        sums[i] = np.float32(sums[i] + np.float32(value))
    per_speaker[speaker] = ErrorCounts(*(float(v) for v in (
        sums[1], sums[0], sums[2], sums[3], sums[4], sums[5])))
  overall = sum(per_speaker.values(), ErrorCounts())
  if not overall.utterances:
    raise ValueError(f'None of the {len(speakers)} speakers has a usable utterance (see the '
                     'data report).')
  return EvaluationResult(overall, per_speaker)


# (model config, outputs, tokens) -> (its scoring model, the scorer traced on it): one trace per
# architecture and vocabulary in a process, whichever model is scored (a tf.function made per
# model traces again, and TF warns of retracing when evaluation of fresh models, checkpoints
# say, runs in a loop).
_SCORERS = {}


def _scorer_with_weights_of(keras_model: transformer.CTCTransformer, tokens: Sequence[str]):
  """The scorer of `keras_model`'s architecture and `tokens`, its model holding a copy of
  `keras_model`'s weights."""
  outputs = keras_model.output_layer.units
  key = (keras_model.config, outputs, tuple(tokens))
  if key not in _SCORERS:
    scoring_model = transformer.build_ctc_transformer(keras_model.config, outputs - 1)
    _SCORERS[key] = (scoring_model, _scorer(scoring_model, tokens))
  scoring_model, scorer = _SCORERS[key]
  # Same builder, same configuration: the weights come in the same order, and Keras refuses
  # a count or shape that differs.
  scoring_model.set_weights(keras_model.get_weights())
  return scorer


def _scorer(keras_model: transformer.CTCTransformer, tokens: Sequence[str]):
  """A batch's loss, logits, references and greedy counts, as `CTCSpeechModel.forward_pass`."""

  # reduce_retracing: dynamic batches differ in shape, so trace once with relaxed shapes.
  @tf.function(reduce_retracing=True)
  def score(batch):
    logits = keras_model((batch['features'], batch['feature_lengths']), training=False)
    logit_lengths = transformer.output_lengths(batch['feature_lengths'], keras_model.config)
    loss = ctc.ctc_loss(batch['labels'], batch['label_lengths'], logits, logit_lengths)
    utterances = tf.cast(tf.shape(logits)[0], tf.float32)
    references = ctc.ids_to_texts(
        tf.RaggedTensor.from_tensor(batch['labels'], lengths=batch['label_lengths']), tokens)
    hypotheses = ctc.ids_to_texts(ctc.greedy_decode(logits, logit_lengths), tokens)
    word_edits, words = metrics.error_counts(references, hypotheses, 'word')
    char_edits, chars = metrics.error_counts(references, hypotheses, 'char')
    return dict(loss_sum=loss * utterances, utterances=utterances, logits=logits,
                logit_lengths=logit_lengths, references=references, word_edits=word_edits,
                words=words, char_edits=char_edits, chars=chars)

  return score


def write_per_speaker_csv(result: EvaluationResult, path: str) -> None:
  """One row per speaker (and a final `ALL` row): utterances, words, WER, CER, loss.

  Written owner-only: per-speaker rows are the speakers' data (and the clients' own when a run
  evaluates on them).

  Args:
    result: the evaluation.
    path: the CSV file; its folder is created if needed.
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  rows = list(result.per_speaker.items()) + [('ALL', result.overall)]
  with private_files.open_private(path, 'w') as f:
    writer = csv.writer(f)
    writer.writerow(['speaker', 'utterances', 'words', 'chars', 'wer', 'cer', 'loss'])
    for speaker, counts in rows:
      writer.writerow([speaker, int(counts.utterances), int(counts.words), int(counts.chars),
                       f'{counts.wer:.6f}', f'{counts.cer:.6f}', f'{counts.loss:.6f}'])
