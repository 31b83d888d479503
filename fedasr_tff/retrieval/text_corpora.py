"""Labelled text corpora for the classifier-as-retriever, one reader per layout.

The classifier-as-retriever (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning
with Ad-hoc Adapter Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever",
webAI 2025, Sec. 3.2) treats each class as one retrievable document, so a corpus is texts with a
class label each (`LabelledTexts`), read by one reader per layout. Every file is decoded as UTF-8
(a leading byte-order mark is dropped), or, with a warning, as latin-1 when it is not valid UTF-8.
Every reader counts what became of each line in a `reading.ReadReport` it is given. A malformed
line or row is an error naming the file and line, or, with `malformed="skip"`, skipped and
counted; what a reader leaves out by design (blank lines, what `read_fortunes`' arguments filter
out, a package listed twice) is counted too. Splits return sorted int64 index arrays into the
corpus (`LabelledTexts.subset` applies them).
"""

import collections
import dataclasses
import os
import stat
from typing import Iterator
from typing import List
from typing import Optional
from typing import Sequence
from typing import Tuple

from absl import logging
import numpy as np

from fedasr_tff import reading
from fedasr_tff import validation

FORTUNES_DIR = '/usr/share/games/fortunes'
AG_NEWS_CLASSES = ('World', 'Sports', 'Business', 'Sci/Tech')
# Files beside the categories in a fortunes directory: strfile's index, and the UTF-8 alias.
_FORTUNES_NOT_CATEGORIES = ('.dat', '.u8')
# Column names a LABEL<TAB>TEXT file's header line uses (lower case): `_is_header`.
_HEADER_NAMES = frozenset({'label', 'labels', 'class', 'category', 'target', 'type', 'tag', 'v1',
                           'text', 'sms', 'message', 'sentence', 'document', 'body', 'content',
                           'v2'})


@dataclasses.dataclass(frozen=True)
class LabelledTexts:
  """Texts with a class label each, and optionally a client id each.

  Attributes:
    texts: the examples.
    labels: int32 [len(texts)], values in [0, len(class_names)); stored read-only.
    class_names: the name of each class (retrievable document), distinct.
    clients: a client id per example, when the source has a client column; else None.

  Sequences are stored as tuples. Two corpora are equal when all four fields are.
  """
  texts: Tuple[str, ...]
  labels: np.ndarray
  class_names: Tuple[str, ...]
  clients: Optional[Tuple[str, ...]] = None

  def __post_init__(self):
    texts = _tuple_of_str('texts', self.texts)
    class_names = _tuple_of_str('class_names', self.class_names)
    if len(set(class_names)) != len(class_names):
      raise ValueError(f'`class_names` must be distinct, got {class_names!r}.')
    labels = np.asarray(self.labels)
    if labels.ndim != 1 or not (labels.size == 0 or np.issubdtype(labels.dtype, np.integer)):
      raise ValueError(f'`labels` must be a 1-D array of integers, got dtype {labels.dtype} and '
                       f'shape {labels.shape}.')
    if len(labels) != len(texts):
      raise ValueError(f'`labels` ({len(labels)}) and `texts` ({len(texts)}) must have the same '
                       'length.')
    if labels.size and (labels.min() < 0 or labels.max() >= len(class_names)):
      raise ValueError(f'`labels` must lie in [0, {len(class_names)}) (one per entry of '
                       f'`class_names`), got values in [{labels.min()}, {labels.max()}].')
    labels = labels.astype(np.int32)  # a copy, so the caller's array cannot change ours
    labels.setflags(write=False)
    clients = self.clients
    if clients is not None:
      clients = _tuple_of_str('clients', clients)
      if len(clients) != len(texts):
        raise ValueError(f'`clients` ({len(clients)}) and `texts` ({len(texts)}) must have the '
                         'same length.')
    object.__setattr__(self, 'texts', texts)
    object.__setattr__(self, 'labels', labels)
    object.__setattr__(self, 'class_names', class_names)
    object.__setattr__(self, 'clients', clients)

  def __len__(self) -> int:
    return len(self.texts)

  def __eq__(self, other) -> bool:
    if not isinstance(other, LabelledTexts):
      return NotImplemented
    return (self.texts == other.texts and self.class_names == other.class_names and
            self.clients == other.clients and np.array_equal(self.labels, other.labels))

  def __hash__(self) -> int:
    return hash((self.texts, self.labels.tobytes(), self.class_names, self.clients))

  def __repr__(self) -> str:
    clients = '' if self.clients is None else f', {len(set(self.clients))} clients'
    return f'LabelledTexts({len(self)} texts, {self.num_classes} classes{clients})'

  @property
  def num_classes(self) -> int:
    """The number of classes, D."""
    return len(self.class_names)

  def subset(self, indices) -> 'LabelledTexts':
    """The examples at some indices.

    Args:
      indices: integer indices into the corpus.

    Returns:
      The examples at `indices`, in that order, with the same `class_names` (a class may have
      no example left).

    Raises:
      ValueError: for indices that are not integers in range.
    """
    indices = _check_indices(indices, len(self))
    return LabelledTexts(texts=tuple(self.texts[i] for i in indices),
                         labels=self.labels[indices],
                         class_names=self.class_names,
                         clients=(None if self.clients is None else
                                  tuple(self.clients[i] for i in indices)))


