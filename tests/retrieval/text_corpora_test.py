"""Readers of labelled text corpora and `LabelledTexts` (their splits: `partitions_test`)."""

import dataclasses
import os
import re
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff import reading
from fedasr_tff import retrieval
from fedasr_tff.retrieval import data as data_lib
from fedasr_tff.retrieval import retriever_config


def _data(labels, class_names=('a', 'b', 'c'), clients=None):
  return retrieval.LabelledTexts(tuple(f'text {i}' for i in range(len(labels))),
                                 np.array(labels), tuple(class_names),
                                 None if clients is None else tuple(clients))


class _FilesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # absltest's create_tempdir needs parsed flags, which pytest does not give it.
    self.dir = self.enterContext(tempfile.TemporaryDirectory())

  def path(self, *names):
    return os.path.join(self.dir, *names)

  def write(self, name, content, encoding='utf-8'):
    mode, kwargs = ('wb', {}) if isinstance(content, bytes) else ('w', {'encoding': encoding,
                                                                       'newline': ''})
    with open(self.path(name), mode, **kwargs) as f:
      f.write(content)
    return self.path(name)


class LabelledTextsTest(absltest.TestCase):

  def test_fields_are_coerced_and_labels_frozen(self):
    labels = np.array([1, 0, 1], np.int64)
    data = retrieval.LabelledTexts(['x', 'y', 'z'], labels, ['neg', 'pos'], ['c1', 'c2', 'c1'])
    self.assertEqual(data.texts, ('x', 'y', 'z'))
    self.assertEqual(data.class_names, ('neg', 'pos'))
    self.assertEqual(data.clients, ('c1', 'c2', 'c1'))
    self.assertEqual(data.labels.dtype, np.int32)
    self.assertLen(data, 3)
    self.assertEqual(data.num_classes, 2)
    labels[0] = 0  # the caller's array is not shared
    np.testing.assert_array_equal(data.labels, [1, 0, 1])
    with self.assertRaises(ValueError):
      data.labels[0] = 0
    self.assertEqual(data, retrieval.LabelledTexts(('x', 'y', 'z'), [1, 0, 1], ('neg', 'pos'),
                                                   ('c1', 'c2', 'c1')))
    self.assertNotEqual(data, retrieval.LabelledTexts(('x', 'y', 'z'), [1, 1, 1], ('neg', 'pos'),
                                                      ('c1', 'c2', 'c1')))
    self.assertEqual(hash(data), hash(retrieval.LabelledTexts(*map(tuple, (
        data.texts, data.labels.tolist(), data.class_names, data.clients)))))
    self.assertEqual(repr(data), 'LabelledTexts(3 texts, 2 classes, 2 clients)')

  def test_subset_keeps_class_names_and_clients(self):
    data = _data([0, 1, 2, 1], clients=['p', 'q', 'r', 's'])
    part = data.subset(np.array([3, 1]))
    self.assertEqual(part.texts, ('text 3', 'text 1'))
    np.testing.assert_array_equal(part.labels, [1, 1])
    self.assertEqual(part.class_names, ('a', 'b', 'c'))  # class 0 and 2 have no example left
    self.assertEqual(part.clients, ('s', 'q'))
    self.assertLen(data.subset([]), 0)
    self.assertIsNone(_data([0, 1]).subset([1]).clients)

  def test_inconsistent_fields_are_named(self):
    for kwargs, message in (
        (dict(labels=[0]), r'`labels` \(1\) and `texts` \(2\)'),
        (dict(clients=('c',)), r'`clients` \(1\) and `texts` \(2\)'),
        (dict(labels=[0, 2]), r'`labels` must lie in \[0, 2\)'),
        (dict(labels=[0, -1]), r'`labels` must lie in \[0, 2\)'),
        (dict(labels=[0.0, 1.0]), '`labels` must be a 1-D array of integers'),
        (dict(class_names=('a', 'a')), '`class_names` must be distinct'),
        (dict(class_names='ab'), '`class_names` must be a sequence of strings'),
        (dict(texts=('x', 3)), '`texts` must hold strings, got 3 at index 1'),
    ):
      fields = dict(texts=('x', 'y'), labels=[0, 1], class_names=('a', 'b'))
      fields.update(kwargs)
      with self.assertRaisesRegex(ValueError, message):
        retrieval.LabelledTexts(**fields)

  def test_subset_indices_are_checked(self):
    data = _data([0, 1, 2])
    with self.assertRaisesRegex(ValueError, r'`indices` must lie in \[0, 3\)'):
      data.subset([0, 3])
    with self.assertRaisesRegex(ValueError, '`indices` must be a 1-D array of integers'):
      data.subset([0.0])


