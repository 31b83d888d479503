"""The federated view of a speech corpus: a client per speaker ([1], Sec. 4), features on the fly.

`SpeechClientData` holds only utterance metadata (path, transcript, speaker); a client's audio is
decoded, featurised and batched when that client's dataset is iterated, so a population of tens of
thousands of speakers costs a list of file names. Batches are filled up to `max_batch_seconds`
of audio (dynamic batching; [1], App. G.1, uses 120 s per client batch on Common Voice) and padded:

    {'features': [B, T, 80], 'feature_lengths': [B], 'labels': [B, L], 'label_lengths': [B],
     'seed': [2]}

Randomness: a client's dataset is made with a seed (`create_tf_dataset_for_client(client_id,
seed)`; a federated run derives it from its secret, the round and the client), and batch i carries
`seed` = [seed mod 2**63, i] (int64). Every training-time random draw of client work is a
function of that element seed and the local step: SpecAugment's masks (drawn here, from the
element seed) and the model's dropout, layer drop and CAPE shift (drawn from the element seed
with the local step folded in, see `fedasr_tff.algorithms.local_training` and
`fedasr_tff.models.transformer`). A TFF client has no identity, so its seed travels in its data;
a replayed round (a resumed DP run replays its noise) then repeats its client work bit for bit,
and the noise is not cancelled by a difference of client updates.

Unreadable audio and transcripts with no in-vocabulary characters are skipped and counted in
`report` (naming the file), or raised with `strict=True`; characters outside the vocabulary are
counted in `unknown_characters`. Helpers make the IID control (every utterance gets a speaker id
drawn uniformly from the set of speakers) and seeded, disjoint speaker splits.

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
"""

import collections
import dataclasses
import hashlib
import os
from typing import Dict
from typing import Iterator
from typing import List
from typing import Optional
from typing import Sequence
from typing import Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import private_files
from fedasr_tff import validation
from fedasr_tff.data import audio as audio_lib
from fedasr_tff.data import corpora
from fedasr_tff.data import features as features_lib
from fedasr_tff.data import text as text_lib

_FRAMES_PER_SECOND = features_lib.SAMPLE_RATE / features_lib.FRAME_STEP


def group_by_speaker(utterances: Sequence[corpora.Utterance]) -> Dict[str, List[corpora.Utterance]]:
  grouped = collections.defaultdict(list)
  for utterance in utterances:
    grouped[utterance.speaker].append(utterance)
  return dict(sorted(grouped.items()))


def make_iid(utterances: Sequence[corpora.Utterance], seed: int) -> List[corpora.Utterance]:
  """Gives every utterance a speaker drawn uniformly from the set of speakers ([1], Fig. 5)."""
  speakers = sorted({u.speaker for u in utterances})
  rng = np.random.default_rng(seed)
  drawn = rng.integers(0, len(speakers), size=len(utterances))
  return [dataclasses.replace(u, speaker=speakers[i]) for u, i in zip(utterances, drawn,
                                                                       strict=True)]


def split_speakers(speakers: Sequence[str], fraction: float,
                   seed: int) -> Tuple[List[str], List[str]]:
  """A seeded split of the speakers into `fraction` of them (at least one) and the rest."""
  validation.check_open_unit_interval('fraction', fraction)
  speakers = sorted(set(speakers))
  if len(speakers) < 2:
    raise ValueError(f'Need at least 2 speakers to split, got {len(speakers)}.')
  order = np.random.default_rng(seed).permutation(len(speakers))
  count = min(len(speakers) - 1, max(1, round(fraction * len(speakers))))
  first = sorted(speakers[i] for i in order[:count])
  rest = sorted(speakers[i] for i in order[count:])
  return first, rest


_ELEMENT_SPEC = collections.OrderedDict(
    features=tf.TensorSpec([None, None, features_lib.NUM_MELS], tf.float32),
    feature_lengths=tf.TensorSpec([None], tf.int32),
    labels=tf.TensorSpec([None, None], tf.int32),
    label_lengths=tf.TensorSpec([None], tf.int32),
    seed=tf.TensorSpec([2], tf.int64),
)


