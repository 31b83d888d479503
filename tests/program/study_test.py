"""Cells of a study run a few at a time and resumed, and their summaries (`program.study`)."""

import json
import os
import sys
import tempfile
import time

from absl.testing import absltest

from fedasr_tff.program import study

# A cell that records when it ran, waits (for a file first, if given: one another cell writes as
# it ends), and finishes by writing its summary, or fails after writing `failing` beside it.
_CELL = '''
import json, os, sys, time
out = sys.argv[1]
with open(os.path.join(out, "runs.txt"), "a") as f:
  f.write(f"{time.monotonic()}\\n")
while len(sys.argv) > 4 and not os.path.exists(sys.argv[4]):
  time.sleep(0.01)
time.sleep(float(sys.argv[2]))
if sys.argv[3] == "fail":
  print("cell went wrong")
  open(os.path.join(os.path.dirname(out), "failing"), "w").close()
  sys.exit(3)
with open(os.path.join(out, "summary.json"), "w") as f:
  json.dump({"eval": {"cer": 0.25}}, f)
'''


class StudyTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enterContext(tempfile.TemporaryDirectory())

  def cell(self, name, seconds=0.0, outcome='ok', after_failure=False):
    output_dir = os.path.join(self.dir, name)
    wait_for = [os.path.join(self.dir, 'failing')] if after_failure else []
    return study.Cell(name, [sys.executable, '-c', _CELL, output_dir, str(seconds), outcome,
                             *wait_for], output_dir)

  def runs(self, cell):
    path = os.path.join(cell.output_dir, 'runs.txt')
    if not os.path.exists(path):
      return []
    with open(path) as f:
      return [float(line) for line in f]

  def test_runs_in_parallel_then_reruns_only_the_unfinished(self):
    cells = [self.cell(f'c{i}', seconds=2.0) for i in range(3)]
    lines = []
    started = time.monotonic()
    seconds = study.run_cells(cells, parallel=3, log=lines.append, poll_seconds=0.05)
    # Three two-second cells at once take well under their six seconds in a row.
    self.assertLess(time.monotonic() - started, 5.0)
    self.assertEqual(set(seconds), {'c0', 'c1', 'c2'})
    self.assertTrue(all(cell.done for cell in cells))
    self.assertAlmostEqual(cells[0].measured_seconds(), seconds['c0'])
    self.assertEqual(study.read_summary(cells[0].output_dir), {'eval': {'cer': 0.25}})
    self.assertLen([line for line in lines if 'finished' in line], 3)
    # A fourth cell joins; the three finished ones are not run again.
    cells.append(self.cell('c3'))
    self.assertEqual(set(study.run_cells(cells, parallel=2, poll_seconds=0.05, log=id)),
                     {'c3'})
    self.assertEqual([len(self.runs(cell)) for cell in cells], [1, 1, 1, 1])

  def test_at_most_parallel_cells_at_once(self):
    cells = [self.cell(f'c{i}', seconds=0.6) for i in range(3)]
    study.run_cells(cells, parallel=1, poll_seconds=0.05, log=id)
    starts = sorted(self.runs(cell)[0] for cell in cells)
    self.assertGreater(starts[1] - starts[0], 0.55)
    self.assertGreater(starts[2] - starts[1], 0.55)

  def test_a_failed_cell_names_its_log_and_stops_new_starts(self):
    # 'slow' ends 2 s after 'bad' has failed, whatever the load: a start of 'never' would then
    # need the loop (polling every 0.05 s) not to see the failure for 2 s.
    cells = [self.cell('bad', outcome='fail'),
             self.cell('slow', seconds=2.0, after_failure=True), self.cell('never')]
    with self.assertRaisesRegex(RuntimeError, r'bad \(log .*cell\.log\):\ncell went wrong'):
      study.run_cells(cells, parallel=2, poll_seconds=0.05, log=id)
    self.assertTrue(cells[1].done)  # already running: finished
    self.assertEqual(self.runs(cells[2]), [])  # waiting: not started
    self.assertFalse(cells[0].done)

  def test_arguments_are_checked(self):
    with self.assertRaisesRegex(ValueError, '`parallel`'):
      study.run_cells([self.cell('a')], parallel=0)
    with self.assertRaisesRegex(ValueError, 'unique'):
      study.run_cells([self.cell('a'), self.cell('a')], parallel=1)

  def test_estimate_from_the_calibration_then_from_finished_cells(self):
    cells = [self.cell(f'c{i}') for i in range(5)]
    self.assertEqual(study.estimate_seconds(cells, 2, 100.0),
                     (300.0, 'calibrated 100 s a cell'))
    os.makedirs(cells[0].output_dir)
    with open(os.path.join(cells[0].output_dir, 'summary.json'), 'w') as f:
      json.dump({}, f)
    with open(os.path.join(cells[0].output_dir, 'cell_seconds.json'), 'w') as f:
      json.dump({'seconds': 40.0}, f)
    # Four left, two at a time, at the measured 40 s.
    estimate, how = study.estimate_seconds(cells, 2, 100.0)
    self.assertEqual(estimate, 80.0)
    self.assertIn('1 finished cells, 40 s', how)

  def test_mean_std_and_orderings(self):
    summary = study.mean_std([1.0, 2.0, 3.0])
    self.assertEqual((summary.mean, summary.std, str(summary)), (2.0, 1.0, '2.0 ± 1.0'))
    self.assertEqual(study.mean_std([4.0]).std, 0.0)
    summaries = {'dim': study.mean_std([10.0, 10.2]), 'uniform': study.mean_std([12.0, 12.2]),
                 'global': study.mean_std([12.1, 12.5])}
    holds, sentence = study.compare(['dim', 'uniform', 'global'], summaries)
    self.assertTrue(holds)
    self.assertIn('dim < uniform: holds (10.1 vs 12.1', sentence)
    self.assertIn('uniform < global: holds within the seeds\' spread', sentence)
    holds, sentence = study.compare(['global', 'dim'], summaries)
    self.assertFalse(holds)
    self.assertTrue(sentence.startswith('DOES NOT HOLD: global < dim: reversed ('))
    with self.assertRaisesRegex(ValueError, 'lacks'):
      study.compare(['dim', 'lars'], summaries)
    with self.assertRaisesRegex(ValueError, 'empty'):
      study.mean_std([])


if __name__ == '__main__':
  absltest.main()