class FortunesTest(_FilesTest):

  def make_directory(self):
    self.write('zen', '\n  First zen entry.\n%\n%\nSecond\n\tzen entry\n%\n')
    self.write('art', 'Art one.\r\n%\r\n%DCL-MEM-BAD is not a separator\r\n%  \r\nArt three.')
    self.write('art.dat', bytes(range(256)))  # strfile's binary index
    os.symlink('art', self.path('art.u8'))
    os.symlink('missing', self.path('dangling'))
    self.write('.hidden', 'Not a category.\n%\n')
    os.mkdir(self.path('off'))
    self.write(os.path.join('off', 'rude'), 'Offensive.\n%\n')
    # Not valid UTF-8; read as latin-1 (0x92 stays U+0092, where cp1252 has a quote).
    self.write('latin', 'Caf\xe9 cr\xe8me.\n%\nna\xefve \x92\n%\n', encoding='latin-1')

  def test_reads_categories_entries_and_encodings(self):
    self.make_directory()
    data = retrieval.read_fortunes(self.dir)
    self.assertEqual(data.class_names, ('art', 'latin', 'zen'))
    self.assertEqual(data.texts, ('Art one.', '%DCL-MEM-BAD is not a separator', 'Art three.',
                                  'Café crème.', 'naïve \x92', 'First zen entry.',
                                  'Second\n\tzen entry'))
    np.testing.assert_array_equal(data.labels, [0, 0, 0, 1, 1, 2, 2])
    self.assertIsNone(data.clients)

  def test_categories_max_chars_and_min_entries(self):
    self.make_directory()
    data = retrieval.read_fortunes(self.dir, ['zen', 'art'], max_chars=10)
    self.assertEqual(data.class_names, ('art',))  # zen's entries are all longer
    self.assertEqual(data.texts, ('Art one.', 'Art three.'))
    self.assertEqual(retrieval.read_fortunes(self.dir, min_entries=3).class_names, ('art',))
    data = retrieval.read_fortunes(self.dir, max_chars=12, min_entries=2)
    self.assertEqual(data.class_names, ('art', 'latin'))
    np.testing.assert_array_equal(data.labels, [0, 0, 1, 1])
    with self.assertRaisesRegex(ValueError, re.escape(f'{self.dir}: no category has '
                                                      '`min_entries` = 4')):
      retrieval.read_fortunes(self.dir, min_entries=4)

  def test_every_line_is_counted_and_what_the_arguments_leave_out_is_counted(self):
    self.make_directory()
    report = reading.ReadReport()
    data = retrieval.read_fortunes(self.dir, max_chars=12, min_entries=2, report=report)
    self.assertLen(data, 4)
    zen, art = report.files[self.path('zen')], report.files[self.path('art')]
    # zen: 7 lines; a blank entry before `%` (line 1 is blank inside entry 1), `%`, an empty
    # entry, `%`; two entries, both longer than 12 characters: its category is dropped.
    self.assertEqual((zen.lines, zen.records, zen.kept), (7, 2, 0))
    self.assertEqual(dict(zen.skipped), {'longer than max_chars=12': 2})
    self.assertEqual((art.lines, art.records, art.kept, art.blank), (5, 3, 2, 2))
    self.assertEqual(dict(art.skipped), {'longer than max_chars=12': 1})
    for path, account in report.files.items():
      account.check(path)
    report = reading.ReadReport()
    retrieval.read_fortunes(self.dir, min_entries=3, report=report)
    self.assertEqual(dict(report.files[self.path('latin')].skipped),
                     {'its category has fewer than min_entries=3': 2})

  def test_unknown_category_names_it_and_lists_the_categories(self):
    self.make_directory()
    for name in ('off', 'art.dat', 'rude', '.hidden', 'dangling'):
      with self.assertRaisesRegex(ValueError, re.escape(
          f"`categories`: no category '{name}' in {self.dir}; the categories are art, latin, "
          'zen.')):
        retrieval.read_fortunes(self.dir, ['art', name])
    with self.assertRaisesRegex(ValueError, r"got the string 'art' \(use \['art'\]\)"):
      retrieval.read_fortunes(self.dir, 'art')
    with self.assertRaisesRegex(ValueError, '`categories` must name at least one'):
      retrieval.read_fortunes(self.dir, [])

  def test_missing_or_empty_directory_says_how_to_install(self):
    missing = self.path('nowhere')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{missing}: no such fortunes directory; `make setup` installs them (the Debian package '
        '`fortunes`).')):
      retrieval.read_fortunes(missing)
    self.write('cookie.dat', b'\0\0\0\2')
    os.mkdir(self.path('off'))
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{self.dir}: no fortune category files; `make setup` installs them (the Debian package '
        '`fortunes`).')):
      retrieval.read_fortunes(self.dir)

  def test_argument_errors_name_the_argument(self):
    self.make_directory()
    for kwargs, name in ((dict(max_chars=0), '`max_chars`'), (dict(max_chars=1.5), '`max_chars`'),
                         (dict(min_entries=0), '`min_entries`')):
      with self.assertRaisesRegex(ValueError, name):
        retrieval.read_fortunes(self.dir, **kwargs)

  def test_installed_debian_package(self):
    data = retrieval.read_fortunes()
    self.assertGreaterEqual(data.num_classes, 20)
    self.assertGreater(len(data), 5000)
    self.assertEqual(list(data.class_names), sorted(data.class_names))
    self.assertNotIn('off', data.class_names)
    self.assertFalse([n for n in data.class_names if n.endswith(('.dat', '.u8'))])
    counts = np.bincount(data.labels, minlength=data.num_classes)
    self.assertLen(counts, data.num_classes)  # every label in [0, num_classes)
    self.assertGreater(counts.min(), 0)
    self.assertTrue(all(text and text == text.strip() for text in data.texts))
    short = retrieval.read_fortunes(max_chars=400, min_entries=20)
    self.assertLessEqual(max(len(text) for text in short.texts), 400)
    self.assertGreaterEqual(np.bincount(short.labels).min(), 20)
    self.assertLess(len(short), len(data))


