r"""How tight the privacy audits are: measured lower bound / claimed ε, global vs per-layer.

Runs, for each clipping (global and the per-layer allocations), the one-run audit through the
TFF process (`fedasr_tff.audit.one_run`, --canaries canaries, --rounds rounds, every canary slot
in every cohort) and the many-run distinguishing audit of one round
(`fedasr_tff.audit.distinguishing`, --trials rounds), each with --seeds seeds (sampling secret,
noise seed and canaries all change with the seed), and prints the claimed ε (PLD), the median and
range of the lower bounds, and their tightness. It also prints the most the one-run audit could
show with every guess right, which caps it whatever the mechanism.

    python -m benchmarks.audit_tightness --canaries=4000 --seeds=3

The model is a transformer block's worth of tensors (16,640 parameters, the layout of the audit
tests) unless --model_config names one of the model's configurations.
"""

import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff import runtime
from fedasr_tff.audit import bounds
from fedasr_tff.audit import distinguishing
from fedasr_tff.audit import one_run
from fedasr_tff.program import dp_config
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import models

_CANARIES = flags.DEFINE_integer('canaries', 4000, 'Canaries of the one-run audit.')
_GUESSES = flags.DEFINE_integer('guesses', None, 'Guesses each way (default canaries / 20).')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds of the one-run audit.')
_TRIALS = flags.DEFINE_integer('trials', 50000, 'Rounds of the distinguishing audit.')
_Z = flags.DEFINE_float('noise_multiplier', 2.1, 'z of the audited mechanism.')
_DELTA = flags.DEFINE_float('delta', 1e-6, 'delta of the claims.')
_SEEDS = flags.DEFINE_integer('seeds', 3, 'Seeds per configuration.')
_ENGINE = flags.DEFINE_enum('engine', 'inprocess', ['inprocess', 'worker'],
                            'What runs the one-run audit\'s TFF process, as the binaries\' '
                            '--engine.')
_CLIPPINGS = flags.DEFINE_list('clippings', ['global', 'uniform', 'dim', 'weighted'],
                               'Clippings to audit.')
_MODEL = flags.DEFINE_string('model_config', None, 'Audit this model\'s tensors instead of the '
                             'one-block layout.')

_BLOCK_NAMES = ('block_00/ln1/gamma', 'block_00/w1/kernel', 'block_00/w1/bias',
                'block_00/w2/kernel', 'block_00/w2/bias')
_BLOCK_SHAPES = ((64,), (64, 128), (128,), (128, 64), (64,))
# The distinguishing audit needs no room between canaries: the same tensors, 1/16 the size.
_SMALL_BLOCK_SHAPES = ((16,), (16, 32), (32,), (32, 16), (16,))


def _aggregator(clipping, cohort_size, names, seed):
  dp = dp_config.DPConfig(clipping=clipping, clip=1.0, noise_multiplier=_Z.value,
                           delta=_DELTA.value, noise_seed=seed)
  return dp.aggregator(_Z.value, cohort_size, names, diagnostics=False,
                       weighted_leaf=models.is_mlp_tensor)


def _summary(values):
  return f'{np.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]'


def main(argv):
  del argv
  {'inprocess': runtime.set_inprocess_execution_context,
   'worker': runtime.set_local_cpp_execution_context}[_ENGINE.value]()
  if _MODEL.value:
    config = config_lib.FederatedConfig(model=data_config.ModelConfig(model_config=_MODEL.value))
    shapes, names = config.model.trainable_leaves(config.data.vocabulary().size)
    small_shapes = shapes
  else:
    shapes, names, small_shapes = _BLOCK_SHAPES, _BLOCK_NAMES, _SMALL_BLOCK_SHAPES
  canaries = _CANARIES.value
  guesses = _GUESSES.value or canaries // 20
  small_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(shape, tf.float32) for shape in small_shapes])
  print(f'{sum(int(np.prod(s)) for s in shapes):,} parameters in {len(shapes)} tensors; '
        f'one-run: {canaries} canaries, {_ROUNDS.value} rounds, {guesses} guesses each way; '
        f'distinguishing: {_TRIALS.value} rounds; z = {_Z.value}, delta = {_DELTA.value:g}, '
        f'{_SEEDS.value} seeds, 95% confidence; engine {_ENGINE.value}.')
  cap = bounds.one_run_epsilon_lower_bound(canaries, 2 * guesses, 2 * guesses, _DELTA.value,
                                           1 - 0.05 / 2)
  print(f'The one-run audit can show at most epsilon {privacy.format_epsilon(cap)} here (every '
        'guess right).')
  print('| clipping | claimed (one-run) | one-run lower bound | tightness | claimed (one round) '
        '| distinguishing lower bound | tightness | seconds | one-run ms per canary and round |')
  print('|---|---|---|---|---|---|---|---|---|')
  for clipping in _CLIPPINGS.value:
    started = time.perf_counter()
    runs, rounds, one_run_seconds = [], [], []
    for seed in range(_SEEDS.value):
      one_run_started = time.perf_counter()
      runs.append(one_run.audit(
          _aggregator(clipping, canaries, names, seed + 100), shapes, names, canaries=canaries,
          rounds=_ROUNDS.value, cohort_size=canaries, canary_norm=1e3, delta=_DELTA.value,
          guesses=guesses, audit_seed=seed, sampling_secret=seed + 1))
      one_run_seconds.append(time.perf_counter() - one_run_started)
      query = _aggregator(clipping, 100, names, seed + 200).build_query(small_type)
      rounds.append(distinguishing.audit(query, small_shapes, trials=_TRIALS.value,
                                         canary_norm=1e3, delta=_DELTA.value, audit_seed=seed))
    print(f'| {clipping} | {privacy.format_epsilon(runs[0].claimed_epsilon)} | '
          f'{_summary([r.lower_bound for r in runs])} | '
          f'{_summary([r.tightness for r in runs])} | '
          f'{privacy.format_epsilon(rounds[0].claimed_epsilon)} | '
          f'{_summary([r.lower_bound for r in rounds])} | '
          f'{_summary([r.tightness for r in rounds])} | {time.perf_counter() - started:.0f} | '
          f'{_summary([1e3 * t / (canaries * _ROUNDS.value) for t in one_run_seconds])} |',
          flush=True)


if __name__ == '__main__':
  app.run(main)
