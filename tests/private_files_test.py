"""Owner-only, durable files (`fedasr_tff.private_files`)."""

import os
import stat
import tempfile

from absl.testing import absltest

from fedasr_tff import private_files


class PrivateFilesTest(absltest.TestCase):

  def test_directories_and_files_are_owner_only(self):
    root = self.enterContext(tempfile.TemporaryDirectory())
    existing = os.path.join(root, 'existing')
    os.makedirs(existing, mode=0o755)
    for path in (existing, os.path.join(root, 'new', 'nested')):
      self.assertEqual(private_files.make_private_directory(path), path)
      self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o700)
    path = os.path.join(existing, 'secret.json')
    with private_files.open_private(path) as f:
      f.write('x')
    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
    private_files.fsync_tree(existing)   # Durable, and no error on a tree of files.


if __name__ == '__main__':
  absltest.main()
