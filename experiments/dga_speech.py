r"""DGA for speech: clients with corrupted transcripts, softmax weights against uniform, with DP.

Dimitriadis et al., "Federated Transfer Learning with Dynamic Gradient Aggregation",
arXiv:2008.02452, weigh each client's update by how well the model fits its data, and rehearse
on the server's data after every step. Here, with the speech runner (`train_federated
--aggregation`):

1. A synthetic espeak-ng corpus (`fedasr_tff.speech.data.synthetic`): seed speakers (`train_seed`),
   client speakers (`train_clients`) and held-out speakers (`dev`). A fraction
   `--noisy_speakers` of the client speakers have **corrupted transcripts**: every transcript
   replaced by as many random words of the vocabulary (`synthetic.corrupt_transcripts`).
2. A seed model trained centrally on the seed speakers (`speech_stages.seed_model`).
3. From the seed, federated fine-tuning on the clients with server Adam and server rehearsal on
   the seed speakers (`--rehearsal_steps`): uniform weights and DGA softmax weights, without and
   with DP noise (`--dp_modes`).
4. Every model scored on the held-out speakers (WER/CER), ε for the declared population and for
   the run, and, as a **simulation diagnostic from ground truth** (which speakers were
   corrupted, something the server never knows), the mean normalised softmax weight N·α_j the
   final model gives the noisy and the clean client speakers in one round over all of them
   (`DGAProcess.client_round`; 1 = uniform). N·α is an exact client statistic (each client's
   training loss under the model): in the DP rows it is labelled OUTSIDE the DP guarantee, like
   every other client statistic. Written to `OUTPUT_DIR/dga_speech.md` / `.json`.

  python -m experiments.dga_speech --output_dir=/tmp/dga_speech --seed=0

Finished runs are reused when run again (seed model, federated runs resume from checkpoints).

It runs on one machine: `--workers` is refused (experiments.train_federated --aggregation=...
runs one of its configurations on TFF workers).
"""

import json
import os

from absl import app
from absl import flags
import numpy as np

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import speech_stages
from fedasr_tff import privacy
from fedasr_tff.program import cohorts
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic

FLAGS = flags.FLAGS

RUNS = ('uniform', 'dga_softmax')
SEED_SPLIT, CLIENT_SPLIT, HELD_OUT_SPLIT = 'train_seed', 'train_clients', 'dev'

_SEED_SPEAKERS = flags.DEFINE_integer('seed_speakers', 6, 'Seed (server) speakers.',
                                      lower_bound=1)
_CLIENT_SPEAKERS = flags.DEFINE_integer('client_speakers', 20, 'Client speakers.', lower_bound=2)
_NOISY = flags.DEFINE_float('noisy_speakers', 0.2, 'Fraction of client speakers whose '
                            'transcripts are corrupted.')
config_flags.define_flags(speech_stages.CorpusConfig,
                          defaults={'held_out_speakers': 4, 'utterances_per_speaker': 8.0})
config_flags.define_flags(speech_stages.SeedConfig, defaults={'seed_steps': 300})
_DP_MODES = flags.DEFINE_list('dp_modes', [speech_stages.NO_DP, speech_stages.DP],
                              'Runs without (no_dp) and with (dp) noise.')
# The federated runs: the runner's flags (`experiments.train_federated --aggregation`) at this
# study's values. The CTC loss is per utterance, hence the loss clip of the DGA weights; the
# weights' flags (dga_*) configure the dga_softmax runs only.
_DGA_WEIGHTS = ('dga_beta', 'dga_loss_clip', 'dga_loss_floor')
FEDERATED_DEFAULTS = dict(rounds=30, cohort_size=8, local_steps=4, dga_beta=0.05,
                          dga_loss_clip=150.0, dga_loss_floor=0.0, rehearsal_steps=2,
                          sigma_dp=3e-4)
config_flags.define_flags(config_lib.FederatedConfig, FEDERATED_DEFAULTS,
                          defaults=FEDERATED_DEFAULTS)


def _corpus(output_dir, seed):
  """The corpus folder and the corrupted client speakers."""
  librispeech = speech_stages.synthetic_corpus(
      output_dir, {SEED_SPLIT: _SEED_SPEAKERS.value, CLIENT_SPLIT: _CLIENT_SPEAKERS.value,
                   HELD_OUT_SPLIT: None}, skew=0.3)
  clients_dir = os.path.join(librispeech, CLIENT_SPLIT)
  speakers = sorted(os.listdir(clients_dir))
  noisy = sorted(np.random.default_rng(seed).choice(
      speakers, size=int(round(_NOISY.value * len(speakers))), replace=False).tolist())
  marker = os.path.join(librispeech, 'corrupted_speakers.json')
  if not os.path.isfile(marker):
    synthetic.corrupt_transcripts(clients_dir, noisy, seed)
    with open(marker, 'w') as f:
      json.dump(noisy, f)
  with open(marker) as f:
    return librispeech, set(json.load(f))


def _federated_config(data_config, aggregation, sigma_dp):
  rounds, rehearsal = FLAGS.rounds, FLAGS.rehearsal_steps
  return speech_stages.federated_config(
      data_config, unused_flags=_DGA_WEIGHTS if aggregation == 'uniform' else (),
      aggregation=aggregation, client_lr=0.2, server_optimizer='adam', server_lr=0.001,
      clipping='dim', clip=1.0, sigma_dp=sigma_dp, population=10_000_000,
      population_cohort_size=2_000, eval_every=rounds, checkpoint_every=rounds,
      central_split=SEED_SPLIT if rehearsal else None)


