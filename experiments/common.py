"""Flags shared by the experiment binaries (data, model, execution) and their helpers.

Defined once here so that binaries (and their tests, which may import several binaries into one
process) never define the same flag twice.
"""

import logging
import os

from absl import flags
from absl import logging as absl_logging

from fedasr_tff import data
from fedasr_tff import models
from fedasr_tff.program import corpus
from fedasr_tff.runtime import tff_workers

CORPUS_DIR = flags.DEFINE_string(
    'corpus_dir', None, 'Root of the corpus: the folder holding the split folders (LibriSpeech), '
    'SPLIT.tsv and clips/ (Common Voice), or the manifest TSVs (manifest).')
LAYOUT = flags.DEFINE_enum('layout', 'librispeech', list(corpus.LAYOUTS), 'Corpus layout.')
SPLIT = flags.DEFINE_string('split', 'train', 'Training split (for "manifest": the TSV file).')
SPEAKERS = flags.DEFINE_enum(
    'speakers', None, list(corpus.SPEAKER_PARTS),
    'Speakers of --split to train on: the "seed" part of the seeded speaker split '
    '(--seed_fraction of them), the "federated" rest, or "all". Default: seed for central '
    'training, federated for federated training.')
SEED_FRACTION = flags.DEFINE_float('seed_fraction', 0.1,
                                   'Fraction of speakers in the seed part (spec §5: 10%).',
                                   lower_bound=0.0, upper_bound=1.0)
SPLIT_SEED = flags.DEFINE_integer('split_seed', 0, 'Seed of the speaker split.', lower_bound=0)
IID = flags.DEFINE_bool('iid', False, 'IID control: give every utterance a speaker drawn '
                        'uniformly from the speakers (spec §5).')
LANGUAGE = flags.DEFINE_enum('language', 'en', ['en', 'fr', 'de'], 'Token set and text '
                             'normalisation.')
MAX_BATCH_SECONDS = flags.DEFINE_float('max_batch_seconds', 120.0,
                                       'Audio per dynamic batch, in seconds.', lower_bound=0.1)
FEATURE_CACHE_DIR = flags.DEFINE_string('feature_cache_dir', None,
                                        'Folder to cache log-mel features in (optional).')
EVAL_SPLIT = flags.DEFINE_string('eval_split', None, 'Held-out split to evaluate on (its '
                                 'speakers are all used); empty: no evaluation.')
MODEL_CONFIG = flags.DEFINE_enum('model_config', 'tiny', list(models.CONFIGS),
                                 'Transformer size (spec §4; tiny/small for CPUs).')
OUTPUT_DIR = flags.DEFINE_string('output_dir', None, 'Folder for the run\'s files.')
SEED = flags.DEFINE_integer(
    'seed', None, 'Random seed of the run: its initialisation, IID control and, for federated '
    'training, the cohorts and every client\'s random draws. Default: 0 for initialisation '
    'and IID control, and a secret from OS entropy (kept only in the checkpoints) for cohorts '
    'and client draws. A fixed seed makes a DP run reproducible but its cohorts public, which '
    'voids the amplification by sampling its epsilon assumes (the privacy statement says so).',
    lower_bound=0)
PROGRESS = flags.DEFINE_bool('progress', True, 'Show a progress bar on stderr.')

flags.register_validator('corpus_dir', lambda v: v is None or os.path.isdir(v),
                         message='--corpus_dir must be an existing directory.')


def start_binary() -> None:
  """What every binary's `main` does first, before any TFF computation.

  Stops TFF's worker processes however the run ends (`tff_workers.install_termination_handlers`)
  and, unless --verbosity is given, keeps the log to warnings from our code: TF and TFF log a
  line per checkpoint file written and warn when evaluation traces the model for a new batch
  shape, which would bury the per-evaluation lines.
  """
  tff_workers.install_termination_handlers()
  if not flags.FLAGS['verbosity'].present:
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger('tensorflow').setLevel(logging.ERROR)


def require(*flag_holders) -> None:
  """Checks required flags in main (not with required=True, so tests can share a process)."""
  missing = [f'--{holder.name}' for holder in flag_holders if holder.value in (None, '')]
  if missing:
    raise flags.IllegalFlagValueError(f'{", ".join(missing)} must be given.')


def vocabulary() -> data.Vocabulary:
  return data.Vocabulary(LANGUAGE.value)


def seed_or_zero() -> int:
  """--seed where a number is needed for public randomness (initialisation, IID control)."""
  return SEED.value or 0


def client_data(split: str, speakers: str, vocab: data.Vocabulary, spec_augment: bool,
                seed: int = 0) -> data.SpeechClientData:
  return corpus.load_client_data(
      CORPUS_DIR.value, LAYOUT.value, split, vocab, speakers=speakers,
      seed_fraction=SEED_FRACTION.value, split_seed=SPLIT_SEED.value, iid=IID.value,
      iid_seed=seed, spec_augment=spec_augment, max_batch_seconds=MAX_BATCH_SECONDS.value,
      feature_cache_dir=FEATURE_CACHE_DIR.value)


def eval_data(vocab: data.Vocabulary):
  if not EVAL_SPLIT.value:
    return None
  return corpus.load_client_data(CORPUS_DIR.value, LAYOUT.value, EVAL_SPLIT.value, vocab,
                                 max_batch_seconds=MAX_BATCH_SECONDS.value,
                                 feature_cache_dir=FEATURE_CACHE_DIR.value)
