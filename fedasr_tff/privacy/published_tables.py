"""The published ε rows of Pelikan et al. 2025 and a reader for CSV files in that format.

`data/privacy_tables.csv` is our transcription of Tables 1, 17, 18 and 20 of "Enabling
Differentially Private Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers
and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098: every ε the paper reports, with the noise
multiplier z, cohort S, population K and accounted steps T. The `check` column holds our own
reproduction notes (they are not in the paper): `ok` when our RDP accountant reproduces the row
at its listed Rényi order, otherwise why not, such as `TYPO` or `ORDER_LABEL`
(docs/accounting.md, "The check column").
"""

import csv
import dataclasses
import math
import os
from typing import List
from typing import Optional

PUBLISHED_TABLES_CSV = os.path.join(os.path.dirname(__file__), 'data', 'privacy_tables.csv')

# All published ε are at δ = 1e-9 (the paper's table captions); a `delta` column overrides it.
PUBLISHED_DELTA = 1e-9

REQUIRED_COLUMNS = ('z', 'S', 'K', 'T', 'epsilon')


@dataclasses.dataclass(frozen=True)
class PublishedRow:
  """One configuration and its published ε.

  Attributes:
    line: the row's line in its file.
    table: the paper's table, such as "1".
    setting: the row's setting, as transcribed.
    noise_multiplier: z.
    cohort_size: S.
    population: K.
    steps: T.
    delta: δ.
    epsilon: the published ε.
    renyi_order: the published Rényi order, if any.
    check: our reproduction note: `ok`, or why our accountant does not reproduce the row
      (docs/accounting.md, "The check column").
  """
  line: int
  table: str
  setting: str
  noise_multiplier: float
  cohort_size: int
  population: int
  steps: int
  delta: float
  epsilon: float
  renyi_order: Optional[float]
  check: str

  @property
  def sampling_rate(self) -> float:
    """q = S / K."""
    return self.cohort_size / self.population


def read_privacy_table(path: str = PUBLISHED_TABLES_CSV) -> List[PublishedRow]:
  """Reads a CSV with the columns of `data/privacy_tables.csv`.

  Required columns: z, S, K, T, epsilon. Optional: table, setting, renyi_order, check (default
  "ok") and delta (default `PUBLISHED_DELTA`). Other columns are ignored.

  Args:
    path: the CSV; default the paper's transcription.

  Returns:
    The rows, in file order.

  Raises:
    ValueError: naming the file (and line and column) when the file cannot be read, a required
      column is missing, or a value does not parse or is out of range.
  """
  try:
    with open(path, newline='', encoding='utf-8') as f:
      reader = csv.DictReader(f)
      columns = reader.fieldnames or []
      missing = [c for c in REQUIRED_COLUMNS if c not in columns]
      if missing:
        raise ValueError(f'{path}: missing column(s) {", ".join(missing)} '
                         f'(found: {", ".join(columns) or "no header"}).')
      return [_parse_row(path, reader.line_num, record) for record in reader]
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise ValueError(f'{path}: cannot read privacy table: {e}') from e


def _parse_row(path: str, line: int, record: dict) -> PublishedRow:

  def field(column, parse, default=None):
    text = (record.get(column) or '').strip()
    if not text:
      if default is not None or column not in REQUIRED_COLUMNS:
        return default
      raise ValueError(f'{path}, line {line}: column {column!r} is empty.')
    try:
      return parse(text)
    except ValueError as e:
      raise ValueError(
          f'{path}, line {line}: column {column!r}: cannot parse {text!r} ({e}).') from e

  row = PublishedRow(
      line=line,
      table=field('table', str, ''),
      setting=field('setting', str, ''),
      noise_multiplier=field('z', float),
      cohort_size=field('S', _parse_count),
      population=field('K', _parse_count),
      steps=field('T', _parse_count),
      delta=field('delta', float, PUBLISHED_DELTA),
      epsilon=field('epsilon', float),
      renyi_order=field('renyi_order', float),
      check=field('check', str, 'ok'))
  for column, value, ok in (
      ('z', row.noise_multiplier, math.isfinite(row.noise_multiplier) and row.noise_multiplier > 0),
      ('S', row.cohort_size, row.cohort_size >= 1),
      ('K', row.population, row.population >= row.cohort_size),
      ('delta', row.delta, 0 < row.delta < 1),
  ):
    if not ok:
      raise ValueError(f'{path}, line {line}: column {column!r} has an invalid value {value!r}'
                       + (' (K must be >= S)' if column == 'K' else '') + '.')
  return row


def _parse_count(text: str) -> int:
  value = float(text)
  if not value.is_integer() or value < 0:
    raise ValueError('expected a whole number >= 0')
  return int(value)
