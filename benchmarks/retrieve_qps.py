r"""Queries per second of a trained retriever (`fedasr_tff.retrieval.Retriever.retrieve`: the
tokenizer, the frozen backbone and the head in one tf.function), at batch 1 and 64.

  python -m experiments.train_retriever --output_dir=/tmp/qps_run --rounds=1 --max_classes=10
  python -m benchmarks.retrieve_qps --model=/tmp/qps_run/model.npz

Prints, for each batch size, the median over --repeats timed runs of --batches batches each
(after one warm-up batch, which traces), and the spread.
"""

import statistics
import time

from absl import app
from absl import flags

from fedasr_tff.retrieval import retriever as retriever_lib

_MODEL = flags.DEFINE_string('model', None, 'A train_retriever run\'s model.npz.', required=True)
_BATCHES = flags.DEFINE_integer('batches', 20, 'Batches a timed run.', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed runs per batch size.', lower_bound=1)

# Queries of realistic length: a sentence or two.
_QUERY = 'my phone will not charge since the last update, what should I try before a repair?'


def main(argv):
  del argv
  retriever = retriever_lib.load_retriever(_MODEL.value)
  print(f'{_MODEL.value}: {len(retriever.class_names)} classes, K = {retriever.k}')
  for batch in (1, 64):
    queries = [_QUERY] * batch
    retriever.retrieve_texts(queries)  # traces
    rates = []
    for _ in range(_REPEATS.value):
      started = time.perf_counter()
      for _ in range(_BATCHES.value):
        retriever.retrieve_texts(queries)
      rates.append(batch * _BATCHES.value / (time.perf_counter() - started))
    print(f'batch {batch:3d}: {statistics.median(rates):8.1f} queries/s median of '
          f'{_REPEATS.value} (range {min(rates):.1f}-{max(rates):.1f})')


if __name__ == '__main__':
  app.run(main)
