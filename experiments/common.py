"""Flags shared by the experiment binaries, and the one mapping from flags to configurations.

Flags that configure a run are defined from the configuration classes of
`fedasr_tff.program.config` (`define_flags`): the flag is the field's name, its default the
field's default, its help and choices the field's metadata. `config_from_flags` builds any
configuration from the flags; `flag_errors` turns the `ValueError` of a configuration or a
library builder into a usage error that names the flags. The shared flags are defined here once,
so binaries (and their tests, which may import several binaries into one process) never define
the same flag twice.
"""

import contextlib
import dataclasses
import logging
import re
import typing

from absl import app
from absl import flags
from absl import logging as absl_logging

from fedasr_tff import runtime
from fedasr_tff.program import config as config_lib

FLAGS = flags.FLAGS


def _value_type(annotation):
  """int for `int` and `Optional[int]`, and so on."""
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  return args[0] if args else annotation


def define_flags(cls, names=None) -> None:
  """Defines a flag for every field of the configuration class `cls` (or those in `names`)."""
  for field in dataclasses.fields(cls):
    if names is not None and field.name not in names:
      continue
    help_text = field.metadata[config_lib.HELP]
    choices = field.metadata[config_lib.CHOICES]
    kind = _value_type(field.type)
    if choices:
      flags.DEFINE_enum(field.name, field.default, list(choices), help_text)
    elif kind is bool:
      flags.DEFINE_bool(field.name, field.default, help_text)
    elif kind is int:
      flags.DEFINE_integer(field.name, field.default, help_text)
    elif kind is float:
      flags.DEFINE_float(field.name, field.default, help_text)
    elif kind is str:
      flags.DEFINE_string(field.name, field.default, help_text)
    else:
      raise TypeError(f'No flag type for field {field.name!r} of type {field.type}.')


def config_from_flags(cls):
  """The configuration `cls` from the flags named like its fields.

  A field without a flag, or whose flag is unset (None), keeps its default.
  """
  values = {name: FLAGS[name].value for name in config_lib.config_fields(cls)
            if name in FLAGS and FLAGS[name].value is not None}
  return config_lib.from_flat(cls, values)


_BACKTICKED = re.compile(r'`(\w+)`')


@contextlib.contextmanager
def flag_errors():
  """Turns a `ValueError` into a usage error, naming each backticked flag as `--name`.

  Configurations and the builders they call name their arguments in backticks, and every
  configuration field is the flag of the same name (`fedasr_tff.program.config`).
  """
  try:
    yield
  except ValueError as e:
    message = _BACKTICKED.sub(lambda m: f'--{m[1]}' if m[1] in FLAGS else m[0], str(e))
    raise app.UsageError(message) from e


define_flags(config_lib.DataConfig)
define_flags(config_lib.ModelConfig, ['model_config'])
define_flags(config_lib.RunConfig, ['seed'])
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


def seed_or_zero() -> int:
  """--seed where a number is needed for public randomness (initialisation, IID control)."""
  return config_lib.RunConfig(seed=FLAGS.seed).seed_or_zero
