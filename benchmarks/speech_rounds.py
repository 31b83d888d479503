"""The speech round the round benchmarks time, as `fedasr_tff.speech.federated_training` runs it.

The `tiny` CTC transformer trained by `fedasr_tff.algorithms.build_fed_avg_process` (local SGD
with global-norm clipping at `CLIP_NORM`, the server's SGD at learning rate 1), its clients the
speakers of a synthetic espeak-ng corpus (`fedasr_tff.speech.data.synthetic`), every round's cohort
built as the runner builds it: each entry's dataset a seeded sample of `max_batches` batches of
its speaker's utterances, features read from the feature cache.
"""

import contextlib
import os
import shutil
import statistics
import tempfile

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.program import cohorts as cohorts_lib
from fedasr_tff.speech import data
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic

MODEL = 'tiny'
CLIENT_LEARNING_RATE = 0.05
CLIP_NORM = 1.0
SERVER_LEARNING_RATE = 1.0
SEED = 0

# Flags of every speech-round benchmark (each benchmark is its own process).
LOCAL_STEPS = flags.DEFINE_integer('local_steps', 2, 'Local SGD steps (batches) per client.',
                                   lower_bound=1)
SPEAKERS = flags.DEFINE_integer('speakers', 16, 'Distinct synthetic speakers (clients); '
                                'larger cohorts cycle through them.', lower_bound=1)
UTTERANCES = flags.DEFINE_integer('utterances_per_speaker', 4, 'Utterances of every speaker.',
                                  lower_bound=1)
MAX_BATCH_SECONDS = flags.DEFINE_float('max_batch_seconds', 4.0,
                                       'Audio per client batch (dynamic batching).',
                                       lower_bound=0.1)
CORPUS_DIR = flags.DEFINE_string(
    'corpus_dir', None, 'Folder for the synthetic corpora (made there if it has none); default: '
    'a temporary folder, removed at the end.')


def corpus(root, name, speakers, utterances):
  """The utterances of a synthetic corpus of `speakers` x `utterances` under root/name."""
  corpus_dir = os.path.join(root, name)
  ls_dir = os.path.join(corpus_dir, 'librispeech')
  if not os.path.isdir(os.path.join(ls_dir, 'train')):
    synthetic.make_corpus(corpus_dir, num_speakers=speakers, mean_utterances=utterances,
                          skew=0.0, seed=SEED)
  found = data.read_librispeech(ls_dir, 'train', strict=True)
  if len({u.speaker for u in found}) < speakers:
    raise app.UsageError(f'{corpus_dir} has fewer than {speakers} speakers.')
  return found


class Cohorts:
  """The runner's data path: per round, every cohort entry's dataset from its round seed."""

  def __init__(self, client_data, max_batches):
    self.client_data = client_data
    self.max_batches = max_batches
    self.round = 0

  def build(self, size):
    """The datasets of the next round's cohort of `size` (cycling the clients)."""
    self.round += 1
    ids = self.client_data.client_ids
    return [self.client_data.create_tf_dataset_for_client(
        ids[i % len(ids)], seed=cohorts_lib.client_seed(SEED, self.round, f'entry{i}'),
        max_batches=self.max_batches) for i in range(size)]

  def keys(self, size):
    """The same cohort as the last `build(size)`, as (store index, seed) per entry: what a run
    with a client store sends (`data.client_store`, the store's index being the sorted ids')."""
    count = len(self.client_data.client_ids)
    return [(np.int32(i % count), np.int64(cohorts_lib.client_seed(SEED, self.round,
                                                                    f'entry{i}')))
            for i in range(size)]


@contextlib.contextmanager
def corpus_root(prefix=None):
  """--corpus_dir, or a temporary folder removed at the end."""
  root = CORPUS_DIR.value or tempfile.mkdtemp(prefix=prefix)
  try:
    yield root
  finally:
    if not CORPUS_DIR.value:
      shutil.rmtree(root, ignore_errors=True)


def clients_and_server(root, clients, server_speakers, *, server_spec_augment):
  """(vocabulary, the clients, the server's own speakers) of one synthetic corpus of `clients` +
  `server_speakers` speakers (--utterances_per_speaker each) under `root`: the first
  `server_speakers` by name the server's, their features cached (`fill_cache`); the clients'
  batches with SpecAugment, the server's with it if `server_spec_augment`."""
  vocab = data.Vocabulary('en')
  total = clients + server_speakers
  utterances = corpus(root, f'speakers{total}x{UTTERANCES.value}', total, UTTERANCES.value)
  speakers = sorted({u.speaker for u in utterances})
  cache = os.path.join(root, 'feature_cache')

  def speakers_data(chosen, spec_augment):
    chosen = set(chosen)
    return data.SpeechClientData([u for u in utterances if u.speaker in chosen], vocab,
                                 spec_augment=spec_augment,
                                 max_batch_seconds=MAX_BATCH_SECONDS.value,
                                 feature_cache_dir=cache)

  client_data = speakers_data(speakers[server_speakers:], True)
  server_data = speakers_data(speakers[:server_speakers], server_spec_augment)
  for source in (client_data, server_data):
    fill_cache(source)
  return vocab, client_data, server_data


def interleaved_times(names, time_round, rounds, warmup_rounds):
  """{name: seconds of its timed rounds}: `warmup_rounds` untimed rounds of each name, then
  `rounds` timed rounds of each, interleaved and their order rotated, so machine noise hits all
  alike. `time_round(name)` runs a round of `name` and returns its seconds."""
  for name in names:
    for _ in range(warmup_rounds):
      time_round(name)
  times = {name: [] for name in names}
  for r in range(rounds):
    for name in names[r % len(names):] + names[:r % len(names)]:
      times[name].append(time_round(name))
  return times


def fill_cache(client_data):
  """Featurises every utterance into the cache: a run does it once, on an utterance's first use;
  here before any timing."""
  for client in client_data.client_ids:
    client_data.create_tf_dataset_for_client(client, seed=0)


def build_process(vocab, local_steps, model_aggregator=None):
  """The FedAvg process on the `tiny` model (`model_aggregator` as `build_fed_avg_process`)."""
  return algorithms.build_fed_avg_process(
      models.build_tff_model_fn(MODEL, vocab.tokens),
      client_learning_rate=CLIENT_LEARNING_RATE,
      local_steps=local_steps,
      local_clip_norm=CLIP_NORM,
      server_optimizer=optimizers.build('sgd', SERVER_LEARNING_RATE),
      model_aggregator=model_aggregator)


def serialize(datasets):
  """Every client's dataset as a GraphDef, as TFF ships it to the worker; total bytes."""
  return sum(
      len(tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(d)).numpy())
      for d in datasets)


def summary(values):
  """'median [min, max]' of seconds."""
  return f'{statistics.median(values):7.3f} [{min(values):.3f}, {max(values):.3f}]'
