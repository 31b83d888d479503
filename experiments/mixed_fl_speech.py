r"""Mixed FL for speech under domain shift: the server keeps its own domain while clients fine-tune.

Augenstein et al., "Mixed Federated Learning: Joint Decentralized and Centralized Learning",
arXiv:2205.13655, Fig. 4: FL alone is good on the clients' data and poor on the server's; mixed
FL is good on both. Here, with the speech runner (`train_federated --mixed`):

1. A synthetic espeak-ng corpus (`fedasr_tff.data.synthetic`) of two domains that say different
   words: the server's domain (split `train_server`, held out `dev_server`) and the clients'
   domain (`train_clients`, held out `dev_clients`), disjoint speakers.
2. A seed model trained centrally on the server's domain (`program.central_training`).
3. From the seed, federated training on the clients' domain: FL alone (`--mixed=none`) and each
   mixed algorithm with the server's training speakers as central data (`--central_split`),
   without and with DP noise (`--dp_modes`).
4. Every model scored on both held-out domains; a Markdown table of WER/CER per domain (the
   seed's first) and, for DP runs, ε for the declared population and for the run itself, is
   printed and written to `OUTPUT_DIR/mixed_fl_speech.md` (`.json` for the numbers).

  python -m experiments.mixed_fl_speech --output_dir=/tmp/mixed_speech

Finished runs are reused when run again (seed model, federated runs resume from checkpoints).
"""

import json
import os

from absl import app
from absl import flags

from experiments import common
from fedasr_tff import models
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.data import synthetic
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import federated_training

_WORDS = synthetic.DEFAULT_WORDS['en']
SERVER_WORDS, CLIENT_WORDS = _WORDS[:20], _WORDS[20:]
SPLITS = {'train_server': SERVER_WORDS, 'dev_server': SERVER_WORDS,
          'train_clients': CLIENT_WORDS, 'dev_clients': CLIENT_WORDS}
RUNS = ('none',) + mixed_fl.ALGORITHMS

_SERVER_SPEAKERS = flags.DEFINE_integer('server_speakers', 6, 'Server-domain training speakers.',
                                        lower_bound=1)
_CLIENT_SPEAKERS = flags.DEFINE_integer('client_speakers', 24, 'Client-domain speakers.',
                                        lower_bound=2)
_HELD_OUT = flags.DEFINE_integer('held_out_speakers', 4, 'Held-out speakers of each domain.',
                                 lower_bound=1)
_UTTERANCES = flags.DEFINE_float('utterances_per_speaker', 8.0, 'Median utterances a speaker.',
                                 lower_bound=1.0)
_SEED_STEPS = flags.DEFINE_integer('seed_steps', 300, 'Central steps of the seed model.',
                                   lower_bound=1)
_ALGORITHMS = flags.DEFINE_list('algorithms', list(RUNS), f'Runs: any of {RUNS} (none: FL '
                                'alone).')
_DP_MODES = flags.DEFINE_list('dp_modes', ['no_dp', 'dp'], 'Runs without (no_dp) and with (dp) '
                              'noise.')
_ROUNDS = flags.DEFINE_integer('fl_rounds', 30, 'Federated rounds.', lower_bound=1)
_COHORT = flags.DEFINE_integer('fl_cohort_size', 8, 'Clients a round.', lower_bound=1)
_LOCAL_STEPS = flags.DEFINE_integer('fl_local_steps', 4, 'Local (and central) steps a round.',
                                    lower_bound=1)
_CENTRAL_WEIGHT = flags.DEFINE_float('fl_central_weight', 0.5, 'w_c of the mixed runs.')
_CENTRAL_LR = flags.DEFINE_float(
    'fl_central_lr', 0.02, 'SGD learning rate of the central steps (clipped like the clients\' '
    'at 1): the federated branch moves by a LAMB step of 0.003 a round, the central one by up to '
    'this x the steps.', lower_bound=0.0)
_SIGMA_DP = flags.DEFINE_float('fl_sigma_dp', 3e-4, 'DP noise of the dp runs (units of the '
                               'clip).', lower_bound=0.0)


def _corpus(root):
  librispeech = os.path.join(root, 'librispeech')
  first = 0
  counts = {'train_server': _SERVER_SPEAKERS.value, 'dev_server': _HELD_OUT.value,
            'train_clients': _CLIENT_SPEAKERS.value, 'dev_clients': _HELD_OUT.value}
  for index, (split, words) in enumerate(SPLITS.items()):
    if not os.path.isdir(os.path.join(librispeech, split)):
      synthetic.make_corpus(root, num_speakers=counts[split], words=words,
                            mean_utterances=_UTTERANCES.value, skew=0.3,
                            seed=common.seed_or_zero() + index, split=split, first_speaker=first)
    first += counts[split]
  return librispeech


