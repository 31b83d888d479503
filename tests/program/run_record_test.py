"""What makes a resumed run the same run (`fedasr_tff.program.run_record`)."""

import dataclasses
import json
import os
import stat
import tempfile

from absl.testing import absltest

from fedasr_tff.program import fields
from fedasr_tff.program import run_record


@dataclasses.dataclass(frozen=True)
class _Group:
  lr: float = fields.field(0.1, 'Learning rate.')
  rounds: int = fields.field(3, 'Rounds.', fingerprint=False)


@dataclasses.dataclass(frozen=True)
class _Config:
  group: _Group = dataclasses.field(default_factory=_Group)
  seed: int = fields.field(0, 'Seed.')


def _record(config=_Config(), digest='clients-a', model='m1'):
  return run_record.RunRecord(config, digest, format=7,
                              checks={'model_sha256': (model, 'the seed model')})


class RunRecordTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'run')

  def test_a_new_run_writes_its_record_and_keeps_the_fingerprint_private(self):
    run_record.check_or_write(self.dir, _record())
    with open(os.path.join(self.dir, run_record.CONFIG_FILE)) as f:
      saved = json.load(f)
    self.assertEqual(saved, {'format': 7, 'model_sha256': 'm1',
                             'config': {'group': {'lr': 0.1, 'rounds': 3}, 'seed': 0}})
    path = os.path.join(self.dir, run_record.CLIENTS_FILE)
    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
    with open(path) as f:
      self.assertEqual(json.load(f), {run_record.CLIENTS_KEY: 'clients-a'})

  def test_a_resume_may_change_only_what_is_not_fingerprinted(self):
    run_record.check_or_write(self.dir, _record())
    run_record.check_or_write(self.dir, _record(_Config(_Group(rounds=10))))
    for record, named in ((_record(_Config(seed=1)), '--seed'),
                          (_record(_Config(_Group(lr=0.2))), '--lr'),
                          (_record(digest='clients-b'), 'the training clients'),
                          (_record(model='m2'), 'the seed model')):
      with self.assertRaisesRegex(ValueError, f'{named} differ'):
        run_record.check_or_write(self.dir, record)

  def test_check_refuses_another_run_and_writes_nothing(self):
    # What a run calls before it spends time building its process.
    self.assertFalse(run_record.check(self.dir, _record()))
    self.assertFalse(os.path.exists(self.dir))
    run_record.check_or_write(self.dir, _record())
    before = {name: os.stat(os.path.join(root, name)).st_mtime_ns
              for root, _, names in os.walk(self.dir) for name in names}
    self.assertTrue(run_record.check(self.dir, _record(_Config(_Group(rounds=10)))))
    with self.assertRaisesRegex(ValueError, '--lr differ'):
      run_record.check(self.dir, _record(_Config(_Group(lr=0.2))))
    self.assertEqual({name: os.stat(os.path.join(root, name)).st_mtime_ns
                      for root, _, names in os.walk(self.dir) for name in names}, before)

  def test_a_field_added_later_compares_at_its_default(self):
    os.makedirs(self.dir)
    run_record.write_clients_fingerprint(self.dir, 'clients-a')
    with open(os.path.join(self.dir, run_record.CONFIG_FILE), 'w') as f:
      json.dump({'format': 7, 'model_sha256': 'm1', 'config': {'group': {'lr': 0.1}}}, f)
    run_record.check_or_write(self.dir, _record())
    with self.assertRaisesRegex(ValueError, '--seed differ'):
      run_record.check_or_write(self.dir, _record(_Config(seed=2)))

  def test_a_run_of_another_kind_is_refused_as_such(self):
    run_record.check_or_write(self.dir, dataclasses.replace(_record(), kind='speech training'))
    with open(os.path.join(self.dir, run_record.CONFIG_FILE)) as f:
      self.assertEqual(json.load(f)['kind'], 'speech training')
    with self.assertRaisesRegex(ValueError, 'holds a speech training run, not a retriever '
                                'training run: use a new output directory'):
      run_record.check(self.dir, dataclasses.replace(_record(), kind='retriever training'))
    # A run saved before kinds were: compared as before.
    old = os.path.join(os.path.dirname(self.dir), 'old')
    run_record.check_or_write(old, _record())
    self.assertTrue(run_record.check(old, dataclasses.replace(_record(), kind='speech training')))

  def test_another_format_is_refused(self):
    os.makedirs(self.dir)
    with open(os.path.join(self.dir, run_record.CONFIG_FILE), 'w') as f:
      json.dump({'format': 6, 'config': {}}, f)
    with self.assertRaisesRegex(ValueError, 'older fedasr-tff .* new output directory'):
      run_record.check_or_write(self.dir, _record())
    noted = dataclasses.replace(_record(), format_note='it records --lr')
    with self.assertRaisesRegex(ValueError, r'format 6, this version writes 7: it records --lr\)'):
      run_record.check_or_write(self.dir, noted)


if __name__ == '__main__':
  absltest.main()
