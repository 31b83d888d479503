"""The disk cache of built learning processes (`process_cache`): read only after two builds
agreed, the same computations and rounds as a build, fresh noise seeds in every process and none
on disk, builds that differ never cached, damaged entries built again, arguments named."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff.aggregators import noise_seeds
from fedasr_tff.runtime import compile_cache
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import inprocess_context
from fedasr_tff.runtime import process_cache
from tests.runtime import dp_mlp

_RECIPE = {'process': 'dp_mlp', 'clip': 0.3}
_ROUNDS = 2


def _process(clip=0.3, noise_seed=None):
  return algorithms.build_fed_avg_process(
      dp_mlp.model_fn, client_learning_rate=0.1, local_steps=3, local_clip_norm=1.0,
      server_optimizer=optimizers.build('lamb', 0.01),
      model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(
          0.8, 4, clip, allocation='dim', leaf_names=dp_mlp.LEAF_NAMES, noise_seed=noise_seed))


def _no_fallback():
  raise AssertionError('a computation went to the worker')


def _seed(state):
  """The per-layer query's noise seed in a process state."""
  return state.aggregator.query_state.numerator_state.noise_seed


def _described(type_spec):
  """A type as text with every struct's Python container by name: dp-accounting makes a new
  namedtuple class per event, so two builds' types are never `==`."""
  if isinstance(type_spec, tff.FunctionType):
    return ('function', _described(type_spec.parameter) if type_spec.parameter else None,
            _described(type_spec.result))
  if isinstance(type_spec, tff.FederatedType):
    return ('federated', str(type_spec.placement), _described(type_spec.member))
  if isinstance(type_spec, tff.StructType):
    container = getattr(type_spec, 'python_container', None)
    return ('struct', container and f'{container.__module__}.{container.__qualname__}',
            tuple((name, _described(element))
                  for name, element in tff.structure.iter_elements(type_spec)))
  return str(type_spec)


class ProcessCacheTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    tff.framework.set_default_context(inprocess_context.InProcessContext(_no_fallback))
    self.addCleanup(execution_context.set_local_cpp_execution_context)
    self.directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)
    self.cache = compile_cache.CompileCache(self.directory)
    self.builds = []

  def _build(self, **kwargs):
    def build():
      self.builds.append(kwargs)
      return _process(**kwargs)
    return build

  def _built_twice(self, recipe=None, **kwargs):
    """The process built, then its entry confirmed as a second build in another process would
    (`AcrossProcessesTest` checks that one does): TensorFlow names a process's graph functions
    by a counter, so a second build in the same process is not the same bytes."""
    recipe = _RECIPE if recipe is None else recipe
    built = process_cache.learning_process(self.cache, recipe, self._build(**kwargs))
    path, _ = self._entry()
    entry = process_cache._read(path)  # pylint: disable=protected-access
    self.assertEqual(entry.status, 'candidate')
    process_cache._write(path, entry._replace(status='confirmed'))  # pylint: disable=protected-access
    return built

  def _entry(self):
    [name] = [n for n in os.listdir(self.directory) if n.endswith('.process')]
    with open(os.path.join(self.directory, name), 'rb') as f:
      return os.path.join(self.directory, name), f.read()

  def test_the_third_call_reads_the_process_two_builds_agreed_on(self):
    built = self._built_twice()
    read = process_cache.learning_process(self.cache, _RECIPE, self._build())
    self.assertLen(self.builds, 1)
    for name in ('next', 'get_model_weights', 'set_model_weights', 'get_hparams',
                 'set_hparams'):
      self.assertEqual(tff.framework.ConcreteComputation.get_proto(getattr(read, name)),
                       tff.framework.ConcreteComputation.get_proto(getattr(built, name)))
      # The Python containers of the types are back too (TFF's protos do not keep them).
      self.assertEqual(_described(getattr(read, name).type_signature),
                       _described(getattr(built, name).type_signature))
    self.assertEqual(_described(read.initialize.type_signature),
                     _described(built.initialize.type_signature))
    state = read.initialize()
    self.assertIsInstance(state, tff.learning.templates.LearningAlgorithmState)
    self.assertIsInstance(read.get_model_weights(state), tff.learning.models.ModelWeights)
    # The same key as the built round's: the compile cache finds it.
    self.assertEqual(self.cache.key(read.next), self.cache.key(built.next))

  def test_a_read_process_runs_the_rounds_a_build_runs(self):
    # A seed the caller fixes is kept as given, so both runs draw the same noise.
    recipe = dict(_RECIPE, noise_seed=11)
    self._built_twice(recipe, noise_seed=11)
    read = process_cache.learning_process(self.cache, recipe, self._build(noise_seed=11))
    self.assertLen(self.builds, 1)
    results = []
    for process in (_process(noise_seed=11), read):
      state = dp_mlp.initial_state(process)
      np.testing.assert_array_equal(_seed(state), [0, 11])
      for _ in range(_ROUNDS):
        output = process.next(state, dp_mlp.datasets(count=4))
        state = output.state
      results.append((process.get_model_weights(state).trainable, output.metrics))
    tf.nest.map_structure(np.testing.assert_array_equal, results[0], results[1])

  def test_every_process_draws_fresh_noise_seeds_and_the_entry_holds_none(self):
    processes = [self._built_twice()] + [
        process_cache.learning_process(self.cache, _RECIPE, self._build()) for _ in range(2)]
    self.assertLen(self.builds, 1)
    _, entry = self._entry()
    seeds = []
    for process in processes:
      seed = _seed(process.initialize())
      self.assertEqual(seed[0], 0)
      self.assertGreaterEqual(seed[1], 0)  # filled: never the unset seed, -1
      seeds.append(int(seed[1]))
      for order in ('little', 'big'):
        self.assertNotIn(seeds[-1].to_bytes(8, order), entry)
    self.assertLen(set(seeds), 3)
    state = dp_mlp.initial_state(processes[2])
    state = processes[2].next(state, dp_mlp.datasets(count=4)).state
    self.assertFalse(np.array_equal(_seed(state), [0, seeds[2]]))  # split every round

  def test_a_state_never_filled_refuses_to_noise(self):
    with noise_seeds.unset_noise_seeds():
      process = _process()
    state = dp_mlp.initial_state(process)
    np.testing.assert_array_equal(_seed(state), [0, noise_seeds.UNSET_NOISE_SEED])
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'noise seed was never set'):
      process.next(state, dp_mlp.datasets(count=4))

  def test_builds_that_differ_are_never_read(self):
    clips = iter([0.3, 0.4, 0.5])

    def build():
      self.builds.append(None)
      return _process(clip=next(clips))

    process_cache.learning_process(self.cache, _RECIPE, build)
    with self.assertLogs(level='WARNING') as logs:
      process_cache.learning_process(self.cache, _RECIPE, build)
    self.assertIn('differ', '\n'.join(logs.output))
    process = process_cache.learning_process(self.cache, _RECIPE, build)
    self.assertLen(self.builds, 3)
    self.assertEqual(_described(process.next.type_signature),
                     _described(_process(clip=0.5).next.type_signature))

  def test_a_damaged_entry_is_built_again(self):
    self._built_twice()
    path, entry = self._entry()
    with open(path, 'wb') as f:
      f.write(entry[:len(entry) // 2])
    with self.assertLogs(level='WARNING') as logs:
      process_cache.learning_process(self.cache, _RECIPE, self._build())
    self.assertIn(path, '\n'.join(logs.output))
    self.assertLen(self.builds, 2)
    self.assertEqual(process_cache._read(path).status, 'candidate')  # pylint: disable=protected-access
    # A confirmed entry whose types name a container that cannot be imported.
    os.remove(path)
    self._built_twice()
    entry = process_cache._read(path)  # pylint: disable=protected-access
    entry.types['next']['result']['container'] = 'no_such_module:Output'
    process_cache._write(path, entry)  # pylint: disable=protected-access
    with self.assertLogs(level='WARNING') as logs:
      process_cache.learning_process(self.cache, _RECIPE, self._build())
    self.assertIn('no_such_module', '\n'.join(logs.output))
    self.assertLen(self.builds, 4)

  def test_bad_arguments_are_named(self):
    with self.assertRaisesRegex(ValueError, '`recipe` must be JSON-able'):
      process_cache.learning_process(self.cache, {'model': object()}, self._build())
    with self.assertRaisesRegex(ValueError, '`modules`'):
      process_cache.learning_process(self.cache, _RECIPE, self._build(), modules=[np.int32])
    with self.assertRaisesRegex(TypeError, '`build` must return'):
      process_cache.learning_process(self.cache, _RECIPE, lambda: 'a process')

  def test_the_key_covers_the_recipe_and_the_source_of_the_named_modules(self):
    self.assertNotEqual(process_cache.recipe_key({'clip': 0.3}),
                        process_cache.recipe_key({'clip': 0.30000001}))
    self.assertEqual(process_cache.recipe_key({'a': 1, 'b': 2}),
                     process_cache.recipe_key({'b': 2, 'a': 1}))
    path = os.path.join(self.directory, 'model_module.py')
    module = mock.Mock(__file__=path, __name__='model_module')
    keys = []
    for source in ('LAYERS = 2\n', 'LAYERS = 3\n'):
      with open(path, 'w') as f:
        f.write(source)
      process_cache._file_digest.cache_clear()  # pylint: disable=protected-access
      keys.append(process_cache.recipe_key(_RECIPE, modules=[module]))
    self.assertNotEqual(keys[0], keys[1])
    self.assertNotIn(process_cache.recipe_key(_RECIPE), keys)


class AcrossProcessesTest(absltest.TestCase):

  def test_three_runs_build_build_and_read_each_with_its_own_seed(self):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
    # What a binary does: its own process, its cache, the process built (or read) and
    # initialised. Keras seeds its initializers from Python's `random`, seeded by the key.
    code = textwrap.dedent(f"""
        import tensorflow_federated as tff
        from fedasr_tff.runtime import compile_cache, inprocess_context, process_cache
        from tests.runtime import process_cache_test
        tff.framework.set_default_context(
            inprocess_context.InProcessContext(process_cache_test._no_fallback))
        built = []
        def build():
          built.append(1)
          return process_cache_test._process()
        process = process_cache.learning_process(
            compile_cache.CompileCache({directory!r}), process_cache_test._RECIPE, build)
        state = process.initialize()
        print('run', 'built' if built else 'read', process_cache_test._seed(state)[1],
              float(state.global_model_weights.trainable[0][0, 0]))
        """)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    runs = [subprocess.run([sys.executable, '-c', code], env=environment, check=True,
                           capture_output=True, text=True).stdout.split('run ')[-1].split()
            for _ in range(3)]
    self.assertEqual([run[0] for run in runs], ['built', 'built', 'read'])
    self.assertLen({run[1] for run in runs}, 3)
    # The initial weights are the recipe's, built or read.
    self.assertLen({run[2] for run in runs}, 1)


if __name__ == '__main__':
  absltest.main()
