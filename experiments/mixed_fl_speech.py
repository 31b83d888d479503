r"""Mixed FL for speech under domain shift: the server keeps its own domain while clients fine-tune.

Augenstein et al., "Mixed Federated Learning: Joint Decentralized and Centralized Learning",
arXiv:2205.13655, Fig. 4: FL alone is good on the clients' data and poor on the server's; mixed
FL is good on both. Here, with the speech runner (`train_federated --mixed`):

1. A synthetic espeak-ng corpus (`fedasr_tff.speech.data.synthetic`) of two domains that say
   different words: the server's domain (split `train_server`, held out `dev_server`) and the
   clients' domain (`train_clients`, held out `dev_clients`), disjoint speakers.
2. A seed model trained centrally on the server's domain (`speech_stages.seed_model`).
3. From the seed, federated training on the clients' domain: FL alone (`--mixed=none`) and each
   mixed algorithm with the server's training speakers as central data (`--central_split`),
   without and with DP noise (`--dp_modes`).
4. Every model scored on both held-out domains; a Markdown table of WER/CER per domain (the
   seed's first) and, for DP runs, ε for the declared population and for the run itself, is
   printed and written to `OUTPUT_DIR/mixed_fl_speech.md` (`.json` for the numbers).

  python -m experiments.mixed_fl_speech --output_dir=/tmp/mixed_speech

Finished runs are reused when run again (seed model, federated runs resume from checkpoints).

It runs on one machine: `--workers` is refused (experiments.train_federated --mixed=... runs one
of its configurations on TFF workers).
"""

import json
import os

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import speech_stages
from fedasr_tff import privacy
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic

FLAGS = flags.FLAGS

_WORDS = synthetic.DEFAULT_WORDS['en']
SERVER_WORDS, CLIENT_WORDS = _WORDS[:20], _WORDS[20:]
SPLITS = {'train_server': SERVER_WORDS, 'dev_server': SERVER_WORDS,
          'train_clients': CLIENT_WORDS, 'dev_clients': CLIENT_WORDS}
RUNS = (config_lib.MIXED_NONE,) + mixed_fl.ALGORITHMS

_SERVER_SPEAKERS = flags.DEFINE_integer('server_speakers', 6, 'Server-domain training speakers.',
                                        lower_bound=1)
_CLIENT_SPEAKERS = flags.DEFINE_integer('client_speakers', 24, 'Client-domain speakers.',
                                        lower_bound=2)
config_flags.define_flags(speech_stages.CorpusConfig,
                          defaults={'held_out_speakers': 4, 'utterances_per_speaker': 8.0})
config_flags.define_flags(speech_stages.SeedConfig, defaults={'seed_steps': 300})
_ALGORITHMS = flags.DEFINE_list('algorithms', list(RUNS), f'Runs: any of {RUNS} (none: FL '
                                'alone).')
_DP_MODES = flags.DEFINE_list('dp_modes', [speech_stages.NO_DP, speech_stages.DP],
                              'Runs without (no_dp) and with (dp) noise.')
# The federated runs: the runner's flags (`experiments.train_federated --mixed`) at this study's
# values; --local_steps is the central steps a round too. The central ones are clipped like the
# clients' at 1: the federated branch moves by a LAMB step of 0.003 a round, the central one by
# up to --central_lr x the steps. The central flags configure the mixed runs only (one_way has
# no central optimizer).
_CENTRAL_FLAGS = {config_lib.MIXED_NONE: ('central_weight', 'central_lr'),
                  mixed_fl.ONE_WAY: ('central_lr',)}
FEDERATED_DEFAULTS = dict(rounds=30, cohort_size=8, local_steps=4, central_weight=0.5,
                          central_lr=0.02, sigma_dp=3e-4)
config_flags.define_flags(config_lib.FederatedConfig, FEDERATED_DEFAULTS,
                          defaults=FEDERATED_DEFAULTS)


