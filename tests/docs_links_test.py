"""Every relative link and anchor in README.md and docs/*.md resolves.

A link to a file must name an existing file or folder (relative to the page; a leading `/` is the
repository root). An anchor, `#name` or `page.md#name`, must match a heading of the target page
under GitHub's rules: the heading's text lower-cased, every character that is not a letter, digit,
underscore, hyphen or space dropped, spaces made hyphens; a repeated heading gets -1, -2, ...
External links (http, https, mailto) are not fetched. Code fences and inline code are not read.

No file of the project (code, tests, docs, build files) cites an issue by number: the tracker is
not in the repository, so such a reference points nowhere; history stays in git.
"""

import os
import pathlib
import re
import tempfile
import unicodedata
import urllib.parse

from absl.testing import absltest

# README.md is a symlink under Bazel's runfiles: its real path is the source tree, which holds
# every file a page may link to, not only the pages this test declares as data.
_ROOT = pathlib.Path(os.path.realpath(pathlib.Path(__file__).resolve().parent.parent / 'README.md')
                     ).parent
_README_MAX_LINES = 200  # results and new sections go to docs/, not the README

_FENCE = re.compile(r'^\s*(```|~~~)')
_HEADING = re.compile(r'^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$')
_INLINE_CODE = re.compile(r'(`+).*?\1')
_LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')
_REFERENCE = re.compile(r'^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$')
_HTML_TARGET = re.compile(r'<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*"([^"]*)"', re.IGNORECASE)
_HTML_ANCHOR = re.compile(r'<a\b[^>]*?\b(?:name|id)\s*=\s*"([^"]*)"', re.IGNORECASE)
_EXTERNAL = re.compile(r'^[a-z][a-z0-9+.-]*:', re.IGNORECASE)  # http:, https:, mailto:, ...


def _prose_lines(text: str):
  """(line number, line) outside code fences."""
  fenced = False
  for number, line in enumerate(text.split('\n'), 1):
    if _FENCE.match(line):
      fenced = not fenced
      continue
    if not fenced:
      yield number, line


def slug(heading: str) -> str:
  """GitHub's anchor for a heading's text (before duplicates are numbered)."""
  text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link's text only
  text = text.replace('`', '').replace('*', '').lower()
  kept = ''.join(c for c in text
                 if c in ' -_' or unicodedata.category(c)[0] in 'LMN')
  return kept.replace(' ', '-')


def anchors(text: str) -> set:
  """Every anchor a page defines: its headings' slugs (numbered on repeats) and HTML anchors."""
  seen, found = {}, set()
  for _, line in _prose_lines(text):
    heading = _HEADING.match(line)
    if heading:
      base = slug(heading.group(2))
      count = seen.get(base, 0)
      seen[base] = count + 1
      found.add(base if count == 0 else f'{base}-{count}')
    found.update(_HTML_ANCHOR.findall(line))
  return found


def links(text: str):
  """(line number, target) of every link, image, reference definition and HTML href/src."""
  for number, line in _prose_lines(text):
    reference = _REFERENCE.match(line)
    if reference:
      yield number, reference.group(1)
      continue
    line = _INLINE_CODE.sub('', line)
    for target in _LINK.findall(line) + _HTML_TARGET.findall(line):
      yield number, target


def broken_links(root: pathlib.Path, pages) -> list:
  """'page:line: target: why' for every relative link of `pages` that does not resolve."""
  problems, anchor_cache = [], {}

  def anchors_of(path: pathlib.Path) -> set:
    if path not in anchor_cache:
      anchor_cache[path] = anchors(path.read_text(encoding='utf-8'))
    return anchor_cache[path]

  for page in pages:
    page = pathlib.Path(page)
    for number, target in links(page.read_text(encoding='utf-8')):
      where = f'{page.relative_to(root)}:{number}: {target}'
      if not target:
        problems.append(f'{where}: empty link')
        continue
      if _EXTERNAL.match(target) or target.startswith('//'):
        continue
      path_part, _, fragment = target.partition('#')
      path_part = urllib.parse.unquote(path_part.split('?')[0])
      if not path_part:
        destination = page
      elif path_part.startswith('/'):
        destination = root / path_part.lstrip('/')
      else:
        destination = page.parent / path_part
      if not destination.exists():
        problems.append(f'{where}: no such file {destination.resolve().relative_to(root)}'
                        if destination.resolve().is_relative_to(root)
                        else f'{where}: outside the repository')
        continue
      if fragment and destination.is_file() and destination.suffix.lower() == '.md':
        if urllib.parse.unquote(fragment) not in anchors_of(destination):
          problems.append(f'{where}: no heading with anchor #{fragment} in '
                          f'{destination.resolve().relative_to(root)}')
  return problems


# The word issue or issues, then a number ("#" optional), in any case.
_ISSUE_NUMBER = re.compile(r'\bissues?\s*#?[0-9]', re.IGNORECASE)
_PROJECT_SUFFIXES = {'.py', '.md', '.sh', '.bzl', '.toml', '.in', '.cfg', '.txt', '.json'}
_PROJECT_NAMES = {'BUILD', 'WORKSPACE', 'Makefile', '.bazelrc', 'run'}


def _project_files(root: pathlib.Path):
  """The project's own text files under `root`: not the virtualenvs, Bazel's output links,
  caches or a run's output."""
  for folder, folders, files in os.walk(root):
    folders[:] = sorted(name for name in folders
                        if (not name.startswith('.') or name == '.ci') and
                        not name.startswith(('bazel-', 'demo_output')) and
                        name != '__pycache__')
    for name in sorted(files):
      path = pathlib.Path(folder) / name
      if path.suffix in _PROJECT_SUFFIXES or name in _PROJECT_NAMES:
        yield path


