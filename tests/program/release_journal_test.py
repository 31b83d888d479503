"""Held releases (`fedasr_tff.program.release_journal`)."""

import os
import stat
import tempfile

from absl.testing import absltest

from fedasr_tff.program import release_journal


class ReleaseJournalTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enterContext(tempfile.TemporaryDirectory())
    self.path = os.path.join(self.dir, 'held.json')

  def test_held_outputs_survive_until_released_for_their_checkpoint_only(self):
    journal = release_journal.ReleaseJournal(self.path)
    journal.hold(1, {'server': {'update_norm': 0.5}})
    journal.hold(2, {'eval': {'cer': 0.25}, 'privacy': {'epsilon_run_rdp': float('inf')}},
                 ('round 2/4 | CER 25.0%',))
    journal.hold(3, {})   # Nothing to release that round.
    journal.write(2)
    self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
    # A new process (a resumed run) reads back exactly what was held, for that checkpoint only.
    reader = release_journal.ReleaseJournal(self.path)
    values, lines = reader.pending(2)
    self.assertEqual(values, {1: {'server': {'update_norm': 0.5}},
                              2: {'eval': {'cer': 0.25},
                                  'privacy': {'epsilon_run_rdp': float('inf')}}})
    self.assertEqual(lines, ['round 2/4 | CER 25.0%'])
    self.assertEqual(reader.pending(4), ({}, []))   # A checkpoint that was never saved.
    journal.clear()
    self.assertFalse(os.path.exists(self.path))
    self.assertEqual(journal.held, ({}, []))
    self.assertEqual(reader.pending(2), ({}, []))

  def test_a_corrupt_journal_is_an_error_naming_the_file(self):
    with open(self.path, 'w') as f:
      f.write('{"checkpoint_round": 2, "values": ')
    with self.assertRaisesRegex(ValueError, self.path):
      release_journal.ReleaseJournal(self.path).pending(2)


if __name__ == '__main__':
  absltest.main()
