r"""DGA for speech: clients with corrupted transcripts, softmax weights against uniform, with DP.

Dimitriadis et al., "Federated Transfer Learning with Dynamic Gradient Aggregation",
arXiv:2008.02452, weigh each client's update by how well the model fits its data, and rehearse
on the server's data after every step. Here, with the speech runner (`train_federated
--aggregation`):

1. A synthetic espeak-ng corpus (`fedasr_tff.data.synthetic`): seed speakers (`train_seed`),
   client speakers (`train_clients`) and held-out speakers (`dev`). A fraction
   `--noisy_speakers` of the client speakers have **corrupted transcripts**: every transcript
   replaced by as many random words of the vocabulary (`synthetic.corrupt_transcripts`).
2. A seed model trained centrally on the seed speakers (`program.central_training`).
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
"""

import json
import os

from absl import app
from absl import flags
import numpy as np

from experiments import common
from fedasr_tff import models
from fedasr_tff.data import synthetic
from fedasr_tff.program import cohorts
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import federated_training

RUNS = ('uniform', 'dga_softmax')

_SEED_SPEAKERS = flags.DEFINE_integer('seed_speakers', 6, 'Seed (server) speakers.',
                                      lower_bound=1)
_CLIENT_SPEAKERS = flags.DEFINE_integer('client_speakers', 20, 'Client speakers.', lower_bound=2)
_HELD_OUT = flags.DEFINE_integer('held_out_speakers', 4, 'Held-out speakers.', lower_bound=1)
_NOISY = flags.DEFINE_float('noisy_speakers', 0.2, 'Fraction of client speakers whose '
                            'transcripts are corrupted.')
_UTTERANCES = flags.DEFINE_float('dga_utterances', 8.0, 'Median utterances a speaker.',
                                 lower_bound=1.0)
_SEED_STEPS = flags.DEFINE_integer('seed_steps', 300, 'Central steps of the seed model.',
                                   lower_bound=1)
_DP_MODES = flags.DEFINE_list('dp_modes', ['no_dp', 'dp'], 'Runs without (no_dp) and with (dp) '
                              'noise.')
_ROUNDS = flags.DEFINE_integer('fl_rounds', 30, 'Federated rounds.', lower_bound=1)
_COHORT = flags.DEFINE_integer('fl_cohort_size', 8, 'Clients a round.', lower_bound=1)
_LOCAL_STEPS = flags.DEFINE_integer('fl_local_steps', 4, 'Local steps a round.', lower_bound=1)
_BETA = flags.DEFINE_float('fl_dga_beta', 0.05, 'beta of the DGA softmax.')
_LOSS_CLIP = flags.DEFINE_float('fl_dga_loss_clip', 150.0, 'Loss clip of the DGA weights (the '
                                'CTC loss is per utterance).')
_LOSS_FLOOR = flags.DEFINE_float('fl_dga_loss_floor', 0.0, 'Loss floor L_lo of the DGA '
                                  'weights: a client at or below it weighs 1. With DP, weights '
                                  'far below 1 shrink the signal against noise sized for 1.')
_REHEARSAL = flags.DEFINE_integer('fl_rehearsal_steps', 2, 'Rehearsal steps a round.',
                                  lower_bound=0)
_SIGMA_DP = flags.DEFINE_float('fl_sigma_dp', 3e-4, 'DP noise of the dp runs (units of the '
                               'clip).', lower_bound=0.0)


def _corpus(root, seed):
  """The corpus folder and the corrupted client speakers."""
  librispeech = os.path.join(root, 'librispeech')
  counts = {'train_seed': _SEED_SPEAKERS.value, 'train_clients': _CLIENT_SPEAKERS.value,
            'dev': _HELD_OUT.value}
  first = 0
  for index, (split, count) in enumerate(counts.items()):
    if not os.path.isdir(os.path.join(librispeech, split)):
      synthetic.make_corpus(root, num_speakers=count, mean_utterances=_UTTERANCES.value,
                            skew=0.3, seed=seed + index, split=split, first_speaker=first)
    first += count
  clients_dir = os.path.join(librispeech, 'train_clients')
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
  dga = {}
  if aggregation != 'uniform':
    dga = dict(aggregation=aggregation, dga_beta=_BETA.value, dga_loss_clip=_LOSS_CLIP.value,
               dga_loss_floor=_LOSS_FLOOR.value)
  return fields_lib.from_flat(config_lib.FederatedConfig, {
      **fields_lib.to_flat(data_config), 'model_config': common.FLAGS.model_config,
      'local_steps': _LOCAL_STEPS.value, 'client_lr': 0.2, 'server_optimizer': 'adam',
      'server_lr': 0.001, 'clipping': 'dim', 'clip': 1.0, 'sigma_dp': sigma_dp,
      'population': 10_000_000, 'population_cohort_size': 2_000, 'rounds': _ROUNDS.value,
      'cohort_size': _COHORT.value, 'seed': common.FLAGS.seed, 'eval_every': _ROUNDS.value,
      'checkpoint_every': _ROUNDS.value, 'rehearsal_steps': _REHEARSAL.value,
      'central_split': 'train_seed' if _REHEARSAL.value else None, **dga})


