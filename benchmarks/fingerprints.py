r"""What the binaries write, as fingerprints: a check that a change of code changes no result.

Each task of --tasks (the short runs of `benchmarks.chaos`, fixed --seed and --noise_seed) runs
once to its end; its fingerprint is the SHA-256 of every array of every `model.npz` it writes
(name, dtype, shape and bytes) and of every `metrics.csv` without its timing columns. Written as
JSON with --out; with --compare, the fingerprints of an earlier run (say, of the code before a
restructuring) are compared and every difference is printed; the script then exits with 1.

  python -m benchmarks.fingerprints --out=/tmp/before.json     # on the old code
  python -m benchmarks.fingerprints --compare=/tmp/before.json # on the new code
"""

import csv
import hashlib
import json
import os
import sys
import tempfile
from typing import Dict
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

from benchmarks import chaos

# --tasks, --rounds and --work_dir are `benchmarks.chaos`'s flags, with shorter defaults here.
FLAGS = flags.FLAGS
FLAGS.set_default('tasks', ['fedavg_dp', 'mixed_fl', 'dga_rehearsal', 'retriever_local_dp',
                            'recipe'])
FLAGS.set_default('rounds', 4)
_OUT = flags.DEFINE_string('out', None, 'JSON file the fingerprints are written to.')
_COMPARE = flags.DEFINE_string('compare', None, 'JSON file of earlier fingerprints to compare.')


def _model_digest(path: str) -> str:
  digest = hashlib.sha256()
  with np.load(path, allow_pickle=False) as arrays:
    for name in sorted(arrays.files):
      value = arrays[name]
      digest.update(f'{name}|{value.dtype.str}|{value.shape}|'.encode())
      digest.update(np.ascontiguousarray(value).tobytes())
  return digest.hexdigest()


def _metrics_digest(path: str) -> str:
  with open(path, newline='') as f:
    rows = [{k: v for k, v in row.items() if not chaos.is_timing_column(k)}
            for row in csv.DictReader(f)]
  return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def fingerprint(output_dir: str) -> Dict[str, str]:
  """{file path under `output_dir`: digest} of every `model.npz` and `metrics.csv` there."""
  found = {}
  for folder, _, files in os.walk(output_dir):
    for name in files:
      path = os.path.join(folder, name)
      relative = os.path.relpath(path, output_dir)
      if relative.startswith('checkpoints') or '/checkpoints/' in relative:
        continue   # Checkpoints hold the state the model and released values come from.
      if name == 'model.npz':
        found[relative] = _model_digest(path)
      elif name == 'metrics.csv':
        found[relative] = _metrics_digest(path)
  return found


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  unknown = sorted(set(FLAGS.tasks) - set(chaos.TASKS))
  if unknown:
    raise app.UsageError(f'--tasks: unknown {", ".join(unknown)}; of {", ".join(chaos.TASKS)}.')
  earlier = None
  if _COMPARE.value:
    with open(_COMPARE.value) as f:
      earlier = json.load(f)
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix='fingerprints_')
  # The runs' compile and process caches in the work folder, not the user's.
  os.environ['XDG_CACHE_HOME'] = os.path.join(work_dir, 'cache')
  defined = chaos.tasks(work_dir, FLAGS.rounds)
  print(f'{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; {work_dir}')
  results, failures = {}, []
  for name in FLAGS.tasks:
    output_dir = os.path.join(work_dir, name)
    ended = chaos.run_once(defined[name], output_dir, os.path.join(work_dir, f'{name}.log'))
    if ended.returncode != 0:
      failures.append(f'{name}: exit status {ended.returncode}\n{ended.stderr_tail}')
      continue
    results[name] = fingerprint(output_dir)
    for path, digest in sorted(results[name].items()):
      print(f'{name}/{path}: {digest[:16]}')
    if earlier is not None:
      if name not in earlier:
        failures.append(f'{name}: not in {_COMPARE.value}')
      elif earlier[name] != results[name]:
        for path in sorted(set(earlier[name]) | set(results[name])):
          if earlier[name].get(path) != results[name].get(path):
            failures.append(f'{name}/{path}: {earlier[name].get(path, "absent")[:16]} before, '
                            f'{results[name].get(path, "absent")[:16]} now')
  if _OUT.value:
    with open(_OUT.value, 'w') as f:
      json.dump(results, f, indent=1, sort_keys=True)
  if earlier is not None and not failures:
    print(f'Every fingerprint equals {_COMPARE.value}\'s.')
  for failure in failures:
    print(failure, file=sys.stderr)
  if failures:
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
