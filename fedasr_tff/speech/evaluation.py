"""WER/CER of a model on a set of speakers, overall and per speaker, with greedy decoding."""

import csv
import dataclasses
import os
from typing import Dict
from typing import Optional
from typing import Sequence

import tensorflow_federated as tff

from fedasr_tff import private_files
from fedasr_tff.data import pipeline
from fedasr_tff.models import tff_model


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


def evaluate(model: tff_model.CTCSpeechModel,
             client_data: pipeline.SpeechClientData,
             weights: Optional[tff.learning.models.ModelWeights] = None,
             speakers: Optional[Sequence[str]] = None) -> EvaluationResult:
  """Scores a model on every speaker's batches.

  Runs the TFF model's own `forward_pass(training=False)` (so the same loss and
  `tf.edit_distance` scoring as federated evaluation) speaker by speaker in this process, which
  is what a server does with held-out data and what gives the per-speaker breakdown.

  Args:
    model: the model.
    client_data: the speakers' data.
    weights: assigned to `model` first, if given.
    speakers: the speakers to score; default all of `client_data`.

  Returns:
    The `EvaluationResult`; rates are corpus-level, total edits over total reference words
    (characters), summed over speakers.

  Raises:
    ValueError: for no speakers, or none with a usable utterance.
  """
  if weights is not None:
    weights.assign_weights_to(model)
  speakers = client_data.client_ids if speakers is None else list(speakers)
  if not speakers:
    raise ValueError('No speakers to evaluate on.')
  per_speaker = {}
  for speaker in speakers:
    model.reset_metrics()
    # A fixed seed: the model draws nothing at random in evaluation, and SpecAugment, should the
    # data have it on, then masks alike in every evaluation.
    for batch in client_data.create_tf_dataset_for_client(speaker, seed=0):
      model.forward_pass(batch, training=False)
    sums = model.report_local_unfinalized_metrics()
    per_speaker[speaker] = ErrorCounts(
        utterances=float(sums['loss'][1]),
        loss_sum=float(sums['loss'][0]),
        word_edits=float(sums['wer'][0]),
        words=float(sums['wer'][1]),
        char_edits=float(sums['cer'][0]),
        chars=float(sums['cer'][1]))
  overall = sum(per_speaker.values(), ErrorCounts())
  if not overall.utterances:
    raise ValueError(f'None of the {len(speakers)} speakers has a usable utterance (see the '
                     'data report).')
  return EvaluationResult(overall, per_speaker)


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
