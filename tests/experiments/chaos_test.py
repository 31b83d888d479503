"""One short case of the chaos benchmark (`benchmarks/chaos.py`) in the test suite: DP mixed FL
(2-way gradient transfer, the server training on the seed speakers, its round on a TFF worker),
killed with SIGKILL three times (at a random moment, inside a checkpoint write, inside the release
journal's write) and resumed after each with the same command, against a run never killed: every
draw of client and server work (client batches and SpecAugment masks, central batches, the
central optimizer, the noise) must replay for the final state to be bit-identical. The other
five tasks, ten kills each, run outside `make test` (docs/benchmarks.md, "Faults survived")."""

import os
import random
import tempfile
from unittest import mock

from absl.testing import absltest

from benchmarks import chaos


class ChaosTest(absltest.TestCase):

  def test_a_run_killed_three_times_ends_bit_identical_releasing_each_round_once(self):
    work_dir = tempfile.mkdtemp()
    rounds = 4
    with mock.patch.dict(os.environ, {'XDG_CACHE_HOME': os.path.join(work_dir, 'cache')}):
      task = chaos.tasks(work_dir, rounds)['mixed_fl']
      outcome = chaos.run_task(task, os.path.join(work_dir, 'mixed_fl'), kills=3,
                               rounds=rounds, rng=random.Random(0))
    self.assertIsNone(outcome.failed)
    self.assertEqual(outcome.kills, {'random': 1, 'checkpoint': 1, 'journal': 1})
    self.assertEqual(outcome.resumes, 3)
    self.assertEqual(outcome.tracebacks, 0)
    comparison = outcome.comparison
    self.assertTrue(comparison.bit_identical, comparison.differences)
    self.assertTrue(comparison.released_identical, comparison.differences)
    self.assertEqual((comparison.duplicated, comparison.missing), (0, 0))
    self.assertEqual(comparison.tensorboard_two_values, 0)


if __name__ == '__main__':
  absltest.main()
