"""`fedasr_tff` as a library: a wheel and `pip install .` install it with its dependencies.

Each install goes into a scratch venv that reuses the set-up's packages (a .pth file naming the
site-packages of the interpreter running the test) and runs with `--no-index`: every dependency
pyproject.toml declares must then be satisfied by requirements.lock, with no network. The
installed library is imported from a directory outside the repository.

setuptools writes `build/` and `*.egg-info` into the tree it builds, and packs whatever an earlier
build left in `build/lib`, so the tests build from a fresh copy of the repository.
"""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = 'fedasr_tff'
# Not sources: the set-up's venv, Bazel's output links, earlier builds, caches, demo output.
_NOT_COPIED = shutil.ignore_patterns('.git', '.venv', 'bazel-*', 'build', '*.egg-info',
                                     '__pycache__', '.pytest_cache', '.ruff_cache', 'demo_output')

# Runs in the scratch venv: the public aggregator factories, one built into a TFF process, and
# the published privacy table (package data).
_USE_THE_LIBRARY = """
import numpy as np
import tensorflow_federated as tff

import fedasr_tff
from fedasr_tff import aggregators
from fedasr_tff import privacy

factory = aggregators.PerLayerDPFactory.gaussian_fixed(
    noise_multiplier=1.0, clients_per_round=4, clip=1.0, allocation='dim')
assert isinstance(factory, tff.aggregators.UnweightedAggregationFactory), factory
process = factory.create(tff.types.to_type([(np.float32, [3]), (np.float32, [2, 2])]))
assert isinstance(process, tff.templates.AggregationProcess), process
assert privacy.read_privacy_table(), 'empty privacy table'
print(fedasr_tff.__file__)
"""


def _run(args, cwd):
  env = {name: value for name, value in os.environ.items()
         if not name.startswith('PIP_') and name not in ('PYTHONPATH', 'PYTHONHOME')}
  # No user or machine pip configuration (extra indexes, find-links, constraints).
  env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK='1', PYTHONNOUSERSITE='1',
             TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
  if result.returncode:
    raise AssertionError(f'{args} failed ({result.returncode}):\n{result.stdout[-3000:]}\n'
                         f'{result.stderr[-3000:]}')
  return result.stdout


class PackagingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._scratch = tempfile.mkdtemp()
    cls._source = os.path.join(cls._scratch, 'source')
    shutil.copytree(_ROOT, cls._source, symlinks=True, ignore=_NOT_COPIED)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls._scratch, ignore_errors=True)
    super().tearDownClass()

  def _make_venv(self, name):
    """A venv without pip of its own that sees the set-up's packages after its own."""
    venv = os.path.join(self._scratch, name)
    _run([sys.executable, '-m', 'venv', '--without-pip', venv], cwd=self._scratch)
    python = os.path.join(venv, 'bin', 'python')
    site_packages = _run([python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'],
                         cwd=self._scratch).strip()
    ours = {sysconfig.get_path('purelib'), sysconfig.get_path('platlib')}
    with open(os.path.join(site_packages, '_fedasr_setup_packages.pth'), 'w') as f:
      f.write(''.join(f'{path}\n' for path in sorted(ours)))
    return venv, python

  def _pip_install(self, python, target):
    _run([python, '-m', 'pip', 'install', '--no-index', '--no-build-isolation', target],
         cwd=self._scratch)

  def test_wheel_holds_the_package_only_and_installs_with_its_dependencies(self):
    dist = os.path.join(self._scratch, 'dist')
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-index', '--no-build-isolation', '--no-deps',
          '--wheel-dir', dist, self._source], cwd=self._scratch)
    (wheel,) = glob.glob(os.path.join(dist, '*.whl'))
    with zipfile.ZipFile(wheel) as archive:
      names = archive.namelist()
    tops = {name.split('/')[0] for name in names}
    self.assertEqual({top for top in tops if not top.endswith('.dist-info')}, {_PACKAGE})
    sources = {os.path.relpath(path, self._source)
               for path in glob.glob(os.path.join(self._source, _PACKAGE, '**', '*.py'),
                                     recursive=True)}
    self.assertEqual({name for name in names if name.endswith('.py')}, sources)
    self.assertIn('fedasr_tff/privacy/data/privacy_tables.csv', names)
    self.assertNotIn('BUILD', {os.path.basename(name) for name in names})

    venv, python = self._make_venv('wheel_venv')
    self._pip_install(python, wheel)
    outside = self.enterContext(tempfile.TemporaryDirectory())
    module_file = _run([python, '-c', _USE_THE_LIBRARY], cwd=outside).strip().splitlines()[-1]
    self.assertStartsWith(os.path.realpath(module_file), os.path.realpath(venv) + os.sep)

  def test_pip_install_of_the_source_tree(self):
    venv, python = self._make_venv('source_venv')
    self._pip_install(python, self._source)
    outside = self.enterContext(tempfile.TemporaryDirectory())
    # TensorFlow-free: the installed package and its data, not the repository's.
    module_file = _run(
        [python, '-c', 'from fedasr_tff import privacy; assert privacy.read_privacy_table(); '
                       'print(privacy.__file__)'], cwd=outside).strip()
    self.assertStartsWith(os.path.realpath(module_file), os.path.realpath(venv) + os.sep)


if __name__ == '__main__':
  absltest.main()
