"""The server's central batches of a mixed FL round, and the checks that central data can be used.

Mixed federated learning (Augenstein et al., "Mixed Federated Learning: Joint Decentralized and
Centralized Learning", arXiv:2205.13655) trains the global model on server data inside each
round (`algorithms.mixed_fl`): a round takes fresh central batches (`CentralBatches`). Central
data is the server's: no client-level guarantee covers it, and it must not hold the federated
users' data (`check_central_data` refuses shared speakers).
"""

import collections
from typing import Sequence

import numpy as np
import tensorflow as tf

from fedasr_tff import validation
from fedasr_tff.program import cohorts
from fedasr_tff.speech.data import pipeline
from fedasr_tff.speech.data import text as text_lib

# Central transcripts may hold a few characters outside the model's token set (they are
# dropped, as on clients); more than this fraction means the central corpus is in another
# language or script than the model.
MAX_UNKNOWN_CHARACTER_FRACTION = 0.05

# A stream of seeds apart from the clients': "central/k" is never a client id of a corpus we read
# (speaker ids are the corpus's own, without a slash).
_CENTRAL_STREAM = 'central/{}'


class CentralBatches:
  """Draws the central batches of every round.

  A round takes `count` fresh central batches: batch k of round t is one dynamic batch of a
  speaker drawn with probability proportional to its utterances (so every utterance is about
  equally likely), a seeded sample of that speaker's utterances
  (`SpeechClientData.create_tf_dataset_for_client` with `max_batches=1`), everything drawn from
  (secret, t, k). A round's batches are therefore a function of the run's secret and the round,
  so a resumed run replays them exactly, and only `count` batches are featurised a round (the
  feature cache makes that a file read), whatever the size of the server's corpus.
  """

  def __init__(self, central_data: pipeline.SpeechClientData, count: int):
    """Initializes the sampler.

    Args:
      central_data: the server's data, speakers as clients.
      count: batches a round (the central steps), a positive integer.
    """
    validation.check_positive_integer('central_steps', count)
    self._data = central_data
    self._count = count
    self._speakers = list(central_data.client_ids)
    sizes = np.array([len(central_data.utterances(s)) for s in self._speakers], np.float64)
    self._probabilities = sizes / sizes.sum()

  @property
  def count(self) -> int:
    """Batches a round."""
    return self._count

  def for_round(self, secret: int, round_num: int) -> tf.data.Dataset:
    """The central batches of a round.

    Args:
      secret: the run's sampling secret.
      round_num: the round.

    Returns:
      The `count` batches, one dataset.
    """
    batches = []
    for k in range(self._count):
      seed = cohorts.client_seed(secret, round_num, _CENTRAL_STREAM.format(k))
      rng = np.random.default_rng(seed)
      speaker = self._speakers[rng.choice(len(self._speakers), p=self._probabilities)]
      batches.append(self._data.create_tf_dataset_for_client(speaker, seed=seed, max_batches=1))
    dataset = batches[0]
    for batch in batches[1:]:
      dataset = dataset.concatenate(batch)
    return dataset


def check_central_data(central_data: pipeline.SpeechClientData,
                       train_client_ids: Sequence[str],
                       vocabulary: text_lib.Vocabulary) -> None:
  """Refuses central data that shares speakers with the clients or does not fit the model.

  Args:
    central_data: the server's data.
    train_client_ids: the federated clients.
    vocabulary: the model's vocabulary.

  Raises:
    ValueError: naming the central data flags when a central speaker is also a training client
      (the server's data must not hold the federated users' data: their privacy would rest on
      data no guarantee covers), or when more than `MAX_UNKNOWN_CHARACTER_FRACTION` of the
      central transcripts' characters are outside the model's token set (`--language`).
  """
  shared = sorted(set(central_data.client_ids) & set(train_client_ids))
  if shared:
    raise ValueError(
        f'The central data shares {len(shared)} speaker(s) with the federated clients (for '
        f'example {shared[0]!r}): the server must not train on the federated users\' data. '
        'Give `central_speakers`=seed for the seed part of the training split, or another '
        '`central_split` or `central_corpus_dir`.')
  unknown, total = collections.Counter(), 0
  for speaker in central_data.client_ids:
    for utterance in central_data.utterances(speaker):
      text = text_lib.normalize_transcript(utterance.transcript, vocabulary.language)
      labels, missing = vocabulary.encode(text)
      unknown.update(missing)
      total += len(labels) + sum(missing.values())
  fraction = sum(unknown.values()) / max(total, 1)
  if total == 0 or fraction > MAX_UNKNOWN_CHARACTER_FRACTION:
    examples = ', '.join(repr(c) for c, _ in unknown.most_common(5))
    raise ValueError(
        f'{100 * fraction:.0f}% of the central transcripts\' characters are not in the model\'s '
        f'token set (`language`={vocabulary.language!r}; most common: {examples}): the '
        '`central_corpus_dir` / `central_split` does not match the model\'s vocabulary.')
