"""Checkpoints as `.npz` files (`fedasr_tff.program.npz_state`)."""

import asyncio
import collections
import os
import stat
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from fedasr_tff.program import npz_state
from tests.program import damage

_Pair = collections.namedtuple('_Pair', ['first', 'second'])


def _state(scale=1.0):
  # The shapes of a learning process's state: attrs ModelWeights, named tuples, ordered dicts,
  # scalars of several dtypes, bytes, an empty structure.
  weights = tff.learning.models.ModelWeights(
      trainable=[np.full((2, 3), scale, np.float32), np.arange(4, dtype=np.float64) * scale],
      non_trainable=[np.int32(7)])
  return collections.OrderedDict(
      weights=weights,
      optimizer=_Pair(np.int64(3), [np.zeros(2, np.float32)]),
      secret=np.array([1, 2**40], np.int64), note=b'seed words', empty=collections.OrderedDict())


def _assert_same(test, a, b):
  flat_a = tff.structure.flatten(tff.structure.from_container(a, recursive=True))
  flat_b = tff.structure.flatten(tff.structure.from_container(b, recursive=True))
  test.assertEqual(len(flat_a), len(flat_b))
  for x, y in zip(flat_a, flat_b, strict=True):
    test.assertEqual(np.asarray(x).dtype, np.asarray(y).dtype)
    np.testing.assert_array_equal(x, y)


class NpzProgramStateManagerTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enterContext(tempfile.TemporaryDirectory())

  def test_round_trip_keeps_structure_dtypes_and_values(self):
    manager = npz_state.NpzProgramStateManager(self.dir)
    asyncio.run(manager.save(_state(2.0), 1))
    self.assertEqual(os.listdir(os.path.join(self.dir, 'program_state_1')), ['state.npz'])
    loaded = asyncio.run(manager.load(1, _state()))
    self.assertIsInstance(loaded['weights'], tff.learning.models.ModelWeights)
    self.assertIsInstance(loaded['optimizer'], _Pair)
    _assert_same(self, loaded, _state(2.0))
    with self.assertRaises(tff.program.ProgramStateExistsError):
      asyncio.run(manager.save(_state(), 1))
    with self.assertRaises(tff.program.ProgramStateNotFoundError):
      asyncio.run(manager.load(2, _state()))

  def test_retention_is_tffs(self):
    manager = npz_state.NpzProgramStateManager(self.dir, keep_total=3, keep_first=True)
    for version in range(5):
      asyncio.run(manager.save(_state(version), version))
    self.assertEqual(asyncio.run(manager.get_versions()), [0, 3, 4])
    self.assertFalse([n for n in os.listdir(self.dir) if 'temp' in n])

  def test_a_save_cut_short_by_a_kill_is_cleared_by_the_next_save(self):
    # SIGKILL inside a save leaves its temporary folder (no clean-up runs); the resumed run
    # saves that version again.
    manager = npz_state.NpzProgramStateManager(self.dir)
    asyncio.run(manager.save(_state(), 1))
    left = os.path.join(self.dir, 'program_state_2_temp123')
    os.makedirs(left)
    with open(os.path.join(left, npz_state.STATE_FILE), 'wb') as f:
      f.write(b'PK\x03')   # Cut short.
    self.assertEqual(asyncio.run(manager.get_versions()), [1])
    asyncio.run(manager.save(_state(2.0), 2))
    self.assertEqual(sorted(os.listdir(self.dir)), ['program_state_1', 'program_state_2'])

  def test_a_checkpoint_written_by_tffs_manager_still_loads(self):
    asyncio.run(tff.program.FileProgramStateManager(self.dir).save(_state(3.0), 5))
    manager = npz_state.NpzProgramStateManager(self.dir)
    self.assertEqual(asyncio.run(manager.get_versions()), [5])
    asyncio.run(manager.check(5))  # A SavedModel is read by `load` only.
    loaded = asyncio.run(manager.load(5, _state()))
    for x, y in zip(loaded['weights'].trainable, _state(3.0)['weights'].trainable, strict=True):
      np.testing.assert_array_equal(x, y)
    self.assertEqual(loaded['note'], b'seed words')

  def test_damage_and_a_wrong_structure_are_named(self):
    manager = npz_state.NpzProgramStateManager(self.dir)
    for version, how in enumerate(('truncate', 'flip', 'remove'), start=1):
      asyncio.run(manager.save(_state(), version))
      asyncio.run(manager.check(version))  # Intact: nothing to say.
      folder = damage.damage_latest_checkpoint(self.dir, how)
      with self.subTest(how=how, reader='load'), self.assertRaisesRegex(ValueError, folder):
        asyncio.run(manager.load(version, _state()))
      # `check` needs no structure: a run calls it before building its process.
      with self.subTest(how=how, reader='check'), self.assertRaisesRegex(ValueError, folder):
        asyncio.run(manager.check(version))
    asyncio.run(manager.save(_state(), 9))
    with self.assertRaisesRegex(ValueError, r'state\.npz holds 7 arrays; the program state has 8'):
      asyncio.run(manager.load(9, (_state(), np.zeros(1))))

  def test_a_leaf_that_needs_a_pickle_is_refused(self):
    manager = npz_state.NpzProgramStateManager(self.dir)
    with self.assertRaisesRegex(ValueError, r'leaf 1 \(object\) .* pickle'):
      asyncio.run(manager.save([np.zeros(1), {'a': object()}], 1))
    self.assertEqual(os.listdir(self.dir), [])

  def test_files_are_as_private_as_the_folder_makes_them(self):
    # The round loop makes the tree owner-only after each save (`private_files`); the manager
    # itself adds no permission beyond the umask.
    manager = npz_state.NpzProgramStateManager(self.dir)
    asyncio.run(manager.save(_state(), 1))
    mode = stat.S_IMODE(os.stat(os.path.join(self.dir, 'program_state_1', 'state.npz')).st_mode)
    self.assertEqual(mode & ~(0o666 & ~os.umask(os.umask(0))), 0)


if __name__ == '__main__':
  absltest.main()
