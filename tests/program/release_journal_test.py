"""Held releases (`fedasr_tff.program.release_journal`)."""

import asyncio
import os
import stat
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from fedasr_tff.program import npz_state
from fedasr_tff.program import release_journal
from tests.program import damage


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


class LoadLatestTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'checkpoints')
    self.manager = tff.program.FileProgramStateManager(self.dir)
    self.structure = (np.zeros(300, np.float32), np.int64(0))

  def _save(self, *rounds):
    for r in rounds:
      asyncio.run(self.manager.save((np.full(300, r, np.float32), np.int64(r)), r))

  def test_latest_or_none(self):
    self.assertEqual(release_journal.load_latest(self.manager, self.structure, self.dir),
                     (None, 0))
    self._save(1, 2)
    state, round_num = release_journal.load_latest(self.manager, self.structure, self.dir)
    self.assertEqual(round_num, 2)
    np.testing.assert_array_equal(state[0], np.full(300, 2, np.float32))

  def test_a_damaged_latest_checkpoint_is_refused_naming_it_and_changing_nothing(self):
    for how in ('truncate', 'flip', 'no saved_model.pb'):
      self._save(1, 2)
      folder = damage.damage_latest_checkpoint(self.dir, how)
      before = damage.files(self.dir)
      with self.assertRaisesRegex(ValueError, f'{folder} \\(round 2\\) cannot be read') as e:
        release_journal.load_latest(self.manager, self.structure, self.dir)
      self.assertIn('resume from the checkpoint of round 1', str(e.exception))
      self.assertIn('new output directory', str(e.exception))
      self.assertEqual(damage.files(self.dir), before, how)
      asyncio.run(self.manager.remove_all())
    # The only checkpoint damaged: there is nothing earlier to resume from.
    self._save(0)
    damage.damage_latest_checkpoint(self.dir)
    with self.assertRaisesRegex(ValueError, 'no earlier checkpoint'):
      release_journal.load_latest(self.manager, self.structure, self.dir)


class CheckLatestTest(absltest.TestCase):
  """`check_latest`: the same refusal, before the program state's structure exists."""

  def test_refuses_what_load_latest_refuses_and_passes_the_rest(self):
    checkpoint_dir = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'checkpoints')
    manager = npz_state.NpzProgramStateManager(checkpoint_dir)
    release_journal.check_latest(manager, checkpoint_dir)  # No checkpoint yet.
    for r in (1, 2):
      asyncio.run(manager.save((np.full(300, r, np.float32), np.int64(r)), r))
    release_journal.check_latest(manager, checkpoint_dir)
    folder = damage.damage_latest_checkpoint(checkpoint_dir, 'flip')
    before = damage.files(checkpoint_dir)
    with self.assertRaisesRegex(ValueError, f'{folder} \\(round 2\\) cannot be read') as e:
      release_journal.check_latest(manager, checkpoint_dir)
    self.assertIn('resume from the checkpoint of round 1', str(e.exception))
    self.assertEqual(damage.files(checkpoint_dir), before)


if __name__ == '__main__':
  absltest.main()
