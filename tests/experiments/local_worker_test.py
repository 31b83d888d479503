"""Tests of `--allow_exposed_worker`: a binary on a machine without network namespaces stops with
an error naming the flag, and starts an exposed worker only when the flag is given (passing the
choice on to the binary's own subprocesses)."""

import os
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver

from experiments import local_worker
from fedasr_tff.runtime import execution_context


class SetContextTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.addCleanup(execution_context.set_local_cpp_execution_context)  # isolated again
    no_namespaces = mock.patch.object(execution_context, 'network_namespace_prefix',
                                      return_value=None)
    no_namespaces.start()
    self.addCleanup(no_namespaces.stop)
    environment = mock.patch.dict(os.environ)
    environment.start()
    self.addCleanup(environment.stop)
    os.environ.pop(execution_context.ALLOW_EXPOSED_WORKER_VARIABLE, None)
    if not flags.FLAGS.is_parsed():
      flags.FLAGS(['local_worker_test'])

  def test_without_namespaces_the_binary_stops_naming_the_flag(self):
    with self.assertRaisesRegex(app.UsageError, '--allow_exposed_worker'):
      local_worker.set_context()
    self.assertNotIn(execution_context.ALLOW_EXPOSED_WORKER_VARIABLE, os.environ)

  def test_the_flag_starts_an_exposed_worker_and_passes_the_choice_on(self):
    with flagsaver.flagsaver(allow_exposed_worker=True):
      local_worker.set_context()
    self.assertFalse(execution_context._worker.isolated)  # pylint: disable=protected-access
    self.assertEqual(os.environ[execution_context.ALLOW_EXPOSED_WORKER_VARIABLE], '1')


if __name__ == '__main__':
  absltest.main()
