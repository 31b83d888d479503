r"""The main job: seed model, federated training without and with DP, report (one command).

  make demo        # = python -m experiments.demo --output_dir=demo_output

1. Writes a synthetic multi-speaker corpus (espeak-ng) if --output_dir has none: a training
   split and a held-out split of other speakers.
2. Trains a `tiny` seed model centrally on 10% of the training speakers (Adam with step decay:
   the paper's LARS needs far more steps than a CPU demo has). SpecAugment is off, in seed and
   federated training alike (--spec_augment): in the demo's few hundred steps it slowed the
   tiny model more than it regularised it, and federated fine-tuning with it undid a seed
   trained without it (docs/results.md, "The demo, measured").
3. Federated training from the seed over the other 90% as clients (one client per speaker):
   per-layer "dim" clipping, LAMB on the server, local SGD with local clipping; once without
   noise, once with DP noise sigma_dp on the averaged update. 16 clients a round with one local
   step each (an earlier exploration found that improved on the seed where 8 clients with 3-5
   local steps did not), the deltas clipped at C = 0.2, the most one such step can move them.
4. Evaluates all three on the held-out speakers (greedy CTC decoding, no word list) and writes
   `report.md`, led by the WER: the WER/CER table, the plots (the per-layer norms are those the
   DP run releases, of its noised average update, unless --layer_norms_from_no_noise_run) and
   the privacy statement for the run and the declared population (the extrapolation of Pelikan
   et al., NeurIPS 2025, arXiv:2310.00098, Sec. 4.3 and Table 1).

Every step is a library call of the binaries' own code (`fedasr_tff.program`); a finished step's
output is reused when the demo is run again (the federated runs resume from their checkpoints).
"""

import math
import os
import time

from absl import app
from absl import flags

from experiments import common
from experiments import report
from fedasr_tff import models
from fedasr_tff.data import synthetic
from fedasr_tff.program import dp_config
from fedasr_tff.program import model_io
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import federated_training

_SPEAKERS = flags.DEFINE_integer('train_speakers', 480, 'Training speakers in the corpus.',
                                 lower_bound=4)
_HELD_OUT = flags.DEFINE_integer('held_out_speakers', 8, 'Held-out speakers for evaluation.',
                                 lower_bound=1)
_UTTERANCES = flags.DEFINE_float('utterances_per_speaker', 16.0, 'Median utterances per speaker.',
                                 lower_bound=1.0)
_CENTRAL_STEPS = flags.DEFINE_integer('central_steps', 1000, 'Seed training steps.',
                                      lower_bound=1)
_CENTRAL_LR = flags.DEFINE_float('central_lr', 2e-3, 'Adam learning rate of seed training.',
                                 lower_bound=0.0)
_SPEC_AUGMENT = flags.DEFINE_bool(
    'spec_augment', False, 'SpecAugment on the training batches (the seed speakers\' and the '
    'clients\'). Off by default: see the module docstring.')
_ROUNDS = flags.DEFINE_integer('fl_rounds', 30, 'Federated rounds of each run.', lower_bound=1)
_COHORT = flags.DEFINE_integer('fl_cohort_size', 16, 'Clients per round.', lower_bound=1)
_LOCAL_STEPS = flags.DEFINE_integer('fl_local_steps', 1, 'Local steps per client.',
                                    lower_bound=1)
_SERVER_LR = flags.DEFINE_float('fl_server_lr', 0.003, 'LAMB learning rate.', lower_bound=0.0)
_CLIENT_LR = flags.DEFINE_float('fl_client_lr', 0.2, 'Local SGD learning rate (Pelikan et al. '
                                '2025, Fig. 4 caption: 0.2 from a seed).', lower_bound=0.0)
_CLIP = flags.DEFINE_float(
    'fl_clip', 0.2, 'Total clip C of a client delta. 0.2 = client lr x local clip (1) x local '
    'steps: the largest delta one local step can make, so the noise (sigma_dp x C) is no larger '
    'than it needs to be (at C = 1 it cost 6 WER points; docs/results.md, "The demo, '
    'measured").', lower_bound=0.0)
