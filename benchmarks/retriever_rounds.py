r"""Cost of the classifier-as-retriever's two modes through MiniLM: features once, then rounds.

The paper's classifier-only mode computes every example's pooled features once and trains the
head on them, so a round should cost about the head's compute; the adapter + classifier mode runs
every example through the frozen backbone (all-MiniLM-L6-v2 here, whose weights are an argument
of the round, broadcast to the clients: `text_models.FrozenBackbone`) in every local step. This
prints, on
fortunes texts (`--examples` of them, spread over 40 categories, dealt to `--clients` clients):

* `features`: seconds to compute the cached features of all examples (median of `--repeats`),
  and per example;
* `classifier_only round`: median [min, max] seconds of a round over `--rounds` timed rounds
  (one untimed first), and per example-epoch;
* `adapter_classifier round` at two client sizes (`--adapter_examples` and twice that, per
  client): the median round time, the per example-epoch slope between the two (the backbone's
  forward and backward) and the intercept (what a round costs beyond its examples: TFF's
  dispatch and sending the backbone's weights to the worker);
* memory: the resident memory (RSS) of this process and of TFF's worker after building the
  adapter process, and their peak RSS after rounds of 1 and of `--clients` clients (the
  worker's current RSS swings as it frees finished calls' values in batches). TFF's worker
  runs each client it trains concurrently in its own session of the client computation; the
  frozen weights (90 MB) are one broadcast value that every session reads, so what grows with
  the clients trained at once (`--clients_in_parallel` bounds them) is their activations.

  python -m benchmarks.retriever_rounds --examples=600 --clients=3 --rounds=5
"""

import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks import memory
from benchmarks import retriever_inputs
from fedasr_tff.retrieval import data as data_lib
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.retrieval import text_corpora
from fedasr_tff.retrieval import tff_model
from fedasr_tff.runtime import execution_context
from fedasr_tff.text_models import frozen
from fedasr_tff.text_models import minilm

_EXAMPLES = flags.DEFINE_integer('examples', 600, 'Fortunes texts for the classifier-only mode.',
                                 lower_bound=40)
_CLIENTS = flags.DEFINE_integer('clients', 3, 'Clients (all take part every round).',
                                lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed rounds of each measurement.', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Repeats of the feature extraction.',
                                lower_bound=1)
_ADAPTER_EXAMPLES = flags.DEFINE_integer('adapter_examples', 8,
                                         'Examples per client in the adapter mode (and twice '
                                         'that).', lower_bound=1)
_MAX_LENGTH = flags.DEFINE_integer('max_length', 64, 'Tokens per text.', lower_bound=2)
_CLIENTS_IN_PARALLEL = flags.DEFINE_integer(
    'clients_in_parallel', None, 'Clients TFF\'s worker trains concurrently (default: no '
    'limit); each runs in its own session of the client computation.', lower_bound=1)
_EPOCHS = 1