def _federated_config(data_config, algorithm, sigma_dp):
  mixed = {}
  if algorithm != config_lib.MIXED_NONE:
    mixed = dict(mixed=algorithm, central_split='train_server', central_speakers='all')
  rounds = FLAGS.rounds
  return speech_stages.federated_config(
      data_config, unused_flags=_CENTRAL_FLAGS.get(algorithm, ()), client_lr=0.2,
      server_optimizer='lamb', server_lr=0.003, clipping='dim', clip=1.0, sigma_dp=sigma_dp,
      population=10_000_000, population_cohort_size=2_000, eval_every=rounds,
      checkpoint_every=rounds, **mixed)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal=(
      'this study runs on one machine; experiments.train_federated --mixed=... runs distributed.'))
  common.require('output_dir')
  for name in _ALGORITHMS.value:
    if name not in RUNS:
      raise app.UsageError(f'--algorithms takes any of {RUNS}, got {name!r}.')
  noise_levels = speech_stages.noise_levels(_DP_MODES.value, FLAGS.sigma_dp)
  output_dir = common.OUTPUT_DIR.value
  # SpecAugment on the training data, as this study has always trained.
  data_config = speech_stages.data_config(speech_stages.synthetic_corpus_dir(output_dir),
                                          output_dir, 'train_clients', speakers='all',
                                          spec_augment=True)
  # Every run configured before the corpus is written or a model trained.
  with config_flags.flag_errors():
    seed_config = config_flags.config_from_flags(speech_stages.SeedConfig)
    configs = {(dp_mode, algorithm): _federated_config(data_config, algorithm, sigma_dp)
               for dp_mode, sigma_dp in noise_levels for algorithm in _ALGORITHMS.value}
  speech_stages.synthetic_corpus(
      output_dir, {'train_server': _SERVER_SPEAKERS.value, 'dev_server': None,
                   'train_clients': _CLIENT_SPEAKERS.value, 'dev_clients': None},
      words=SPLITS, skew=0.3)
  vocab = data_config.vocabulary()
  server_data = data_config.load_client_data('train_server', vocab, speakers='all',
                                             training=True)
  client_data = data_config.load_client_data('train_clients', vocab, speakers='all',
                                             training=True)
  eval_sets = {domain: data_config.load_client_data(f'dev_{domain}', vocab)
               for domain in ('server', 'clients')}
  model_fn = models.build_tff_model_fn(FLAGS.model_config, vocab.tokens)

  def score(weights):
    # A model made now: building a TFF process (graph mode) invalidates Keras models made before.
    model = model_fn()
    return {domain: evaluation.evaluate(model, eval_data, weights).overall
            for domain, eval_data in eval_sets.items()}

  seed_weights, _ = speech_stages.seed_model(seed_config, server_data, vocab, output_dir)
  rows = [('seed (server domain)', '-', score(seed_weights), None)]
  for (dp_mode, algorithm), config in configs.items():
    name = f'{"fl_alone" if algorithm == config_lib.MIXED_NONE else algorithm}_{dp_mode}'
    result = speech_stages.federated_run(name, config, client_data, vocab, output_dir,
                                         seed_weights, central_data=server_data)
    rows.append((name, dp_mode, score(result.weights), speech_stages.epsilons(result, config)))

  lines = ['| model | DP | WER server domain | CER server domain | WER client domain | '
           'CER client domain | ε declared / run (RDP, δ=1e-9) |', '|---|---|---|---|---|---|---|']
  for name, dp_mode, scores, epsilons in rows:
    eps = ' / '.join(privacy.format_epsilon(e) for e in epsilons[:2]) if epsilons else '-'
    lines.append(f'| {name} | {dp_mode} | {100 * scores["server"].wer:.1f}% | '
                 f'{100 * scores["server"].cer:.1f}% | {100 * scores["clients"].wer:.1f}% | '
                 f'{100 * scores["clients"].cer:.1f}% | {eps} |')
  table = '\n'.join(lines)
  print(table)
  with open(os.path.join(output_dir, 'mixed_fl_speech.md'), 'w') as f:
    f.write(table + '\n')
  with open(os.path.join(output_dir, 'mixed_fl_speech.json'), 'w') as f:
    json.dump([{'model': name, 'dp': dp_mode, 'epsilon_declared_run': epsilons,
                **{f'{metric}_{domain}': getattr(s, metric) for domain, s in scores.items()
                   for metric in ('wer', 'cer')}} for name, dp_mode, scores, epsilons in rows],
              f, indent=2)


if __name__ == '__main__':
  cli.run(main)
