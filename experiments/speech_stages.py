"""The stages the speech experiments share: a synthetic corpus, a seed model trained centrally on
part of it, then federated runs that start from the seed.

The recipe of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025
(arXiv:2310.00098), Sec. 4: the demo, the ablation and the DGA and mixed FL speech studies are
each this recipe with a corpus and federated runs of their own. The flags every such study takes
alike are defined here; a study defines the others, the runner's, `CorpusConfig`'s and
`SeedConfig`'s among them (`config_flags.define_flags`, with its own defaults).
"""

import dataclasses
import json
import os
from typing import Mapping
from typing import Optional
from typing import Sequence

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from fedasr_tff import private_files
from fedasr_tff import validation
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config as data_config_lib
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import federated_training
from fedasr_tff.speech import models
from fedasr_tff.speech import presets
from fedasr_tff.speech.data import synthetic

FLAGS = flags.FLAGS

config_flags.define_flags(data_config_lib.DataConfig, ['max_batch_seconds'])
config_flags.define_flags(data_config_lib.ModelConfig, ['model_config'])
config_flags.define_flags(config_lib.RunConfig, ['seed'])
CORPUS_DIR = flags.DEFINE_string(
    'corpus_dir', None, 'Folder of the synthetic corpus, written there if it has none (its '
    'LibriSpeech layout is read). Default: OUTPUT_DIR/corpus.')

LAYOUT, LANGUAGE = 'librispeech', 'en'
# How often the seed model is scored in its training, when there is held-out data.
SEED_EVALUATIONS = 4
# The --dp_modes of a study: each federated run without and with noise.
NO_DP, DP = 'no_dp', 'dp'


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
  """The size of a study's synthetic corpus, beside the speakers of its own splits."""
  held_out_speakers: int = fields_lib.field(8, 'Held-out speakers (of each held-out split).')
  utterances_per_speaker: float = fields_lib.field(16.0, 'Median utterances per speaker.')

  def __post_init__(self):
    validation.check_positive_integer('held_out_speakers', self.held_out_speakers)
    validation.check_positive('utterances_per_speaker', self.utterances_per_speaker)


