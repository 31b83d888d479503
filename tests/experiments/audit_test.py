"""The audit binary end to end, in a subprocess (as users run it): a small audit of the tiny
model's configuration passes (both ε audits and every direct check) and writes its report;
configurations it cannot audit are refused with messages naming the flags."""

import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]),
             TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'experiments.audit', *args], capture_output=True,
                        text=True, env=env, cwd=_ROOT, timeout=600, check=False)


class AuditBinaryTest(absltest.TestCase):

  def test_audits_a_configuration_and_writes_the_report(self):
    output_dir = tempfile.mkdtemp()
    result = _run('--model_config=tiny', '--clipping=dim', '--noise_multiplier=2.0',
                  '--cohort_size=100', '--canaries=200', '--rounds=1', '--trials=100',
                  '--check_rounds=10', '--delta=1e-6', '--seed=1', f'--output_dir={output_dir}')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn('one_run: claimed epsilon', result.stdout)
    self.assertIn('distinguishing: claimed epsilon', result.stdout)
    self.assertIn('noise: effective noise multiplier', result.stdout)
    with open(os.path.join(output_dir, 'audit.json')) as f:
      report = json.load(f)
    one_run, rounds, *checks = report['results']
    self.assertEqual([c['method'] for c in checks],
                     ['noise', 'clipping/below_clip', 'clipping/one_leaf',
                      'clipping/at_total_clip', 'clipping/non_finite'])
    for check in checks:
      self.assertEqual(check['verdict'], 'consistent', check['finding'])
    self.assertEqual(one_run['method'], 'one_run')
    self.assertEqual(one_run['details']['canaries'], 200)
    self.assertEqual(one_run['details']['guesses'], 40)
    self.assertEqual(report['configuration']['clipping'], 'dim')
    for audited in (one_run, rounds):
      self.assertEqual(audited['verdict'], 'consistent')
      self.assertLess(audited['lower_bound'], min(audited['claimed'].values()))

  def test_a_configuration_it_cannot_audit_is_refused_naming_the_flags(self):
    # Client noise needs every canary slot in every cohort. (The other refusals are library
    # errors with the same naming: tests/audit.)
    client = _run('--clipping=dim', '--noise_multiplier=1.0', '--noise_placement=client',
                  '--sampling=fixed', '--cohort_size=8', '--canaries=10', '--rounds=1',
                  '--trials=0')
    self.assertNotEqual(client.returncode, 0)
    self.assertIn('--cohort_size', client.stderr)
    self.assertIn('--canaries', client.stderr)
    self.assertNotIn('Traceback', client.stderr)


if __name__ == '__main__':
  absltest.main()
