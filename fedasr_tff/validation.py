"""Argument checks shared by the library; each error message names the argument."""

import math
import numbers


def _is_real(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive(name: str, value) -> None:
  """Checks that `value` is a finite real number > 0.

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` is a finite real number > 0.
  """
  if not _is_real(value) or not math.isfinite(value) or value <= 0:
    raise ValueError(f'`{name}` must be a finite number > 0, got {value!r}.')


def check_non_negative(name: str, value) -> None:
  """Checks that `value` is a finite real number >= 0.

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` is a finite real number >= 0.
  """
  if not _is_real(value) or not math.isfinite(value) or value < 0:
    raise ValueError(f'`{name}` must be a finite number >= 0, got {value!r}.')


def check_positive_integer(name: str, value) -> None:
  """Checks that `value` is an integer >= 1 (a float like 3.0 is refused).

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` is an integer >= 1 (a float like 3.0 is refused).
  """
  if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
    raise ValueError(f'`{name}` must be an integer >= 1, got {value!r}.')


def check_non_negative_integer(name: str, value) -> None:
  """Checks that `value` is an integer >= 0 (a float like 3.0 is refused).

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` is an integer >= 0 (a float like 3.0 is refused).
  """
  if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
    raise ValueError(f'`{name}` must be an integer >= 0, got {value!r}.')


def check_sampling_rate(name: str, value) -> None:
  """Checks that `value` lies in (0, 1].

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` lies in (0, 1].
  """
  if not _is_real(value) or not 0 < value <= 1:
    raise ValueError(f'`{name}` must lie in (0, 1], got {value!r}.')


def check_open_unit_interval(name: str, value) -> None:
  """Checks that `value` lies in (0, 1).

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` lies in (0, 1).
  """
  if not _is_real(value) or not 0 < value < 1:
    raise ValueError(f'`{name}` must lie in (0, 1), got {value!r}.')


def check_unit_interval_right_open(name: str, value) -> None:
  """Checks that `value` lies in [0, 1).

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` lies in [0, 1).
  """
  if not _is_real(value) or not 0 <= value < 1:
    raise ValueError(f'`{name}` must lie in [0, 1), got {value!r}.')


def check_unit_interval(name: str, value) -> None:
  """Checks that `value` lies in [0, 1].

  Args:
    name: the argument's name, for the error.
    value: its value.

  Raises:
    ValueError: naming `name`, unless `value` lies in [0, 1].
  """
  if not _is_real(value) or not 0 <= value <= 1:
    raise ValueError(f'`{name}` must lie in [0, 1], got {value!r}.')
