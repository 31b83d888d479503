r"""DP federated training of the CTC transformer, with speakers as clients.

  python -m experiments.train_federated --corpus_dir=/tmp/corpus/librispeech --split=train \
      --eval_split=dev --output_dir=/tmp/run --model_config=tiny --seed_model=/tmp/seed/model.npz \
      --cohort_size=8 --rounds=100 --local_steps=10 --client_lr=0.2 --server_optimizer=lamb \
      --server_lr=0.002 --clipping=dim --clip=0.01 --sigma_dp=1e-4 --population=1000000 \
      --population_cohort_size=10000 --delta=1e-9

The recipe of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025
(arXiv:2310.00098), Secs. 2-4: Algorithm 1, per-layer clipping (Definition 3) and the
accounting of Theorem 1. Started again with the same flags and --output_dir, a run resumes from
its latest checkpoint (see `fedasr_tff/speech/federated_training.py`). Noise is given one way:
--sigma_dp (std on the averaged update in units of --clip), --noise_multiplier (z of this run's
cohort) or --target_epsilon (for --population and --population_cohort_size at --rounds, solved
with the RDP accountant). At every evaluation the run prints the epsilon spent and projected,
for this run's own population (epsilon_run) and for the declared one (epsilon_declared).

With --mixed=parallel|one_way|two_way the server also trains on central data of its own inside
every round (mixed federated learning, Augenstein et al. 2022, arXiv:2205.13655), for example its
seed speakers while the clients fine-tune with DP:

  python -m experiments.train_federated ... --mixed=parallel --central_weight=0.3 \
      --central_split=train --central_speakers=seed

With --aggregation=dga_softmax|dga_rl the client deltas are weighted by how well the model fits
each client's data, and with --rehearsal_steps the server rehearses on its own data after every
step (dynamic gradient aggregation, Dimitriadis et al. 2020, arXiv:2008.02452); the paper pairs
it with server Adam:

  python -m experiments.train_federated ... --aggregation=dga_softmax --dga_beta=0.1 \
      --dga_loss_clip=80 --server_optimizer=adam --rehearsal_steps=2 --central_split=train \
      --central_speakers=seed

Every flag that configures the run is a field of `fedasr_tff.speech.config.FederatedConfig`
(same name and help); the configuration and the library check the values. The defaults are
--preset's (`fedasr_tff.speech.presets`): cpu, the demo's recipe that trains on a CPU (30 rounds
of 16 clients, 1 local step, LAMB at 0.003, SpecAugment off, --clip derived as client_lr x
local_clip x local_steps), or paper, the large-scale settings of the paper (the example above).
"""

import dataclasses

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import local_worker
from fedasr_tff.program import model_io
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import federated_training
from fedasr_tff.speech import models
from fedasr_tff.speech import presets

_PRESET = config_flags.define_preset_flag(presets.PRESETS, presets.DEFAULT)
config_flags.define_flags(config_lib.FederatedConfig, defaults=presets.for_config(
    presets.PRESETS[presets.DEFAULT], config_lib.FederatedConfig))
_CLIENTS_IN_PARALLEL = flags.DEFINE_integer(
    'clients_in_parallel', None, 'Clients the TFF runtime trains concurrently (default: 2 '
    'with --engine=inprocess, no limit on a TFF worker). On GPUs, set it to the number of '
    'clients that fit in memory.', lower_bound=1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  workers = common.start_binary(max_concurrent_computation_calls=_CLIENTS_IN_PARALLEL.value)
  common.require('corpus_dir', 'output_dir')

  with config_flags.flag_errors():
    config = config_flags.config_from_flags(config_lib.FederatedConfig,
                                            preset=presets.PRESETS[_PRESET.value])
    config = dataclasses.replace(
        config, data=config.data.with_default_feature_cache(common.OUTPUT_DIR.value))
    vocab = config.data.vocabulary()
    train_data = config.data.load_client_data(config.data.split, vocab, speakers='federated',
                                              training=True, iid_seed=config.run.seed_or_zero)
    initial_weights = None
    if config.model.seed_model:
      model = models.build_ctc_transformer(config.model.model_config, vocab.size)
      data_config.check_model_features(config.model.seed_model,
                                       config.data.feature_normalization, '--seed_model')
      try:
        initial_weights = model_io.load_weights(config.model.seed_model, model,
                                                source='--seed_model')
      except ValueError as e:
        raise ValueError(f'{e} (--model_config={config.model.model_config})') from e
    eval_data = config.data.load_eval_data(vocab)
    central_data = (config.central.load(config.data, vocab) if config.uses_central_data
                    else None)
    validation_data = (config.central.load(config.data, vocab, training=False)
                       if config.dga.rl else None)
    run = federated_training.build_run(config, train_data, vocab, common.OUTPUT_DIR.value,
                                       eval_data=eval_data, initial_weights=initial_weights,
                                       central_data=central_data,
                                       validation_data=validation_data,
                                       process_cache=local_worker.compile_cache())
  result = run.train(show_progress=common.PROGRESS.value)
  # Which files of the sampled clients were unusable is itself a client statistic.
  if train_data.report.problems and config.client_diagnostics:
    outside = ' (outside the DP guarantee)' if config.dp.adds_noise else ''
    print(f'Skipped training utterances{outside}: {train_data.report}')
  if result.evaluation is not None:
    print(f'final WER {100 * result.evaluation.overall.wer:.2f}% CER '
          f'{100 * result.evaluation.overall.cer:.2f}% on {config.data.eval_split}')
  print(common.with_trust_statement(result.privacy_statement(), workers,
                                    client_store=config.data.client_store_dir or None))


if __name__ == '__main__':
  cli.run(main)
