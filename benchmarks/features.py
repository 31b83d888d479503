r"""Feature-extraction throughput: seconds of audio per second of CPU, on one core.

TensorFlow is pinned to one intra-op and one inter-op thread; the figure is audio seconds divided
by process CPU seconds for `log_mel_features` on 10 s utterances (and with SpecAugment), median of
`--repeats` runs after a warm-up.

  python -m benchmarks.features
"""

import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from fedasr_tff.speech import data

_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed runs.', lower_bound=1)
_UTTERANCES = flags.DEFINE_integer('utterances', 50, 'Utterances per run.', lower_bound=1)
_SECONDS = 10.0


def main(argv):
  del argv
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  rng = np.random.default_rng(0)
  audio = tf.constant(
      rng.uniform(-0.5, 0.5, size=(_UTTERANCES.value, int(_SECONDS * data.SAMPLE_RATE))),
      tf.float32)

  plain = tf.function(lambda a: tf.map_fn(data.log_mel_features, a))
  augmented = tf.function(
      lambda a: tf.map_fn(lambda w: data.spec_augment(data.log_mel_features(w)), a))
  audio_seconds = _UTTERANCES.value * _SECONDS
  print(f'{_UTTERANCES.value} utterances of {_SECONDS:g} s, one core, {_REPEATS.value} runs; '
        'audio seconds per CPU second, median [min, max]')
  for name, fn in (('log-mel', plain), ('log-mel + SpecAugment', augmented)):
    fn(audio)  # Trace and warm up.
    rates = []
    for _ in range(_REPEATS.value):
      start = time.process_time()
      fn(audio).numpy()
      rates.append(audio_seconds / (time.process_time() - start))
    print(f'  {name:22s} {statistics.median(rates):7.0f}x real time '
          f'[{min(rates):.0f}, {max(rates):.0f}]')


if __name__ == '__main__':
  app.run(main)