_SIGMA_DP = flags.DEFINE_float('fl_sigma_dp', 3e-4, 'DP noise on the averaged update, in units '
                               'of the clip.', lower_bound=0.0)
_DECLARED_POPULATION = flags.DEFINE_integer('declared_population', 10_000_000, 'Population K\' '
                                            'the DP run is accounted for.', lower_bound=1)
_DECLARED_COHORT = flags.DEFINE_integer('declared_cohort_size', 2_000, 'Cohort S\' of the '
                                        'declared population.', lower_bound=1)
_EVAL_EVERY = flags.DEFINE_integer('fl_eval_every', 10, 'Rounds between evaluations.',
                                   lower_bound=1)
_EXACT_LAYER_NORMS = flags.DEFINE_bool(
    'layer_norms_from_no_noise_run', False, 'Draw the per-layer norms figure from the run '
    'without noise: its exact client statistics (outside any DP guarantee, and labelled so). '
    'Default: from what the DP run releases (norms of its noised average update).')

_TRAIN_SPLIT, _HELD_OUT_SPLIT = 'train', 'dev'


def corpus(root: str) -> str:
  """The synthetic corpus under `root` (written if absent): its LibriSpeech-layout folder, with
  the training split (--train_speakers) and the held-out split (--held_out_speakers)."""
  librispeech = os.path.join(root, 'librispeech')
  if not os.path.isdir(os.path.join(librispeech, _HELD_OUT_SPLIT)):
    print(f'writing the synthetic corpus to {root}')
    synthetic.make_corpus(root, num_speakers=_SPEAKERS.value,
                          mean_utterances=_UTTERANCES.value, seed=common.seed_or_zero(),
                          split=_TRAIN_SPLIT)
    synthetic.make_corpus(root, num_speakers=_HELD_OUT.value, mean_utterances=_UTTERANCES.value,
                          seed=common.seed_or_zero() + 1, split=_HELD_OUT_SPLIT,
                          first_speaker=_SPEAKERS.value)
  return librispeech


