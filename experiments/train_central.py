r"""Central training of a seed model on the seed part of the speakers (Pelikan et al.,
NeurIPS 2025, arXiv:2310.00098, App. F "Training"; the seed split of Sec. 4 "Data").

  python -m experiments.train_central --corpus_dir=/tmp/corpus/librispeech --split=train \
      --speakers=seed --seed_fraction=0.1 --eval_split=dev --output_dir=/tmp/seed \
      --model_config=tiny --steps=1000

Writes `model.npz` (the seed model for `train_federated --seed_model`), `metrics.csv` and
`eval_per_speaker.csv` to --output_dir. The defaults are --preset's
(`fedasr_tff.speech.presets`): cpu, the demo's seed model (Adam at 2e-3, halved at every third
of --steps, SpecAugment off), or paper (LARS at 0.5 halved every 50k steps from 40k, SpecAugment
on).
"""

from absl import app

from experiments import cli
from experiments import common
from experiments import config_flags
from fedasr_tff.speech import central_training
from fedasr_tff.speech import corpus_clients
from fedasr_tff.speech import data_config
from fedasr_tff.speech import presets

# --model_config and --seed are shared flags (`common`).
_PRESET = config_flags.define_preset_flag(presets.PRESETS, presets.DEFAULT)
config_flags.define_flags(data_config.DataConfig, defaults=presets.for_config(
    presets.PRESETS[presets.DEFAULT], data_config.DataConfig))
config_flags.define_flags(central_training.CentralConfig, defaults=presets.for_config(
    presets.PRESETS[presets.DEFAULT], central_training.CentralConfig))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal='central training runs no federated round.')
  common.require('corpus_dir', 'output_dir')
  with config_flags.flag_errors():
    preset = presets.PRESETS[_PRESET.value]
    data = config_flags.config_from_flags(
        data_config.DataConfig, preset=preset).with_default_feature_cache(common.OUTPUT_DIR.value)
    config = config_flags.config_from_flags(central_training.CentralConfig, preset=preset)
    vocab = data.vocabulary()
    train_data = data.load_client_data(data.split, vocab, speakers='seed', training=True,
                                       iid_seed=config.seed)
    eval_data = data.load_eval_data(vocab)
  print(f'central training on {corpus_clients.describe_speakers(train_data.client_ids)} of '
        f'{data.split}')
  result = central_training.train(config, train_data, vocab, common.OUTPUT_DIR.value,
                                  eval_data=eval_data, show_progress=common.PROGRESS.value)
  if result.evaluation is not None:
    print(f'seed model: WER {100 * result.evaluation.overall.wer:.2f}% CER '
          f'{100 * result.evaluation.overall.cer:.2f}% on {data.eval_split}')


if __name__ == '__main__':
  cli.run(main)
