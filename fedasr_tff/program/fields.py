"""Configuration fields that are also command-line flags, for every task's configuration.

A configuration is a frozen dataclass (possibly of sub-configurations) whose fields are made
with `field`: the default, the flag help and choices sit in the field's metadata, so the
binaries define their flags from the class (`experiments/config_flags.py`) and a resumed run
compares the fields marked `fingerprint`. A library builder's `ValueError` naming one of its
arguments is re-raised naming the field (the flag) by `naming_fields`. A default may be
`Derived` from other fields (`with_derived`), for a field left unset.
"""

import contextlib
import dataclasses
from typing import Any
from typing import Callable
from typing import Dict
from typing import Mapping
from typing import Optional
from typing import Sequence

# Metadata keys of a field: its flag help, its allowed values, and whether a resumed run must
# have the same value (paths of inputs whose content is fingerprinted separately need not).
HELP, CHOICES, FINGERPRINT = 'help', 'choices', 'fingerprint'


@dataclasses.dataclass(frozen=True)
class Derived:
  """A default computed from the other fields' values, for a field left unset.

  Attributes:
    rule: the rule in words, for the flag's help (e.g. "client_lr x local_clip x local_steps").
    compute: {field name: value} of the whole configuration -> the field's value; raises a
      `ValueError` naming the fields in backticks where the rule gives no value.
  """
  rule: str
  compute: Callable[[Mapping[str, Any]], Any]


def field(default, help_text: str, choices: Optional[Sequence[str]] = None,
          fingerprint: bool = True):
  """A configuration field: its default, flag help and choices, and whether a resumed run must
  have the same value.

  Args:
    default: the field's (and the flag's) default value.
    help_text: the flag's help.
    choices: the allowed values, for the flag's definition; None for any. Not checked here: the
      configuration checks its choices (`check_choice`) or the builder it feeds does.
    fingerprint: whether a resumed run must have the same value (`run_record`); False for
      paths of inputs whose content is fingerprinted separately.

  Returns:
    A `dataclasses.Field` with the help, choices and fingerprint in its metadata (`HELP`,
    `CHOICES`, `FINGERPRINT`).
  """
  return dataclasses.field(default=default, metadata={
      HELP: help_text, CHOICES: tuple(choices) if choices else None, FINGERPRINT: fingerprint})


@contextlib.contextmanager
def naming_fields(field_of_argument: Mapping[str, str]):
  """Re-raises a builder's `ValueError` naming `argument` as naming the field instead.

  Args:
    field_of_argument: {builder argument: configuration field} names; a backquoted
      `argument` in the error's message becomes `field`.

  Yields:
    Nothing; the `with` block runs the builder.

  Raises:
    ValueError: the builder's error, its message renamed and the original as its cause; an
      error that names none of the arguments is re-raised unchanged.
  """
  try:
    yield
  except ValueError as e:
    message = str(e)
    for argument, field in field_of_argument.items():
      message = message.replace(f'`{argument}`', f'`{field}`')
    if message == str(e):
      raise
    raise ValueError(message) from e


def check_choice(name: str, value, choices) -> None:
  """Raises a `ValueError` naming field `name` unless `value` is one of `choices`.

  Args:
    name: the field (flag) name, for the message.
    value: the field's value.
    choices: its allowed values.

  Raises:
    ValueError: if `value` is not one of `choices`.
  """
  if value not in choices:
    raise ValueError(f'`{name}` must be one of {tuple(choices)}, got {value!r}.')


def config_fields(cls) -> Dict[str, dataclasses.Field]:
  """The settable fields of a configuration class by name, sub-configurations flattened.

  Args:
    cls: a configuration dataclass, whose dataclass-typed fields are sub-configurations.

  Returns:
    {field (flag) name: `dataclasses.Field`} of `cls` and its sub-configurations.
  """
  fields = {}
  for f in dataclasses.fields(cls):
    if dataclasses.is_dataclass(f.type):
      fields.update(config_fields(f.type))
    else:
      fields[f.name] = f
  return fields


def from_flat(cls, values: Mapping[str, Any]):
  """A `cls` from flat `{field (flag) name: value}`; names not in `cls` are ignored.

  Args:
    cls: a configuration dataclass, whose dataclass-typed fields are sub-configurations.
    values: {field (flag) name: value}; a field not named keeps its default.

  Returns:
    The configuration; its sub-configurations are built from the same `values`.
  """
  kwargs = {}
  for f in dataclasses.fields(cls):
    if dataclasses.is_dataclass(f.type):
      kwargs[f.name] = from_flat(f.type, values)
    elif f.name in values:
      kwargs[f.name] = values[f.name]
  return cls(**kwargs)


def to_flat(config) -> Dict[str, Any]:
  """`{field (flag) name: value}` of a configuration, sub-configurations flattened.

  Args:
    config: a configuration dataclass instance.

  Returns:
    {field (flag) name: value}; the inverse of `from_flat`.
  """
  values = {}
  for f in dataclasses.fields(config):
    value = getattr(config, f.name)
    if dataclasses.is_dataclass(value):
      values.update(to_flat(value))
    else:
      values[f.name] = value
  return values


def with_derived(cls, values: Mapping[str, Any], defaults: Mapping[str, Any]) -> Dict[str, Any]:
  """`values` and, for every field of `cls` unset in them, its `Derived` default computed.

  Args:
    cls: a configuration dataclass.
    values: {field (flag) name: value} given (as for `from_flat`).
    defaults: {field name: default}, some of them `Derived` (a preset); the others are
      ignored here (they are the flags' defaults, already in `values`).

  Returns:
    `values` with the derived fields added, in the order of `defaults`, each computed from the
    configuration `values` make with the fields derived before it (unset fields at their
    dataclass defaults).

  Raises:
    ValueError: from a rule that gives no value for this configuration.
  """
  fields = config_fields(cls)
  derived = {name: default for name, default in defaults.items()
             if isinstance(default, Derived) and name in fields and name not in values}
  values = dict(values)
  if derived:
    flat = to_flat(from_flat(cls, values))
    for name, rule in derived.items():
      values[name] = flat[name] = rule.compute(flat)
  return values