def _tuple_of_str(name: str, values) -> Tuple[str, ...]:
  if isinstance(values, str):
    raise ValueError(f'`{name}` must be a sequence of strings, got the string {values!r}.')
  values = tuple(values)
  for i, value in enumerate(values):
    if not isinstance(value, str):
      raise ValueError(f'`{name}` must hold strings, got {value!r} at index {i}.')
  return values


def _check_indices(indices, size: int) -> np.ndarray:
  indices = np.asarray(indices)
  if indices.ndim != 1 or not (indices.size == 0 or np.issubdtype(indices.dtype, np.integer)):
    raise ValueError(f'`indices` must be a 1-D array of integers, got dtype {indices.dtype} and '
                     f'shape {indices.shape}.')
  if indices.size and (indices.min() < 0 or indices.max() >= size):
    raise ValueError(f'`indices` must lie in [0, {size}), got values in '
                     f'[{indices.min()}, {indices.max()}].')
  return indices.astype(np.int64)


def _is_fortune_category(directory: str, name: str) -> bool:
  if name.startswith('.') or name.endswith(_FORTUNES_NOT_CATEGORIES):
    return False
  try:
    return stat.S_ISREG(os.stat(os.path.join(directory, name)).st_mode)  # follows symlinks
  except OSError:  # e.g. a dangling symlink
    return False


def _fortune_entries(path: str, report: reading.ReadReport) -> List[Tuple[int, str]]:
  """(line where it starts, text) of each entry of a fortune file: the stripped, non-empty text
  between lines holding only `%`, each line counted in `path`'s account (`%` lines and those of
  an empty entry as blank)."""
  account = report.account(path)
  lines = reading.split_lines(reading.read_text(path, latin1_fallback=True))
  account.lines += len(lines)
  entries, chunk, chunk_start = [], [], 1
  for number, line in enumerate([*lines, '%'], start=1):  # a last entry ends at the file's end
    if line.rstrip() != '%':
      chunk.append(line)
      continue
    text = '\n'.join(chunk).strip()
    if text:
      entries.append((chunk_start, text))
      account.records += 1
      account.record_lines += len(chunk)
    else:
      account.blank += len(chunk)
    account.blank += number <= len(lines)  # the `%` line itself, not the one added at the end
    chunk, chunk_start = [], number + 1
  return entries


