r"""Your own corpus, a working model: seed model, federated training without and with DP,
evaluation and report, in one command.

  python -m experiments.recipe --corpus_dir=/data/mycorpus --layout=manifest --split=train.tsv \
      --output_dir=/tmp/recipe                  # 10% of the speakers held out, 30% seed
  python -m experiments.recipe --corpus_dir=/data/LibriSpeech --split=train-clean-100 \
      --eval_split=dev-clean --output_dir=/tmp/recipe
  make demo    # = python -m experiments.recipe --synthetic_speakers=480 --rounds=30 \
               #       --output_dir=demo_output

Stages, each resumable (a finished stage's output is read back when the command runs again;
the federated runs resume from their checkpoints):

1. Speakers: the held-out speakers are those of --eval_split, or --held_out by name, or
   --held_out_speakers drawn from --split (default 10% of them, at least 1); the rest are split
   into the seed speakers (--seed_fraction, the server's data) and the clients, as Pelikan et
   al., NeurIPS 2025, arXiv:2310.00098, Sec. 4 "Data" do (`speech.corpus_clients.assign_speakers`),
   drawn with --split_seed (default: --seed). The seed share is 30% here, not the paper's 10%:
   at a CPU's budget it was the largest lever on both tuning corpora (docs/results.md, "The
   recipe on unseen voices and recording conditions"). Its price is privacy, stated in the
   report: the seed speakers' data trains the seed model centrally, outside the DP guarantee,
   which covers the clients only.
   The roles are kept in `speakers.json` (owner-only: it names the clients); a rerun that would
   give other roles is refused, naming the flags.
2. A seed model trained centrally on the seed speakers (Adam with step decay, --seed_steps,
   --seed_lr, --seed_warmup_steps; the paper's LARS needs far more steps than a CPU has).
3. Federated training from the seed with the clients (one per speaker): per-layer "dim"
   clipping, LAMB on the server, local SGD with local clipping; once without noise, once with
   DP noise --sigma_dp on the averaged update. The runner's flags
   (`experiments.train_federated`) at the demo's values but --rounds=100 (the cpu preset's 30
   left unseen voices at 38.6% WER with DP, 100 at 31.0%; the federated stage then takes about
   17 min on an idle 2-core machine against 5, scaled from the demo's measured rounds); the
   clip C = client_lr x local clip x local steps, the largest delta local training makes. On a
   corpus with fewer clients than --cohort_size, every client takes part in every round (q = 1,
   stated in the privacy report).
4. Every model scored on the held-out speakers (greedy CTC decoding, or --decoder=beam with
   --beam_width), the transcripts restricted to the words the seed speakers said (the server's
   data: `seed_word_list`; on the hardest tuning corpus 70% WER became 36%, docs/results.md,
   "The seed speakers' words"), or to --word_list, or open (--noseed_word_list), with the
   open-vocabulary greedy WER beside the list's, and `report.md`:
   WER first, the plots (per-layer norms are those the DP run releases) and the privacy statement
   for the run and the declared population (the paper's extrapolation, Sec. 4.3, Table 1).

SpecAugment is off (--spec_augment turns it on in seed and federated training): in a few
hundred steps it slowed the tiny model more than it regularised it, and federated fine-tuning
with it undid a seed trained without it (docs/results.md, "The demo, measured"). The features
have each mel channel's mean removed (--feature_normalization=cmn, the cpu preset's), as
recorded speech needs; the seed share (30%), the seed steps (2,000) and the features were tuned
on the demo's corpus and on its voices recorded as through a phone, and checked on voices and
conditions they never saw (docs/results.md, "The recipe on unseen voices and recording
conditions").

--synthetic_speakers=N runs the recipe on a synthetic espeak-ng corpus (the demo's): N training
speakers and a held-out split of --held_out_speakers (default 8) other speakers, written to
--corpus_dir (default OUTPUT_DIR/corpus) if it has none.

It runs on one machine: `--workers` is refused (experiments.train_federated runs the recipe's
federated stage on TFF workers).
"""

