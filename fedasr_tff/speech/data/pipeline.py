"""The federated view of a speech corpus: a client per speaker, features on the fly.

Speakers as clients, as in Pelikan et al., "Enabling Differentially Private Federated Learning
for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, Sec. 4. `SpeechClientData` holds only utterance metadata, so a population of
tens of thousands of speakers costs a list of file names; a client's audio is decoded,
featurised and batched when its dataset is made. Helpers make the IID control (`make_iid`) and
seeded, disjoint speaker splits (`split_speakers`).
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
from fedasr_tff.speech.data import audio as audio_lib
from fedasr_tff.speech.data import client_store
from fedasr_tff.speech.data import corpora
from fedasr_tff.speech.data import features as features_lib
from fedasr_tff.speech.data import text as text_lib

_FRAMES_PER_SECOND = features_lib.SAMPLE_RATE / features_lib.FRAME_STEP
# Everything the cached features depend on besides the audio: a change makes new cache keys.
_FEATURE_VERSION = (f'log-mel v1 {features_lib.SAMPLE_RATE} {features_lib.FRAME_LENGTH} '
                    f'{features_lib.FRAME_STEP} {features_lib.FFT_LENGTH} '
                    f'{features_lib.NUM_MELS}')


def group_by_speaker(utterances: Sequence[corpora.Utterance]) -> Dict[str, List[corpora.Utterance]]:
  """Groups utterances by speaker.

  Args:
    utterances: utterances of a corpus.

  Returns:
    {speaker: its utterances in the given order}, speakers sorted.
  """
  grouped = collections.defaultdict(list)
  for utterance in utterances:
    grouped[utterance.speaker].append(utterance)
  return dict(sorted(grouped.items()))


def make_iid(utterances: Sequence[corpora.Utterance], seed: int) -> List[corpora.Utterance]:
  """The IID control: every utterance gets a speaker drawn uniformly from the set of speakers.

  As in Pelikan et al. 2025, Fig. 5.

  Args:
    utterances: utterances of a corpus.
    seed: seed of the draws.

  Returns:
    The utterances with their new speakers, in the given order.
  """
  speakers = sorted({u.speaker for u in utterances})
  rng = np.random.default_rng(seed)
  drawn = rng.integers(0, len(speakers), size=len(utterances))
  return [dataclasses.replace(u, speaker=speakers[i]) for u, i in zip(utterances, drawn,
                                                                       strict=True)]


def split_speakers(speakers: Sequence[str], seed_fraction: float,
                   seed: int) -> Tuple[List[str], List[str]]:
  """A seeded split of the speakers into `seed_fraction` of them (the seed part) and the rest.

  Args:
    speakers: the speakers (duplicates are merged), at least 2.
    seed_fraction: the share of the first part, in (0, 1); both parts get at least one
      speaker.
    seed: seed of the split.

  Returns:
    (first part, rest), each sorted.

  Raises:
    ValueError: for fewer than 2 speakers or `seed_fraction` outside (0, 1).
  """
  validation.check_open_unit_interval('seed_fraction', seed_fraction)
  speakers = sorted(set(speakers))
  if len(speakers) < 2:
    raise ValueError(f'Need at least 2 speakers to split, got {len(speakers)}.')
  order = np.random.default_rng(seed).permutation(len(speakers))
  count = min(len(speakers) - 1, max(1, round(seed_fraction * len(speakers))))
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
  """TFF `ClientData` with speakers as clients, over utterance metadata.

  A client's batches are filled up to `max_batch_seconds` of audio (dynamic batching; Pelikan et
  al. 2025, App. G.1, use 120 s per client batch on Common Voice) and padded:

      {'features': [B, T, 80], 'feature_lengths': [B], 'labels': [B, L], 'label_lengths': [B],
       'seed': [2]}

  Unreadable audio and transcripts with no in-vocabulary characters are skipped and counted in
  `report` (naming the file), or raised with `strict=True`; characters outside the vocabulary
  are counted in `unknown_characters`. Audio is decoded in Python when a client's dataset is
  made, so the datasets are not TF-serializable: use `create_tf_dataset_for_client`, not
  `serializable_dataset_fn`.
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
               feature_normalization: str = features_lib.UTTERANCE,
               report: Optional[corpora.ReadReport] = None,
               read_report: Optional[corpora.ReadReport] = None):
    """Initializes the client data.

    Args:
      utterances: the corpus (from a reader), grouped by speaker into clients.
      vocabulary: turns normalised transcripts into label ids.
      max_batch_seconds: audio per dynamic batch.
      spec_augment: apply SpecAugment (training data only).
      strict: raise on the first unusable utterance instead of skipping and counting it.
      max_utterance_seconds: longer utterances are skipped (30 s in the released code).
      feature_cache_dir: if given, each utterance's log-mels are stored there once (keyed by the
        audio file's path, size and modification time, and by the feature parameters, so
        several runs and corpora can share one cache) and read back instead of decoding the
        audio again. They are derived from raw client audio, so the folder and its files are
        owner-only (`private_files`). A cache file that cannot be read is computed again and
        replaced.
      feature_normalization: how each utterance's log-mels are normalised, "utterance" or
        "cmn" (`features.log_mel_features`); a model must be used with the features it was
        trained on.
      report: where the utterances this view skips (when a client's dataset is made) are
        counted; a new one by default.
      read_report: what the corpus reader read to list `utterances` (each file's lines, the
        rows it skipped), kept as `read_report`; an empty one by default. Apart from `report`:
        it is known before any client is sampled.

    Raises:
      ValueError: for a non-positive duration or another `feature_normalization`.
    """
    validation.check_positive('max_batch_seconds', max_batch_seconds)
    validation.check_positive('max_utterance_seconds', max_utterance_seconds)
    features_lib.check_normalization('feature_normalization', feature_normalization)
    self._by_speaker = group_by_speaker(utterances)
    self._vocabulary = vocabulary
    self._max_batch_frames = int(max_batch_seconds * _FRAMES_PER_SECOND)
    self._max_utterance_samples = int(max_utterance_seconds * features_lib.SAMPLE_RATE)
    self._max_utterance_frames = _frames(self._max_utterance_samples)
    self._spec_augment = spec_augment
    self._feature_cache_dir = feature_cache_dir
    self._feature_normalization = feature_normalization
    # "utterance" keys as before the choice existed, so caches written then stay valid.
    self._feature_version = (_FEATURE_VERSION if feature_normalization == features_lib.UTTERANCE
                             else f'{_FEATURE_VERSION} normalization={feature_normalization}')
    self._strict = strict
    self.report = corpora.ReadReport() if report is None else report
    self.read_report = corpora.ReadReport() if read_report is None else read_report
    self.unknown_characters = collections.Counter()

  @property
  def vocabulary(self) -> text_lib.Vocabulary:
    """The vocabulary of the labels (it decodes a model's output)."""
    return self._vocabulary

  @property
  def spec_augment(self) -> bool:
    """Whether training batches are SpecAugment-ed (evaluation data never is)."""
    return self._spec_augment

  @property
  def feature_normalization(self) -> str:
    """How the log-mels are normalised (`features.log_mel_features`): what a model trained on
    these clients must be used with."""
    return self._feature_normalization

  @property
  def client_ids(self) -> List[str]:
    """The speakers, sorted."""
    return list(self._by_speaker)

  def utterances(self, client_id: str) -> List[corpora.Utterance]:
    """A client's utterances.

    Args:
      client_id: the speaker.

    Returns:
      Its utterances, in corpus order.

    Raises:
      ValueError: for an unknown speaker.
    """
    if client_id not in self._by_speaker:
      raise ValueError(f'Unknown client id {client_id!r}.')
    return list(self._by_speaker[client_id])

  def example(self, utterance: corpora.Utterance) -> Optional[Tuple[np.ndarray, List[int]]]:
    """One utterance as the batches hold it, or None if it is skipped (counted in `report`).

    Args:
      utterance: one of the corpus's utterances.

    Returns:
      (log-mels [T, 80] float32, label ids), or None.
    """
    text = text_lib.normalize_transcript(utterance.transcript, self._vocabulary.language)
    labels, unknown = self._vocabulary.encode(text)
    self.unknown_characters.update(unknown)
    if not [t for t in labels if self._vocabulary.tokens[t - 1] != text_lib.WORD_BOUNDARY]:
      self.report.add(utterance.path, 'transcript has no in-vocabulary letters', self._strict)
      return None
    feats = self._features(utterance.path)
    return None if feats is None else (feats, labels)

  def _examples(self, utterances: Sequence[corpora.Utterance]
                ) -> Iterator[Tuple[np.ndarray, List[int]]]:
    for utterance in utterances:
      example = self.example(utterance)
      if example is not None:
        yield example

  @property
  def feature_description(self) -> Dict[str, object]:
    """What a client's examples depend on besides its audio and transcripts (JSON values): the
    features' parameters, the vocabulary and the utterance limit (`client_store`'s manifest)."""
    return {'features': self._feature_version, 'vocabulary': list(self._vocabulary.tokens),
            'language': self._vocabulary.language,
            'max_utterance_samples': self._max_utterance_samples}

  def _cache_path(self, path: str) -> Optional[str]:
    if self._feature_cache_dir is None:
      return None
    stat = os.stat(path)
    key = hashlib.sha1(f'{self._feature_version}|{os.path.abspath(path)}|{stat.st_size}|'
                       f'{stat.st_mtime_ns}'.encode())
    digest = key.hexdigest()
    return os.path.join(self._feature_cache_dir, digest[:2], f'{digest}.npy')

  def _features(self, path: str) -> Optional[np.ndarray]:
    """Log-mels of one file (from the cache when there), or None if it was skipped."""
    cache_path = self._cache_path(path) if os.path.isfile(path) else None
    if cache_path is not None and os.path.isfile(cache_path):
      # A damaged entry (disk error, truncated, empty, not a `.npy`) is computed again below and
      # replaced: the cache is derived from the audio, so recomputing it loses nothing.
      try:
        with open(cache_path, 'rb') as f:
          feats = np.lib.format.read_array(f)  # `.npy` only: never a zip (np.load's BadZipFile).
      except (OSError, ValueError):
        feats = None
      if feats is not None and feats.ndim == 2 and feats.shape[1] == features_lib.NUM_MELS:
        if feats.shape[0] > self._max_utterance_frames:  # Cached by a run with a longer limit.
          self.report.add(path, 'longer than max_utterance_seconds', self._strict)
          return None
        return feats
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
    feats = features_lib.log_mel_features(waveform, self._feature_normalization).numpy()
    if cache_path is not None:
      private_files.make_private_directory(self._feature_cache_dir)
      private_files.make_private_directory(os.path.dirname(cache_path))
      partial = f'{cache_path}.{os.getpid()}.tmp.npy'
      with private_files.open_private(partial, 'wb') as f:
        np.save(f, feats)
      os.replace(partial, cache_path)  # Atomic: readers never see a half-written file.
    return feats

  def _batches(self, utterances: Sequence[corpora.Utterance],
               max_batches: Optional[int] = None) -> Iterator[Dict[str, np.ndarray]]:
    """Dynamic batches of `utterances` in order; only the first `max_batches`, if given."""
    batch = []
    frames = 0
    made = 0
    for feats, labels in self._examples(utterances):
      if batch and frames + feats.shape[0] > self._max_batch_frames:
        yield _pad_batch(batch)
        made += 1
        batch, frames = [], 0
        if made == max_batches:
          return  # The utterance read last starts a batch that is not needed.
      batch.append((feats, labels))
      frames += feats.shape[0]
    if batch:
      yield _pad_batch(batch)

  def create_tf_dataset_for_client(self, client_id: str,
                                   seed: Optional[int] = None,
                                   max_batches: Optional[int] = None) -> tf.data.Dataset:
    """The client's padded dynamic batches, batch i with `seed` = [seed mod 2**63, i].

    The client's audio is decoded and featurised now (only this client's, and with `max_batches`
    only the utterances of those batches), and the batches are held as constants, so the dataset
    can be shipped into TFF computations. SpecAugment, when on, masks each batch now, drawing
    from the batch's `seed`, so from a new seed for every dataset made (every round); repeated
    passes over one dataset (local epochs) see the same masks.

    Every training-time random draw of client work is a function of the element seed and the
    local step: SpecAugment's masks (drawn here) and the model's dropout, layer drop and CAPE
    shift (drawn from the element seed with the local step folded in,
    `algorithms.local_training.with_step_seed`). A TFF client has no identity, so its seed
    travels in its data; a replayed round (a resumed DP run replays its noise) then repeats its
    client work bit for bit, and the noise is not cancelled by a difference of client updates.

    Args:
      client_id: the speaker.
      seed: seed of all the client's randomness (an integer >= 0), for runs that must replay
        exactly (a federated run derives it from its secret, the round and the client); None
        draws it from OS entropy.
      max_batches: if given (a positive integer), a seeded sample of the client's data: its
        utterances in an order drawn from `seed`, and the first `max_batches` of their batches
        (all of them if it has fewer), so only those utterances are read and shipped to the TFF
        worker and a round costs about its client compute whatever the client's size (a
        federated run passes its local steps; the client work cycles the batches if it takes
        more). None: every utterance, in corpus order.

    Returns:
      A `tf.data.Dataset` of the batches (empty if every utterance was skipped).

    Raises:
      ValueError: for an unknown client, a negative seed or a non-positive `max_batches`.
    """
    if seed is None:
      # OS entropy rather than TF's global seed, which would freeze the draws across datasets.
      seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))
    else:
      validation.check_non_negative_integer('seed', seed)
    seed = int(seed) % 2**63
    utterances = self.utterances(client_id)
    if max_batches is not None:
      validation.check_positive_integer('max_batches', max_batches)
      # A stateless TF draw, which a worker building the batches from a client store repeats.
      order = client_store.utterance_order(seed, len(utterances)).numpy()
      utterances = [utterances[i] for i in order]
    batches = [collections.OrderedDict(batch, seed=np.array([seed, index], np.int64))
               for index, batch in enumerate(self._batches(utterances, max_batches))]
    if self._spec_augment:
      batches = [_spec_augment_batch(batch) for batch in batches]
    # Constants only, no `map`: a map traces its function for every dataset made (2/3 of the
    # time it took to make one).
    if not batches:  # Every utterance was skipped (see `report`): an empty dataset.
      empty = _pad_batch([(np.zeros([1, features_lib.NUM_MELS], np.float32), [1])])
      return tf.data.Dataset.from_tensors(
          collections.OrderedDict(empty, seed=np.zeros([2], np.int64))).take(0)
    dataset = tf.data.Dataset.from_tensors(batches[0])
    for batch in batches[1:]:
      dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
    return dataset

  def create_tf_dataset_from_all_clients(self, seed: Optional[int] = None) -> tf.data.Dataset:
    """Every client's batches, one client after another.

    Args:
      seed: shuffles the clients and seeds their datasets (so the whole dataset replays); None:
        clients in id order, each drawing its seed from OS entropy.

    Returns:
      The concatenated `tf.data.Dataset`.
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

  def store_dataset_computation(self, store_dir: str,
                                max_batches: Optional[int] = None) -> tff.Computation:
    """The TFF computation that builds a client's batches from the client store at `store_dir`
    (`client_store`), where it runs: (index in the store, seed) -> the batches
    `create_tf_dataset_for_client(client, seed, max_batches)` makes, bit for bit.

    Args:
      store_dir: the store, written by `client_store.write_client_store` from this data, at a
        path every worker reaches.
      max_batches: as in `create_tf_dataset_for_client`.

    Returns:
      A `tff.tensorflow.computation` of (int32, int64).
    """
    frames, spec_augment = self._max_batch_frames, self._spec_augment

    @tff.tensorflow.computation(np.int32, np.int64)
    def dataset_computation(index, seed):
      return client_store.client_dataset(store_dir, index, seed, max_batch_frames=frames,
                                         max_batches=max_batches, spec_augment=spec_augment)

    return dataset_computation

  @property
  def serializable_dataset_fn(self):
    """Not available: the datasets decode audio in Python (raises `NotImplementedError`); a
    client store serves workers instead (`store_dataset_computation`)."""
    raise NotImplementedError(
        'SpeechClientData decodes audio in Python, so its datasets cannot be traced into a TFF '
        'computation; build them with create_tf_dataset_for_client, or write a client store '
        '(data.client_store) and use store_dataset_computation.')

  @property
  def element_type_structure(self):
    """The batches' `tf.TensorSpec`s (class docstring)."""
    return _ELEMENT_SPEC


@tf.function(input_signature=[_ELEMENT_SPEC])
def _spec_augment_batch(batch):
  """SpecAugment of a padded batch from its `seed` (stateless); traced once per process."""
  features = features_lib.spec_augment_batch(batch['features'], batch['feature_lengths'],
                                             seed=batch['seed'])
  return collections.OrderedDict(batch, features=features)


def _frames(samples: int) -> int:
  """Frames of the log-mels of `samples` samples (no end padding, as `features_lib`)."""
  return 1 + (samples - features_lib.FRAME_LENGTH) // features_lib.FRAME_STEP


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