def _texts(count):
  data = text_corpora.read_fortunes(max_chars=400, min_entries=20)
  per_class = max(1, count // data.num_classes)
  chosen = np.concatenate([np.flatnonzero(data.labels == c)[:per_class]
                           for c in range(data.num_classes)])[:count]
  return data.subset(np.sort(chosen))


def _time_rounds(process, inputs, labels, clients, rounds, *extra_arguments):
  state = process.initialize()
  dp_states = [process_lib.initial_client_dp_state(None)] * clients
  seeds = [np.array([0, i], np.int64) for i in range(clients)]
  times = []
  for round_num in range(rounds + 1):
    datasets = retriever_inputs.client_datasets(inputs, labels, clients, round_num)
    start = time.perf_counter()
    state = process_lib.run_round(process, state, datasets, dp_states, seeds,
                                  *extra_arguments).state
    if round_num:   # The first round compiles.
      times.append(time.perf_counter() - start)
  return times


def _summary(times):
  return f'{statistics.median(times):.3f} s [{min(times):.3f}, {max(times):.3f}]'


def main(argv):
  del argv
  execution_context.set_local_cpp_execution_context(
      max_concurrent_computation_calls=_CLIENTS_IN_PARALLEL.value)
  backbone, tokenizer = minilm.load_minilm(_MAX_LENGTH.value)
  texts = _texts(_EXAMPLES.value)
  tokens = {k: v.numpy() for k, v in tokenizer(tf.constant(list(texts.texts))).items()}
  labels = texts.labels.astype(np.int32)
  num_classes = texts.num_classes
  count = len(labels)
  print(f'{count} fortunes texts of {num_classes} classes, {_CLIENTS.value} clients, batch '
        f'{retriever_inputs.BATCH}, {_EPOCHS} local epoch, max_length {_MAX_LENGTH.value}, MiniLM '
        f'({backbone.parameter_bytes / 2**20:.1f} MiB of float32 weights)')

  feature_times = []
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    features = data_lib.compute_features(backbone, tokens, 'mean')
    feature_times.append(time.perf_counter() - start)
  median = statistics.median(feature_times)
  print(f'features (once per run): {_summary(feature_times)}, {1e3 * median / count:.2f} ms per '
        'example')

  frozen_backbone = frozen.FrozenBackbone(backbone)
  head_process = process_lib.build_retrieval_process(
      tff_model.build_model_fn(tff_model.CLASSIFIER_ONLY, num_classes,
                               feature_dim=features.shape[1]),
      client_learning_rate=0.1, local_epochs=_EPOCHS)
  times = _time_rounds(head_process, {'features': features}, labels, _CLIENTS.value,
                       _ROUNDS.value)
  print(f'classifier_only round: {_summary(times)}, '
        f'{1e3 * statistics.median(times) / (count * _EPOCHS):.3f} ms per example-epoch '
        f'(vs {1e3 * median / count:.2f} ms per example to compute its features)')

  rss_before = memory.rss_mb()
  adapter_process = process_lib.build_retrieval_process(
      tff_model.build_model_fn(tff_model.ADAPTER_CLASSIFIER, num_classes,
                               frozen_backbone=frozen_backbone, max_length=_MAX_LENGTH.value),
      client_learning_rate=0.1, local_epochs=_EPOCHS, frozen_backbone=frozen_backbone)
  backbone_weights = frozen_backbone.weights
  rss_built = memory.rss_mb()
  medians = {}
  rss_after = {}
  for clients in sorted({1, _CLIENTS.value}):
    for per_client in (_ADAPTER_EXAMPLES.value, 2 * _ADAPTER_EXAMPLES.value):
      n = per_client * clients
      subset = {k: v[:n] for k, v in tokens.items()}
      times = _time_rounds(adapter_process, subset, labels[:n], clients, _ROUNDS.value,
                           backbone_weights)
      medians[(clients, per_client)] = statistics.median(times)
      print(f'adapter_classifier round, {clients} client(s) x {per_client} examples: '
            f'{_summary(times)}')
    rss_after[clients] = memory.peak_rss_mb()
  clients = _CLIENTS.value
  small, large = _ADAPTER_EXAMPLES.value, 2 * _ADAPTER_EXAMPLES.value
  slope = (medians[(clients, large)] - medians[(clients, small)]) / ((large - small) * clients)
  intercept = medians[(clients, small)] - slope * small * clients
  print(f'adapter_classifier: {1e3 * slope:.1f} ms per example-epoch through MiniLM (forward + '
        f'backward), {intercept:.3f} s per round beyond the examples')
  print(f'RSS MB (python, worker): before the adapter process {rss_before[0]:.0f}, '
        f'{rss_before[1]:.0f}; built {rss_built[0]:.0f}, {rss_built[1]:.0f}; peak ' +
        '; '.join(f'after rounds of {c} client(s) {r[0]:.0f}, {r[1]:.0f}'
                  for c, r in sorted(rss_after.items())))


if __name__ == '__main__':
  app.run(main)