import json
import math
import os
import time
from typing import Optional

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import decoding_flags
from experiments import report
from experiments import speech_stages
from fedasr_tff import privacy
from fedasr_tff import private_files
from fedasr_tff import reading
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import corpus_clients
from fedasr_tff.speech import data_config as data_config_lib
from fedasr_tff.speech import decoding
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models
from fedasr_tff.speech import presets

FLAGS = flags.FLAGS

# The corpus: --corpus_dir (`speech_stages`), its layout and splits, the speakers' roles.
# The seed share: 30%, the recipe's own default (module docstring). train_central and
# train_federated keep the field's 10% under every preset, so the seed part one trains on and the
# federated part the other trains on never overlap by default.
RECIPE_SEED_FRACTION = 0.3
config_flags.define_flags(data_config_lib.DataConfig, ['layout', 'split', 'eval_split', 'language',
                                                  'seed_fraction', 'split_seed'],
                          defaults={'seed_fraction': RECIPE_SEED_FRACTION},
                          helps={'seed_fraction': 'Fraction of the speakers left after the '
                                 'held-out ones that are seed speakers, the server\'s data, '
                                 'trained on centrally without DP (the paper: 10%; the recipe: '
                                 '30%, see experiments/recipe.py).'})
_SYNTHETIC_SPEAKERS = flags.DEFINE_integer(
    'synthetic_speakers', None, 'Run on a synthetic espeak-ng corpus of this many training '
    'speakers (and --held_out_speakers others), written to --corpus_dir if it has none (the '
    'demo: 480). Default: the corpus at --corpus_dir.', lower_bound=4)
_HELD_OUT = flags.DEFINE_list(
    'held_out', [], 'Speakers of --split held out for evaluation, by name (instead of '
    '--held_out_speakers or --eval_split).')
config_flags.define_flags(speech_stages.CorpusConfig)
config_flags.define_flags(speech_stages.SeedConfig)
# 100 rounds, not the cpu preset's 30: on the check corpus of unseen voices they took the held-out
# WER with DP from 38.6 +- 13.9% to 31.0 +- 10.8%, still falling at round 100 (docs/results.md,
# "The seed speakers' words"), for about 12 min more on 2 cores. `make demo` gives --rounds=30.
RECIPE_ROUNDS = 100
# The federated stage: the runner's flags (`experiments.train_federated`) at the cpu preset
# (`speech.presets.CPU`: SpecAugment off, see the module docstring; the clip C derived as
# client_lr x local clip x local steps, 0.2 here, the largest delta one local step can make, so
# the noise sigma_dp x C is no larger than it needs to be: at C = 1 it cost 6 WER points,
# docs/results.md, "The demo, measured"), one local step, --rounds=RECIPE_ROUNDS, and the demo's
# noise and declared population K', S'.
# --noise_seed fixes the DP run's noise for a reproducible simulation (benchmarks/chaos.py
# compares a killed recipe with one never killed); its statement then says it has no guarantee.
FEDERATED_FLAGS = ('rounds', 'cohort_size', 'local_steps', 'client_lr', 'server_lr', 'clip',
                   'sigma_dp', 'population', 'population_cohort_size', 'eval_every',
                   'spec_augment', 'feature_normalization', 'noise_seed')
FEDERATED_DEFAULTS = {**presets.for_config(presets.CPU, config_lib.FederatedConfig),
                      'rounds': RECIPE_ROUNDS, 'local_steps': 1, 'sigma_dp': 3e-4,
                      'population': 10_000_000, 'population_cohort_size': 2_000}
config_flags.define_flags(config_lib.FederatedConfig, FEDERATED_FLAGS,
                          defaults=FEDERATED_DEFAULTS)
