"""The disk cache of rounds' compiled forms (`compile_cache`): a warm cache runs a round without
TFF's compiler and equally; the key tells rounds apart and is the same for the same round built
in two processes; a corrupt entry is compiled again; a directory others can write is refused."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.runtime import compile_cache
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import inprocess_context
from tests.runtime import dp_mlp

_ROUNDS = 2


def _process(clip=0.3):
  return algorithms.build_fed_avg_process(
      dp_mlp.model_fn, client_learning_rate=0.1, local_steps=3, local_clip_norm=1.0,
      server_optimizer=optimizers.build('sgd', 1.0),
      model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(
          0.8, 4, clip, allocation='dim', leaf_names=dp_mlp.LEAF_NAMES, noise_seed=11))


def _no_fallback():
  raise AssertionError('a computation went to the worker')


def _run(process, cache_dir):
  """`_ROUNDS` rounds in a fresh in-process context with the cache in `cache_dir` (or none)."""
  tff.framework.set_default_context(inprocess_context.InProcessContext(
      _no_fallback, cache=None if cache_dir is None else compile_cache.CompileCache(cache_dir)))
  state = dp_mlp.initial_state(process)
  for _ in range(_ROUNDS):
    state = process.next(state, dp_mlp.datasets(count=4)).state
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


def _entries(directory):
  return sorted(name for name in os.listdir(directory) if name.endswith('.mrparts'))


class CompileCacheTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.addCleanup(execution_context.set_local_cpp_execution_context)
    self.directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)

  def test_a_warm_cache_runs_the_round_without_compiling_it_and_equally(self):
    process = _process()
    uncached = _run(process, None)
    cold = _run(process, self.directory)
    self.assertLen(_entries(self.directory), 1)
    with mock.patch.object(tff.backends.mapreduce, 'get_map_reduce_form_for_computation',
                           side_effect=AssertionError('compiled despite a warm cache')):
      warm = _run(process, self.directory)
    for a, b, c in zip(uncached, cold, warm, strict=True):
      np.testing.assert_array_equal(a, b)
      np.testing.assert_array_equal(a, c)

  def test_a_different_round_is_a_different_entry(self):
    cache = compile_cache.CompileCache(self.directory)
    self.assertNotEqual(cache.key(_process(clip=0.3).next), cache.key(_process(clip=0.4).next))
    self.assertNotEqual(cache.key(_process().next, b'options a'),
                        cache.key(_process().next, b'options b'))
    _run(_process(clip=0.3), self.directory)
    _run(_process(clip=0.4), self.directory)
    self.assertLen(_entries(self.directory), 2)

  def test_the_same_round_built_in_two_processes_has_one_key(self):
    # Keras draws an unseeded initializer's seed per model built; client work's model is
    # zero-initialised, so the round's graph holds none and a new process finds the entry.
    code = textwrap.dedent(f"""
        from fedasr_tff.runtime import compile_cache
        from tests.runtime import compile_cache_test
        print('key', compile_cache.CompileCache({self.directory!r}).key(
            compile_cache_test._process().next))
        """)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    keys = [subprocess.run([sys.executable, '-c', code], env=environment, check=True,
                           capture_output=True, text=True).stdout.split('key ')[-1].strip()
            for _ in range(2)]
    self.assertLen(keys[0], 64)
    self.assertEqual(keys[0], keys[1])

  def test_a_corrupt_entry_is_compiled_again_and_rewritten(self):
    process = _process()
    expected = _run(process, self.directory)
    [entry] = _entries(self.directory)
    path = os.path.join(self.directory, entry)
    with open(path, 'wb') as f:
      f.write(b'\x0a\x03not a computation')
    with self.assertLogs(level='WARNING') as logs:
      rerun = _run(process, self.directory)
    self.assertIn(path, '\n'.join(logs.output))
    for a, b in zip(expected, rerun, strict=True):
      np.testing.assert_array_equal(a, b)
    with mock.patch.object(tff.backends.mapreduce, 'get_map_reduce_form_for_computation',
                           side_effect=AssertionError('the rewritten entry was not read')):
      _run(process, self.directory)

  def test_a_directory_others_can_write_is_refused(self):
    os.chmod(self.directory, 0o777)
    with self.assertRaisesRegex(ValueError, f'{self.directory} is writable by group or others'):
      compile_cache.CompileCache(self.directory)

  def test_a_new_directory_is_the_users_alone(self):
    directory = os.path.join(self.directory, 'made', 'here')
    compile_cache.CompileCache(directory)
    self.assertEqual(os.stat(directory).st_mode & 0o777, 0o700)

  def test_a_directory_of_another_user_is_refused(self):
    owner = os.stat(self.directory).st_uid
    # As another user sees this directory (chown needs root, and a sandbox maps no other uid).
    with mock.patch.object(compile_cache.os, 'getuid', return_value=owner + 1):
      with self.assertRaisesRegex(ValueError, f'belongs to user {owner}, not to this user'):
        compile_cache.CompileCache(self.directory)

if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  execution_context.set_local_cpp_execution_context()
  absltest.main()
