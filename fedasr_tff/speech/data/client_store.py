"""Clients' training examples in files the TFF workers read, batched there in TensorFlow ops.

TFF's pattern for simulation at scale has each worker build its clients' datasets from their keys
(`tff.simulation.compose_dataset_computation_with_computation`). Speech clients decode audio in
Python (`pipeline.SpeechClientData`), which a worker cannot run, so `write_client_store` writes
their features once, before training, to a client store: one file per client and a manifest.
`client_dataset` builds a client's batches from its file in TF ops exactly as
`SpeechClientData.create_tf_dataset_for_client` does in the driver (the tests check bit for bit).
The store holds features of raw client audio, like the feature cache, so it is owner-only, and a
worker that reads it can read every client in it (docs/distributed.md, "Workers read their
clients' data").
"""

import collections
import json
import os
from typing import List
from typing import Optional

import numpy as np
import tensorflow as tf

from fedasr_tff import private_files
from fedasr_tff import validation
from fedasr_tff.speech.data import features as features_lib

STORE_FORMAT = 1
MANIFEST = 'manifest.json'
# Stream of the seeded utterance order, apart from the batches' element seeds.
ORDER_STREAM = 1

_CLIENT_FEATURES = {
    'usable': tf.io.VarLenFeature(tf.int64),
    'frames': tf.io.VarLenFeature(tf.int64),
    'label_lengths': tf.io.VarLenFeature(tf.int64),
    'labels': tf.io.VarLenFeature(tf.int64),
    'features': tf.io.FixedLenFeature([], tf.string),
}


def utterance_order(seed, count):
  """The seeded order of a client's `count` utterances, as TF ops (eager or traced).

  Both modes draw it: `client_dataset` in the worker and `pipeline.SpeechClientData` in the
  driver, so a client's seeded sample is the same in each.

  Args:
    seed: the client's seed, an int64 scalar in [0, 2**63).
    count: its utterances.

  Returns:
    A permutation of 0..count-1, int32: a stateless draw from (seed, `ORDER_STREAM`).
  """
  keys = tf.random.stateless_uniform(
      [count], seed=tf.stack([tf.cast(seed, tf.int64), tf.constant(ORDER_STREAM, tf.int64)]))
  return tf.argsort(keys, stable=True)


def client_file(store_dir: str, index: int) -> str:
  """The file of the client at `index` of the store's ids (sorted), `client_NNNNNN.pb`."""
  return os.path.join(store_dir, f'client_{index:06d}.pb')


def _client_record(examples) -> bytes:
  """One client's utterances, each None (skipped by the pipeline) or (log-mels [T, 80], label
  ids), as one serialized `tf.train.Example`.

  Every utterance, in corpus order: whether the pipeline uses it, its frames and label count,
  and, concatenated, the log-mels (the feature cache's) and the label ids. A skipped utterance
  is kept, marked unusable, so that the store and the driver order the same list.
  """
  usable = [int(e is not None) for e in examples]
  frames = [0 if e is None else e[0].shape[0] for e in examples]
  labels = [[] if e is None else [int(t) for t in e[1]] for e in examples]
  features = b''.join(np.ascontiguousarray(e[0], '<f4').tobytes() for e in examples
                      if e is not None)

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  feature = {'usable': ints(usable), 'frames': ints(frames),
             'label_lengths': ints([len(ids) for ids in labels]),
             'labels': ints([t for ids in labels for t in ids]),
             'features': tf.train.Feature(bytes_list=tf.train.BytesList(value=[features]))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_client_store(client_data, store_dir: str) -> List[str]:
  """Writes every client of `client_data` to the store at `store_dir` (module docstring).

  Reads each utterance's features as the pipeline does (from the feature cache, decoding audio
  only where it has none), skipping and counting the same utterances in `client_data.report`.
  A store already written for the same clients and features is kept as it is.

  Args:
    client_data: a `pipeline.SpeechClientData`.
    store_dir: the folder, created owner-only; every worker must reach it at the same path.

  Returns:
    The client ids in store order (a client's index is its position).
  """
  ids = list(client_data.client_ids)
  # The format, the client ids and what the features depend on.
  manifest = {'format': STORE_FORMAT, 'features': client_data.feature_description,
              'client_ids': ids}
  path = os.path.join(store_dir, MANIFEST)
  if os.path.isfile(path):
    with open(path) as f:
      if json.load(f) == manifest:
        return ids
  private_files.make_private_directory(store_dir)
  for index, client_id in enumerate(ids):
    record = _client_record([client_data.example(u) for u in client_data.utterances(client_id)])
    partial = f'{client_file(store_dir, index)}.{os.getpid()}.tmp'
    with private_files.open_private(partial, 'wb') as f:
      f.write(record)
    os.replace(partial, client_file(store_dir, index))
  # The manifest last: a store interrupted while written has none and is written again.
  with private_files.open_private(path, 'w') as f:
    json.dump(manifest, f)
  return ids


def read_client_ids(store_dir: str) -> List[str]:
  """The client ids of the store at `store_dir`, in store order.

  Raises:
    ValueError: if it has no manifest or another format.
  """
  path = os.path.join(store_dir, MANIFEST)
  try:
    with open(path) as f:
      manifest = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'{store_dir!r} holds no readable client store ({path}: {e}).') from e
  if manifest.get('format') != STORE_FORMAT:
    raise ValueError(f'{path}: client store format {manifest.get("format")!r}, this version '
                     f'reads {STORE_FORMAT}; write the store again.')
  return list(manifest['client_ids'])