def read_fortunes(directory: str = FORTUNES_DIR, categories: Optional[Sequence[str]] = None, *,
                  max_chars: Optional[int] = None, min_entries: int = 1,
                  report: Optional[reading.ReadReport] = None) -> LabelledTexts:
  """The fortunes of a directory, one class per category, classes sorted.

  The Debian package `fortunes` (the data of fortune-mod; `make setup` installs it),
  `/usr/share/games/fortunes/CATEGORY`: one plain text file per category, entries separated by
  lines holding only `%` (the `strfile` format). The class is the category. Beside each category
  sit its `CATEGORY.dat` index (binary, from `strfile`) and `CATEGORY.u8` (a symlink to it);
  those, dot files, subdirectories (`off/`, from `fortunes-off`) and anything that is not a
  regular file are not categories. Entries are kept as written: in Debian's 1:1.99.1-7.3 (43
  categories, 2 to 1251 entries each) some hold backspaces (overstrike, `_<BS>x`) and bells, and
  82 entries appear in two categories.

  Args:
    directory: a directory in the layout of Debian's `fortunes` package.
    categories: category (file) names to read; None reads every category.
    max_chars: entries longer than this (ASCII art, long poems) are skipped; None keeps all.
    min_entries: categories with fewer entries than this, after `max_chars`, are skipped.
    report: where each category file's lines and entries are counted (skipped entries by
      reason); default a new one.

  Returns:
    The `LabelledTexts`.

  Raises:
    ValueError: for a missing directory or category, or no category left.
  """
  if max_chars is not None:
    validation.check_positive_integer('max_chars', max_chars)
  validation.check_positive_integer('min_entries', min_entries)
  report = reading.ReadReport() if report is None else report
  install = "`make setup` installs them (the Debian package `fortunes`)"
  if not os.path.isdir(directory):
    raise ValueError(f'{directory}: no such fortunes directory; {install}.')
  available = sorted(n for n in os.listdir(directory) if _is_fortune_category(directory, n))
  if not available:
    raise ValueError(f'{directory}: no fortune category files; {install}.')
  if categories is None:
    names = available
  else:
    if isinstance(categories, str):
      raise ValueError(f'`categories` must be a sequence of category names, got the string '
                       f'{categories!r} (use [{categories!r}]).')
    names = sorted(set(categories))
    if not names:
      raise ValueError('`categories` must name at least one category, or be None for all.')
    for name in names:
      if name not in available:
        raise ValueError(f'`categories`: no category {name!r} in {directory}; the categories '
                         f'are {", ".join(available)}.')
  texts, labels, class_names = [], [], []
  for name in names:
    path = os.path.join(directory, name)
    entries = []
    for line, entry in _fortune_entries(path, report):
      if max_chars is not None and len(entry) > max_chars:
        report.skip(path, line, f'longer than max_chars={max_chars}', strict=False)
      else:
        entries.append((line, entry))
    if len(entries) < min_entries:
      for line, _ in entries:
        report.skip(path, line, f'its category has fewer than min_entries={min_entries}',
                    strict=False)
      report.account(path).check(path)
      continue
    for _ in entries:
      report.keep(path)
    report.account(path).check(path)
    texts.extend(entry for _, entry in entries)
    labels.extend([len(class_names)] * len(entries))
    class_names.append(name)
  if not class_names:
    raise ValueError(f'{directory}: no category has `min_entries` = {min_entries} entries of at '
                     f'most `max_chars` = {max_chars} characters.')
  return LabelledTexts(tuple(texts), np.array(labels, np.int32), tuple(class_names))


def _from_string_labels(path: str, texts: List[str], names: List[str],
                        clients: Optional[List[str]] = None) -> LabelledTexts:
  if not texts:
    raise ValueError(f'{path}: no examples.')
  class_names = tuple(sorted(set(names)))
  index = {name: i for i, name in enumerate(class_names)}
  return LabelledTexts(tuple(texts), np.array([index[name] for name in names], np.int32),
                       class_names, None if clients is None else tuple(clients))


def read_sms_spam(path: str, *, report: Optional[reading.ReadReport] = None,
                  malformed: str = 'error') -> LabelledTexts:
  """The SMS Spam Collection.

  Almeida, Gomez Hidalgo and Yamakami, "Contributions to the Study of SMS Spam Filtering: New
  Collection and Results", DocEng 2011 (the UCI Machine Learning Repository's
  `SMSSpamCollection`): one `LABEL<TAB>TEXT` line per message. A line's text is everything after
  its first tab.

  A first line such as `Label<TAB>SMS` (the file as some mirrors publish it) is a header and is
  skipped, with a warning: its label is on no other line and one of its fields is a column name.

  Args:
    path: the file.
    report: where the file's lines are counted; default a new one.
    malformed: "error" refuses a line without a tab or with an empty label or text; "skip"
      skips it, counted.

  Returns:
    The `LabelledTexts`; class names from the data, sorted (`('ham', 'spam')` for the published
    file).

  Raises:
    ValueError: naming the line of a malformed message, or for a file with no message.
  """
  reading.check_malformed(malformed)
  report = reading.ReadReport() if report is None else report
  account = report.account(path)
  lines = reading.split_lines(reading.read_text(path, latin1_fallback=True))
  account.lines += len(lines)
  texts, names, numbers = [], [], []
  for line_number, line in enumerate(lines, start=1):
    if not line.strip():
      account.blank += 1
      continue
    account.records += 1
    account.record_lines += 1
    label, tab, text = line.partition('\t')
    label, text = label.strip(), text.strip()
    if not tab:
      reason, detail = 'no tab', 'expected LABEL<TAB>TEXT, found no tab'
    elif not label or not text:
      reason = detail = f'empty {"label" if not label else "text"}'
    else:
      reason = None
    if reason is not None:
      if malformed == 'error':
        raise reading.MalformedRowError(f'{path}:{line_number}: {detail}.')
      report.skip(path, line_number, reason, strict=False)
      continue
    texts.append(text)
    names.append(label)
    numbers.append(line_number)
  if _is_header(names, texts):
    logging.warning('%s:%d: %r taken as a header line and skipped (its label is on no other '
                    'line, and it names a column).', path, numbers[0], f'{names[0]}\t{texts[0]}')
    texts, names = texts[1:], names[1:]
    account.records -= 1
    account.record_lines -= 1
    account.header += 1
  account.kept += len(texts)
  account.check(path)
  return _from_string_labels(path, texts, names)


