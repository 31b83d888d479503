"""What every binary prints on its way in and out: one line for a refusal, no TensorFlow noise."""

import os
import subprocess
import sys

from absl.testing import absltest

from experiments import tensorflow_start_up

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(*args, **env):
  return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=_ROOT,
                        env=dict(os.environ, PYTHONPATH=_ROOT, **env), timeout=300, check=False)


class CliTest(absltest.TestCase):

  def test_a_refusal_is_one_line_naming_the_cause_and_where_help_is(self):
    # privacy_table imports no TensorFlow: a second per case.
    result = _python('-m', 'experiments.privacy_table', 'stray')
    self.assertEqual(result.returncode, 1)
    self.assertEqual(result.stdout, '')
    self.assertEqual(result.stderr, 'privacy_table: Unexpected arguments: stray. Try '
                     '--helpshort.\n')
    # A flag error is absl's: the error and where help is.
    result = _python('-m', 'experiments.privacy_table', '--no_such_flag')
    self.assertNotEqual(result.returncode, 0)
    self.assertEqual(result.stderr.splitlines(), [
        "FATAL Flags parsing error: Unknown command line flag 'no_such_flag'",
        'Pass --helpshort or --helpfull to see help on flags.'])

  def test_tensorflow_start_up_noise_is_kept_off_stderr_and_other_lines_are_not(self):
    script = ('import os, experiments, tensorflow\n'
              'os.write(2, b"after the import\\n")\n')
    quiet = _python('-c', script)
    self.assertEqual(quiet.returncode, 0, quiet.stderr)
    self.assertEqual(quiet.stderr, 'after the import\n')
    shown = _python('-c', script, FEDASR_TF_START_UP_LOG='1')
    self.assertEqual(shown.returncode, 0, shown.stderr)
    noise = [line for line in shown.stderr.splitlines()
             if tensorflow_start_up.is_start_up_noise(line)]
    # On a machine without CUDA TensorFlow 2.14 prints its factory lines (a GPU machine may not).
    self.assertEqual(len(shown.stderr.splitlines()), len(noise) + 1, shown.stderr)

  def test_what_counts_as_start_up_noise(self):
    for line in (
        '2026-11-27 22:49:06.618083: E tensorflow/compiler/xla/stream_executor/cuda/cuda_dnn.cc:'
        '9342] Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN '
        'when one has already been registered',
        '2026-11-27 22:49:06.570985: I tensorflow/tsl/cuda/cudart_stub.cc:28] Could not find '
        'cuda drivers on your machine, GPU will not be used.',
        '2026-11-27 22:49:08.304213: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] '
        'TF-TRT Warning: Could not find TensorRT'):
      self.assertTrue(tensorflow_start_up.is_start_up_noise(line), line)
    for line in ('E tensorflow/core/framework/op_kernel.cc:1839] OP_REQUIRES failed',
                 'my own message about cuDNN', 'Unable to register'):
      self.assertFalse(tensorflow_start_up.is_start_up_noise(line), line)


if __name__ == '__main__':
  absltest.main()
