"""Input files read whole: every line accounted for, nothing dropped or merged silently.

A reader counts, file by file (`FileAccount`), the lines it read and what each one was (a
header, blank or a separator, part of a record) and, of the records, how many it kept and how
many it skipped, by reason; the counts add up (`FileAccount.check`). A `ReadReport` holds a
reader's accounts and the problems it skipped, each named `file:line` (or the file), so that a
run's summary and report can say what became of every line of its input. `read_table` reads a
tab-separated table without quoting and any other delimiter as RFC 4180 CSV, and refuses or
skips a malformed row (docs/running.md, "What the readers read").
"""

import collections
import csv
import dataclasses
from typing import Callable
from typing import Dict
from typing import Iterable
from typing import List
from typing import Optional
from typing import Sequence
from typing import Tuple
from typing import Union

from absl import logging

MALFORMED = ('error', 'skip')
# The warnings `ReadReport.warn_if_skipped` gave in this process: a file read again (a run reads
# its split once per part) is not warned about twice.
_WARNED = set()


class MalformedRowError(ValueError):
  """A malformed row or line, refused naming the file and line (a reader's `malformed="error"`);
  with `malformed="skip"` the reader would have skipped and counted it."""


@dataclasses.dataclass
class FileAccount:
  """What became of the lines of one file.

  The counts add up: lines = header + blank + record_lines, and records = kept + skipped
  (`check`).

  Attributes:
    lines: the lines read (a last line without a line break counts).
    header: header lines.
    blank: blank lines, and lines that only separate records (a fortune file's `%`).
    record_lines: lines that belong to a record (a table's row, a fortune, a package's stanza;
      a record may span several lines).
    records: the records found.
    kept: records kept.
    skipped: records skipped, by reason.
  """
  lines: int = 0
  header: int = 0
  blank: int = 0
  record_lines: int = 0
  records: int = 0
  kept: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  def check(self, path: str) -> None:
    """Checks that the counts add up (a reader's own invariant, not the input's).

    Args:
      path: the file, for the message.

    Raises:
      AssertionError: if a line or a record is unaccounted for.
    """
    if (self.header + self.blank + self.record_lines != self.lines or
        self.kept + sum(self.skipped.values()) != self.records):
      raise AssertionError(f'{path}: the reader lost count: {self.as_dict()}.')

  def as_dict(self) -> dict:
    """The counts, as `summary.json` stores them."""
    return {'lines': self.lines, 'header': self.header, 'blank': self.blank,
            'record_lines': self.record_lines, 'records': self.records, 'kept': self.kept,
            'skipped': dict(self.skipped.most_common())}

  def __str__(self) -> str:
    parts = [f'{self.lines:,} lines']
    if self.header:
      parts.append(f'{self.header} header')
    if self.blank:
      parts.append(f'{self.blank:,} blank')
    kept = f'{self.kept:,} of {self.records:,} records kept'
    if self.skipped:
      kept += ', ' + ', '.join(f'{n:,} skipped: {reason}'
                               for reason, n in self.skipped.most_common())
    return f'{", ".join(parts)}; {kept}'


