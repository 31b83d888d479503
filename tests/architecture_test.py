"""The house as docs/architecture.md draws it: wings apart, layers under them that import
neither, no plotting in the library."""

import ast
import pathlib
import subprocess
import sys

from absl.testing import absltest

_LIBRARY = pathlib.Path(__file__).resolve().parent.parent / 'fedasr_tff'
_WINGS = ('speech', 'retrieval')


def _imported_packages(path: pathlib.Path):
  """The `fedasr_tff` packages a module imports (`fedasr_tff.X...`, `from fedasr_tff import X`)."""
  packages = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('fedasr_tff'):
      parts = node.module.split('.')
      packages.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
    elif isinstance(node, ast.Import):
      packages.update(a.name.split('.')[1] for a in node.names
                      if a.name.startswith('fedasr_tff.'))
  return packages


def _loaded_modules(statement: str):
  """The `fedasr_tff` modules a fresh interpreter has loaded after `statement`."""
  code = (f'import sys\n{statement}\n'
          'print(" ".join(sorted(m for m in sys.modules if m.startswith("fedasr_tff"))))')
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          check=True, cwd=_LIBRARY.parent)
  return result.stdout.strip().splitlines()[-1].split()


class ArchitectureTest(absltest.TestCase):

  def test_neither_wing_imports_the_other_and_no_layer_under_them_imports_a_wing(self):
    for path in sorted(_LIBRARY.rglob('*.py')):
      package = path.relative_to(_LIBRARY).parts[0]
      others = set(_WINGS) - {package}
      self.assertFalse(_imported_packages(path) & others, f'{path} imports {others}')

  def test_importing_the_retriever_loads_no_speech_module(self):
    loaded = _loaded_modules('import fedasr_tff.retrieval')
    self.assertIn('fedasr_tff.retrieval.process', loaded)   # The statement did import it.
    self.assertEqual([m for m in loaded if m.startswith('fedasr_tff.speech')], [])

  def test_importing_the_aggregators_loads_no_model(self):
    loaded = _loaded_modules('import fedasr_tff.aggregators')
    self.assertIn('fedasr_tff.aggregators.per_layer_dp', loaded)
    wings = [m for m in loaded if m.split('.')[1:2] in (['speech'], ['retrieval'], ['text_models'])]
    self.assertEqual(wings, [])

  def test_importing_the_library_loads_no_plotting_library(self):
    modules = sorted('fedasr_tff.' + '.'.join(p.relative_to(_LIBRARY).with_suffix('').parts)
                     for p in _LIBRARY.rglob('*.py') if p.name != '__init__.py'
                     and p.name != 'namespace_bridge.py')   # A script run on its own.
    code = ('import importlib, sys\n'
            f'for name in {modules!r}: importlib.import_module(name)\n'
            'print(sorted(m for m in sys.modules if m.split(".")[0] in '
            '("matplotlib", "pylab", "seaborn")))')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            check=True, cwd=_LIBRARY.parent)
    self.assertEqual(result.stdout.strip().splitlines()[-1], '[]')


  def test_the_transcription_binary_imports_no_tff(self):
    # It runs no TFF computation, and importing TFF costs ~7 s of start-up.
    code = ('import sys, experiments.transcribe\n'
            'print(sorted(m for m in sys.modules if m.startswith("tensorflow_federated"))[:3])')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            check=True, cwd=_LIBRARY.parent)
    self.assertEqual(result.stdout.strip().splitlines()[-1], '[]')


if __name__ == '__main__':
  absltest.main()
