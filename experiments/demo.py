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

The federated runs take the runner's flags (`experiments.train_federated`: --rounds,
--cohort_size, --local_steps, --client_lr, --server_lr, --clip, --sigma_dp, --population,
--population_cohort_size, --eval_every) at the demo's values, and the seed model --seed_steps and
--seed_lr. Every step is a library call (`experiments/speech_stages.py`, the stages the speech
studies share); a finished step's output is reused when the demo is run again (the federated
runs resume from their checkpoints).
"""

import math
import os
import time

from absl import app
from absl import flags

from experiments import common
from experiments import config_flags
from experiments import report
from experiments import speech_stages
from fedasr_tff.speech import config as config_lib

FLAGS = flags.FLAGS

_SPEAKERS = flags.DEFINE_integer('train_speakers', 480, 'Training speakers in the corpus.',
                                 lower_bound=4)
config_flags.define_flags(speech_stages.CorpusConfig)
config_flags.define_flags(speech_stages.SeedConfig)
# SpecAugment off by default: see the module docstring.
config_flags.define_flags(config_lib.DataConfig, ['spec_augment'],
                          defaults={'spec_augment': False})
# The federated stage: the runner's flags (`experiments.train_federated`) at the demo's values.
# The clip C = 0.2 is client_lr x local clip (1) x local steps, the largest delta one local step
# can make, so the noise (sigma_dp x C) is no larger than it needs to be (at C = 1 it cost 6 WER
# points; docs/results.md, "The demo, measured"). The population is the declared one, K' and S'.
FEDERATED_DEFAULTS = dict(rounds=30, cohort_size=16, local_steps=1, client_lr=0.2,
                          server_lr=0.003, clip=0.2, sigma_dp=3e-4, population=10_000_000,
                          population_cohort_size=2_000, eval_every=10)
config_flags.define_flags(config_lib.FederatedConfig, FEDERATED_DEFAULTS,
                          defaults=FEDERATED_DEFAULTS)
_EXACT_LAYER_NORMS = flags.DEFINE_bool(
    'layer_norms_from_no_noise_run', False, 'Draw the per-layer norms figure from the run '
    'without noise: its exact client statistics (outside any DP guarantee, and labelled so). '
    'Default: from what the DP run releases (norms of its noised average update).')

_TRAIN_SPLIT, _HELD_OUT_SPLIT = 'train', 'dev'


def federated_config(data_config, sigma_dp, **fields) -> config_lib.FederatedConfig:
  """The demo's federated run with noise `sigma_dp`: the runner's flags at the demo's values
  (`FEDERATED_DEFAULTS`), LAMB, "dim" clipping, a checkpoint at every evaluation; `fields` are
  what the ablation (`experiments.ablation`) varies."""
  return speech_stages.federated_config(data_config, **{
      'server_optimizer': 'lamb', 'clipping': 'dim', 'sigma_dp': sigma_dp,
      'checkpoint_every': FLAGS.eval_every, **fields})


def demo_data(output_dir: str) -> config_lib.DataConfig:
  """The demo's data: the synthetic corpus (`speech_stages.synthetic_corpus`: the training split
  of --train_speakers and the held-out split of --held_out_speakers), its seed speakers (10%)
  and held-out split, the features cached in `output_dir/feature_cache`."""
  corpus_dir = speech_stages.synthetic_corpus(
      output_dir, {_TRAIN_SPLIT: _SPEAKERS.value, _HELD_OUT_SPLIT: None})
  return speech_stages.data_config(corpus_dir, output_dir, _TRAIN_SPLIT, seed_fraction=0.1,
                                   split_seed=speech_stages.seed_or_zero(),
                                   eval_split=_HELD_OUT_SPLIT, spec_augment=FLAGS.spec_augment)


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
  seed_data = data_config.load_client_data(_TRAIN_SPLIT, vocab, speakers='seed', training=True)
  fl_data = data_config.load_client_data(_TRAIN_SPLIT, vocab, speakers='federated',
                                         training=True)
  eval_data = data_config.load_eval_data(vocab)

  mark = time.monotonic()
  seed_weights, seed_eval = speech_stages.seed_model(
      config_flags.config_from_flags(speech_stages.SeedConfig), seed_data, vocab, output_dir,
      eval_data=eval_data)
  stages['seed model'] = time.monotonic() - mark
  results = {}
  for name, stage, sigma_dp in (('fl_no_noise', 'FL, no noise', 0.0),
                                ('fl_dp', 'FL + DP', FLAGS.sigma_dp)):
    mark = time.monotonic()
    results[name] = speech_stages.federated_run(
        name, federated_config(data_config, sigma_dp), fl_data, vocab, output_dir,
        seed_weights, eval_data=eval_data)
    stages[stage] = time.monotonic() - mark
  no_noise, dp = results['fl_no_noise'], results['fl_dp']

  rounds, ledger = FLAGS.rounds, dp.ledger
  epsilons = {
      'epsilon_run': ledger.epsilon(rounds, declared=False, accountant='rdp'),
      'epsilon_declared': ledger.epsilon(rounds, declared=True, accountant='rdp'),
  }
  epsilon_declared_pld = ledger.epsilon(rounds, declared=True, accountant='pld')
  results = [
      {'model': 'seed (central, 10% of speakers)', 'wer': seed_eval.overall.wer,
       'cer': seed_eval.overall.cer, 'rounds': 0, 'epsilon_run': None,
       'epsilon_declared': None},
      {'model': 'FL, no noise', 'wer': no_noise.evaluation.overall.wer,
       'cer': no_noise.evaluation.overall.cer, 'rounds': rounds, 'epsilon_run': math.inf,
       'epsilon_declared': math.inf},
      {'model': f'FL + DP (σ_DP = {FLAGS.sigma_dp:g})', 'wer': dp.evaluation.overall.wer,
       'cer': dp.evaluation.overall.cer, 'rounds': rounds, **epsilons},
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
      f'Seed training metrics (by step): `{os.path.join(output_dir, "seed", "metrics.csv")}`.',
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