def _is_header(names: Sequence[str], texts: Sequence[str]) -> bool:
  """Whether a LABEL<TAB>TEXT file's first line is a header (such as `Label<TAB>SMS`): its label
  is on no other line (a header would otherwise be a class of one example) and it or the text is
  a column name (`_HEADER_NAMES`), so a real first message of a rare class is kept."""
  if len(names) < 2 or names[0] in names[1:]:
    return False
  return names[0].lower() in _HEADER_NAMES or texts[0].lower() in _HEADER_NAMES


def _is_integer(field: str) -> bool:
  try:
    int(field)
  except ValueError:
    return False
  return True


def read_ag_news(path: str, *, report: Optional[reading.ReadReport] = None,
                 malformed: str = 'error') -> LabelledTexts:
  """AG News, labels 0-3 for its classes 1-4 (`AG_NEWS_CLASSES`).

  As released by Zhang, Zhao and LeCun, "Character-level Convolutional Networks for Text
  Classification", NeurIPS 2015, arXiv:1509.01626 (`train.csv`, `test.csv`): RFC 4180 CSV rows
  `CLASS,TITLE,DESCRIPTION`, classes 1-4 = World, Sports, Business, Sci/Tech. The text is
  title + ' ' + description, each escaped newline (backslash, `n`) read as a space; HTML entities
  (such as `#39;`) are left as they are. A first row whose class field is not an integer is a
  header and is skipped.

  Args:
    path: the CSV file.
    report: where the file's lines are counted; default a new one.
    malformed: "error" refuses a malformed row (not 3 fields, a field holding a line break, a
      class other than 1-4, an empty title and description); "skip" skips it, counted.

  Returns:
    The `LabelledTexts`.

  Raises:
    ValueError: naming the line of a malformed row, or for a file with no example.
  """
  report = reading.ReadReport() if report is None else report
  table = reading.read_table(path, report, delimiter=',', malformed=malformed,
                             header=lambda row: not _is_integer(row[0]), latin1_fallback=True)
  if table.columns is not None and len(table.columns) != 3:
    raise ValueError(f'{path}: expected 3 columns CLASS,TITLE,DESCRIPTION, the header has '
                     f'{len(table.columns)}.')
  texts, labels = [], []
  for line, row in table.rows:
    label = row[0].strip()
    text = ' '.join(field.strip() for field in row[1:]).replace('\\n', ' ').strip()
    if len(row) != 3:
      reason = 'not 3 fields'
      detail = f'expected 3 fields CLASS,TITLE,DESCRIPTION, found {len(row)}'
    elif label not in ('1', '2', '3', '4'):
      reason, detail = 'class not 1-4', f'class must be 1, 2, 3 or 4, got {row[0]!r}'
    elif not text:
      reason = detail = 'empty title and description'
    else:
      report.keep(path)
      texts.append(text)
      labels.append(int(label) - 1)
      continue
    if malformed == 'error':
      raise reading.MalformedRowError(f'{path}:{line}: {detail}.')
    report.skip(path, line, reason, strict=False)
  report.account(path).check(path)
  if not texts:
    raise ValueError(f'{path}: no examples.')
  return LabelledTexts(tuple(texts), np.array(labels, np.int32), AG_NEWS_CLASSES)