def issue_numbers(root: pathlib.Path) -> list:
  """'path:line: text' of every line of a project file that cites an issue by number."""
  found = []
  for path in _project_files(root):
    try:
      text = path.read_text(encoding='utf-8')
    except (UnicodeDecodeError, OSError):
      continue
    for number, line in enumerate(text.split('\n'), 1):
      if _ISSUE_NUMBER.search(line):
        found.append(f'{path.relative_to(root)}:{number}: {line.strip()}')
  return found


def _pages(root: pathlib.Path) -> list:
  return [root / 'README.md'] + sorted((root / 'docs').glob('*.md'))


class SlugTest(absltest.TestCase):

  def test_github_rules(self):
    self.assertEqual(slug('Security: what a run exposes, and to whom'),
                     'security-what-a-run-exposes-and-to-whom')
    self.assertEqual(slug("Past one machine: TFF's distributed runtime"),
                     'past-one-machine-tffs-distributed-runtime')
    self.assertEqual(slug('Evidence (real runs)'), 'evidence-real-runs')
    self.assertEqual(slug('`--mixed` and dga_rl, σ_DP'), '--mixed-and-dga_rl-σ_dp')
    self.assertEqual(slug('See [the docs](docs/x.md)'), 'see-the-docs')

  def test_repeated_headings_are_numbered_and_fences_skipped(self):
    text = '# A\n## Evidence\n```sh\n# not a heading\n```\n## Evidence\n### Evidence\n'
    self.assertEqual(anchors(text), {'a', 'evidence', 'evidence-1', 'evidence-2'})


class CheckerTest(absltest.TestCase):
  """The checker finds what it should, on pages written here."""

  def test_planted_broken_links_are_reported(self):
    with tempfile.TemporaryDirectory() as folder:
      root = pathlib.Path(folder)
      (root / 'docs').mkdir()
      (root / 'docs' / 'a.md').write_text(
          '# A\n\n## Same\n\n## Same\n\n`[not a link](nowhere.md)`\n\n'
          '```\n[not a link](nowhere.md)\n```\n')
      (root / 'README.md').write_text(
          '# Top\n\n[fine](docs/a.md) [fine](docs/a.md#same-1) [fine](#top) '
          '[web](https://example.com/nowhere) ![img](docs/a.md)\n'
          '[missing](docs/b.md) [bad anchor](docs/a.md#same-2) [bad local](#nothing)\n'
          '<a href="docs/c.md">html</a>\n\n[ref]: docs/d.md\n')
      problems = broken_links(root, _pages(root))
    self.assertLen(problems, 5, problems)
    for expected in ('README.md:4: docs/b.md: no such file docs/b.md',
                     'README.md:4: docs/a.md#same-2: no heading with anchor #same-2',
                     'README.md:4: #nothing: no heading with anchor #nothing',
                     'README.md:5: docs/c.md: no such file',
                     'README.md:7: docs/d.md: no such file'):
      self.assertTrue(any(p.startswith(expected) for p in problems), (expected, problems))


class IssueNumbersTest(absltest.TestCase):

  def test_planted_references_are_found_and_other_uses_are_not(self):
    issue = 'issue'  # the planted texts are built, so that this file cites none itself
    with tempfile.TemporaryDirectory() as folder:
      root = pathlib.Path(folder)
      (root / 'pkg').mkdir()
      (root / 'pkg' / 'a.py').write_text(f'x = 1  # as {issue} 36 asked\n# the {issue} at hand\n')
      (root / 'docs').mkdir()
      (root / 'docs' / 'b.md').write_text(f'Fixed in {issue.title()}s 12 and 13.\n'
                                          f'see {issue} #4\n')
      (root / '.venv').mkdir()
      (root / '.venv' / 'c.py').write_text(f'# {issue} 1 of a dependency\n')
      (root / 'BUILD').write_text(f'# no number: an {issue}\n')
      self.assertEqual(issue_numbers(root), [
          f'docs/b.md:1: Fixed in {issue.title()}s 12 and 13.', f'docs/b.md:2: see {issue} #4',
          f'pkg/a.py:1: x = 1  # as {issue} 36 asked'])

  def test_no_project_file_cites_an_issue_number(self):
    # The walk reaches the library, the tests and the docs (under Bazel too: the source tree).
    read = set(_project_files(_ROOT))
    for path in ('fedasr_tff/__init__.py', 'tests/docs_links_test.py', 'docs/testing.md'):
      self.assertIn(_ROOT / path, read)
    found = issue_numbers(_ROOT)
    self.assertEmpty(found, 'cite what the change did, not its issue: the tracker is not in '
                     'the repository:\n' + '\n'.join(found))


class DocsLinksTest(absltest.TestCase):

  def test_pages_exist(self):
    self.assertTrue((_ROOT / 'README.md').is_file())
    self.assertGreater(len(_pages(_ROOT)), 1, 'no docs/*.md pages found')

  def test_every_relative_link_and_anchor_resolves(self):
    problems = broken_links(_ROOT, _pages(_ROOT))
    self.assertEmpty(problems, 'broken links:\n' + '\n'.join(problems))

  def test_readme_stays_short(self):
    lines = (_ROOT / 'README.md').read_text(encoding='utf-8').count('\n')
    self.assertLessEqual(lines, _README_MAX_LINES,
                         'README.md grew past its limit: put results and new sections in a '
                         'docs/ page and link it.')


if __name__ == '__main__':
  absltest.main()