_SEED_WORD_LIST = flags.DEFINE_bool(
    'seed_word_list', True, 'Without --word_list, restrict the held-out transcripts to the words '
    'of the seed speakers\' transcripts (`decoding.WordList`; the server\'s own data, written '
    'to OUTPUT_DIR/seed_words.txt for --word_list of evaluate and transcribe); the report gives '
    'greedy decoding without a word list beside it. --noseed_word_list: no word list.')
_EXACT_LAYER_NORMS = flags.DEFINE_bool(
    'layer_norms_from_no_noise_run', False, 'Draw the per-layer norms figure from the run '
    'without noise: its exact client statistics (outside any DP guarantee, and labelled so). '
    'Default: from what the DP run releases (norms of its noised average update).')

# The synthetic corpus's splits.
_SYNTHETIC_TRAIN, _SYNTHETIC_HELD_OUT = 'train', 'dev'
# The held-out share of --split's speakers when neither --eval_split nor --held_out* is given.
_HELD_OUT_FRACTION = 0.1
SPEAKERS_FILE = 'speakers.json'
SEED_WORDS_FILE = 'seed_words.txt'


def federated_config(data_config, sigma_dp, **fields) -> config_lib.FederatedConfig:
  """The recipe's federated run with noise `sigma_dp`: the runner's flags at the recipe's values
  (`FEDERATED_DEFAULTS`), LAMB, "dim" clipping, a checkpoint at every evaluation; `fields` are
  what the ablation (`experiments.ablation`) varies."""
  return speech_stages.federated_config(data_config, preset=FEDERATED_DEFAULTS, **{
      'server_optimizer': 'lamb', 'clipping': 'dim', 'sigma_dp': sigma_dp,
      'checkpoint_every': FLAGS.eval_every, **fields})


def recipe_data(output_dir: str) -> data_config_lib.DataConfig:
  """The data flags (--corpus_dir, --layout, --split, --eval_split, ...), or the synthetic
  corpus's with --synthetic_speakers (written by `write_synthetic_corpus`); the features cached
  in `output_dir/feature_cache`."""
  # --split_seed defaults to --seed: each seed of a study is another draw of the roles.
  fields = {'seed_fraction': FLAGS.seed_fraction, 'spec_augment': FLAGS.spec_augment,
            'feature_normalization': FLAGS.feature_normalization,
            'split_seed': (FLAGS.split_seed if FLAGS['split_seed'].present
                           else speech_stages.seed_or_zero())}
  if _SYNTHETIC_SPEAKERS.value is not None:
    given = [f'--{name}' for name in ('layout', 'split', 'eval_split', 'language', 'held_out')
             if FLAGS[name].present]
    if given:
      raise app.UsageError(f'{", ".join(given)}: the synthetic corpus (--synthetic_speakers) '
                           'has its own layout, splits and language.')
    return speech_stages.data_config(speech_stages.synthetic_corpus_dir(output_dir), output_dir,
                                     _SYNTHETIC_TRAIN, eval_split=_SYNTHETIC_HELD_OUT, **fields)
  common.require('corpus_dir')
  if FLAGS.eval_split and (_HELD_OUT.value or FLAGS['held_out_speakers'].present):
    raise app.UsageError('--eval_split holds out its own speakers: give it, or --held_out / '
                         '--held_out_speakers, not both.')
  return data_config_lib.DataConfig(
      corpus_dir=speech_stages.CORPUS_DIR.value, layout=FLAGS.layout, split=FLAGS.split,
      eval_split=FLAGS.eval_split or None, language=FLAGS.language,
      max_batch_seconds=FLAGS.max_batch_seconds,
      feature_cache_dir=os.path.join(output_dir, data_config_lib.FEATURE_CACHE_SUBDIR), **fields)


