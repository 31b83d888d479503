"""Flags shared by the experiment binaries, and what every binary does first.

The shared flags (data, model size, seed, output) are defined here once, from the configuration
classes (`config_flags.define_flags`), so binaries (and their tests, which may import several
binaries into one process) never define the same flag twice.
"""

import logging

from absl import app
from absl import flags
from absl import logging as absl_logging

from experiments import config_flags
from fedasr_tff import runtime
from fedasr_tff.program import config as config_lib

FLAGS = flags.FLAGS

config_flags.define_flags(config_lib.DataConfig)
config_flags.define_flags(config_lib.ModelConfig, ['model_config'])
config_flags.define_flags(config_lib.RunConfig, ['seed'])
OUTPUT_DIR = flags.DEFINE_string('output_dir', None, 'Folder for the run\'s files.')
PROGRESS = flags.DEFINE_bool('progress', True, 'Show a progress bar on stderr.')


def start_binary(max_concurrent_computation_calls=None) -> None:
  """What every binary's `main` does first, before any TFF computation.

  Sets TFF's local C++ execution context, whose worker dies with the run however it ends
  (`fedasr_tff.runtime`; `max_concurrent_computation_calls` as there), and, unless --verbosity
  is given, keeps the log to warnings from our code: TF and TFF log a line per checkpoint file
  written and warn when evaluation traces the model for a new batch shape, which would bury the
  per-evaluation lines.
  """
  runtime.set_local_cpp_execution_context(max_concurrent_computation_calls)
  if not FLAGS['verbosity'].present:
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger('tensorflow').setLevel(logging.ERROR)


def require(*names: str) -> None:
  """Checks required flags in main (not with required=True, so tests can share a process)."""
  missing = [f'--{name}' for name in names if FLAGS[name].value in (None, '')]
  if missing:
    raise app.UsageError(f'{", ".join(missing)} must be given.')


def data_config() -> config_lib.DataConfig:
  """The data flags, the feature cache under --output_dir unless --feature_cache_dir names one."""
  data = config_flags.config_from_flags(config_lib.DataConfig)
  return data.with_default_feature_cache(OUTPUT_DIR.value)


def seed_or_zero() -> int:
  """--seed where a number is needed for public randomness (initialisation, IID control)."""
  return config_lib.RunConfig(seed=FLAGS.seed).seed_or_zero