def read_labelled_table(path: str, *, text_column: str = 'text', label_column: str = 'label',
                        client_column: Optional[str] = None, delimiter: Optional[str] = None,
                        report: Optional[reading.ReadReport] = None,
                        malformed: str = 'error') -> LabelledTexts:
  """A table with a header: texts, string labels and, optionally, clients.

  A tab-separated table (`.tsv`, or `delimiter` a tab) has no quoting: a text that starts with
  `"` is read as written. Any other is RFC 4180 CSV: a field may be quoted (a quote inside it
  doubled), so a quoted comma stays in its field (`reading.read_table`). A client column gives a
  natural split over clients (`split_by_client`).

  Args:
    path: the table.
    text_column: the header of the texts.
    label_column: the header of the labels (class names, sorted).
    client_column: the header of a client id per example, or None.
    delimiter: one character; default a tab for a `.tsv` file and a comma otherwise.
    report: where the file's lines are counted; default a new one.
    malformed: "error" refuses a malformed row (another number of fields than the header, a
      field holding a line break, an empty text, label or client id); "skip" skips it, counted.

  Returns:
    The `LabelledTexts`.

  Raises:
    ValueError: for missing or repeated columns, or a malformed row with `malformed="error"`,
      naming the file and line.
  """
  columns = {'text_column': text_column, 'label_column': label_column}
  if client_column is not None:
    columns['client_column'] = client_column
  for name, column in columns.items():
    if not isinstance(column, str) or not column:
      raise ValueError(f'`{name}` must be a non-empty string, got {column!r}.')
  if len(set(columns.values())) != len(columns):
    raise ValueError(f'{", ".join(f"`{n}`" for n in columns)} must be distinct, got '
                     f'{list(columns.values())}.')
  if delimiter is None:
    delimiter = '\t' if os.path.splitext(path)[1].lower() == '.tsv' else ','
  report = reading.ReadReport() if report is None else report
  table = reading.read_table(path, report, delimiter=delimiter, required=list(columns.values()),
                             malformed=malformed, latin1_fallback=True)
  texts, names, clients = [], [], []
  for line, row in table.rows:
    values = {name: table.field(row, column).strip() for name, column in columns.items()}
    empty = [name for name, value in values.items() if not value]
    if empty:
      problem = f'empty {columns[empty[0]]!r} ({empty[0]})'
      if malformed == 'error':
        raise reading.MalformedRowError(f'{path}:{line}: {problem}.')
      report.skip(path, line, problem, strict=False)
      continue
    report.keep(path)
    texts.append(values['text_column'])
    names.append(values['label_column'])
    clients.append(values.get('client_column'))
  report.account(path).check(path)
  return _from_string_labels(path, texts, names, None if client_column is None else clients)


# Debtag facets that say what a package is made of or how it is built or used, not what it is
# about (`read_debian_packages`).
DEBTAG_FORM_FACETS = frozenset({'role', 'interface', 'implemented-in', 'uitoolkit', 'scope',
                                'made-of', 'x11', 'special'})
DEBIAN_LABELS = ('debtag', 'section')


def _deb822_stanzas(path: str, account: reading.FileAccount) -> Iterator[Tuple[int, dict]]:
  """(line where it starts, {field: value}) for each stanza of a Debian control file, each line
  counted in `account` (blank lines between stanzas as blank).

  Stanzas are separated by blank lines; a field is `Name: value`, continued by lines that start
  with a space or tab (joined with newlines, as Debian policy 5.1 writes them).
  """
  lines = reading.split_lines(reading.read_text(path, latin1_fallback=True))
  account.lines += len(lines)
  fields, start, name = {}, None, None
  for line_number, line in enumerate(lines, start=1):
    if not line.strip():
      account.blank += 1
      if fields:
        yield start, fields
      fields, start, name = {}, None, None
      continue
    account.record_lines += 1
    if line[0] in ' \t':
      if name is None:
        raise ValueError(f'{path}:{line_number}: a continuation line outside any field.')
      fields[name] += '\n' + line.strip()
      continue
    name, colon, value = line.partition(':')
    name = name.strip()
    if not colon or not name or ' ' in name:
      raise ValueError(f'{path}:{line_number}: expected `Field: value`, got {line[:60]!r}.')
    if start is None:
      start = line_number
      account.records += 1
    fields[name] = value.strip()
  if fields:
    yield start, fields