def write_synthetic_corpus(output_dir: str) -> None:
  """With --synthetic_speakers, writes the synthetic corpus `recipe_data` names, if not there
  (`speech_stages.synthetic_corpus`)."""
  if _SYNTHETIC_SPEAKERS.value is not None:
    speech_stages.synthetic_corpus(
        output_dir, {_SYNTHETIC_TRAIN: _SYNTHETIC_SPEAKERS.value, _SYNTHETIC_HELD_OUT: None})


def speaker_roles(data: data_config_lib.DataConfig, utterances,
                  output_dir: str) -> corpus_clients.SpeakerRoles:
  """The roles of the speakers of `utterances` (--split's; `corpus_clients.assign_speakers`),
  compared with `output_dir/speakers.json` if there (`save_speaker_roles` writes it).

  Raises:
    app.UsageError: if the flags give other roles than the run in `output_dir` has.
  """
  speakers = [u.speaker for u in utterances]
  held_out_count = 0
  if not data.eval_split and not _HELD_OUT.value:
    held_out_count = (FLAGS.held_out_speakers if FLAGS['held_out_speakers'].present else
                      max(1, round(_HELD_OUT_FRACTION * len(set(speakers)))))
  try:
    roles = corpus_clients.assign_speakers(speakers, seed_fraction=data.seed_fraction,
                                           split_seed=data.split_seed, held_out=_HELD_OUT.value,
                                           held_out_count=held_out_count)
  except ValueError as e:
    raise app.UsageError(f'{e} (--split={data.split}, --held_out, --held_out_speakers, '
                         '--seed_fraction)') from e
  path = os.path.join(output_dir, SPEAKERS_FILE)
  if os.path.isfile(path):
    with open(path) as f:
      saved = json.load(f)
    if saved != roles.as_dict():
      raise app.UsageError(
          f'{path} holds other speaker roles than --split, --eval_split, --held_out, '
          '--held_out_speakers, --seed_fraction and --split_seed give now: use a new '
          '--output_dir, or the flags of that run.')
  return roles


def save_speaker_roles(roles: corpus_clients.SpeakerRoles, output_dir: str) -> None:
  """Writes `output_dir/speakers.json` (owner-only: it names the clients) if not there."""
  path = os.path.join(output_dir, SPEAKERS_FILE)
  if not os.path.isfile(path):
    os.makedirs(output_dir, exist_ok=True)
    # Atomically: a partial file (a full disk) would refuse every rerun.
    with private_files.writing(path, f'{path}.partial'), \
        private_files.open_private(f'{path}.partial') as f:
      json.dump(roles.as_dict(), f, indent=1)
    os.replace(f'{path}.partial', path)


def _client_data(data, split, vocab, speaker_ids, spec_augment=False):
  return corpus_clients.load_client_data(
      data.corpus_dir, data.layout, split, vocab, speaker_ids=speaker_ids,
      spec_augment=spec_augment, max_batch_seconds=data.max_batch_seconds,
      feature_cache_dir=data.feature_cache(), feature_normalization=data.feature_normalization)


def seed_word_list(data: data_config_lib.DataConfig, utterances, roles: corpus_clients.SpeakerRoles,
                   vocab) -> decoding.WordList:
  """The words of the seed speakers' transcripts among `utterances` (--split's;
  `decoding.WordList.from_transcripts`; `main`
  writes them to `OUTPUT_DIR/seed_words.txt`, owner-only: the server's data, as private as the
  corpus).

  Only seed speakers' transcripts enter it: they are the server's data and already trained the
  seed model outside the DP guarantee. A client's transcript would put its words, unnoised, in
  every transcript the recipe writes.

  Raises:
    app.UsageError: naming the split and the flags to give, if they have no word the
      vocabulary can spell.
  """
  seed_speakers = set(roles.seed)
  try:
    return decoding.WordList.from_transcripts(
        [u.transcript for u in utterances if u.speaker in seed_speakers], vocab)
  except ValueError as e:
    raise app.UsageError(f'The seed speakers\' transcripts of --split={data.split}: {e} Give '
                         '--word_list, or --noseed_word_list.') from e


