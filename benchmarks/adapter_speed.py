r"""The adapter + classifier mode's cost per example and epoch: a TFF round against its floor.

The adapter mode (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc
Adapter Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI
2025, Sec. 6.3) runs the frozen encoder forward and backward in every local step. Its floor is
that compute alone: one `tf.function` step (forward through the adapter, all-MiniLM-L6-v2 and
the head, `GradientTape` with respect to the adapter and the head only, an SGD update) over the
same batches, each padded to its longest sequence, eagerly in this process. This prints, for
`--clients` clients of `--examples` fortunes texts each (batch 4, `--epochs` local epochs,
`--max_length` tokens at most):

* the texts' token counts (quartiles, and how many fill `--max_length`) and the batches' mean
  padded length (their longest sequence);
* `floor`: ms per example-epoch of the step over every client's batches;
* `round`: ms per example-epoch of a round of `process.build_retrieval_process` on the same
  data (one untimed round first);
* `fixed`: the seconds of a round whose clients hold one batch each (what a round costs beyond
  its examples: TFF's dispatch and sending the backbone's weights to the worker), and the
  round's ms per example-epoch without it;
* wall time and CPU time (this process, plus TFF's worker for a round) of each, as the median of
  `--repeats` measurements, round, floor and fixed cost alternated, with the load average
  beside: on a shared machine CPU time varies less than wall time.

  python -m benchmarks.adapter_speed --clients=2 --examples=48 --repeats=3
"""

import statistics
import time

from absl import app
from absl import flags
import numpy as np
import psutil
import tensorflow as tf

from benchmarks import memory
from benchmarks import retriever_inputs
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.retrieval import text_corpora
from fedasr_tff.retrieval import tff_model
from fedasr_tff.runtime import execution_context
from fedasr_tff.text_models import frozen
from fedasr_tff.text_models import minilm

_CLIENTS = flags.DEFINE_integer('clients', 2, 'Clients (all take part every round).',
                                lower_bound=1)
_EXAMPLES = flags.DEFINE_integer('examples', 48, 'Examples per client.', lower_bound=1)
_EPOCHS = flags.DEFINE_integer('epochs', 2, 'Local epochs per round.', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed rounds, and timed passes of the floor.',
                                lower_bound=1)
_MAX_LENGTH = flags.DEFINE_integer('max_length', 64, 'Tokens per text at most.', lower_bound=2)
_MAX_CHARS = flags.DEFINE_integer('max_chars', 400, 'Fortunes longer than this are left out '
                                  '(the retriever\'s default; 160 for SMS-length texts).',
                                  lower_bound=1)
_LEARNING_RATE = 0.1


def _texts(count, max_chars):
  """`count` fortunes drawn at random (seed 0), their categories as labels."""
  data = text_corpora.read_fortunes(max_chars=max_chars)
  chosen = np.sort(np.random.default_rng(0).choice(len(data), count, replace=False))
  return data.subset(chosen)


def _trimmed(batch):
  """A batch cut to its longest sequence (right padding).

  The floor cuts its batches itself rather than through `text_models.trim_padding`, so that this
  script also times code from before that function (the "before" figures of docs/retrieval.md).
  """
  length = max(int(np.max(np.sum(batch['mask'], axis=1))), 1)
  return dict(batch, token_ids=batch['token_ids'][:, :length], mask=batch['mask'][:, :length])


def _floor_step(keras_model):
  """A plain SGD step of the adapter and head, through the frozen backbone."""
  variables = keras_model.trainable_variables
  spec = dict(token_ids=tf.TensorSpec([None, None], tf.int32),
              mask=tf.TensorSpec([None, None], tf.int32),
              label=tf.TensorSpec([None], tf.int32), seed=tf.TensorSpec([2], tf.int64))

  @tf.function(input_signature=[spec])
  def step(batch):
    with tf.GradientTape() as tape:
      logits = keras_model({'token_ids': batch['token_ids'], 'mask': batch['mask']},
                           training=True, seed=batch['seed'])
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=batch['label'], logits=logits))
    for variable, gradient in zip(variables, tape.gradient(loss, variables), strict=True):
      variable.assign_sub(_LEARNING_RATE * gradient)
    return loss
  return step


def _worker_cpu_seconds():
  total = 0.0
  for worker in memory.worker_processes():
    times = worker.cpu_times()
    total += times.user + times.system
  return total


class _Timer:
  """Wall and CPU seconds (this process, and TFF's worker) of a block, and the load."""

  def __enter__(self):
    self._wall, self._cpu = time.perf_counter(), time.process_time() + _worker_cpu_seconds()
    return self

  def __exit__(self, *exc):
    self.wall = time.perf_counter() - self._wall
    self.cpu = time.process_time() + _worker_cpu_seconds() - self._cpu
    self.load = psutil.getloadavg()[0]


