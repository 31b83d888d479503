"""Start-up refusals of a binary, several in one interpreter.

`python -m experiments.train_federated --bad_flag` spends about 8 s of CPU importing TensorFlow
and TFF before it refuses, and CI has 2 cores. `refusals(module, cases)` starts one interpreter
that imports `module` once and runs each case as `python -m` would (`cli.run(module.main)` with
the case's arguments), capturing file descriptors 1 and 2 (so absl's usage errors, log lines and
an uncaught exception's traceback too) and resetting the flags between cases. One difference:
absl's help (`--helpshort`) lists the flags of the `__main__` module, which here is this one,
so the binary's own flags are missing from it (the binary's docstring is there).

Only for cases that end during start-up: a case that trains or starts a worker would leave state
for the next one. Run one case in a real `python -m` subprocess beside them when the exit itself
is what a test checks.
"""

import collections
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from typing import List
from typing import Sequence

from absl import flags

from experiments import cli

Result = collections.namedtuple('Result', ['returncode', 'stdout', 'stderr'])


def refusals(module: str, cases: Sequence[Sequence[str]], *, env: dict, cwd: str,
             timeout: float = 300) -> List[Result]:
  """The exit status and output of `python -m module *case` for each case, in one interpreter.

  Args:
    module: the binary, e.g. 'experiments.train_federated'.
    cases: each case's command-line arguments.
    env: the interpreter's environment (its PYTHONPATH must reach `module` and this file).
    cwd: its working directory.
    timeout: seconds for all cases.
  """
  with tempfile.TemporaryDirectory() as tmp:
    results = os.path.join(tmp, 'results.json')
    process = subprocess.run(
        [sys.executable, '-m', 'tests.experiments.start_up', module, results],
        input=json.dumps([list(case) for case in cases]), capture_output=True, text=True,
        env=env, cwd=cwd, timeout=timeout, check=False)
    if process.returncode or not os.path.exists(results):
      raise AssertionError(f'the start-up runner of {module} failed: {process.stderr[-3000:]}')
    with open(results) as f:
      return [Result(*result) for result in json.load(f)]


def _run_case(main, program: str, args: Sequence[str]) -> Result:
  """`cli.run(main)` with argv [program, *args], as `python -m` runs it; fds 1 and 2 captured."""
  with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.argv = [program, *args]  # absl's usage messages name sys.argv[0].
    try:
      try:
        cli.run(main, sys.argv)
        code = 0
      except SystemExit as e:
        # What the interpreter does with the code: None is 0; anything but an int is printed.
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
          print(e.code, file=sys.stderr)
      except BaseException:
        traceback.print_exc()  # An uncaught exception: the interpreter prints it and exits 1.
        code = 1
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      os.dup2(saved[0], 1)
      os.dup2(saved[1], 2)
      os.close(saved[0])
      os.close(saved[1])
      flags.FLAGS.unparse_flags()
    out.seek(0)
    err.seek(0)
    return Result(code, out.read(), err.read())


def _main(module: str, results: str) -> None:
  cases = json.load(sys.stdin)
  binary = importlib.import_module(module)
  sys.modules['__main__'].__doc__ = binary.__doc__  # What absl's usage message prints.
  with open(results, 'w') as f:
    json.dump([_run_case(binary.main, binary.__file__, case) for case in cases], f)


if __name__ == '__main__':
  _main(*sys.argv[1:])