class SmsSpamTest(_FilesTest):

  def test_reads_labels_and_texts(self):
    path = self.write('SMSSpamCollection', 'spam\tWIN a prize!\tCall now\r\n\nham\tOk lar...\n'
                      'ham\t  See you \n\n')
    data = retrieval.read_sms_spam(path)
    self.assertEqual(data.class_names, ('ham', 'spam'))
    self.assertEqual(data.texts, ('WIN a prize!\tCall now', 'Ok lar...', 'See you'))
    np.testing.assert_array_equal(data.labels, [1, 0, 0])

  def test_a_header_line_is_detected_and_skipped(self):
    body = 'ham\tOk lar...\nspam\tWIN a prize\nham\tSee you\n'
    for header in ('Label\tSMS\n', 'v1\tv2\n', '\ncategory\tmessage\n'):
      path = self.write('sms.tsv', header + body)
      with self.assertLogs(level='WARNING') as logs:
        data = retrieval.read_sms_spam(path)
      self.assertEqual(data.class_names, ('ham', 'spam'), header)
      self.assertLen(data, 3)
      self.assertIn(f'{path}:{header.count(chr(10))}: ', logs.output[0])
      self.assertIn('taken as a header line', logs.output[0])
    # A first message of a class of its own is data, and so is a first line whose label recurs.
    for first in ('urgent\tCall me back\n', 'ham\ttext\n'):
      data = retrieval.read_sms_spam(self.write('sms.tsv', first + body))
      self.assertLen(data, 4, first)

  def test_every_line_is_counted_and_malformed_lines_skipped_on_request(self):
    path = self.write('sms.tsv', 'Label\tSMS\nham\tOk\n\nno tab\nspam\t \nham\tWin\tnow\n'
                      'spam\tPrize\n')
    with self.assertRaisesRegex(ValueError, re.escape(f'{path}:4: expected LABEL<TAB>TEXT')):
      retrieval.read_sms_spam(path)
    report = reading.ReadReport()
    with self.assertLogs(level='WARNING'):  # the header line
      data = retrieval.read_sms_spam(path, report=report, malformed='skip')
    self.assertEqual(data.texts, ('Ok', 'Win\tnow', 'Prize'))
    account = report.files[path]
    account.check(path)
    self.assertEqual((account.lines, account.header, account.blank, account.records,
                      account.kept), (7, 1, 1, 5, 3))
    self.assertEqual(dict(account.skipped), {'no tab': 1, 'empty text': 1})
    self.assertEqual(report.problems, [(f'{path}:4', 'no tab'), (f'{path}:5', 'empty text')])

  def test_bad_lines_name_file_and_line(self):
    for content, message in (('ham\tfine\n\nno tab here\n', ':3: expected LABEL<TAB>TEXT'),
                             ('ham\tfine\n\tno label\n', ':2: empty label'),
                             ('ham\tfine\nspam\t  \n', ':2: empty text')):
      path = self.write('sms.txt', content)
      with self.assertRaisesRegex(ValueError, re.escape(path + message)):
        retrieval.read_sms_spam(path)
    path = self.write('empty.txt', '\n\n')
    with self.assertRaisesRegex(ValueError, re.escape(f'{path}: no examples.')):
      retrieval.read_sms_spam(path)
    with self.assertRaisesRegex(ValueError, re.escape(f'{self.path("none.txt")}: cannot read')):
      retrieval.read_sms_spam(self.path('none.txt'))