def client_weights(config, model_fn, client_data, weights, noisy, seed):
  """Mean N·α of the noisy and the clean speakers: one DGA softmax round over every client at
  `weights` (the ground-truth diagnostic of the module docstring)."""
  softmax = config_lib.DGAConfig(aggregation='dga_softmax', dga_beta=_BETA.value,
                                 dga_loss_clip=_LOSS_CLIP.value, dga_loss_floor=_LOSS_FLOOR.value)
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
    eps = f'{row["epsilons"][0]:.3g} / {row["epsilons"][1]:.3g}' if row['epsilons'] else '-'
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
  for name in _DP_MODES.value:
    if name not in ('no_dp', 'dp'):
      raise app.UsageError(f'--dp_modes takes any of no_dp, dp; got {name!r}.')
  if not 0 < _NOISY.value < 1:
    raise app.UsageError(f'--noisy_speakers must lie in (0, 1), got {_NOISY.value}.')
  output_dir = common.OUTPUT_DIR.value
  seed = common.seed_or_zero()
  root = common.FLAGS.corpus_dir or os.path.join(output_dir, 'corpus')
  corpus_dir, noisy = _corpus(root, seed)
  data_config = config_lib.DataConfig(
      corpus_dir=corpus_dir, layout='librispeech', split='train_clients', speakers='all',
      language='en', max_batch_seconds=common.FLAGS.max_batch_seconds,
      feature_cache_dir=os.path.join(output_dir, 'feature_cache'))
  vocab = data_config.vocabulary()
  seed_data = data_config.load_client_data('train_seed', vocab, speakers='all',
                                           spec_augment=True)
  client_data = data_config.load_client_data('train_clients', vocab, speakers='all',
                                             spec_augment=True)
  eval_data = data_config.load_client_data('dev', vocab)
  model_fn = models.build_tff_model_fn(common.FLAGS.model_config, vocab.tokens)

  def score(weights):
    # A model made now: building a TFF process (graph mode) invalidates Keras models made before.
    return evaluation.evaluate(model_fn(), eval_data, weights).overall

  seed_dir = os.path.join(output_dir, 'seed')
  seed_path = os.path.join(seed_dir, 'model.npz')
  if os.path.isfile(seed_path):
    seed_weights = model_io.load_weights(seed_path, model_fn().keras_model, source='seed model')
  else:
    print(f'== seed model on the seed speakers ({_SEED_STEPS.value} steps)')
    steps = _SEED_STEPS.value
    seed_weights = central_training.train(
        central_training.CentralConfig(
            steps=steps, model_config=common.FLAGS.model_config, optimizer='adam',
            learning_rate=2e-3, schedule='step', decay_rate=0.5,
            decay_every=max(1, steps // 3), decay_start=max(1, steps // 3), seed=seed,
            eval_every_steps=steps),
        seed_data, vocab, seed_dir, show_progress=common.PROGRESS.value).weights
  base_config = _federated_config(data_config, 'dga_softmax', 0.0)
  rows = [dict(model='seed', dp='-', scores=score(seed_weights), epsilons=None,
               weights=client_weights(base_config, model_fn, client_data, seed_weights, noisy,
                                      seed))]
  for dp_mode in _DP_MODES.value:
    sigma_dp = _SIGMA_DP.value if dp_mode == 'dp' else 0.0
    for aggregation in RUNS:
      name = f'{aggregation}_{dp_mode}'
      print(f'\n== {name}')
      config = _federated_config(data_config, aggregation, sigma_dp)
      result = federated_training.train(
          config, client_data, vocab, os.path.join(output_dir, name),
          initial_weights=seed_weights, show_progress=common.PROGRESS.value,
          central_data=seed_data if config.uses_central_data else None)
      epsilons = None
      if sigma_dp:
        epsilons = (result.ledger.epsilon(_ROUNDS.value, declared=True),
                    result.ledger.epsilon(_ROUNDS.value, declared=False))
      rows.append(dict(model=name, dp=dp_mode, scores=score(result.weights),
                       epsilons=epsilons,
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
  app.run(main)