class SpeechClientData(tff.simulation.datasets.ClientData):
  """TFF `ClientData` with speakers as clients, over utterance metadata (module docstring).

  Audio is decoded in Python when a client's dataset is iterated, so the datasets are not
  TF-serializable: use `create_tf_dataset_for_client`, not `serializable_dataset_fn`.
  """

  def __init__(self,
               utterances: Sequence[corpora.Utterance],
               vocabulary: text_lib.Vocabulary,
               *,
               max_batch_seconds: float = 120.0,
               spec_augment: bool = False,
               strict: bool = False,
               max_utterance_seconds: float = 30.0,
               feature_cache_dir: Optional[str] = None,
               report: Optional[corpora.ReadReport] = None):
    """Initializes the client data.

    Args:
      utterances: the corpus (from a reader), grouped by speaker into clients.
      vocabulary: turns normalised transcripts into label ids.
      max_batch_seconds: audio per dynamic batch.
      spec_augment: apply SpecAugment (training data only).
      strict: raise on the first unusable utterance instead of skipping and counting it.
      max_utterance_seconds: longer utterances are skipped (30 s in the released code).
      feature_cache_dir: if given, log-mel features are stored there (keyed by the audio file's
        path, size and modification time) and read back instead of decoding the audio again.
        They are derived from raw client audio, so folder and files are owner-only.
      report: where skipped utterances are counted; a new one by default.
    """
    validation.check_positive('max_batch_seconds', max_batch_seconds)
    validation.check_positive('max_utterance_seconds', max_utterance_seconds)
    self._by_speaker = group_by_speaker(utterances)
    self._vocabulary = vocabulary
    self._max_batch_frames = int(max_batch_seconds * _FRAMES_PER_SECOND)
    self._max_utterance_samples = int(max_utterance_seconds * features_lib.SAMPLE_RATE)
    self._spec_augment = spec_augment
    self._feature_cache_dir = feature_cache_dir
    self._strict = strict
    self.report = corpora.ReadReport() if report is None else report
    self.unknown_characters = collections.Counter()

  @property
  def client_ids(self) -> List[str]:
    return list(self._by_speaker)

  def utterances(self, client_id: str) -> List[corpora.Utterance]:
    if client_id not in self._by_speaker:
      raise ValueError(f'Unknown client id {client_id!r}.')
    return list(self._by_speaker[client_id])

  def _examples(self, client_id: str) -> Iterator[Tuple[np.ndarray, List[int]]]:
    for utterance in self.utterances(client_id):
      text = text_lib.normalize_transcript(utterance.transcript, self._vocabulary.language)
      labels, unknown = self._vocabulary.encode(text)
      self.unknown_characters.update(unknown)
      if not [t for t in labels if self._vocabulary.tokens[t - 1] != text_lib.WORD_BOUNDARY]:
        self.report.add(utterance.path, 'transcript has no in-vocabulary letters', self._strict)
        continue
      feats = self._features(utterance.path)
      if feats is not None:
        yield feats, labels

  def _cache_path(self, path: str) -> Optional[str]:
    if self._feature_cache_dir is None:
      return None
    stat = os.stat(path)
    key = hashlib.sha1(f'{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}'.encode())
    digest = key.hexdigest()
    return os.path.join(self._feature_cache_dir, digest[:2], f'{digest}.npy')

  def _features(self, path: str) -> Optional[np.ndarray]:
    """Log-mels of one file (from the cache when there), or None if it was skipped."""
    cache_path = self._cache_path(path) if os.path.isfile(path) else None
    if cache_path is not None and os.path.isfile(cache_path):
      return np.load(cache_path)
    try:
      waveform = audio_lib.load_audio(path)
    except audio_lib.AudioError as e:
      self.report.add(path, f'unreadable audio ({str(e).split(": ", 1)[-1][:80]})', self._strict)
      return None
    if waveform.shape[0] > self._max_utterance_samples:
      self.report.add(path, 'longer than max_utterance_seconds', self._strict)
      return None
    if waveform.shape[0] < features_lib.FRAME_LENGTH:
      self.report.add(path, 'shorter than one 25 ms frame', self._strict)
      return None
    feats = features_lib.log_mel_features(waveform).numpy()
    if cache_path is not None:
      private_files.make_private_directory(self._feature_cache_dir)
      private_files.make_private_directory(os.path.dirname(cache_path))
      partial = f'{cache_path}.{os.getpid()}.tmp.npy'
      with private_files.open_private(partial, 'wb') as f:
        np.save(f, feats)
      os.replace(partial, cache_path)  # Atomic: readers never see a half-written file.
    return feats

  def _batches(self, client_id: str):
    batch = []
    frames = 0
    for feats, labels in self._examples(client_id):
      if batch and frames + feats.shape[0] > self._max_batch_frames:
        yield _pad_batch(batch)
        batch, frames = [], 0
      batch.append((feats, labels))
      frames += feats.shape[0]
    if batch:
      yield _pad_batch(batch)

  def create_tf_dataset_for_client(self, client_id: str,
                                   seed: Optional[int] = None) -> tf.data.Dataset:
    """The client's padded dynamic batches, batch i with `seed` = [seed mod 2**63, i].

    The client's audio is decoded and featurised now (only this client's), and the batches are
    held as constants, so the dataset can be shipped into TFF computations. SpecAugment, when on,
    is a map over the batches with masks drawn from each batch's `seed`, so from a new seed for
    every dataset made (every round); repeated passes over one dataset (local epochs) see the same
    masks. The model's random draws in training come from the same element seed (module
    docstring).

    Args:
      client_id: the speaker.
      seed: seed of all the client's randomness (an integer >= 0), for runs that must replay
        exactly (a federated run derives it from its secret, the round and the client); None
        draws it from OS entropy.
    """
    if seed is None:
      # OS entropy rather than TF's global seed, which would freeze the draws across datasets.
      seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))
    else:
      validation.check_non_negative_integer('seed', seed)
    seed = int(seed) % 2**63
    batches = list(self._batches(client_id))
    if not batches:  # Every utterance was skipped (see `report`): an empty dataset.
      batches = [_pad_batch([(np.zeros([1, features_lib.NUM_MELS], np.float32), [1])])]
      dataset = tf.data.Dataset.from_tensors(batches[0]).take(0)
    else:
      dataset = tf.data.Dataset.from_tensors(batches[0])
      for batch in batches[1:]:
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
    # Stateless ops from a seed held in the graph keep the dataset shippable into TFF.
    dataset = dataset.enumerate().map(
        lambda index, batch: collections.OrderedDict(
            batch, seed=tf.stack([tf.constant(seed, tf.int64), index])))
    if self._spec_augment:
      dataset = dataset.map(_spec_augment_batch)
    return dataset

  def create_tf_dataset_from_all_clients(self, seed: Optional[int] = None) -> tf.data.Dataset:
    """Every client's batches, clients in an order shuffled by `seed` (None: id order).

    With a seed, the clients' datasets are seeded from it too (so the whole dataset replays);
    without, each draws its seed from OS entropy.
    """
    ids = self.client_ids
    client_seeds = [None] * len(ids)
    if seed is not None:
      rng = np.random.default_rng(seed)
      ids = [ids[i] for i in rng.permutation(len(ids))]
      client_seeds = [int(s) for s in rng.integers(0, 2**63, size=len(ids), dtype=np.int64)]
    datasets = [self.create_tf_dataset_for_client(client_id, seed=client_seed)
                for client_id, client_seed in zip(ids, client_seeds, strict=True)]
    dataset = datasets[0]
    for other in datasets[1:]:
      dataset = dataset.concatenate(other)
    return dataset

  @property
  def serializable_dataset_fn(self):
    raise NotImplementedError(
        'SpeechClientData decodes audio in Python, so its datasets cannot be traced into a TFF '
        'computation; build them with create_tf_dataset_for_client.')

  @property
  def element_type_structure(self):
    return _ELEMENT_SPEC


@tf.function(input_signature=[_ELEMENT_SPEC])
def _spec_augment_batch(batch):
  """SpecAugment of a padded batch from its `seed`; traced once per process, not per dataset."""
  features = features_lib.spec_augment_batch(batch['features'], batch['feature_lengths'],
                                             seed=batch['seed'])
  return collections.OrderedDict(batch, features=features)


def _pad_batch(batch):
  frames = max(f.shape[0] for f, _ in batch)
  length = max(len(labels) for _, labels in batch)
  features = np.zeros([len(batch), frames, features_lib.NUM_MELS], np.float32)
  labels = np.zeros([len(batch), length], np.int32)
  for i, (feats, ids) in enumerate(batch):
    features[i, :feats.shape[0]] = feats
    labels[i, :len(ids)] = ids
  return collections.OrderedDict(
      features=features,
      feature_lengths=np.array([f.shape[0] for f, _ in batch], np.int32),
      labels=labels,
      label_lengths=np.array([len(ids) for _, ids in batch], np.int32),
  )