@dataclasses.dataclass
class ReadReport:
  """What readers read, file by file, and what they skipped and why.

  Attributes:
    files: {path: its `FileAccount`}, in the order first read.
    problems: (file or `file:line`, reason) of everything skipped, in the order met: records of
      the files (also counted in their account) and things that are no line of a file (an audio
      file without a transcript, audio that cannot be decoded).
  """
  files: Dict[str, FileAccount] = dataclasses.field(default_factory=dict)
  problems: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
  # Problems that are no record of a counted file (`add`), by reason.
  _elsewhere: collections.Counter = dataclasses.field(default_factory=collections.Counter,
                                                      repr=False)

  def account(self, path: str) -> FileAccount:
    """The account of `path`, new if it has none yet.

    Args:
      path: the file.
    """
    return self.files.setdefault(path, FileAccount())

  def add(self, path: str, reason: str, strict: bool) -> None:
    """Records a problem that is no record of a counted file, or raises it.

    Args:
      path: the file (or `file:line`) concerned.
      reason: what is wrong with it.
      strict: raise instead of recording.

    Raises:
      ValueError: `path: reason`, if `strict`.
    """
    self._record(path, reason, strict)
    self._elsewhere[reason] += 1

  def _record(self, where: str, reason: str, strict: bool) -> None:
    if strict:
      raise ValueError(f'{where}: {reason}')
    self.problems.append((where, reason))

  def skip(self, path: str, line: int, reason: str, strict: bool,
           where: Optional[str] = None) -> None:
    """Skips the record of `path` at `line`, counted in its account, or raises.

    Args:
      path: the file.
      line: where the record starts.
      reason: why it is skipped.
      strict: raise instead of skipping.
      where: what to name in the problem (e.g. the missing audio file a row lists); default
        `path:line`.

    Raises:
      ValueError: `where: reason`, if `strict`.
    """
    self._record(f'{path}:{line}' if where is None else where, reason, strict)
    self.account(path).skipped[reason] += 1

  def keep(self, path: str) -> None:
    """Counts a kept record of `path`.

    Args:
      path: the file.
    """
    self.account(path).kept += 1

  @property
  def counts(self) -> collections.Counter:
    """The number of problems by reason."""
    return collections.Counter(reason for _, reason in self.problems)

  def total(self) -> FileAccount:
    """The accounts of all files, summed."""
    total = FileAccount()
    for account in self.files.values():
      for name in ('lines', 'header', 'blank', 'record_lines', 'records', 'kept'):
        setattr(total, name, getattr(total, name) + getattr(account, name))
      total.skipped.update(account.skipped)
    return total

  def _listed(self, max_files: int) -> Dict[str, FileAccount]:
    """Every file's account, or past `max_files` files (a LibriSpeech split has a transcript
    file per chapter) those that skipped a record."""
    if len(self.files) <= max_files:
      return self.files
    return {path: account for path, account in self.files.items() if account.skipped}

  def as_dict(self, max_files: int = 20) -> dict:
    """What was read, as `summary.json` stores it: the files read, their summed account, each
    file's (past `max_files` files, those that skipped a record), and the problems by reason.

    Args:
      max_files: list every file's account up to this many files.
    """
    return {'files_read': len(self.files), 'total': self.total().as_dict(),
            'files': {path: account.as_dict() for path, account in self._listed(max_files).items()},
            'problems': dict(self.counts.most_common())}

  def lines(self, max_files: int = 20) -> List[str]:
    """A line per file (`path: counts`; past `max_files` files, the total and the files that
    skipped a record), then the problems that are no record of a file.

    Args:
      max_files: describe every file up to this many files.
    """
    described = [f'{path}: {account}' for path, account in self._listed(max_files).items()]
    if len(self.files) > max_files:
      described.insert(0, f'{len(self.files):,} files: {self.total()}')
    if self._elsewhere:
      described.append('skipped: ' + ', '.join(f'{n:,} x {reason}'
                                               for reason, n in self._elsewhere.most_common()))
    return described

  def warn_if_skipped(self, what: str) -> None:
    """Logs a warning naming what was skipped, if anything was: a skipped record is never
    silent.

    Args:
      what: what was read, for the message (e.g. "the training split").
    """
    if not self.problems:
      return
    message = (f'Reading {what} skipped {len(self.problems):,} record(s): '
               f'{"; ".join(self.lines())}.')
    if message not in _WARNED:
      _WARNED.add(message)
      logging.warning(message)

  def __str__(self) -> str:
    if not self.problems:
      return 'no problems'
    return '; '.join(f'{n} x {reason}' for reason, n in self.counts.most_common())


def read_text(path: str, *, latin1_fallback: bool = False) -> str:
  """The file at `path` as text: UTF-8 (a leading byte-order mark dropped).

  Args:
    path: the file.
    latin1_fallback: read a file that is not valid UTF-8 as latin-1 (every byte is a
      character), with a warning naming it, instead of refusing it.

  Returns:
    The text.

  Raises:
    ValueError: naming `path`, if it cannot be read, or is not UTF-8 without the fallback.
  """
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise ValueError(f'{path}: cannot read: {e.strerror or e}.') from e
  try:
    return data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data.count(b'\n', 0, e.start) + 1
    where = f'{path}:{line}'
    if not latin1_fallback:
      raise ValueError(f'{where}: not UTF-8 text ({e.reason} at byte {e.start}).') from e
    logging.warning('%s: not UTF-8 (%s at byte %d); read as latin-1.', where, e.reason, e.start)
    return data.decode('latin-1')


def split_lines(text: str) -> List[str]:
  """The lines of `text`, without their line breaks (`\\n` or `\\r\\n`).

  Not `str.splitlines`, which also breaks at form feeds, `\\x85` and other characters that may
  sit inside a field. A last line without a line break is a line; the empty text has none.

  Args:
    text: the file's text.
  """
  lines = text.split('\n')
  if lines[-1] == '':
    lines.pop()
  return [line[:-1] if line.endswith('\r') else line for line in lines]


@dataclasses.dataclass
class Table:
  """The well-formed rows of a delimited table (`read_table`).

  Attributes:
    path: the file.
    columns: the header's column names (stripped), or None for a table without a header.
    rows: (line where the row starts, its fields) of every well-formed, non-blank row; their
      account's `kept` and `skipped` are the caller's to count (`ReadReport.keep`/`skip`).
  """
  path: str
  columns: Optional[List[str]]
  rows: List[Tuple[int, List[str]]]

  def field(self, row: Sequence[str], column: str) -> str:
    """The value of `column` in `row` (a row of `rows`).

    Args:
      row: the fields.
      column: a column of the header.
    """
    return row[self.columns.index(column)]