class AgNewsTest(_FilesTest):

  _ROWS = ('"3","Wall St. Bears Claw Back","Reuters - Short-sellers, Wall Street\'s\\ndwindling"\n'
           '"4","Title, with comma","It\'s #39;fine#39; \\n ok"\n'
           '1,"A ""quoted"" title",desc\n')

  def test_reads_canonical_rows(self):
    data = retrieval.read_ag_news(self.write('train.csv', self._ROWS))
    self.assertEqual(data.class_names, ('World', 'Sports', 'Business', 'Sci/Tech'))
    self.assertEqual(data.class_names, retrieval.AG_NEWS_CLASSES)
    self.assertEqual(data.texts, (
        "Wall St. Bears Claw Back Reuters - Short-sellers, Wall Street's dwindling",
        "Title, with comma It's #39;fine#39;   ok",
        'A "quoted" title desc'))
    np.testing.assert_array_equal(data.labels, [2, 3, 0])

  def test_header_row_is_skipped(self):
    with_header = retrieval.read_ag_news(
        self.write('with_header.csv', '\ufeffClass Index,Title,Description\n' + self._ROWS))
    self.assertEqual(with_header, retrieval.read_ag_news(self.write('train.csv', self._ROWS)))

  def test_every_line_is_counted_and_bad_rows_skipped_on_request(self):
    path = self.write('train.csv', 'Class Index,Title,Description\n' + self._ROWS +
                      '\n5,t,d\n2,"joined\nrows",d\n2, , \n')
    report = reading.ReadReport()
    data = retrieval.read_ag_news(path, report=report, malformed='skip')
    self.assertLen(data, 3)
    account = report.files[path]
    account.check(path)
    self.assertEqual((account.lines, account.header, account.blank, account.records,
                      account.record_lines, account.kept), (9, 1, 1, 6, 7, 3))
    self.assertEqual(dict(account.skipped), {
        'class not 1-4': 1, 'malformed row: a field holds a line break': 1,
        'empty title and description': 1})

  def test_bad_rows_name_file_and_line(self):
    for content, message in ((self._ROWS + '2,"only two"\n',
                              ':4: malformed row: 2 fields, not 3 as in the first row'),
                             (self._ROWS + '\n5,t,d\n', ":5: class must be 1, 2, 3 or 4, got '5'"),
                             (self._ROWS + 'Class,t,d\n', ":4: class must be 1, 2, 3 or 4"),
                             ('0,t,d\n', ":1: class must be 1, 2, 3 or 4, got '0'"),
                             ('2, , \n', ':1: empty title and description')):
      path = self.write('bad.csv', content)
      with self.assertRaisesRegex(ValueError, re.escape(path + message)):
        retrieval.read_ag_news(path)
    path = self.write('header_only.csv', 'Class Index,Title,Description\n')
    with self.assertRaisesRegex(ValueError, re.escape(f'{path}: no examples.')):
      retrieval.read_ag_news(path)


