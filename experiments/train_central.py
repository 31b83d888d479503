r"""Central training of a seed model on the seed part of the speakers (spec §3.4, §5).

  python -m experiments.train_central --corpus_dir=/tmp/corpus/librispeech --split=train \
      --speakers=seed --seed_fraction=0.1 --eval_split=dev --output_dir=/tmp/seed \
      --model_config=tiny --steps=2000 --learning_rate=0.5 --schedule=step

Writes `model.npz` (the seed model for `train_federated --seed_model`), `metrics.csv` and
`eval_per_speaker.csv` to --output_dir.
"""

from absl import app
from absl import flags

from experiments import common
from fedasr_tff import optimizers
from fedasr_tff.program import central_training

_STEPS = flags.DEFINE_integer('steps', 1000, 'Training steps (batches).', lower_bound=1)
_OPTIMIZER = flags.DEFINE_enum('optimizer', 'lars', list(central_training.OPTIMIZERS),
                               'Optimizer: LARS (the paper\'s) or Adam (short CPU runs).')
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 0.5, 'Learning rate (spec: LARS 0.5).',
                                    lower_bound=0.0)
_MOMENTUM = flags.DEFINE_float('momentum', 0.9, 'LARS momentum.', lower_bound=0.0,
                               upper_bound=0.999)
_SCHEDULE = flags.DEFINE_enum('schedule', 'step', list(optimizers.schedules.NAMES),
                              'step: multiply by --decay_rate every --decay_every steps from '
                              '--decay_start (the paper halves every 50k steps); exponential: '
                              'rate^((t - start) / every).')
_DECAY_RATE = flags.DEFINE_float('decay_rate', 0.5, 'Decay factor.', lower_bound=0.0)
_DECAY_EVERY = flags.DEFINE_integer('decay_every', 50_000, 'Decay period in steps.',
                                    lower_bound=1)
_DECAY_START = flags.DEFINE_integer('decay_start', 40_000, 'Step the decay starts at.',
                                    lower_bound=0)
_EVAL_EVERY_STEPS = flags.DEFINE_integer('eval_every_steps', 100, 'Steps between evaluations.',
                                         lower_bound=1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary()
  common.require(common.CORPUS_DIR, common.OUTPUT_DIR)
  vocab = common.vocabulary()
  train_data = common.client_data(common.SPLIT.value, common.SPEAKERS.value or 'seed', vocab,
                                  spec_augment=True, seed=common.seed_or_zero())
  config = central_training.CentralConfig(
      steps=_STEPS.value, model_config=common.MODEL_CONFIG.value,
      optimizer=_OPTIMIZER.value, learning_rate=_LEARNING_RATE.value, momentum=_MOMENTUM.value,
      schedule=_SCHEDULE.value,
      decay_rate=_DECAY_RATE.value, decay_every=_DECAY_EVERY.value,
      decay_start=_DECAY_START.value, seed=common.seed_or_zero(),
      eval_every=_EVAL_EVERY_STEPS.value)
  print(f'central training on {len(train_data.client_ids)} speakers of {common.SPLIT.value}')
  result = central_training.train(config, train_data, vocab, common.OUTPUT_DIR.value,
                                  eval_data=common.eval_data(vocab),
                                  show_progress=common.PROGRESS.value)
  if result.evaluation is not None:
    print(f'seed model: WER {100 * result.evaluation.overall.wer:.2f}% CER '
          f'{100 * result.evaluation.overall.cer:.2f}% on {common.EVAL_SPLIT.value}')


if __name__ == '__main__':
  app.run(main)
