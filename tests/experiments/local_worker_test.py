"""Tests of `--allow_exposed_worker`: a binary on a machine without network namespaces stops with
an error naming the flag, and starts an exposed worker only when the flag is given (passing the
choice on to the binary's own subprocesses), with either engine; and the rest of `set_context`:
--compile_cache_dir, and the imports' objects frozen out of the garbage collector's way; and the
one line a binary ends with when its worker dies (also while `common.start_binary` starts it) or
its disk is full."""

import contextlib
import errno
import gc
import io
import os
import pathlib
import re
import shutil
import sys
import tempfile
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import numpy as np
import tensorflow_federated as tff

from experiments import common
from experiments import local_worker
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import inprocess_context


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
      local_worker.set_context(engine='worker')
    self.assertFalse(execution_context._worker.isolated)  # pylint: disable=protected-access
    self.assertEqual(os.environ[execution_context.ALLOW_EXPOSED_WORKER_VARIABLE], '1')

  def test_the_context_freezes_what_the_imports_made(self):
    with mock.patch.object(gc, 'freeze') as freeze, flagsaver.flagsaver(allow_exposed_worker=True):
      local_worker.set_context()
    freeze.assert_called_once_with()

  def test_the_in_process_engine_starts_the_exposed_worker_when_first_needed(self):
    with flagsaver.flagsaver(allow_exposed_worker=True):
      local_worker.set_context()  # --engine's default: in process
    self.assertIsInstance(tff.framework.get_context_stack().current,
                          inprocess_context.InProcessContext)
    before = execution_context._worker  # pylint: disable=protected-access

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def at_clients(values):  # no round: it runs on the worker
      return values

    self.assertEqual(at_clients([1.0, 2.0]), [1.0, 2.0])
    worker = execution_context._worker  # pylint: disable=protected-access
    self.assertIsNot(worker, before)
    self.assertFalse(worker.isolated)
    self.assertIsNone(worker.process.poll())


  def test_a_compile_cache_others_can_write_stops_the_binary_naming_the_flag(self):
    directory = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, directory)
    os.chmod(directory, 0o777)
    with flagsaver.flagsaver(allow_exposed_worker=True, compile_cache_dir=directory):
      with self.assertRaisesRegex(app.UsageError, '--compile_cache_dir: .* writable by group'):
        local_worker.set_context()

  def test_the_default_compile_cache_is_used_and_one_that_cannot_be_made_is_skipped(self):
    base = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, base)
    os.environ['XDG_CACHE_HOME'] = base
    with flagsaver.flagsaver(allow_exposed_worker=True):
      local_worker.set_context()
    context = tff.framework.get_context_stack().current
    self.assertEqual(context._cache.directory,  # pylint: disable=protected-access
                     os.path.join(base, 'fedasr_tff', 'compiled'))
    not_a_directory = os.path.join(base, 'file')
    pathlib.Path(not_a_directory).write_text('')
    os.environ['XDG_CACHE_HOME'] = not_a_directory  # the default cannot be made under a file
    with flagsaver.flagsaver(allow_exposed_worker=True):
      with self.assertLogs(level='WARNING') as logs:
        local_worker.set_context()
    self.assertIn('No compile cache', '\n'.join(logs.output))
    self.assertIsNone(tff.framework.get_context_stack().current._cache)  # pylint: disable=protected-access
    with flagsaver.flagsaver(allow_exposed_worker=True, compile_cache_dir=''):
      local_worker.set_context()
    self.assertIsNone(tff.framework.get_context_stack().current._cache)  # pylint: disable=protected-access

  def test_the_default_engine_is_the_one_the_readme_names(self):
    # README.md is a symlink under Bazel's runfiles (data //:docs); its real folder is the tree.
    readme = pathlib.Path(os.path.realpath(
        pathlib.Path(__file__).resolve().parent.parent.parent / 'README.md'))
    named = re.findall(r'Rounds run by default\s+`--engine=(\w+)`', readme.read_text())
    self.assertEqual(named, [common.ENGINE.default])
    self.assertEqual(common.ENGINE.default, 'inprocess')
    with flagsaver.flagsaver(allow_exposed_worker=True):  # namespaces are mocked away (setUp)
      local_worker.set_context()  # as start_binary calls it without --engine
    self.assertIsInstance(tff.framework.get_context_stack().current,
                          inprocess_context.InProcessContext)


class OutsideCauseTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not flags.FLAGS.is_parsed():
      flags.FLAGS(['local_worker_test'])
    hook = mock.patch.object(sys, 'excepthook', sys.__excepthook__)
    hook.start()
    self.addCleanup(hook.stop)

  def _reported(self, error):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
      sys.excepthook(type(error), error, error.__traceback__)
    return stderr.getvalue()

  def test_a_worker_killed_while_the_binary_starts_it_ends_it_with_one_line(self):
    # --engine=worker starts the worker in start_binary: the chaos benchmark killed it there,
    # and the binary printed a traceback, its hook not yet set.
    died = execution_context.WorkerDiedError('not serving', 123, -9)
    with mock.patch.object(local_worker, 'set_context', side_effect=died), \
        self.assertRaises(execution_context.WorkerDiedError):
      common.start_binary()
    self.assertRegex(self._reported(died), r'^\S+: TFF worker_binary 123 ended \(exit status -9, '
                     r'SIGKILL\); rerun the same command to resume from the latest checkpoint\.\n$')

  def test_a_full_disk_ends_the_binary_with_one_line_naming_the_file(self):
    with mock.patch.object(local_worker, 'set_context'):
      common.start_binary()
    try:
      try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), '/out/metrics.csv')
      except OSError as e:
        raise RuntimeError('TFF re-raised it') from e
    except RuntimeError as e:
      reported = self._reported(e)
    self.assertRegex(reported, r'^\S+: No space left on device writing /out/metrics\.csv; free '
                     r'space and rerun the same command to resume from the latest checkpoint\.\n$')


if __name__ == '__main__':
  absltest.main()
