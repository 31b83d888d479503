import contextlib
import io
import os
import tempfile

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver

from experiments import privacy_table


def _run(*args):
  out = io.StringIO()
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['privacy_table', *args])
    with contextlib.redirect_stdout(out):
      code = privacy_table.main(['privacy_table'])
  return code, out.getvalue()


class PrivacyTableTest(absltest.TestCase):

  def test_table_mode_prints_published_and_ours(self):
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, 'rows.csv')
      with open(path, 'w') as f:
        f.write('table,setting,z,S,K,T,epsilon,check\n'
                '1,LS100>CVen,0.6144,204800,69506000,2034,7.2,ok\n'
                '1,LS100>CVen,1.024,51200,1737650,2006,1.3,TYPO\n')
      code, out = _run(f'--csv={path}')
    self.assertEqual(code, 0)
    lines = out.strip().splitlines()
    self.assertTrue(lines[0].startswith('line\ttable\tsetting'))
    first = dict(zip(lines[0].split('\t'), lines[1].split('\t'), strict=True))
    self.assertEqual(first['published'], '7.2')
    self.assertEqual(first['rdp_G'], '7.223')
    self.assertEqual(first['order_G'], '4')
    self.assertLess(float(first['pld']), float(first['rdp']))
    second = dict(zip(lines[0].split('\t'), lines[2].split('\t'), strict=True))
    self.assertEqual(second['check'], 'TYPO')
    self.assertIn('2 rows; 1 flagged ok', lines[-1])

  def test_single_mode_with_extrapolation(self):
    code, out = _run('--sigma_dp=3e-6', '--cohort_size=1024', '--population=34753',
                     '--steps=2006', '--cohort_scale=200', '--population_scale=10',
                     '--extrapolated_steps=2034', '--accountants=rdp')
    self.assertEqual(code, 0)
    self.assertIn('z=0.003072', out)
    self.assertIn('extrapolated (rdp): S=204800 K=69506000', out)
    self.assertIn('epsilon=7.223', out)

  def test_unreadable_csv_is_refused_naming_the_flag_and_path(self):
    with self.assertRaisesRegex(app.UsageError, '^--csv: /nonexistent/rows.csv: '):
      _run('--csv=/nonexistent/rows.csv')

  def test_conflicting_noise_flags_are_refused(self):
    with flagsaver.flagsaver():
      with self.assertRaisesRegex(flags.IllegalFlagValueError, 'noise_multiplier.*sigma_dp'):
        flags.FLAGS(['privacy_table', '--noise_multiplier=1', '--sigma_dp=1e-6', '--steps=3',
                     '--sampling_rate=0.1'])

  def test_single_mode_without_noise_is_refused(self):
    with flagsaver.flagsaver():
      with self.assertRaisesRegex(flags.IllegalFlagValueError, 'noise_multiplier or --sigma_dp'):
        flags.FLAGS(['privacy_table', '--steps=3', '--sampling_rate=0.1'])


if __name__ == '__main__':
  absltest.main()