def _line(name, timers, example_epochs, floor=None):
  wall = 1e3 * statistics.median(t.wall for t in timers) / example_epochs
  cpu = 1e3 * statistics.median(t.cpu for t in timers) / example_epochs
  text = (f'{name:6s} wall {wall:6.1f} ms  cpu {cpu:6.1f} ms per example-epoch  (runs, wall: '
          + ', '.join(f'{1e3 * t.wall / example_epochs:.1f}' for t in timers)
          + '; load ' + ', '.join(f'{t.load:.2f}' for t in timers) + ')')
  if floor is not None:
    text += f'\n       / floor: wall {wall / floor[0]:.2f}, cpu {cpu / floor[1]:.2f}'
  return text, (wall, cpu)


def main(argv):
  del argv
  execution_context.set_local_cpp_execution_context()
  clients, epochs = _CLIENTS.value, _EPOCHS.value
  backbone, tokenizer = minilm.load_minilm(_MAX_LENGTH.value)
  texts = _texts(clients * _EXAMPLES.value, _MAX_CHARS.value)
  tokens = {k: v.numpy() for k, v in tokenizer(tf.constant(list(texts.texts))).items()}
  labels = texts.labels.astype(np.int32)
  count = len(labels)
  example_epochs = count * epochs
  lengths = tokens['mask'].sum(axis=1)
  batches = [b for d in retriever_inputs.client_datasets(tokens, labels, clients, 0)
             for b in d.as_numpy_iterator()]
  padded = np.mean([b['mask'].shape[1] for b in map(_trimmed, batches)])
  print(f'{count} fortunes (at most {_MAX_CHARS.value} characters) of {texts.num_classes} '
        f'categories, {clients} client(s) x {_EXAMPLES.value}, batch '
        f'{retriever_inputs.BATCH}, {epochs} local '
        f'epoch(s), MiniLM, max_length {_MAX_LENGTH.value}')
  print(f'tokens per text: quartiles {np.percentile(lengths, [25, 50, 75]).tolist()}, mean '
        f'{lengths.mean():.1f}, {np.mean(lengths == _MAX_LENGTH.value):.0%} at max_length; '
        f'batches padded to their longest: {padded:.1f} tokens on average')

  frozen_backbone = frozen.FrozenBackbone(backbone)
  model_fn = tff_model.build_model_fn(tff_model.ADAPTER_CLASSIFIER, texts.num_classes,
                                      frozen_backbone=frozen_backbone,
                                      max_length=_MAX_LENGTH.value)
  process = process_lib.build_retrieval_process(
      model_fn, client_learning_rate=_LEARNING_RATE, local_epochs=epochs,
      frozen_backbone=frozen_backbone)
  # After the process: building it invalidates Keras models made before (`training`).
  step = _floor_step(model_fn(frozen_backbone.weights).keras_model)
  backbone_weights = frozen_backbone.weights
  state = process.initialize()
  dp_states = [process_lib.initial_client_dp_state(None)] * clients
  seeds = [np.array([0, i], np.int64) for i in range(clients)]

  def run_round(round_num, batches=None):
    datasets = retriever_inputs.client_datasets(tokens, labels, clients, round_num)
    if batches is not None:
      datasets = [dataset.take(batches) for dataset in datasets]
    return process_lib.run_round(process, state, datasets, dp_states, seeds,
                                 backbone_weights).state

  def run_floor(round_num):
    for dataset in retriever_inputs.client_datasets(tokens, labels, clients, round_num):
      feed = [{k: tf.constant(v) for k, v in _trimmed(b).items()}
              for b in dataset.as_numpy_iterator()]
      for _ in range(epochs):
        for batch in feed:
          loss = step(batch)
    return float(loss)

  with _Timer() as first:
    run_round(0)
    run_floor(0)   # Traces the step.
  print(f'first round and floor pass (compiling): {first.wall:.1f} s')
  rounds, floors, fixed = [], [], []
  for round_num in range(1, _REPEATS.value + 1):
    for timers, run in ((rounds, run_round), (floors, run_floor),
                        (fixed, lambda r: run_round(r, batches=1))):
      with _Timer() as timer:
        run(round_num)
      timers.append(timer)
  floor_text, floor = _line('floor', floors, example_epochs)
  round_text, _ = _line('round', rounds, example_epochs, floor)
  print(floor_text)
  print(round_text)
  fixed_wall, fixed_cpu = (statistics.median(getattr(t, key) for t in fixed)
                           for key in ('wall', 'cpu'))
  # The one-batch rounds' own examples are left in: an upper bound of the fixed cost.
  print(f'fixed  wall {fixed_wall:.2f} s  cpu {fixed_cpu:.2f} s per round (load '
        + ', '.join(f'{t.load:.2f}' for t in fixed) + ')')
  beyond = [(1e3 * (statistics.median(t.wall for t in rounds) - fixed_wall) / example_epochs),
            (1e3 * (statistics.median(t.cpu for t in rounds) - fixed_cpu) / example_epochs)]
  print(f'round less fixed: wall {beyond[0]:.1f} ms  cpu {beyond[1]:.1f} ms per example-epoch; '
        f'/ floor: wall {beyond[0] / floor[0]:.2f}, cpu {beyond[1] / floor[1]:.2f}')


if __name__ == '__main__':
  app.run(main)
