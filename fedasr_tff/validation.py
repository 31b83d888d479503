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


def check_cohort_within_population(cohort_size, population, *,
                                   cohort_name: str = 'cohort_size',
                                   population_name: str = 'population',
                                   population_description: str = '') -> None:
  """Checks that a cohort of `cohort_size` clients can be drawn from `population` clients.

  Args:
    cohort_size: S, an integer >= 1.
    population: K, an integer >= 1.
    cohort_name: the cohort argument's name, for the error.
    population_name: the population argument's name, for the error.
    population_description: what the error calls the population instead of
      "`population_name` (K)", e.g. "the population of 3 training clients".

  Raises:
    ValueError: naming the argument, unless both are integers >= 1 and S <= K.
  """
  check_positive_integer(cohort_name, cohort_size)
  check_positive_integer(population_name, population)
  if cohort_size > population:
    described = population_description or f'`{population_name}` ({population})'
    raise ValueError(f'`{cohort_name}` ({cohort_size}) exceeds {described}.')