class LabelledTableTest(_FilesTest):

  def test_csv_with_clients(self):
    path = self.write('table.csv', 'id,text,label,user\n1,"hello, world",pos,u2\n'
                      '2,"bye ""now""",neg,u1\n\n3, meh ,pos,u2\n')
    data = retrieval.read_labelled_table(path, client_column='user')
    self.assertEqual(data.texts, ('hello, world', 'bye "now"', 'meh'))
    self.assertEqual(data.class_names, ('neg', 'pos'))
    np.testing.assert_array_equal(data.labels, [1, 0, 1])
    self.assertEqual(data.clients, ('u2', 'u1', 'u2'))
    self.assertIsNone(retrieval.read_labelled_table(path).clients)

  def test_a_tsv_whose_texts_start_with_a_quote_keeps_every_row(self):
    # A public intent corpus's trap: `csv`'s default quoting read a text that starts with `"`
    # as a quoted field and joined the rows after it into one text, silently.
    rows = [(f'"{i} quoted at the start' if i % 5 == 0 else f'plain text {i}', f'class{i % 7}')
            for i in range(200)]
    path = self.write('train.tsv', 'text\tlabel\n' + ''.join(f'{t}\t{c}\n' for t, c in rows))
    report = reading.ReadReport()
    data = retrieval.read_labelled_table(path, report=report)
    self.assertLen(data, 200)
    self.assertEqual(data.texts[0], '"0 quoted at the start')
    self.assertEqual(data.num_classes, 7)
    account = report.files[path]
    account.check(path)
    self.assertEqual((account.lines, account.header, account.records, account.kept), (201, 1,
                                                                                      200, 200))
    self.assertEqual(report.problems, [])

  def test_a_field_with_a_tab_or_a_quote_left_open_is_refused_or_skipped_and_counted(self):
    tsv = self.write('t.tsv', 'text\tlabel\nfine\ta\nhas a\ttab\tb\nno label\t\n')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{tsv}:3: malformed row: 3 fields, not 2 as in the header')):
      retrieval.read_labelled_table(tsv)
    report = reading.ReadReport()
    data = retrieval.read_labelled_table(tsv, report=report, malformed='skip')
    self.assertEqual(data.texts, ('fine',))
    self.assertEqual(dict(report.files[tsv].skipped), {
        'malformed row: wrong number of fields': 1, "empty 'label' (label_column)": 1})
    csv_path = self.write('t.csv', 'text,label\nfine,a\n"open quote,b\nnext,c\nclosed",d\n')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{csv_path}:3: malformed row: a field holds a line break (the row spans lines 3-5')):
      retrieval.read_labelled_table(csv_path)

  def test_delimiter_from_extension_or_argument(self):
    content = 'sentence\tintent\nplay jazz\tmusic\nwake me\talarm\n'
    expected = retrieval.LabelledTexts(('play jazz', 'wake me'), [1, 0], ('alarm', 'music'))
    for name, delimiter in (('t.tsv', None), ('t.TSV', None), ('t.txt', '\t')):
      data = retrieval.read_labelled_table(self.write(name, content), text_column='sentence',
                                           label_column='intent', delimiter=delimiter)
      self.assertEqual(data, expected)
    data = retrieval.read_labelled_table(self.write('t.csv', 'text;label\na,b;x\n'),
                                         delimiter=';')
    self.assertEqual(data.texts, ('a,b',))

  def test_missing_columns_name_file_missing_and_present(self):
    path = self.write('t.csv', 'body,tag\nx,y\n')
    with self.assertRaisesRegex(ValueError, re.escape(
        f'{path}:1: missing column(s) text, label (columns present: body, tag).')):
      retrieval.read_labelled_table(path)
    with self.assertRaisesRegex(ValueError, re.escape('missing column(s) user (columns present')):
      retrieval.read_labelled_table(path, text_column='body', label_column='tag',
                                    client_column='user')

  def test_bad_rows_name_file_and_line(self):
    for content, message in (('text,label,client\nx,a,c1\n\ny,b,\n', ":4: empty 'client'"),
                             ('text,label\nx,a\ny,\n', ":3: empty 'label'"),
                             ('text,label\nx,a\ny,b,extra\n',
                              ':3: malformed row: 3 fields, not 2 as in the header'),
                             ('text,label,text\nx,a,y\n', ':1: column(s) text appear more than')):
      path = self.write('t.csv', content)
      with self.assertRaisesRegex(ValueError, re.escape(path + message)):
        retrieval.read_labelled_table(path, client_column='client' if 'client' in content
                                      else None)
    for content, message in (('', ': no header'), ('text,label\n', ': no examples.')):
      path = self.write('t.csv', content)
      with self.assertRaisesRegex(ValueError, re.escape(path + message)):
        retrieval.read_labelled_table(path)

  def test_argument_errors_name_the_argument(self):
    path = self.write('t.csv', 'text,label\nx,a\n')
    for kwargs, name in ((dict(delimiter='::'), '`delimiter`'),
                         (dict(text_column=''), '`text_column`'),
                         (dict(client_column='label'), '`label_column`, `client_column`')):
      with self.assertRaisesRegex(ValueError, name):
        retrieval.read_labelled_table(path, **kwargs)


class DebianPackagesTest(_FilesTest):

  # `apt-cache dumpavail`'s layout: folded Tag fields, a long description with a ` .` line, a
  # package listed twice, packages with only form tags or no tags, a contrib section.
  _PACKAGES = """Package: astro
Version: 1.0
Maintainer: Sky Team <sky@example.org>
Description: star chart
Tag: field::astronomy, interface::x11, role::program,
 use::viewing
Section: science

Package: astro-doc
Maintainer: Sky Team <sky@example.org>
Description: star chart (documentation)
 A long description.
 .
 Second paragraph.
Tag: field::astronomy, made-of::html, role::documentation
Section: doc

Package: astro
Version: 0.9
Maintainer: Someone Else <else@example.org>
Description: an older star chart
Tag: game::toys
Section: games

Package: viewer
Maintainer: Ann <ann@example.org>
Description: image viewer
Tag: interface::x11, role::program, use::viewing, works-with::TODO
Section: contrib/graphics

Package: lib
Maintainer: Ann <ann@example.org>
Description: a library
Tag: role::shared-lib
Section: libs

Package: untagged
Maintainer: Ann <ann@example.org>
Description: no tags
Section: utils
"""

  def test_labels_by_most_specific_topic_tag_with_maintainers_as_clients(self):
    path = self.write('packages.txt', self._PACKAGES)
    with self.assertLogs(level='WARNING') as logs:
      data = retrieval.read_debian_packages(path)
    # astro: field::astronomy and use::viewing are carried by 2 packages each, a tie broken by
    # name; viewer's works-with::TODO is a placeholder; lib has only a form tag.
    self.assertEqual(data.class_names, ('field::astronomy', 'use::viewing'))
    self.assertEqual(data.texts, ('star chart', 'star chart (documentation)\nA long description.'
                                  '\nSecond paragraph.', 'image viewer'))
    self.assertEqual(list(data.labels), [0, 0, 1])
    self.assertEqual(data.clients, ('Sky Team <sky@example.org>',) * 2 +
                     ('Ann <ann@example.org>',))
    self.assertIn('2 of 5 packages have no debtag outside the form facets', logs.output[0])

  def test_every_line_and_stanza_is_counted(self):
    path = self.write('packages.txt', self._PACKAGES)
    report = reading.ReadReport()
    with self.assertLogs(level='WARNING'):
      retrieval.read_debian_packages(path, report=report)
    account = report.files[path]
    account.check(path)
    self.assertEqual((account.lines, account.blank, account.records, account.kept),
                     (self._PACKAGES.count('\n'), 5, 6, 3))
    self.assertEqual(dict(account.skipped), {
        'no debtag outside the form facets': 2,
        'package listed before (read at its first stanza)': 1})
    self.assertIn((f'{path}:18', 'package listed before (read at its first stanza)'),
                  report.problems)

  def test_labels_by_section(self):
    path = self.write('packages.txt', self._PACKAGES)
    data = retrieval.read_debian_packages(path, 'section')
    self.assertEqual(data.class_names, ('doc', 'graphics', 'libs', 'science', 'utils'))
    self.assertLen(data, 5)   # The second `astro` is the same package.

  def test_bad_stanzas_name_file_and_line(self):
    for content, message in (('Package: a\nDescription: x\nno colon here\n', ':3: expected'),
                             (' leading continuation\n', ':1: a continuation line'),
                             ('Package: a\nTag: role::program\n\nPackage: b\n',
                              ':1: the stanza has no Description'),
                             ('Package: a\nDescription: x\nTag: role::program\n',
                              'no package has a debtag label')):
      path = self.write('bad.txt', content)
      with self.assertRaisesRegex(ValueError, re.escape(path) + '.*' + re.escape(message)):
        retrieval.read_debian_packages(path)
    with self.assertRaisesRegex(ValueError, '`label`'):
      retrieval.read_debian_packages(path, 'priority')

  def test_maintainers_are_the_column_split(self):
    path = self.write('packages.txt', self._PACKAGES)
    config = retriever_config.RetrieverConfig(
        corpus='debian_packages', corpus_path=path, package_label='section',
        client_split='column', num_clients=2, min_class_examples=1, test_fraction=0.5,
        output_dir=self.dir)
    self.assertEqual(set(data_lib.load_corpus(config).clients),
                     {'Sky Team <sky@example.org>', 'Ann <ann@example.org>'})


class LoadCorpusTest(_FilesTest):

  def _load(self, **overrides):
    rows = ''.join(f'{name}{i},{name}\n' for name in ('a', 'b') for i in range(10))
    path = self.write('corpus.csv', 'text,label\n' + rows)
    return data_lib.load_corpus(retriever_config.RetrieverConfig(
        corpus='table', corpus_path=path, output_dir=self.dir, min_class_examples=1,
        **overrides))

  def test_max_class_examples_is_a_seeded_sample_kept_in_file_order(self):
    samples = {seed: self._load(max_class_examples=3, data_seed=seed).texts
               for seed in (0, 1, 2)}
    for seed, texts in samples.items():
      self.assertEqual([t[0] for t in texts], ['a'] * 3 + ['b'] * 3, seed)
      self.assertEqual(list(texts), sorted(texts), seed)  # file order
    self.assertEqual(self._load(max_class_examples=3, data_seed=1).texts, samples[1])
    self.assertLen(set(samples.values()), 3)
    # Not the first rows of each class, which a file sorted by date or source would bias.
    self.assertTrue(any(texts != ('a0', 'a1', 'a2', 'b0', 'b1', 'b2')
                        for texts in samples.values()))
    self.assertLen(self._load(max_class_examples=20).texts, 20)

  def test_dirichlet_clients(self):
    self._load()  # writes corpus.csv
    config = retriever_config.RetrieverConfig(
        corpus='table', corpus_path=self.path('corpus.csv'), output_dir=self.dir,
        min_class_examples=1, client_split='dirichlet', dirichlet_alpha=0.5, num_clients=2)

    def tokenizer(texts):  # A stand-in: the split is what is checked.
      return {'token_ids': tf.zeros([len(texts), 2], tf.int32)}

    data = data_lib.prepare_data(config, tokenizer)
    self.assertEqual(data.client_ids, ['client_000', 'client_001'])
    train = np.concatenate(list(data.client_indices.values()))
    self.assertEqual(len(np.unique(train)) + len(data.test), 20)
    with self.assertRaisesRegex(ValueError, '--client_split=dirichlet with --dirichlet_alpha=0.5 '
                                'and --num_clients=30: `num_clients`'):
      data_lib.prepare_data(dataclasses.replace(config, num_clients=30), tokenizer)
    with self.assertRaisesRegex(ValueError, 'dirichlet_alpha'):
      dataclasses.replace(config, dirichlet_alpha=0.0)

  def test_a_separate_test_file(self):
    self._load()  # writes corpus.csv: classes a and b, ten rows each
    test_path = self.write('test.csv', 'label,text\nb,b test\nz,z test\na,a test\nz,z2\n')
    config = retriever_config.RetrieverConfig(
        corpus='table', corpus_path=self.path('corpus.csv'), test_path=test_path,
        output_dir=self.dir, min_class_examples=1, num_clients=2)

    def tokenizer(texts):  # A stand-in: the split is what is checked.
      return {'token_ids': tf.zeros([len(texts), 2], tf.int32)}

    with self.assertLogs(level='WARNING') as logs:
      data = data_lib.prepare_data(config, tokenizer)
    self.assertIn('2 of its examples are of classes the training corpus does not keep',
                  logs.output[0])
    self.assertEqual(data.test_left_out, 2)
    # Every row of the corpus trains; the test set is the test file's rows of known classes,
    # labelled by class name (the columns in another order).
    self.assertEqual(sorted(np.concatenate(list(data.client_indices.values()))), list(range(20)))
    self.assertEqual([data.texts.texts[i] for i in data.test], ['b test', 'a test'])
    self.assertEqual([data.texts.class_names[data.texts.labels[i]] for i in data.test],
                     ['b', 'a'])
    unknown = self.write('unknown.csv', 'text,label\nz test,z\n')
    with self.assertRaisesRegex(ValueError, f"--test_path '{unknown}': none of its 1 examples"):
      data_lib.prepare_data(dataclasses.replace(config, test_path=unknown), tokenizer)
    with self.assertRaisesRegex(ValueError, '--test_path needs a file corpus'):
      retriever_config.RetrieverConfig(output_dir=self.dir, test_path=test_path)

  def test_top_k_defaults_to_three_or_the_classes_and_more_is_refused_before_any_work(self):
    config = retriever_config.RetrieverConfig(output_dir=self.dir)
    self.assertEqual((config.retrieval_k(2), config.retrieval_k(150)), (2, 3))
    self.assertEqual(retriever_config.RetrieverConfig(output_dir=self.dir, top_k=2)
                     .retrieval_k(2), 2)
    with self.assertRaisesRegex(ValueError, 'top_k'):
      retriever_config.RetrieverConfig(output_dir=self.dir, top_k=0)
    self.assertLen(self._load().class_names, 2)
    # The 2-class corpus with --top_k=3: refused before the texts are tokenized (no tokenizer).
    with self.assertRaisesRegex(ValueError, "--top_k=3 is more than the corpus's 2 classes"):
      data_lib.prepare_data(retriever_config.RetrieverConfig(
          corpus='table', corpus_path=self.path('corpus.csv'), output_dir=self.dir,
          min_class_examples=1, top_k=3), tokenizer=None)


if __name__ == '__main__':
  absltest.main()