def seed_model(seed_data, eval_data, vocab, seed_dir):
  """The seed model (weights, held-out evaluation): read from `seed_dir/model.npz` if there,
  else trained centrally on `seed_data` (Adam with step decay, --central_steps, --central_lr)."""
  seed_path = os.path.join(seed_dir, 'model.npz')
  print(f'== seed model: central training on {len(seed_data.client_ids)} speakers '
        f'({_CENTRAL_STEPS.value} steps)')
  if os.path.isfile(seed_path):
    print(f'reusing {seed_path}')
    model = models.build_tff_model_fn(common.FLAGS.model_config, vocab.tokens)()
    weights = model_io.load_weights(seed_path, model.keras_model, source='seed model')
    return weights, evaluation.evaluate(model, eval_data, weights)
  seed = central_training.train(
      central_training.CentralConfig(
          steps=_CENTRAL_STEPS.value, model_config=common.FLAGS.model_config,
          optimizer='adam', learning_rate=_CENTRAL_LR.value, schedule='step', decay_rate=0.5,
          decay_every=max(1, _CENTRAL_STEPS.value // 3),
          decay_start=max(1, _CENTRAL_STEPS.value // 3), seed=common.seed_or_zero(),
          eval_every_steps=max(1, _CENTRAL_STEPS.value // 4)),
      seed_data, vocab, seed_dir, eval_data=eval_data, show_progress=common.PROGRESS.value)
  return seed.weights, seed.evaluation


def federated_config(data_config, sigma_dp, *, clipping='dim', normalize=False,
                     server_optimizer='lamb', server_lr=None, seed=None,
                     release_client_diagnostics=False) -> config_lib.FederatedConfig:
  """The demo's federated run (the --fl_* flags; LAMB at --fl_server_lr, "dim" clipping, --seed)
  with noise `sigma_dp`; the ablation (`experiments.ablation`) varies the rest."""
  return config_lib.FederatedConfig(
      data=data_config,
      model=config_lib.ModelConfig(model_config=common.FLAGS.model_config),
      client=config_lib.ClientConfig(local_steps=_LOCAL_STEPS.value, client_lr=_CLIENT_LR.value),
      server=config_lib.ServerConfig(server_optimizer=server_optimizer,
                                     server_lr=server_lr or _SERVER_LR.value),
      dp=dp_config.DPConfig(clipping=clipping, normalize=normalize, clip=_CLIP.value,
                             sigma_dp=sigma_dp, delta=1e-9,
                             population=_DECLARED_POPULATION.value,
                             population_cohort_size=_DECLARED_COHORT.value,
                             release_client_diagnostics=release_client_diagnostics),
      run=config_lib.RunConfig(rounds=_ROUNDS.value, cohort_size=_COHORT.value,
                               seed=common.FLAGS.seed if seed is None else seed,
                               eval_every=_EVAL_EVERY.value, checkpoint_every=_EVAL_EVERY.value))


def _federated(name, sigma_dp, seed_weights, data_config, train_data, eval_data, vocab,
               output_dir):
  config = federated_config(data_config, sigma_dp)
  print(f'\n== federated training, {name}: {_ROUNDS.value} rounds, {_COHORT.value} of '
        f'{len(train_data.client_ids)} speakers a round, sigma_dp={sigma_dp:g}')
  return federated_training.train(config, train_data, vocab, os.path.join(output_dir, name),
                                  eval_data=eval_data, initial_weights=seed_weights,
                                  show_progress=common.PROGRESS.value)


def demo_data(output_dir: str) -> config_lib.DataConfig:
  """The demo's data: the synthetic corpus (`corpus`, under --corpus_dir or
  `output_dir/corpus`), its seed speakers (10%) and held-out split, the features cached in
  `output_dir/feature_cache`."""
  root = common.FLAGS.corpus_dir or os.path.join(output_dir, 'corpus')
  return config_lib.DataConfig(
      corpus_dir=corpus(root), layout='librispeech', split=_TRAIN_SPLIT, seed_fraction=0.1,
      split_seed=common.seed_or_zero(), language='en',
      max_batch_seconds=common.FLAGS.max_batch_seconds,
      feature_cache_dir=os.path.join(output_dir, 'feature_cache'), eval_split=_HELD_OUT_SPLIT)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal=(
      'the demo runs on one machine; use experiments.train_federated for distributed runs.'))
  common.require('output_dir')
  started = time.monotonic()
  output_dir = common.OUTPUT_DIR.value
  stages = {}  # stage -> wall seconds (of this invocation: a reused step costs little)
  data_config = demo_data(output_dir)
  stages['corpus'] = time.monotonic() - started
  vocab = data_config.vocabulary()
  seed_data = data_config.load_client_data(_TRAIN_SPLIT, vocab, speakers='seed',
                                           spec_augment=_SPEC_AUGMENT.value)
  fl_data = data_config.load_client_data(_TRAIN_SPLIT, vocab, speakers='federated',
                                         spec_augment=_SPEC_AUGMENT.value)
  eval_data = data_config.load_eval_data(vocab)

  mark = time.monotonic()
  seed_dir = os.path.join(output_dir, 'seed')
  seed_weights, seed_eval = seed_model(seed_data, eval_data, vocab, seed_dir)

  stages['seed model'] = time.monotonic() - mark
  mark = time.monotonic()
  no_noise = _federated('fl_no_noise', 0.0, seed_weights, data_config, fl_data, eval_data, vocab,
                        output_dir)
  stages['FL, no noise'] = time.monotonic() - mark
  mark = time.monotonic()
  dp = _federated('fl_dp', _SIGMA_DP.value, seed_weights, data_config, fl_data, eval_data, vocab,
                  output_dir)
  stages['FL + DP'] = time.monotonic() - mark

  ledger = dp.ledger
  epsilons = {
      'epsilon_run': ledger.epsilon(_ROUNDS.value, declared=False, accountant='rdp'),
      'epsilon_declared': ledger.epsilon(_ROUNDS.value, declared=True, accountant='rdp'),
  }
  epsilon_declared_pld = ledger.epsilon(_ROUNDS.value, declared=True, accountant='pld')
  results = [
      {'model': 'seed (central, 10% of speakers)', 'wer': seed_eval.overall.wer,
       'cer': seed_eval.overall.cer, 'rounds': 0, 'epsilon_run': None,
       'epsilon_declared': None},
      {'model': 'FL, no noise', 'wer': no_noise.evaluation.overall.wer,
       'cer': no_noise.evaluation.overall.cer, 'rounds': _ROUNDS.value, 'epsilon_run': math.inf,
       'epsilon_declared': math.inf},
      {'model': f'FL + DP (σ_DP = {_SIGMA_DP.value:g})', 'wer': dp.evaluation.overall.wer,
       'cer': dp.evaluation.overall.cer, 'rounds': _ROUNDS.value, **epsilons},
  ]
  wers = [100 * row['wer'] for row in results]
  layer_norm_run = os.path.join(output_dir, 'fl_dp', 'metrics.csv')
  layer_norms_note = ('The per-layer norms figure shows what the DP run releases: the norms of '
                      'its noised average update and the noise\'s expected share of them.')
  if _EXACT_LAYER_NORMS.value:
    layer_norm_run = os.path.join(output_dir, 'fl_no_noise', 'metrics.csv')
    layer_norms_note = ('The per-layer norms figure comes from the run without noise '
                        '(--layer_norms_from_no_noise_run): its exact client statistics are '
                        'outside any DP guarantee.')
  notes = [
      f'{len(seed_data.client_ids)} seed speakers, {len(fl_data.client_ids)} federated clients, '
      f'{len(eval_data.client_ids)} held-out speakers (never trained on).',
      f'WER (greedy decoding): seed {wers[0]:.1f}% → FL {wers[1]:.1f}% → FL + DP '
      f'{wers[2]:.1f}%: federated training ' + ('improves on' if wers[2] < wers[0] else
                                               'does NOT improve on') + ' the seed model with '
      f'DP; the cost of the noise (DP run minus run without noise) is {wers[2] - wers[1]:+.1f} WER '
      'points.',
      f'ε (RDP, δ = 1e-9): `epsilon_run` is the DP run\'s own guarantee ({ledger.cohort_size} '
      f'of {ledger.population} clients a round, Poisson-sampled); `epsilon_declared` is the '
      f'extrapolation to K\' = {ledger.declared_population:,}, S\' = '
      f'{ledger.declared_cohort_size:,} at the same σ_DP (PLD: {epsilon_declared_pld:.2f}), '
      'which assumes quality depends on σ_DP only.',
      layer_norms_note,
      f'Seed training metrics (by step): `{os.path.join(seed_dir, "metrics.csv")}`.',
      f'Wall time of the demo: {(time.monotonic() - started) / 60:.1f} min ('
      + ', '.join(f'{stage} {seconds / 60:.1f}' for stage, seconds in stages.items()) + ').',
  ]
  path = report.write_report(
      output_dir, title='fedasr-tff demo: DP federated fine-tuning of a seed ASR model',
      results=results, privacy_statement=dp.privacy_statement(),
      runs={'FL, no noise': os.path.join(output_dir, 'fl_no_noise', 'metrics.csv'),
            'FL + DP': os.path.join(output_dir, 'fl_dp', 'metrics.csv')},
      references={'seed model': (seed_eval.overall.wer, seed_eval.overall.cer)},
      layer_norm_run=layer_norm_run, notes=notes)
  print('\n== held-out speakers (greedy decoding)')
  for row in results:
    eps = ''
    if row['epsilon_run'] is not None and math.isfinite(row['epsilon_run']):
      eps = (f'  epsilon_run={row["epsilon_run"]:.3g} (this run, K={ledger.population}, '
             f'S={ledger.cohort_size}); epsilon_declared={row["epsilon_declared"]:.2f} (K\'='
             f'{ledger.declared_population:,}, S\'={ledger.declared_cohort_size:,}; PLD '
             f'{epsilon_declared_pld:.2f}) at delta=1e-9')
    print(f'{row["model"]:<34} WER {100 * row["wer"]:5.1f}%  CER {100 * row["cer"]:5.1f}%{eps}')
  print('\n'.join(notes))
  print(f'report: {path}')


if __name__ == '__main__':
  app.run(main)