def _federated_config(data_config, algorithm, sigma_dp):
  mixed = {}
  if algorithm != 'none':
    mixed = dict(mixed=algorithm, central_weight=_CENTRAL_WEIGHT.value,
                 central_split='train_server', central_speakers='all')
    if algorithm != mixed_fl.ONE_WAY:
      mixed['central_lr'] = _CENTRAL_LR.value
  return fields_lib.from_flat(config_lib.FederatedConfig, {
      **fields_lib.to_flat(data_config), 'model_config': common.FLAGS.model_config,
      'local_steps': _LOCAL_STEPS.value, 'client_lr': 0.2, 'server_optimizer': 'lamb',
      'server_lr': 0.003, 'clipping': 'dim', 'clip': 1.0, 'sigma_dp': sigma_dp,
      'population': 10_000_000, 'population_cohort_size': 2_000, 'rounds': _ROUNDS.value,
      'cohort_size': _COHORT.value, 'seed': common.FLAGS.seed, 'eval_every': _ROUNDS.value,
      'checkpoint_every': _ROUNDS.value, **mixed})


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal=(
      'this study runs on one machine; experiments.train_federated --mixed=... runs distributed.'))
  common.require('output_dir')
  for name in _ALGORITHMS.value:
    if name not in RUNS:
      raise app.UsageError(f'--algorithms takes any of {RUNS}, got {name!r}.')
  for name in _DP_MODES.value:
    if name not in ('no_dp', 'dp'):
      raise app.UsageError(f'--dp_modes takes any of no_dp, dp; got {name!r}.')
  output_dir = common.OUTPUT_DIR.value
  root = common.FLAGS.corpus_dir or os.path.join(output_dir, 'corpus')
  data_config = config_lib.DataConfig(
      corpus_dir=_corpus(root), layout='librispeech', split='train_clients', speakers='all',
      language='en', max_batch_seconds=common.FLAGS.max_batch_seconds,
      feature_cache_dir=os.path.join(output_dir, 'feature_cache'))
  vocab = data_config.vocabulary()
  server_data = data_config.load_client_data('train_server', vocab, speakers='all',
                                             spec_augment=True)
  client_data = data_config.load_client_data('train_clients', vocab, speakers='all',
                                             spec_augment=True)
  eval_sets = {domain: data_config.load_client_data(f'dev_{domain}', vocab)
               for domain in ('server', 'clients')}
  model_fn = models.build_tff_model_fn(common.FLAGS.model_config, vocab.tokens)

  def score(weights):
    # A model made now: building a TFF process (graph mode) invalidates Keras models made before.
    model = model_fn()
    return {domain: evaluation.evaluate(model, eval_data, weights).overall
            for domain, eval_data in eval_sets.items()}

  seed_dir = os.path.join(output_dir, 'seed')
  seed_path = os.path.join(seed_dir, 'model.npz')
  if os.path.isfile(seed_path):
    seed_weights = model_io.load_weights(seed_path, model_fn().keras_model,
                                         source='seed model')
  else:
    print(f'== seed model on the server domain ({_SEED_STEPS.value} steps)')
    steps = _SEED_STEPS.value
    seed_weights = central_training.train(
        central_training.CentralConfig(
            steps=steps, model_config=common.FLAGS.model_config, optimizer='adam',
            learning_rate=2e-3, schedule='step', decay_rate=0.5,
            decay_every=max(1, steps // 3), decay_start=max(1, steps // 3),
            seed=common.seed_or_zero(), eval_every_steps=steps),
        server_data, vocab, seed_dir, show_progress=common.PROGRESS.value).weights
  rows = [('seed (server domain)', '-', score(seed_weights), None)]
  for dp_mode in _DP_MODES.value:
    sigma_dp = _SIGMA_DP.value if dp_mode == 'dp' else 0.0
    for algorithm in _ALGORITHMS.value:
      name = f'{"fl_alone" if algorithm == "none" else algorithm}_{dp_mode}'
      print(f'\n== {name}')
      config = _federated_config(data_config, algorithm, sigma_dp)
      result = federated_training.train(
          config, client_data, vocab, os.path.join(output_dir, name),
          initial_weights=seed_weights, show_progress=common.PROGRESS.value,
          central_data=server_data if config.uses_central_data else None)
      epsilons = None
      if sigma_dp:
        epsilons = (result.ledger.epsilon(_ROUNDS.value, declared=True),
                    result.ledger.epsilon(_ROUNDS.value, declared=False))
      rows.append((name, dp_mode, score(result.weights), epsilons))

  lines = ['| model | DP | WER server domain | CER server domain | WER client domain | '
           'CER client domain | ε declared / run (RDP, δ=1e-9) |', '|---|---|---|---|---|---|---|']
  for name, dp_mode, scores, epsilons in rows:
    eps = f'{epsilons[0]:.3g} / {epsilons[1]:.3g}' if epsilons else '-'
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
  app.run(main)