def check_malformed(malformed: str) -> None:
  """Checks a reader's `malformed` argument.

  Args:
    malformed: one of `MALFORMED`.

  Raises:
    ValueError: naming the argument.
  """
  if malformed not in MALFORMED:
    raise ValueError(f'`malformed` must be one of {MALFORMED}, got {malformed!r}.')


def read_table(path: str, report: ReadReport, *, delimiter: str = '\t',
               header: Union[bool, Callable[[List[str]], bool]] = True,
               required: Sequence[str] = (), malformed: str = 'error',
               latin1_fallback: bool = False) -> Table:
  """Reads a delimited table whole, counting every line in `report`.

  A tab-separated table has no quoting (the IANA text/tab-separated-values format: a field ends
  at a tab, a row at a line break), so a text that starts with `"` is read as written; any other
  delimiter follows RFC 4180 (a field may be quoted, a quote inside it doubled). A row with
  another number of fields than the header, or a field that still holds a line break (in CSV, a
  quote left open joins the lines after it into one field), is malformed.

  Args:
    path: the file.
    report: where its account goes.
    delimiter: one character; a tab reads without quoting, anything else as RFC 4180 CSV.
    header: True if the first non-blank row is a header, False if there is none, or a test of
      the first non-blank row's fields that says whether it is one.
    required: columns the header must have, each once.
    malformed: "error" refuses a malformed row (another number of fields than the header, or
      than the first row without a header; a field holding a line break); "skip" skips it,
      counted in the account.
    latin1_fallback: as in `read_text`.

  Returns:
    The `Table`.

  Raises:
    ValueError: naming the file (and line) for an unreadable file, no header, missing or
      repeated required columns, or a quote RFC 4180 cannot parse (past which no row can be
      trusted, so it is refused even with `malformed="skip"`).
    MalformedRowError: naming the file and line of a malformed row, with `malformed="error"`.
  """
  check_malformed(malformed)
  if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"':
    raise ValueError(f'`delimiter` must be one character other than a quote or a line break, '
                     f'got {delimiter!r}.')
  lines = split_lines(read_text(path, latin1_fallback=latin1_fallback))
  account = report.account(path)
  account.lines += len(lines)
  columns, rows, first, width = None, [], True, None
  for start, end, fields in _rows(path, lines, delimiter):
    if not any(field.strip() for field in fields):
      account.blank += end - start + 1
      continue
    if first and header and (header is True or header(fields)):
      first = False
      account.header += end - start + 1
      columns = [field.strip() for field in fields]
      width = len(columns)
      _check_columns(path, start, columns, required)
      continue
    first = False
    account.record_lines += end - start + 1
    account.records += 1
    if width is None:
      width = len(fields)  # no header: the first row sets the width
    spans = f' (the row spans lines {start}-{end}: a quote left open?)' if end > start else ''
    reason = detail = None
    if len(fields) != width:
      reason = 'malformed row: wrong number of fields'
      detail = (f'{len(fields)} fields, not {width} as in the '
                f'{"header" if columns is not None else "first row"}{spans}')
    elif any('\n' in field or '\r' in field for field in fields):
      reason = 'malformed row: a field holds a line break'
      detail = f'a field holds a line break{spans}'
    if reason is not None:
      if malformed == 'error':
        raise MalformedRowError(f'{path}:{start}: malformed row: {detail}.')
      report.skip(path, start, reason, strict=False)
      continue
    rows.append((start, fields))
  if header is True and columns is None:
    raise ValueError(f'{path}: no header (the file has no non-blank line).')
  return Table(path, columns, rows)


def _rows(path: str, lines: Sequence[str], delimiter: str
          ) -> Iterable[Tuple[int, int, List[str]]]:
  """(first line, last line, fields) of each row: a line each without quoting; as RFC 4180
  reads them (a quoted field may span lines) otherwise."""
  if delimiter == '\t':
    for number, line in enumerate(lines, start=1):
      yield number, number, line.split('\t')
    return
  # The lines with their breaks back, so a quoted field keeps the line breaks it spans.
  reader = csv.reader((f'{line}\n' for line in lines), delimiter=delimiter, strict=True)
  start = 1
  try:
    for fields in reader:
      yield start, reader.line_num, fields
      start = reader.line_num + 1
  except csv.Error as e:
    # Refused even with malformed="skip": past a quote it cannot parse, no row can be trusted.
    raise ValueError(f'{path}:{start}: malformed row: {e} (RFC 4180 quoting: a quote inside a '
                     'quoted field is doubled).') from e


def _check_columns(path: str, line: int, columns: List[str], required: Sequence[str]) -> None:
  missing = [column for column in required if column not in columns]
  if missing:
    raise ValueError(f'{path}:{line}: missing column(s) {", ".join(missing)} (columns present: '
                     f'{", ".join(columns) or "none"}).')
  repeated = [column for column in required if columns.count(column) > 1]
  if repeated:
    raise ValueError(f'{path}:{line}: column(s) {", ".join(repeated)} appear more than once in '
                     'the header.')