def parse_client(serialized):
  """A client's file (`_client_record`) as tensors: `usable`, `frames`, `label_lengths` [n],
  `features` [sum of frames, 80] and `labels` [sum of label lengths], concatenated in order."""
  parsed = tf.io.parse_single_example(serialized, _CLIENT_FEATURES)
  dense = {key: tf.cast(tf.sparse.to_dense(parsed[key]), tf.int32)
           for key in ('usable', 'frames', 'label_lengths', 'labels')}
  return collections.OrderedDict(
      usable=dense['usable'], frames=dense['frames'], label_lengths=dense['label_lengths'],
      features=tf.reshape(tf.io.decode_raw(parsed['features'], tf.float32),
                          [-1, features_lib.NUM_MELS]),
      labels=dense['labels'])


def _padded_rows(values, offsets, lengths):
  """values[offsets[j] : offsets[j] + lengths[j]] for each j, zero-padded to the longest: the
  rows gathered at once, padding pointing at a zero row appended to `values`."""
  zero = tf.zeros_like(values[:1])
  values = tf.concat([values, zero], 0)
  positions = tf.range(tf.reduce_max(lengths))
  inside = positions[tf.newaxis, :] < lengths[:, tf.newaxis]
  rows = tf.where(inside, offsets[:, tf.newaxis] + positions[tf.newaxis, :],
                  tf.shape(values)[0] - 1)
  return tf.gather(values, rows)


def batch_ids(frames, max_batch_frames: int):
  """Greedy dynamic batching: each utterance's batch, a new one started when the current one
  holds any utterance and this one would take it past `max_batch_frames` frames.

  Args:
    frames: the utterances' frames, in batching order (int32 [n]).
    max_batch_frames: frames a batch may hold (an utterance longer than that is a batch alone).

  Returns:
    int32 [n], non-decreasing from 0.
  """
  def step(state, length):
    batch, held = state
    start = tf.logical_or(batch < 0, held + length > max_batch_frames)
    return (tf.where(start, batch + 1, batch), tf.where(start, length, held + length))

  batches, _ = tf.scan(step, frames, initializer=(tf.constant(-1), tf.constant(0)))
  return batches


def _batches(client, seed, max_batch_frames: int, max_batches: Optional[int],
             spec_augment: bool) -> tf.data.Dataset:
  """The padded batches of one client (`parse_client`'s tensors)."""
  frames, label_lengths = client['frames'], client['label_lengths']
  count = tf.shape(frames)[0]
  order = (utterance_order(seed, count) if max_batches is not None
           else tf.range(count, dtype=tf.int32))
  order = tf.boolean_mask(order, tf.gather(client['usable'], order) > 0)
  batch_of = batch_ids(tf.gather(frames, order), max_batch_frames)
  total = tf.cond(tf.size(batch_of) > 0, lambda: batch_of[-1] + 1, lambda: tf.constant(0))
  if max_batches is not None:
    total = tf.minimum(total, max_batches)
  # Where each utterance's frames and labels start in the concatenations.
  frame_offsets = tf.cumsum(frames, exclusive=True)
  label_offsets = tf.cumsum(label_lengths, exclusive=True)
  features, labels = client['features'], client['labels']
  seed = tf.cast(seed, tf.int64)

  def batch(index):
    members = tf.boolean_mask(order, tf.equal(batch_of, tf.cast(index, tf.int32)))
    lengths = tf.gather(frames, members)
    label_counts = tf.gather(label_lengths, members)
    element = collections.OrderedDict(
        features=_padded_rows(features, tf.gather(frame_offsets, members), lengths),
        feature_lengths=lengths,
        labels=_padded_rows(labels, tf.gather(label_offsets, members), label_counts),
        label_lengths=label_counts,
        seed=tf.stack([seed, index]))
    if spec_augment:
      element['features'] = features_lib.spec_augment_batch(
          element['features'], element['feature_lengths'], seed=element['seed'])
    return element

  return tf.data.Dataset.range(tf.cast(total, tf.int64)).map(batch)


def client_dataset(store_dir, index, seed, *, max_batch_frames: int,
                   max_batches: Optional[int] = None,
                   spec_augment: bool = False) -> tf.data.Dataset:
  """A client's batches, read from the store in TF ops (module docstring).

  The same batches as `pipeline.SpeechClientData.create_tf_dataset_for_client`: the same
  seeded utterance order (`utterance_order`), dynamic batches filled greedily up to the same
  frames (`batch_ids`), the same padding, element seeds and SpecAugment masks.

  Args:
    store_dir: the store's folder (a string or string tensor).
    index: the client's index in the store (an int32 scalar).
    seed: the client's seed (an int64 scalar in [0, 2**63)): batch i has `seed` = [seed, i].
    max_batch_frames: frames of audio a batch is filled up to.
    max_batches: if given, the first `max_batches` batches of the client's utterances in the
      seeded order; None, all of them in corpus order.
    spec_augment: mask each batch from its seed (`features.spec_augment_batch`).

  Returns:
    The `tf.data.Dataset` of `pipeline.SpeechClientData`'s batches (empty for a client whose
    every utterance was skipped).
  """
  if max_batches is not None:
    validation.check_positive_integer('max_batches', max_batches)
  path = tf.strings.join([store_dir, '/client_',
                          tf.strings.as_string(index, width=6, fill='0'), '.pb'])
  # Read, parsed, ordered and batched by the caller's graph (a TFF computation's): the dataset
  # itself only gathers and pads each batch.
  client = parse_client(tf.io.read_file(path))
  return _batches(client, seed, max_batch_frames, max_batches, spec_augment)
