"""A shortened demo (a few steps and rounds) end to end, as `make demo` runs it."""

import os
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DemoTest(absltest.TestCase):

  def test_short_demo_prints_three_error_rates_and_epsilon_and_writes_the_report(self):
    output_dir = tempfile.mkdtemp()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
               PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))
    result = subprocess.run(
        [sys.executable, '-m', 'experiments.demo', f'--output_dir={output_dir}',
         '--train_speakers=6', '--held_out_speakers=2', '--utterances_per_speaker=2',
         '--seed_steps=4', '--rounds=2', '--cohort_size=2', '--local_steps=1',
         '--eval_every=1', '--noprogress'],
        capture_output=True, text=True, env=env, cwd=_ROOT, timeout=900, check=False)
    self.assertEqual(result.returncode, 0, msg=result.stderr[-4000:])
    out = result.stdout
    for model in ('seed (central', 'FL, no noise', 'FL + DP'):
      self.assertRegex(out, re.escape(model) + r'.*CER +\d+\.\d%', msg=model)
    # Both epsilons, each named by the population it covers.
    self.assertRegex(out, r'epsilon_run=\S+ \(this run, K=\d+, S=2\); '
                          r'epsilon_declared=\d+\.\d+ \(K\'=10,000,000')
    report = os.path.join(output_dir, 'report.md')
    with open(report) as f:
      text = f.read()
    self.assertIn('FL + DP', text)
    # WER leads, and the per-layer figure shows only what the DP run releases.
    self.assertIn('## Results\n\n**WER (greedy decoding): seed (central', text)
    self.assertIn('| Model | WER (%) | CER (%) |', text)
    self.assertIn('figure shows what the DP run releases', text)
    self.assertIn('averaged over rounds, from `' + os.path.join(output_dir, 'fl_dp', 'metrics.csv'),
                  text)
    self.assertIn('ε (RDP)', text)
    self.assertIn('ε (this run)', text)
    self.assertIn('ε (declared population)', text)
    for png in ('error_rates.png', 'layer_norms.png'):
      self.assertIn(png, text)
      self.assertGreater(os.path.getsize(os.path.join(output_dir, png)), 1000)


if __name__ == '__main__':
  absltest.main()