def client_weights(config, model_fn, client_data, weights, noisy, seed):
  """Mean N·α of the noisy and the clean speakers: one DGA softmax round over every client at
  `weights` (the ground-truth diagnostic of the module docstring)."""
  softmax = config_lib.DGAConfig(aggregation='dga_softmax', dga_beta=FLAGS.dga_beta,
                                 dga_loss_clip=FLAGS.dga_loss_clip,
                                 dga_loss_floor=FLAGS.dga_loss_floor)
  process = softmax.process(config.client, model_fn, server_optimizer=config.server.optimizer(),
                            server_lr_schedule=None, model_aggregator=None,
                            with_client_round=True)
  state = process.set_model_weights(process.initialize(), weights)
  ids = client_data.client_ids
  datasets = [client_data.create_tf_dataset_for_client(
      c, seed=cohorts.client_seed(seed, 0, c), max_batches=config.client.batches_per_round())
              for c in ids]
  _, _, raw, _, _ = process.client_round(state, datasets)
  alpha = len(ids) * np.asarray(raw, np.float64) / np.sum(raw)
  mask = np.array([c in noisy for c in ids])
  return float(alpha[mask].mean()), float(alpha[~mask].mean())


def table(rows) -> str:
  """The Markdown table of the results; N·α of a DP row is labelled outside the guarantee."""
  lines = ['| model | DP | held-out WER | held-out CER | ε declared / run (RDP, δ=1e-9) | '
           'N·α noisy / clean (diagnostic) |', '|---|---|---|---|---|---|']
  for row in rows:
    eps = (' / '.join(privacy.format_epsilon(e) for e in row['epsilons'][:2])
           if row['epsilons'] else '-')
    # The clients' exact losses under a DP-trained model: a client statistic, not released by
    # the run's guarantee.
    outside = ' (OUTSIDE the DP guarantee)' if row['dp'] == 'dp' else ''
    lines.append(f'| {row["model"]} | {row["dp"]} | {100 * row["scores"].wer:.1f}% | '
                 f'{100 * row["scores"].cer:.1f}% | {eps} | {row["weights"][0]:.3f} / '
                 f'{row["weights"][1]:.3f}{outside} |')
  lines += ['', 'N·α is computed from the clients\' data without noise (a simulation diagnostic '
            'from ground truth): in the DP rows it is OUTSIDE the DP guarantee.']
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal=(
      'this study runs on one machine; experiments.train_federated --aggregation=... runs '
      'distributed.'))
  common.require('output_dir')
  noise_levels = speech_stages.noise_levels(_DP_MODES.value, FLAGS.sigma_dp)
  if not 0 < _NOISY.value < 1:
    raise app.UsageError(f'--noisy_speakers must lie in (0, 1), got {_NOISY.value}.')
  output_dir = common.OUTPUT_DIR.value
  seed = speech_stages.seed_or_zero()
  # SpecAugment on the training data, as this study has always trained.
  data_config = speech_stages.data_config(speech_stages.synthetic_corpus_dir(output_dir),
                                          output_dir, CLIENT_SPLIT, speakers='all',
                                          spec_augment=True)
  # Every run configured before the corpus is written or a model trained.
  with config_flags.flag_errors():
    seed_config = config_flags.config_from_flags(speech_stages.SeedConfig)
    base_config = _federated_config(data_config, 'dga_softmax', 0.0)
    configs = {(dp_mode, aggregation): _federated_config(data_config, aggregation, sigma_dp)
               for dp_mode, sigma_dp in noise_levels for aggregation in RUNS}
  _, noisy = _corpus(output_dir, seed)
  vocab = data_config.vocabulary()
  seed_data = data_config.load_client_data(SEED_SPLIT, vocab, speakers='all', training=True)
  client_data = data_config.load_client_data(CLIENT_SPLIT, vocab, speakers='all', training=True)
  eval_data = data_config.load_client_data(HELD_OUT_SPLIT, vocab)
  model_fn = models.build_tff_model_fn(FLAGS.model_config, vocab.tokens)

  def score(weights):
    # A model made now: building a TFF process (graph mode) invalidates Keras models made before.
    return evaluation.evaluate(model_fn(), eval_data, weights).overall

  seed_weights, _ = speech_stages.seed_model(seed_config, seed_data, vocab, output_dir)
  rows = [dict(model='seed', dp='-', scores=score(seed_weights), epsilons=None,
               weights=client_weights(base_config, model_fn, client_data, seed_weights, noisy,
                                      seed))]
  for (dp_mode, aggregation), config in configs.items():
    name = f'{aggregation}_{dp_mode}'
    result = speech_stages.federated_run(name, config, client_data, vocab, output_dir,
                                         seed_weights, central_data=seed_data)
    rows.append(dict(model=name, dp=dp_mode, scores=score(result.weights),
                     epsilons=speech_stages.epsilons(result, config),
                     weights=client_weights(config, model_fn, client_data, result.weights,
                                            noisy, seed)))

  text = table(rows)
  print(text)
  with open(os.path.join(output_dir, 'dga_speech.md'), 'w') as f:
    f.write(text + '\n')
  with open(os.path.join(output_dir, 'dga_speech.json'), 'w') as f:
    json.dump([{'model': r['model'], 'dp': r['dp'], 'wer': r['scores'].wer,
                'cer': r['scores'].cer, 'epsilon_declared_run': r['epsilons'],
                'weight_noisy_clean': r['weights']} for r in rows], f, indent=2)


if __name__ == '__main__':
  cli.run(main)
