"""The mixed FL experiments: the synthetic tasks' claims in short runs, and the speech binary end
to end in a subprocess on a tiny corpus."""

import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

from experiments import mixed_fl_toys
from fedasr_tff import runtime

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class MixedFLToysTest(absltest.TestCase):

  def test_quadratic_parallel_training_is_biased_and_transfers_are_not(self):
    # Augenstein et al. 2022, App. B: with K > 1 steps and curvatures that differ, parallel
    # training stops short of argmin f; both gradient transfers reach it.
    results = mixed_fl_toys.run_quadratic(rounds=60)
    self.assertGreater(results['parallel']['distance'], 0.05)
    for algorithm in ('one_way', 'two_way'):
      self.assertLess(results[algorithm]['distance'], 1e-3, algorithm)
      self.assertLess(results[algorithm]['suboptimality'],
                      1e-3 * results['parallel']['suboptimality'], algorithm)

  def test_label_skew_fl_alone_misses_the_servers_label_and_mixed_fl_learns_it(self):
    curves, dissimilarity = mixed_fl_toys.run_label_skew(rounds=20, seed=0, eval_every=20)
    self.assertLess(curves['fl_alone'][-1]['accuracy_label_0'], 0.1)
    for name in ('parallel', 'one_way', 'two_way', 'oracle'):
      self.assertGreater(curves[name][-1]['accuracy_label_0'], 0.7, name)
      self.assertGreater(curves[name][-1]['accuracy_label_1'], 0.7, name)
      self.assertLess(curves[name][-1]['eval_loss'], curves['fl_alone'][-1]['eval_loss'], name)
    # G~² >= 0 and B~² >= 1 (Jensen), measured by every mixed algorithm.
    self.assertEqual(sorted(dissimilarity), ['one_way', 'parallel', 'two_way'])
    for values in dissimilarity.values():
      self.assertGreaterEqual(values['max_G2'], 0.0)
      self.assertGreaterEqual(values['max_B2'], 1.0)


class MixedFLSpeechTest(absltest.TestCase):

  def test_binary_scores_both_domains_and_states_epsilon(self):
    output_dir = tempfile.mkdtemp()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]),
               TF_CPP_MIN_LOG_LEVEL='2')
    result = subprocess.run(
        [sys.executable, '-m', 'experiments.mixed_fl_speech', f'--output_dir={output_dir}',
         '--seed_steps=5', '--rounds=1', '--cohort_size=2', '--algorithms=two_way',
         '--dp_modes=dp', '--server_speakers=2', '--client_speakers=3',
         '--held_out_speakers=1', '--utterances_per_speaker=2', '--noprogress'],
        capture_output=True, text=True, env=env, cwd=_ROOT, timeout=900, check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(output_dir, 'mixed_fl_speech.json')) as f:
      rows = json.load(f)
    self.assertEqual([r['model'] for r in rows], ['seed (server domain)', 'two_way_dp'])
    for row in rows:
      for key in ('wer_server', 'cer_server', 'wer_clients', 'cer_clients'):
        self.assertBetween(row[key], 0.0, 10.0)
    declared, run = rows[1]['epsilon_declared_run']
    self.assertLess(declared, run)   # The declared population is far larger than the run's.
    self.assertIn('| two_way_dp | dp |', result.stdout)


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