def _decoding(word_list: Optional[decoding.WordList]) -> str:
  """The decoding of the --decoder flags and `word_list`, in words."""
  words = ('greedy decoding' if decoding_flags.DECODER.value == 'greedy' else
           f'beam search of width {decoding_flags.BEAM_WIDTH.value}')
  if decoding_flags.WORD_LIST.value:
    words += f', words of {decoding_flags.WORD_LIST.value}'
  elif word_list is not None:
    words += f', the seed speakers\' {len(word_list.words)} words'
  return words


def _scored(model_config, vocab, eval_data, evaluations, word_list):
  """{model: EvaluationResult} of `evaluations` ({model: (weights, greedy evaluation)}) under the
  --decoder flags and `word_list`: the runs' own greedy evaluations, or each model scored
  again."""
  if decoding_flags.DECODER.value == 'greedy' and word_list is None:
    return {name: greedy for name, (_, greedy) in evaluations.items()}
  model = models.build_ctc_transformer(model_config, vocab.size)
  return {name: evaluation.evaluate(model, eval_data, weights,
                                    decoder=decoding_flags.DECODER.value,
                                    beam_width=decoding_flags.BEAM_WIDTH.value,
                                    top_paths=decoding_flags.TOP_PATHS.value, word_list=word_list)
          for name, (weights, _) in evaluations.items()}


