"""Input files read whole (`fedasr_tff.reading`): every line accounted for, tables by format."""

import os
import re
import tempfile

from absl.testing import absltest

from fedasr_tff import reading


class _FilesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # absltest's create_tempdir needs parsed flags, which pytest does not give it.
    self.dir = self.enterContext(tempfile.TemporaryDirectory())

  def write(self, name, content, encoding='utf-8'):
    path = os.path.join(self.dir, name)
    with open(path, 'w', encoding=encoding, newline='') as f:
      f.write(content)
    return path

  def assert_balanced(self, report, path, lines):
    account = report.files[path]
    account.check(path)
    self.assertEqual(account.lines, lines)
    self.assertEqual(account.header + account.blank + account.record_lines, lines)


class ReadTableTest(_FilesTest):

  def test_a_tsv_whose_texts_start_with_a_quote_keeps_every_row(self):
    # The trap that `csv`'s default quoting fell into: a stray `"` opening a field joined the
    # rows after it into one "text". A TSV has no quoting: each line is one row.
    rows = [f'{"" if i % 5 else chr(34)}text {i} with a "quote\tclass{i % 3}' for i in range(50)]
    path = self.write('t.tsv', 'text\tlabel\n' + '\n'.join(rows) + '\n')
    report = reading.ReadReport()
    table = reading.read_table(path, report, required=('text', 'label'))
    self.assertLen(table.rows, 50)
    self.assertEqual(table.field(table.rows[0][1], 'text'), '"text 0 with a "quote')
    self.assertEqual([line for line, _ in table.rows], list(range(2, 52)))
    for _ in table.rows:
      report.keep(path)
    self.assert_balanced(report, path, 51)
    self.assertEqual(report.files[path].kept, 50)

  def test_an_embedded_tab_is_refused_naming_the_line(self):
    path = self.write('t.tsv', 'text\tlabel\nfine\ta\nhas a\ttab\tb\n')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{path}:3: malformed row: 3 fields, not 2 as in the header')):
      reading.read_table(path, reading.ReadReport())

  def test_a_csv_quoted_comma_is_one_field_and_a_doubled_quote_one_quote(self):
    path = self.write('t.csv', 'text,label\n"hello, world",a\n"say ""hi""",b\n')
    table = reading.read_table(path, reading.ReadReport(), delimiter=',')
    self.assertEqual([row for _, row in table.rows], [['hello, world', 'a'], ['say "hi"', 'b']])

  def test_a_csv_quote_left_open_is_refused_naming_where_it_opened(self):
    # The quote opened at line 3 is closed by another stray one at line 5: RFC 4180 would join
    # lines 3-5 into one field.
    path = self.write('t.csv', 'text,label\nok,a\n"stray,b\nmore,c\nend" x,d\nlast,e\n')
    with self.assertRaisesRegex(ValueError, re.escape(f'{path}:3: malformed row: ')):
      reading.read_table(path, reading.ReadReport(), delimiter=',')
    path = self.write('u.csv', 'text,label\nok,a\n"stray,b\nmore,c\nend",d\nlast,e\n')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{path}:3: malformed row: a field holds a line break (the row spans lines 3-5')):
      reading.read_table(path, reading.ReadReport(), delimiter=',')

  def test_malformed_rows_skipped_on_request_are_counted_and_the_lines_add_up(self):
    path = self.write('t.csv', 'text,label\nok,a\n"joined,b\nrow",c\n\nextra,d,e\nfine,f\n')
    report = reading.ReadReport()
    table = reading.read_table(path, report, delimiter=',', malformed='skip')
    self.assertEqual([line for line, _ in table.rows], [2, 7])
    for _ in table.rows:
      report.keep(path)
    self.assert_balanced(report, path, 7)
    account = report.files[path]
    self.assertEqual((account.header, account.blank, account.records, account.kept),
                     (1, 1, 4, 2))
    self.assertEqual(dict(account.skipped), {
        'malformed row: a field holds a line break': 1,
        'malformed row: wrong number of fields': 1})
    self.assertEqual(report.problems, [
        (f'{path}:3', 'malformed row: a field holds a line break'),
        (f'{path}:6', 'malformed row: wrong number of fields')])

  def test_header_line_endings_blank_lines_and_a_last_line_without_a_break(self):
    path = self.write('t.tsv', '\ufefftext\tlabel\r\n\r\n  \t \r\nx\ty\r\nlast\tz')
    report = reading.ReadReport()
    table = reading.read_table(path, report)
    self.assertEqual(table.columns, ['text', 'label'])
    self.assertEqual(table.rows, [(4, ['x', 'y']), (5, ['last', 'z'])])
    for _ in table.rows:
      report.keep(path)
    self.assert_balanced(report, path, 5)
    self.assertEqual(report.files[path].blank, 2)

  def test_a_header_test_decides_whether_the_first_row_is_a_header(self):
    path = self.write('t.csv', '1,a\n2,b\n')
    is_header = lambda row: not row[0].isdigit()  # noqa: E731
    self.assertIsNone(reading.read_table(path, reading.ReadReport(), delimiter=',',
                                         header=is_header).columns)
    path = self.write('h.csv', 'n,x\n1,a\n')
    table = reading.read_table(path, reading.ReadReport(), delimiter=',', header=is_header)
    self.assertEqual((table.columns, len(table.rows)), (['n', 'x'], 1))

  def test_bad_files_and_arguments_are_named(self):
    latin1 = self.write('l.tsv', 'text\tlabel\ncaf\xe9\ta\n', encoding='latin-1')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{latin1}:2: not UTF-8 text (invalid continuation byte at byte 14)')):
      reading.read_table(latin1, reading.ReadReport())
    with self.assertLogs(level='WARNING') as logs:
      table = reading.read_table(latin1, reading.ReadReport(), latin1_fallback=True)
    self.assertEqual(table.rows[0][1][0], 'café')
    self.assertIn('read as latin-1', logs.output[0])
    for content, message in (('', ': no header'), ('\n\n', ': no header'),
                             ('a\tb\n', ':1: missing column(s) text (columns present: a, b)'),
                             ('text\ttext\n', ':1: column(s) text appear more than once')):
      path = self.write('bad.tsv', content)
      with self.assertRaisesRegex(ValueError, re.escape(path + message)):
        reading.read_table(path, reading.ReadReport(), required=('text',))
    with self.assertRaisesRegex(ValueError, 'cannot read'):
      reading.read_table(os.path.join(self.dir, 'missing.tsv'), reading.ReadReport())
    with self.assertRaisesRegex(ValueError, '`malformed`'):
      reading.read_table(latin1, reading.ReadReport(), malformed='drop')
    with self.assertRaisesRegex(ValueError, '`delimiter`'):
      reading.read_table(latin1, reading.ReadReport(), delimiter='"')


class ReadReportTest(absltest.TestCase):

  def test_accounts_problems_and_their_description(self):
    report = reading.ReadReport()
    account = report.account('a.tsv')
    account.lines, account.header, account.record_lines, account.records = 4, 1, 3, 3
    report.keep('a.tsv')
    report.skip('a.tsv', 3, 'empty transcript', strict=False)
    report.skip('a.tsv', 4, 'missing audio file', strict=False, where='x.wav')
    report.add('y.flac', 'audio file without transcript', strict=False)
    account.check('a.tsv')
    self.assertEqual(report.problems, [('a.tsv:3', 'empty transcript'),
                                       ('x.wav', 'missing audio file'),
                                       ('y.flac', 'audio file without transcript')])
    self.assertEqual(report.lines(), [
        'a.tsv: 4 lines, 1 header; 1 of 3 records kept, 1 skipped: empty transcript, '
        '1 skipped: missing audio file',
        'skipped: 1 x audio file without transcript'])
    saved = report.as_dict()
    self.assertEqual(saved['files_read'], 1)
    self.assertEqual(saved['total']['skipped'], {'empty transcript': 1, 'missing audio file': 1})
    self.assertEqual(saved['problems']['audio file without transcript'], 1)
    with self.assertRaisesRegex(ValueError, 'a.tsv:5: empty transcript'):
      report.skip('a.tsv', 5, 'empty transcript', strict=True)

  def test_a_reader_that_loses_count_is_caught(self):
    account = reading.FileAccount(lines=3, header=1, record_lines=1, records=1, kept=1)
    with self.assertRaisesRegex(AssertionError, 'lost count'):
      account.check('f')

  def test_many_files_are_summed_and_only_those_with_skips_listed(self):
    report = reading.ReadReport()
    for i in range(30):
      account = report.account(f'{i}.txt')
      account.lines = account.record_lines = account.records = 2
      if i == 7:
        report.skip('7.txt', 1, 'empty transcript', strict=False)
        report.keep('7.txt')
      else:
        account.kept = 2
    saved = report.as_dict()
    self.assertEqual(saved['files_read'], 30)
    self.assertEqual(list(saved['files']), ['7.txt'])
    self.assertEqual((saved['total']['lines'], saved['total']['kept']), (60, 59))
    self.assertEqual(report.lines()[0], '30 files: 60 lines; 59 of 60 records kept, 1 skipped: '
                     'empty transcript')

  def test_a_skip_is_warned_about_once(self):
    report = reading.ReadReport()
    report.skip(os.path.join(tempfile.gettempdir(), 'warned_once.tsv'), 2, 'empty transcript',
                strict=False)
    with self.assertLogs(level='WARNING') as logs:
      report.warn_if_skipped('the test split')
      report.warn_if_skipped('the test split')
    self.assertLen(logs.output, 1)
    self.assertIn('Reading the test split skipped 1 record(s)', logs.output[0])
    with self.assertNoLogs(level='WARNING'):
      reading.ReadReport().warn_if_skipped('nothing')


class SplitLinesTest(absltest.TestCase):

  def test_only_line_feeds_break_lines(self):
    self.assertEqual(reading.split_lines('a\r\nb\x0cc\x85d\ne'), ['a', 'b\x0cc\x85d', 'e'])
    self.assertEqual(reading.split_lines(''), [])
    self.assertEqual(reading.split_lines('\n'), [''])


if __name__ == '__main__':
  absltest.main()
