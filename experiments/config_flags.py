"""Flags defined from configuration classes, and configurations built from flags.

A configuration class of `fedasr_tff.speech.config` (or `central_training.CentralConfig`) holds
each flag's name, default, help and choices (`config.field`). `define_flags` defines the flags of
a class, `config_from_flags` builds the configuration from them (the one mapping from flags to a
configuration, for every binary), and `flag_errors` turns the `ValueError` of a configuration or
a library builder into a usage error that names the flags. No flag is defined here.
"""

import contextlib
import dataclasses
import re
import typing

from absl import app
from absl import flags

from fedasr_tff.program import fields as fields_lib


def _value_type(annotation):
  """int for `int` and `Optional[int]`, and so on."""
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  return args[0] if args else annotation


def define_flags(cls, names=None, flag_values=flags.FLAGS) -> None:
  """Defines a flag for every field of the configuration class `cls` (or those in `names`)."""
  for field in dataclasses.fields(cls):
    if names is not None and field.name not in names:
      continue
    help_text = field.metadata[fields_lib.HELP]
    choices = field.metadata[fields_lib.CHOICES]
    kind = _value_type(field.type)
    kwargs = dict(flag_values=flag_values)
    if choices:
      flags.DEFINE_enum(field.name, field.default, list(choices), help_text, **kwargs)
    elif kind is bool:
      flags.DEFINE_bool(field.name, field.default, help_text, **kwargs)
    elif kind is int:
      flags.DEFINE_integer(field.name, field.default, help_text, **kwargs)
    elif kind is float:
      flags.DEFINE_float(field.name, field.default, help_text, **kwargs)
    elif kind is str:
      flags.DEFINE_string(field.name, field.default, help_text, **kwargs)
    else:
      raise TypeError(f'No flag type for field {field.name!r} of type {field.type}.')


def config_from_flags(cls, flag_values=flags.FLAGS):
  """The configuration `cls` from the flags named like its fields.

  A field without a flag, or whose flag is unset (None), keeps its default.
  """
  values = {name: flag_values[name].value for name in fields_lib.config_fields(cls)
            if name in flag_values and flag_values[name].value is not None}
  return fields_lib.from_flat(cls, values)


_BACKTICKED = re.compile(r'`(\w+)`')


@contextlib.contextmanager
def flag_errors(flag_values=flags.FLAGS):
  """Turns a `ValueError` into a usage error, naming each backticked flag as `--name`.

  Configurations and the builders they call name their arguments in backticks, and every
  configuration field is the flag of the same name (`fedasr_tff.speech.config`).
  """
  try:
    yield
  except ValueError as e:
    message = _BACKTICKED.sub(lambda m: f'--{m[1]}' if m[1] in flag_values else m[0], str(e))
    raise app.UsageError(message) from e


def argv_from_config(config) -> list:
  """The flags that make a binary rebuild `config` with `config_from_flags`: `--name=value` for
  every field that differs from its default (the inverse of `config_from_flags`).

  Raises:
    ValueError: a field is None where its default is not (an unset flag means the default).
  """
  defaults = fields_lib.to_flat(type(config)())
  argv = []
  for name, value in fields_lib.to_flat(config).items():
    if value == defaults[name]:
      continue
    if value is None:
      raise ValueError(f'`{name}` is None, which no flag can give (its default is '
                       f'{defaults[name]!r}).')
    argv.append(f'--{name}={value}')
  return argv
