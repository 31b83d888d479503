"""A two-cell, two-round ablation end to end, run again to check that it resumes.

One DP cell (dim clipping, LAMB) and the no-noise reference, one seed, two at once, on a tiny
corpus; run again with the same flags, no finished cell runs again and the table is rewritten.
"""

import csv
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(output_dir, *extra_flags):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
             PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))
  return subprocess.run(
      [sys.executable, '-m', 'experiments.ablation', f'--output_dir={output_dir}', *extra_flags,
       '--synthetic_speakers=5', '--held_out_speakers=1', '--utterances_per_speaker=2',
       '--seed_steps=2', '--rounds=2', '--eval_every=2', '--cohort_size=2',
       '--local_steps=1', '--seeds=0', '--clippings=dim', '--optimizers=lamb',
       '--reference=dim:lamb', '--parallel=2', '--noprogress'],
      capture_output=True, text=True, env=env, cwd=_ROOT, timeout=900, check=False)


class AblationTest(absltest.TestCase):

  def test_two_cells_table_orderings_norms_and_resume(self):
    output_dir = tempfile.mkdtemp()
    result = _run(output_dir)
    self.assertEqual(result.returncode, 0, msg=result.stderr[-4000:])
    out = result.stdout
    self.assertRegex(out, r'== 2 cells \(2 x 1 seeds\), 2 to run, 2 at once: about \d+ min '
                          r'\(calibrated \d+ s a cell\)')
    self.assertRegex(out, r'\| dim / lamb / no noise \| 0 \| \d+\.\d ± 0\.0 \|')
    self.assertRegex(out, r'\| dim / lamb \| 0\.005 \| .* \| \d\S* / \d\S* \|')  # both epsilons
    self.assertIn('noise costs accuracy: dim / lamb / no noise < dim / lamb: ', out)
    self.assertIn('OUTSIDE the DP guarantee', out)
    self.assertRegex(out, r'\| wqkv kernel \| \d')
    with open(os.path.join(output_dir, 'ablation.csv')) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([row['cell'] for row in rows], ['dim / lamb / no noise', 'dim / lamb'])
    for name in ('ablation.md', 'layer_norms.csv', 'ablation.png', 'layer_norms_dim_lamb.png'):
      self.assertGreater(os.path.getsize(os.path.join(output_dir, name)), 100, name)
    cells = os.path.join(output_dir, 'cells')
    logs = {cell: os.path.getsize(os.path.join(cells, cell, 'cell.log'))
            for cell in os.listdir(cells)}
    self.assertEqual(set(logs), {'dim_lamb_no_noise_s0', 'dim_lamb_s0'})

    # Again: nothing to run, the finished cells read back (their logs untouched).
    again = _run(output_dir)
    self.assertEqual(again.returncode, 0, msg=again.stderr[-4000:])
    self.assertRegex(again.stdout, r'2 cells \(2 x 1 seeds\), 0 to run, 2 at once: about 0 min '
                                   r'\(mean wall time of the 2 finished cells')
    self.assertNotIn('started', again.stdout)
    self.assertIn('| dim / lamb |', again.stdout)
    self.assertEqual({cell: os.path.getsize(os.path.join(cells, cell, 'cell.log'))
                      for cell in logs}, logs)

  def test_the_demos_spec_augment_flag_is_refused_before_any_work(self):
    output_dir = tempfile.mkdtemp()
    result = _run(output_dir, '--nospec_augment')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('--spec_augment is the demo\'s; the ablation trains with SpecAugment',
                  result.stderr)
    self.assertEqual(os.listdir(output_dir), [])


if __name__ == '__main__':
  absltest.main()