def _count(number: int, noun: str) -> str:
  return f'{number} {noun}' + ('' if number == 1 else 's')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal=(
      'the recipe runs on one machine; use experiments.train_federated for distributed runs.'))
  common.require('output_dir')
  decoding_flags.check(has_word_list=bool(decoding_flags.WORD_LIST.value) or
                       _SEED_WORD_LIST.value)
  started = time.monotonic()
  output_dir = common.OUTPUT_DIR.value
  stages = {}  # stage -> wall seconds (of this invocation: a reused stage costs little)
  data_config = recipe_data(output_dir)
  vocab = data_config.vocabulary()
  with config_flags.flag_errors():
    seed_config = config_flags.config_from_flags(speech_stages.SeedConfig)
  write_synthetic_corpus(output_dir)
  read = reading.ReadReport()
  with config_flags.flag_errors():  # A missing, unreadable or malformed --split.
    utterances = corpus_clients.read_utterances(data_config.corpus_dir, data_config.layout,
                                                data_config.split, report=read)
  roles = speaker_roles(data_config, utterances, output_dir)
  # The word list before any training or file: a bad --word_list, or seed speakers without a
  # word, is refused at start-up rather than after the training.
  word_list = decoding_flags.word_list(vocab)
  seed_words = None
  if word_list is None and _SEED_WORD_LIST.value:
    word_list = seed_words = seed_word_list(data_config, utterances, roles, vocab)
  # The federated runs' flags too, before anything is written or trained. A corpus with fewer
  # clients than the cohort: all of them every round, unless the flag says.
  clients = len(roles.federated)
  cohort = ({} if FLAGS['cohort_size'].present or clients >= FLAGS.cohort_size
            else {'cohort_size': clients})
  with config_flags.flag_errors():
    configs = {name: federated_config(data_config, sigma_dp, **cohort)
               for name, sigma_dp in (('fl_no_noise', 0.0), ('fl_dp', FLAGS.sigma_dp))}
    for config in configs.values():  # The noise and populations, as each run's ledger takes them.
      config.ledger(config.noise_level(clients), clients)
  save_speaker_roles(roles, output_dir)
  if seed_words is not None:
    seed_words_path = os.path.join(output_dir, SEED_WORDS_FILE)
    with private_files.writing(seed_words_path), private_files.open_private(seed_words_path) as f:
      f.write(''.join(f'{word}\n' for word in seed_words.words))
  seed_data = _client_data(data_config, data_config.split, vocab, roles.seed,
                           data_config.spec_augment)
  fl_data = _client_data(data_config, data_config.split, vocab, roles.federated,
                         data_config.spec_augment)
  eval_data = (data_config.load_eval_data(vocab) if data_config.eval_split else
               _client_data(data_config, data_config.split, vocab, roles.held_out))
  stages['corpus'] = time.monotonic() - started
  print(f'== speakers: {_count(len(seed_data.client_ids), "seed speaker")}, '
        f'{_count(clients, "client")}, {_count(len(eval_data.client_ids), "held-out speaker")} '
        f'({"--eval_split=" + data_config.eval_split if data_config.eval_split else "of --split"}'
        f'; roles in {os.path.join(output_dir, SPEAKERS_FILE)})')

  mark = time.monotonic()
  seed_weights, seed_eval = speech_stages.seed_model(seed_config, seed_data, vocab, output_dir,
                                                     eval_data=eval_data)
  stages['seed model'] = time.monotonic() - mark
  results = {}
  for name, stage in (('fl_no_noise', 'FL, no noise'), ('fl_dp', 'FL + DP')):
    mark = time.monotonic()
    results[name] = speech_stages.federated_run(name, configs[name], fl_data, vocab, output_dir,
                                                seed_weights, eval_data=eval_data)
    stages[stage] = time.monotonic() - mark
  no_noise, dp = results['fl_no_noise'], results['fl_dp']
  mark = time.monotonic()
  greedy = {'seed': seed_eval, 'fl_no_noise': no_noise.evaluation, 'fl_dp': dp.evaluation}
  scores = _scored(FLAGS.model_config, vocab, eval_data, {
      'seed': (seed_weights, seed_eval), 'fl_no_noise': (no_noise.weights, no_noise.evaluation),
      'fl_dp': (dp.weights, dp.evaluation)}, word_list)
  stages['evaluation'] = time.monotonic() - mark
  decoded = _decoding(word_list)

  rounds, ledger = FLAGS.rounds, dp.ledger
  epsilons = {
      'epsilon_run': ledger.epsilon(rounds, declared=False, accountant='rdp'),
      'epsilon_declared': ledger.epsilon(rounds, declared=True, accountant='rdp'),
  }
  epsilon_declared_pld = ledger.epsilon(rounds, declared=True, accountant='pld')
  seed_share = f'{len(seed_data.client_ids)} of {len(seed_data.client_ids) + clients} speakers'
  results = [
      {'model': f'seed (central, {seed_share})', 'wer': scores['seed'].overall.wer,
       'cer': scores['seed'].overall.cer, 'rounds': 0, 'epsilon_run': None,
       'epsilon_declared': None},
      {'model': 'FL, no noise', 'wer': scores['fl_no_noise'].overall.wer,
       'cer': scores['fl_no_noise'].overall.cer, 'rounds': rounds, 'epsilon_run': math.inf,
       'epsilon_declared': math.inf},
      {'model': f'FL + DP (σ_DP = {FLAGS.sigma_dp:g})', 'wer': scores['fl_dp'].overall.wer,
       'cer': scores['fl_dp'].overall.cer, 'rounds': rounds, **epsilons},
  ]
  if word_list is not None:
    # Open-vocabulary greedy decoding beside the word list: what the model spells by itself.
    for row, name in zip(results, ('seed', 'fl_no_noise', 'fl_dp'), strict=True):
      row['wer_open'] = greedy[name].overall.wer
  wers = [100 * row['wer'] for row in results]
  layer_norm_run = os.path.join(output_dir, 'fl_dp', 'metrics.csv')
  layer_norms_note = ('The per-layer norms figure shows what the DP run releases: the norms of '
                      'its noised average update and the noise\'s expected share of them.')
  if _EXACT_LAYER_NORMS.value:
    layer_norm_run = os.path.join(output_dir, 'fl_no_noise', 'metrics.csv')
    layer_norms_note = ('The per-layer norms figure comes from the run without noise '
                        '(--layer_norms_from_no_noise_run): its exact client statistics are '
                        'outside any DP guarantee.')
  corpus_name = ('the synthetic corpus' if _SYNTHETIC_SPEAKERS.value is not None else
                 f'split {data_config.split!r} of `{data_config.corpus_dir}` '
                 f'({data_config.layout})')
  notes = [
      f'{_count(len(seed_data.client_ids), "seed speaker")}, '
      f'{_count(clients, "federated client")}, '
      f'{_count(len(eval_data.client_ids), "held-out speaker")} (never trained on) of '
      f'{corpus_name}' + (f', held-out split {data_config.eval_split!r}'
                          if data_config.eval_split else '') + '. The seed speakers\' data '
      'trains the seed model centrally, without DP: the guarantee below covers the federated '
      'clients only.',
      f'WER ({decoded}): seed {wers[0]:.1f}% → FL {wers[1]:.1f}% → FL + DP '
      f'{wers[2]:.1f}%: federated training ' + ('improves on' if wers[2] < wers[0] else
                                               'does NOT improve on') + ' the seed model with '
      f'DP; the cost of the noise (DP run minus run without noise) is {wers[2] - wers[1]:+.1f} WER '
      'points.',
      f'ε (RDP, δ = 1e-9): `epsilon_run` is the DP run\'s own guarantee ({ledger.cohort_size} '
      f'of {ledger.population} clients a round, Poisson-sampled); `epsilon_declared` is the '
      f'extrapolation to K\' = {ledger.declared_population:,}, S\' = '
      f'{ledger.declared_cohort_size:,} at the same σ_DP (PLD: '
      f'{privacy.format_epsilon(epsilon_declared_pld)}), '
      'which assumes quality depends on σ_DP only.',
      layer_norms_note,
      f'Seed training metrics (by step): `{os.path.join(output_dir, "seed", "metrics.csv")}`.',
      f'Wall time: {(time.monotonic() - started) / 60:.1f} min ('
      + ', '.join(f'{stage} {seconds / 60:.1f}' for stage, seconds in stages.items()) + ').',
  ]
  path = report.write_report(
      output_dir, title='fedasr-tff recipe: DP federated fine-tuning of a seed ASR model',
      results=results, privacy_statement=dp.privacy_statement(),
      runs={'FL, no noise': os.path.join(output_dir, 'fl_no_noise', 'metrics.csv'),
            'FL + DP': os.path.join(output_dir, 'fl_dp', 'metrics.csv')},
      references={'seed model': (seed_eval.overall.wer, seed_eval.overall.cer)},
      layer_norm_run=layer_norm_run, notes=notes, decoding=decoded,
      inputs={'--split': read.as_dict(),
              **({'--eval_split': eval_data.read_report.as_dict()} if data_config.eval_split
                 else {})})
  print(f'\n== held-out speakers ({decoded})')
  for row in results:
    eps = ''
    if row['epsilon_run'] is not None and math.isfinite(row['epsilon_run']):
      eps = (f'  epsilon_run={privacy.format_epsilon(row["epsilon_run"])} (this run, '
             f'K={ledger.population}, S={ledger.cohort_size}); epsilon_declared='
             f'{privacy.format_epsilon(row["epsilon_declared"])} (K\'='
             f'{ledger.declared_population:,}, S\'={ledger.declared_cohort_size:,}; PLD '
             f'{privacy.format_epsilon(epsilon_declared_pld)}) at delta={ledger.delta:g}')
    open_vocabulary = (f'  (greedy, no word list: WER {100 * row["wer_open"]:.1f}%)'
                       if 'wer_open' in row else '')
    print(f'{row["model"]:<34} WER {100 * row["wer"]:5.1f}%  CER {100 * row["cer"]:5.1f}%'
          f'{open_vocabulary}{eps}')
  print('\n'.join(notes))
  print(f'report: {path}')


if __name__ == '__main__':
  cli.run(main)
