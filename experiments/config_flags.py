"""Flags defined from configuration classes, and configurations built from flags.

A configuration class of `fedasr_tff.speech.config` (or `central_training.CentralConfig`,
`retrieval.retriever_config.RetrieverConfig`) holds each flag's name, default, help and choices
(`fields.field`). `define_flags` defines the flags of a class, with a binary's own defaults where
they differ; `config_from_flags` builds the configuration from them (the one mapping from flags
to a configuration, for every binary), with the defaults of a preset (`speech.presets`) if the
binary takes --preset, and `flag_errors` turns the `ValueError` of a configuration or a library
builder into a usage error that names the flags. No flag is defined here.
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
      that runs the federated stage with its own number of rounds, say); a
      `fields_lib.Derived` default makes the flag's default None (unset) and its help name the
      rule, which `config_from_flags` applies given the same defaults as `preset`.
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
    if isinstance(default, fields_lib.Derived):
      default, help_text = None, f'{help_text} Default: {default.rule}.'
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


def config_from_flags(cls, flag_values=flags.FLAGS, preset=None):
  """The configuration `cls` from the flags named like its fields.

  A field without a flag, or whose flag is unset (None), keeps its default, or with a `preset`
  the preset's.

  Args:
    cls: a configuration class.
    flag_values: the parsed flags.
    preset: {field: default} the binary's flags take unless given (`speech.presets`; the
      flags' defaults become the preset's), a `fields_lib.Derived` one computed from the
      configuration; None for the flags' own defaults.

  Returns:
    The configuration.

  Raises:
    ValueError: from the configuration, or from a derived default's rule.
  """
  if preset is None:
    return fields_lib.from_flat(cls, values_from_flags(cls, flag_values))
  names = fields_lib.config_fields(cls)
  for name, default in preset.items():
    if name in names and name in flag_values:
      # A flag given on the command line keeps its value.
      flag_values.set_default(
          name, None if isinstance(default, fields_lib.Derived) else default)
  return fields_lib.from_flat(
      cls, fields_lib.with_derived(cls, values_from_flags(cls, flag_values), preset))


def define_preset_flag(presets, default: str, flag_values=flags.FLAGS):
  """Defines --preset, choosing the defaults of the training flags among `presets`.

  Args:
    presets: {preset name: {field: default}} (`speech.presets.PRESETS`).
    default: the preset of a binary started without --preset; its values must be the flags'
      defaults (`define_flags(..., defaults=...)`).
    flag_values: where to define it.

  Returns:
    The flag's holder.
  """
  def shown(value):
    # A derived default's rule is in its flag's help.
    if isinstance(value, fields_lib.Derived):
      return '(derived)'
    return 'unset' if value is None else value

  described = '; '.join(
      f'{name}: ' + ' '.join(f'--{field}={shown(value)}' for field, value in preset.items())
      for name, preset in presets.items())
  return flags.DEFINE_enum(
      'preset', default, list(presets), 'Defaults of the training flags (a flag given '
      'explicitly wins; config.json saves the values, not the preset): ' + described + '.',
      flag_values=flag_values)


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


def argv_from_config(config, defaults=None) -> list:
  """The flags that make a binary rebuild `config` with `config_from_flags`: `--name=value` for
  every field that differs from its default (the inverse of `config_from_flags`).

  Args:
    config: the configuration.
    defaults: {field: default} of the binary's flags where they differ from the fields' (its
      preset); a `fields_lib.Derived` one is always given explicitly.

  Returns:
    The flags.

  Raises:
    ValueError: a field is None where its default is not (an unset flag means the default).
  """
  defaults = {**fields_lib.to_flat(type(config)()), **(defaults or {})}
  argv = []
  for name, value in fields_lib.to_flat(config).items():
    if value == defaults[name]:
      continue
    if value is None:
      raise ValueError(f'`{name}` is None, which no flag can give (its default is '
                       f'{defaults[name]!r}).')
    argv.append(f'--{name}={value}')
  return argv