@dataclasses.dataclass(frozen=True)
class SeedConfig:
  """Central training of the seed model: Adam, the learning rate halved at every third of the
  steps, after --seed_warmup_steps of linear warm-up (the paper's LARS needs far more steps than
  a CPU study has)."""
  seed_steps: int = fields_lib.field(
      presets.CPU['steps'], 'Central training steps of the seed model (the cpu preset\'s '
      '--steps: 2,000 took a seed model of recorded speech from WER 47.6% to 33.5% against '
      '1,000, docs/results.md).')
  seed_lr: float = fields_lib.field(2e-3, 'Adam learning rate of the seed model.')
  seed_warmup_steps: int = fields_lib.field(
      0, 'Steps of a linear warm-up of the seed model\'s learning rate (0: none). 200 of 2,000 '
      'took the seed models of a tuning corpus from WER 71.4% to 67.8% (docs/results.md, "The '
      'seed stage\'s start"); not yet a default, as the check corpus has not been run with it.')

  def __post_init__(self):
    validation.check_positive_integer('seed_steps', self.seed_steps)
    validation.check_positive('seed_lr', self.seed_lr)
    validation.check_non_negative_integer('seed_warmup_steps', self.seed_warmup_steps)

  def central_config(self) -> central_training.CentralConfig:
    """The central training of --model_config at --seed: the cpu preset's (`speech.presets.CPU`,
    as `train_central`'s defaults) at --seed_steps, --seed_lr and --seed_warmup_steps."""
    preset = presets.for_config(presets.CPU, central_training.CentralConfig)
    given = dict(steps=self.seed_steps, model_config=FLAGS.model_config,
                 learning_rate=self.seed_lr, warmup_steps=self.seed_warmup_steps,
                 seed=seed_or_zero(),
                 eval_every_steps=max(1, self.seed_steps // SEED_EVALUATIONS))
    values = {**{name: value for name, value in preset.items()
                 if not isinstance(value, fields_lib.Derived)}, **given}
    return fields_lib.from_flat(central_training.CentralConfig,
                                fields_lib.with_derived(central_training.CentralConfig, values,
                                                        preset))


def seed_or_zero() -> int:
  """--seed where a number is needed for public randomness (corpus, initialisation, splits)."""
  return config_lib.RunConfig(seed=FLAGS.seed).seed_or_zero


def synthetic_corpus_dir(output_dir: str) -> str:
  """The LibriSpeech folder of a study's synthetic corpus, under --corpus_dir or
  `output_dir/corpus` (`synthetic_corpus` writes it): a study configures its runs on it before
  anything is written."""
  return os.path.join(CORPUS_DIR.value or os.path.join(output_dir, 'corpus'), LAYOUT)


def synthetic_corpus(output_dir: str, speakers: Mapping[str, Optional[int]], *,
                     words: Optional[Mapping[str, Sequence[str]]] = None, **kwargs) -> str:
  """The synthetic corpus under --corpus_dir or `output_dir/corpus`, of the size of the study's
  `CorpusConfig` flags; returns its LibriSpeech folder.

  Args:
    output_dir: the study's folder.
    speakers: {split: speakers, or None for --held_out_speakers}: the splits, in order, each of
      other speakers and written with its own seed (--seed plus its index) unless its folder is
      there.
    words: {split: its word list} (default every split `synthetic.DEFAULT_WORDS`).
    **kwargs: the other arguments of `synthetic.make_corpus`.
  """
  with config_flags.flag_errors():
    size = config_flags.config_from_flags(CorpusConfig)
  if CORPUS_DIR.value:
    cli.check_output('corpus_dir', CORPUS_DIR.value)
  librispeech = synthetic_corpus_dir(output_dir)
  root = os.path.dirname(librispeech)
  first = 0
  for index, (split, count) in enumerate(speakers.items()):
    count = size.held_out_speakers if count is None else count
    if not os.path.isdir(os.path.join(librispeech, split)):
      print(f'writing split {split} of the synthetic corpus to {root}')
      synthetic.make_corpus(root, num_speakers=count, mean_utterances=size.utterances_per_speaker,
                            words=(words or {}).get(split), seed=seed_or_zero() + index,
                            split=split, first_speaker=first, **kwargs)
    first += count
  return librispeech


def data_config(corpus_dir: str, output_dir: str, split: str,
                **fields) -> data_config_lib.DataConfig:
  """The data of a study: `split` of the synthetic corpus at `corpus_dir`, --max_batch_seconds,
  the features cached in `output_dir/feature_cache`; `fields` are other `DataConfig` fields."""
  return data_config_lib.DataConfig(
      corpus_dir=corpus_dir, layout=LAYOUT, split=split, language=LANGUAGE,
      max_batch_seconds=FLAGS.max_batch_seconds,
      feature_cache_dir=os.path.join(output_dir, data_config_lib.FEATURE_CACHE_SUBDIR), **fields)


# What a seed model was trained with, beside it: a reused one must match the flags.
SEED_SETTINGS_FILE = 'seed_settings.json'


def _seed_settings(central: central_training.CentralConfig, train_data) -> dict:
  """{flag name: value} of what shapes a seed model besides its speakers (`speakers.json`) and
  features (recorded in `model.npz`)."""
  return {'seed_steps': central.steps, 'seed_lr': central.learning_rate,
          'seed_warmup_steps': central.warmup_steps, 'model_config': central.model_config,
          'seed': central.seed, 'spec_augment': train_data.spec_augment}


# What a seed model was trained with where its `seed_settings.json` predates the setting.
_SEED_SETTINGS_BEFORE = {'seed_warmup_steps': 0}


def seed_model(config: SeedConfig, train_data, vocab, output_dir: str, *, eval_data=None):
  """(weights, evaluation) of the seed model: read from `output_dir/seed/model.npz` if there,
  else trained centrally on `train_data` (`SeedConfig`); the evaluation on `eval_data`, or
  None without.

  Raises:
    app.UsageError: naming the flags, if the seed model there was trained with other
      --seed_steps, --seed_lr, --seed_warmup_steps, --model_config, --seed or --spec_augment
      (`seed_settings.json`; a model whose file predates --seed_warmup_steps had none;
      a seed model written before that file is reused as it is), or other features, or if
      that model is damaged or not finite.
  """
  seed_dir = os.path.join(output_dir, 'seed')
  seed_path = os.path.join(seed_dir, 'model.npz')
  settings_path = os.path.join(seed_dir, SEED_SETTINGS_FILE)
  central = config.central_config()
  settings = _seed_settings(central, train_data)
  # Printed once the stage is known to go ahead: a refused command prints nothing on stdout.
  heading = (f'== seed model: central training on {len(train_data.client_ids)} speakers '
             f'({config.seed_steps} steps)')
  if os.path.isfile(seed_path):
    if os.path.isfile(settings_path):
      with open(settings_path) as f:
        saved = json.load(f)
      saved = {**_SEED_SETTINGS_BEFORE, **saved}
      differ = [name for name in settings if saved.get(name) != settings[name]]
      if differ:
        raise app.UsageError(
            f'{seed_path} was trained with '
            + ', '.join(f'--{name}={_flag_value(saved.get(name))}' for name in differ)
            + ', not ' + ', '.join(f'--{name}={_flag_value(settings[name])}' for name in differ)
            + ': give those flags to reuse it, or use a new --output_dir.')
    model = models.build_tff_model_fn(FLAGS.model_config, vocab.tokens)()
    try:
      data_config_lib.check_model_features(seed_path, train_data.feature_normalization,
                                           'seed model')
      weights = model_io.load_weights(seed_path, model.keras_model, source='seed model')
    except ValueError as e:  # Other features, a damaged file, non-finite weights.
      raise app.UsageError(f'{e} Or use a new --output_dir.') from e
    print(heading)
    print(f'reusing {seed_path}')
    return weights, (None if eval_data is None
                     else evaluation.evaluate(model, eval_data, weights))
  print(heading)
  os.makedirs(seed_dir, exist_ok=True)
  with private_files.writing(settings_path), open(settings_path, 'w') as f:
    json.dump(settings, f, indent=1)
  seed = central_training.train(central, train_data, vocab, seed_dir, eval_data=eval_data,
                                show_progress=common.PROGRESS.value)
  return seed.weights, seed.evaluation


def _flag_value(value) -> str:
  """A value as its flag is written: booleans as absl prints them."""
  return str(value).lower() if isinstance(value, bool) else str(value)


def federated_config(data: data_config_lib.DataConfig, *, unused_flags: Sequence[str] = (),
                     preset: Optional[Mapping[str, object]] = None,
                     **fields) -> config_lib.FederatedConfig:
  """A federated run of a study: the runner's flags its binary defines (but `unused_flags`, which
  configure other runs of the study), on `data`, with `fields` (by name: `FederatedConfig`'s
  flattened) that the study fixes or varies; the `fields_lib.Derived` defaults of `preset` (the
  binary's flag defaults, `speech.presets`) computed for the fields still unset."""
  flagged = config_flags.values_from_flags(config_lib.FederatedConfig)
  for name in unused_flags:
    flagged.pop(name, None)
  # The data is the study's (its --corpus_dir is where the synthetic corpus is written).
  values = {**flagged, **fields_lib.to_flat(data), **fields}
  return fields_lib.from_flat(config_lib.FederatedConfig,
                              fields_lib.with_derived(config_lib.FederatedConfig, values,
                                                      preset or {}))


def federated_run(name: str, config: config_lib.FederatedConfig, train_data, vocab,
                  output_dir: str, seed_weights, *, eval_data=None, central_data=None):
  """The federated run `config` from the seed in `output_dir/name` (resumed from its latest
  checkpoint if there); the server's `central_data` if the configuration uses it."""
  print(f'\n== {name}: {config.run.rounds} rounds, {config.run.cohort_size} of '
        f'{len(train_data.client_ids)} speakers a round, '
        f'sigma_dp={config.dp.sigma_dp or 0.0:g}')
  with config_flags.flag_errors():  # What a builder refuses, in one line naming the flag.
    run = federated_training.build_run(
        config, train_data, vocab, os.path.join(output_dir, name), eval_data=eval_data,
        initial_weights=seed_weights,
        central_data=central_data if config.uses_central_data else None)
  return run.train(show_progress=common.PROGRESS.value)


def noise_levels(dp_modes: Sequence[str], sigma_dp: float):
  """[(dp mode, σ_DP)] of a study's --dp_modes: no_dp without noise, dp at `sigma_dp`."""
  for mode in dp_modes:
    if mode not in (NO_DP, DP):
      raise app.UsageError(f'--dp_modes takes any of {NO_DP}, {DP}; got {mode!r}.')
  return [(mode, sigma_dp if mode == DP else 0.0) for mode in dp_modes]


def epsilons(result, config: config_lib.FederatedConfig):
  """(ε for the declared population, ε of the run) after the run's rounds (RDP), or None for a
  run without noise."""
  if not config.dp.adds_noise:
    return None
  rounds = config.run.rounds
  return (result.ledger.epsilon(rounds, declared=True),
          result.ledger.epsilon(rounds, declared=False))
