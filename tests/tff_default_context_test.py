"""The warning of `fedasr_tff.tff_default_context`: once a process when our factories or
processes are built under TFF's own local C++ context; never under ours, under a context of the
user's own, or while TFF traces a computation."""

import contextlib
import inspect
from unittest import mock
import warnings

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import retrieval
from fedasr_tff import runtime
from fedasr_tff import tff_default_context

# Whether the context current when this module is imported, the one `import tensorflow_federated`
# set (pytest's conftest.py sets ours only later), is recognised. Not the context itself: kept
# until the interpreter's teardown, its `__del__` would fail there.
_RECOGNISED_AT_IMPORT = tff_default_context.starts_tff_worker(
    tff.framework.get_context_stack().current)

# Every public builder of a factory or a process, by the name the warning gives it.
_BUILDERS = {
    'aggregators.PerLayerDPFactory.gaussian_fixed': aggregators.PerLayerDPFactory.gaussian_fixed,
    'aggregators.PerLayerDPFactory.gaussian_adaptive':
        aggregators.PerLayerDPFactory.gaussian_adaptive,
    'aggregators.BoundedWeightDPFactory.gaussian_fixed':
        aggregators.BoundedWeightDPFactory.gaussian_fixed,
    'aggregators.BoundedWeightDPFactory.gaussian_adaptive':
        aggregators.BoundedWeightDPFactory.gaussian_adaptive,
    'algorithms.build_fed_avg_process': algorithms.build_fed_avg_process,
    'algorithms.compose_process': algorithms.compose_process,
    'algorithms.build_evaluation_process': algorithms.build_evaluation_process,
    'algorithms.build_local_training_client_work': algorithms.build_local_training_client_work,
    'algorithms.build_central_work': algorithms.build_central_work,
    'algorithms.build_dga_process': algorithms.build_dga_process,
    'algorithms.build_mixed_fl_process': algorithms.build_mixed_fl_process,
    'retrieval.build_retrieval_process': retrieval.build_retrieval_process,
}


def _tff_default_context():
  """A new context of the kind `import tensorflow_federated` sets (TFF's `__init__` calls
  `tff.backends.native.set_sync_local_cpp_execution_context()`); its worker starts on first use."""
  return tff.backends.native.create_sync_local_cpp_execution_context()


def _build_factories_twice():
  for _ in range(2):
    aggregators.PerLayerDPFactory.gaussian_fixed(1.0, 4, 1.0)
    aggregators.BoundedWeightDPFactory.gaussian_fixed(1.0, 4, 1.0, min_weight=0.5)


class TFFDefaultContextTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(mock.patch.object(tff_default_context, '_warned', False))

  def _warnings(self, build):
    """The `TFFWorkerWarning`s that `build()` issues."""
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      build()
    return [w for w in caught if issubclass(w.category, tff_default_context.TFFWorkerWarning)]

  def test_recognises_the_context_tff_sets_on_import_and_its_other_local_ones(self):
    self.assertTrue(_RECOGNISED_AT_IMPORT)
    for context in (_tff_default_context(),
                    tff.backends.native.create_async_local_cpp_execution_context(),
                    tff.backends.test.create_sync_test_cpp_execution_context()):
      self.assertTrue(tff_default_context.starts_tff_worker(context), context)

  def test_warns_once_under_tffs_default_context_naming_the_call_to_make(self):
    with tff.framework.get_context_stack().install(_tff_default_context()):
      caught = self._warnings(_build_factories_twice)
    self.assertLen(caught, 1)
    message = str(caught[0].message)
    self.assertNotIn('\n', message)
    self.assertStartsWith(message, 'fedasr_tff.aggregators.PerLayerDPFactory.gaussian_fixed ')
    self.assertIn('fedasr_tff.runtime.set_inprocess_execution_context()', message)
    self.assertIn('set_local_cpp_execution_context()', message)
    self.assertIn('every network interface', message)
    # The line is the caller's, not the library's.
    self.assertEqual(caught[0].filename, __file__)

  def test_every_public_builder_warns_first(self):
    for name, builder in _BUILDERS.items():
      with self.subTest(name):
        tff_default_context._warned = False  # pylint: disable=protected-access
        # Placeholder arguments: the warning comes before anything reads them.
        arguments = {parameter.name: None
                     for parameter in inspect.signature(builder).parameters.values()
                     if parameter.default is inspect.Parameter.empty
                     and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                inspect.Parameter.VAR_KEYWORD)}

        def build(builder=builder, arguments=arguments):
          with contextlib.suppress(Exception):
            builder(**arguments)

        with tff.framework.get_context_stack().install(_tff_default_context()):
          caught = self._warnings(build)
        self.assertLen(caught, 1)
        self.assertStartsWith(str(caught[0].message), f'fedasr_tff.{name} ')

  def test_silent_under_our_contexts(self):
    for set_context in (runtime.set_inprocess_execution_context,
                        runtime.set_local_cpp_execution_context):  # last: what conftest sets
      with self.subTest(set_context.__name__):
        set_context()
        self.assertFalse(tff_default_context.starts_tff_worker(
            tff.framework.get_context_stack().current))
        self.assertEmpty(self._warnings(_build_factories_twice))

  def test_silent_under_a_context_of_the_users_own(self):
    own = tff.framework.SyncExecutionContext(
        tff.framework.ResourceManagingExecutorFactory(lambda cardinalities: None))
    with tff.framework.get_context_stack().install(own):
      self.assertEmpty(self._warnings(_build_factories_twice))

  def test_silent_and_working_while_tff_traces_a_computation(self):

    def trace():

      @tff.tensorflow.computation
      def in_tensorflow():
        aggregators.PerLayerDPFactory.gaussian_fixed(1.0, 4, 1.0)
        return tf.constant(1)

      @tff.federated_computation
      def federated():
        aggregators.PerLayerDPFactory.gaussian_fixed(1.0, 4, 1.0)
        return tff.federated_value(np.int32(1), tff.SERVER)

      self.assertIsInstance(in_tensorflow, tff.Computation)
      self.assertIsInstance(federated, tff.Computation)

    with tff.framework.get_context_stack().install(_tff_default_context()):
      self.assertEmpty(self._warnings(trace))


if __name__ == '__main__':
  absltest.main()
