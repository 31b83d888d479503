"""Flags defined from configuration classes, and configurations built from flags.

A configuration class of `fedasr_tff.speech.config` (or `central_training.CentralConfig`,
`retrieval.config.RetrieverConfig`) holds each flag's name, default, help and choices
(`fields.field`). `define_flags` defines the flags of a class, with a binary's own defaults where
they differ; `config_from_flags` builds the configuration from them (the one mapping from flags
to a configuration, for every binary), and `flag_errors` turns the `ValueError` of a
configuration or a library builder into a usage error that names the flags. No flag is defined
here.
"""

import contextlib
import re
import typing

from absl import app
from absl import flags

from fedasr_tff.program import fields as fields_lib


def _value_type(annotation):
  """int for `int` and `Optional[int]`, and so on."""
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  return args[0] if args else annotation


def define_flags(cls, names=None, flag_values=flags.FLAGS, defaults=None, helps=None) -> None:
  """Defines a flag for every field of the configuration class `cls` (or those in `names`).

  Args:
    cls: a configuration class; the fields of its sub-configurations are its fields too.
    names: the fields to define flags of (default all).
    flag_values: where to define them.
    defaults: {field: default} of this binary where it differs from the field's (an experiment
      that runs the federated stage with its own number of rounds, say).
    helps: {field: help} of this binary where the field's help does not say what the flag does
      here (the evaluation binary's split is the split it scores, not a training split).

  Raises:
    ValueError: a name in `names`, `defaults` or `helps` is no field of `cls`, or `defaults` or
      `helps` names a field not in `names`.
  """
  fields = fields_lib.config_fields(cls)
  names = list(fields) if names is None else list(names)
  defaults = dict(defaults or {})
  helps = dict(helps or {})
  unknown = [name for name in [*names, *defaults, *helps] if name not in fields]
  if unknown:
    raise ValueError(f'{cls.__name__} has no field {", ".join(map(repr, unknown))}.')
  undefined = [name for name in [*defaults, *helps] if name not in names]
  if undefined:
    raise ValueError(f'Defaults or help for flags not defined: '
                     f'{", ".join(map(repr, undefined))}.')
  for name in names:
    field = fields[name]
    default = defaults.get(name, field.default)
    help_text = helps.get(name, field.metadata[fields_lib.HELP])
    choices = field.metadata[fields_lib.CHOICES]
    kind = _value_type(field.type)
    kwargs = dict(flag_values=flag_values)
    if choices:
      flags.DEFINE_enum(name, default, list(choices), help_text, **kwargs)
    elif kind is bool:
      flags.DEFINE_bool(name, default, help_text, **kwargs)
    elif kind is int:
      flags.DEFINE_integer(name, default, help_text, **kwargs)
    elif kind is float:
      flags.DEFINE_float(name, default, help_text, **kwargs)
    elif kind is str:
      flags.DEFINE_string(name, default, help_text, **kwargs)
    else:
      raise TypeError(f'No flag type for field {name!r} of type {field.type}.')


def values_from_flags(cls, flag_values=flags.FLAGS) -> dict:
  """{field: flag value} of the fields of `cls` (sub-configurations flattened) whose flag is
  defined and set (not None)."""
  return {name: flag_values[name].value for name in fields_lib.config_fields(cls)
          if name in flag_values and flag_values[name].value is not None}


def config_from_flags(cls, flag_values=flags.FLAGS):
  """The configuration `cls` from the flags named like its fields.

  A field without a flag, or whose flag is unset (None), keeps its default.
  """
  return fields_lib.from_flat(cls, values_from_flags(cls, flag_values))


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