def _debian_description(value: str) -> str:
  """A Description field as one text: the synopsis, then the long description's paragraphs
  (its ` .` lines are paragraph breaks)."""
  lines = [line for line in value.split('\n') if line.strip() != '.']
  return '\n'.join(line.strip() for line in lines if line.strip())


def read_debian_packages(path: str, label: str = 'debtag', *,
                         report: Optional[reading.ReadReport] = None) -> LabelledTexts:
  """Debian package descriptions, labelled by debtag or section, with maintainers as clients.

  `apt-cache dumpavail > packages.txt` (or any Debian `Packages` file): one stanza per package
  (Debian policy 5.1). The text is the package's Description (its synopsis, and its long
  description where the file has one; `apt-cache dumpavail` on Debian 12 has synopses only, the
  long ones living in Translation files). The client is the Maintainer field (a person or team
  who uploads its packages: the natural FL client of this corpus). A package listed more than
  once (several versions or architectures) is read once, at its first stanza.

  Labels:
  - `debtag`: the package's most specific debtag (Debian's faceted tags, the `Tag` field) about
    what it is: of its tags outside `DEBTAG_FORM_FACETS` (role, interface, implementation
    language, toolkit, ...) and placeholders (`facet::TODO`), the one the fewest packages of the
    file carry (ties by name).
  - `section`: the archive section (`contrib/` and `non-free/` prefixes dropped): 57 with 20 or
    more packages on Debian 12.
  Packages without such a label (no tag, or only form tags; no Section) are skipped, counted in
  `report` and a warning.

  Args:
    path: the file.
    label: one of `DEBIAN_LABELS`.
    report: where the file's lines and stanzas are counted; default a new one.

  Returns:
    The `LabelledTexts`, class names sorted, with `clients`.

  Raises:
    ValueError: naming the line of a malformed stanza or one without Package or Description, or
      for a file with no labelled package.
  """
  if label not in DEBIAN_LABELS:
    raise ValueError(f'`label` must be one of {DEBIAN_LABELS}, got {label!r}.')
  report = reading.ReadReport() if report is None else report
  packages, seen = [], set()
  for line, fields in _deb822_stanzas(path, report.account(path)):
    for required in ('Package', 'Description'):
      if not fields.get(required, '').strip():
        raise ValueError(f'{path}:{line}: the stanza has no {required} field.')
    if fields['Package'] in seen:
      report.skip(path, line, 'package listed before (read at its first stanza)', strict=False)
      continue
    seen.add(fields['Package'])
    tags = [tag.strip() for tag in fields.get('Tag', '').replace('\n', ' ').split(',')]
    # `facet::TODO` marks a package still to be tagged, not a topic.
    topics = [tag for tag in tags if tag and tag.split('::')[0] not in DEBTAG_FORM_FACETS
              and not tag.endswith('::TODO')]
    packages.append((_debian_description(fields['Description']), topics,
                     fields.get('Section', '').split('/')[-1].strip(),
                     fields.get('Maintainer', '').strip() or '(no maintainer)', line))
  if label == 'debtag':
    carried = collections.Counter(tag for _, topics, *_ in packages for tag in set(topics))
    labels = [min(topics, key=lambda tag: (carried[tag], tag)) if topics else ''
              for _, topics, *_ in packages]
  else:
    labels = [section for _, _, section, *_ in packages]
  kept = [i for i, name in enumerate(labels) if name]
  missing = ('no debtag outside the form facets' if label == 'debtag' else 'no Section')
  for i, name in enumerate(labels):
    if name:
      report.keep(path)
    else:
      report.skip(path, packages[i][4], missing, strict=False)
  report.account(path).check(path)
  if len(kept) < len(packages):
    logging.warning('%s: %d of %d packages have no %s and are skipped.', path,
                    len(packages) - len(kept), len(packages),
                    'debtag outside the form facets' if label == 'debtag' else 'Section')
  if not kept:
    raise ValueError(f'{path}: no package has a {label} label.')
  return _from_string_labels(path, [packages[i][0] for i in kept], [labels[i] for i in kept],
                             [packages[i][3] for i in kept])
