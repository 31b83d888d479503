r"""Faults survived: every federated task killed again and again, resumed, and compared bit for bit.

For each task of --tasks, a short run with fixed --seed and --noise_seed runs once uninterrupted
(the reference), then once more killed --kills times with SIGKILL and started again with the same
command after each kill. The kills fall, in turn, at these moments (the checkpoint folder watched
with inotify, so that a kill lands inside the write it names):

- `random`: a moment drawn uniformly over the time the run still needs (the reference's start-up
  and rounds);
- `checkpoint`: a temporary checkpoint folder (`program_state_N_tempX`) was just made: the kill
  lands while `state.npz` is written and synced, or just after;
- `journal`: the release journal's temporary file was just made (`held_releases.json.tmp`);
- `covered`: a checkpoint was just renamed into place, before the rounds it covers are released;
- `release`: `metrics.csv` is being written;
- `worker`: the run's TFF worker, at a random moment (tasks that run one): the run then ends
  with one line naming the worker, and must print no traceback.

A trigger fires at its n-th event of the attempt, n drawn so that the run keeps rounds for the
kills still to come. The table gives per task: the kills delivered (and how many landed inside a
write: the temporary file was still there), the resumes, tracebacks printed, whether the final
state is bit-identical to the reference (the latest checkpoint's every array and every
`model.npz`), whether the released values are (`metrics.csv` but timings), and over the released
rounds: rows duplicated and missing in `metrics.csv` (both must be 0), TensorBoard steps written
twice with one value (a replay after a kill between a checkpoint and its release) and with two
values (must be 0), and the wall times. A task that runs in process is also watched for a TFF
worker started all the same (a failure, printed below the table).

  python -m benchmarks.chaos --kills=10 --seed=0          # all six tasks
  python -m benchmarks.chaos --tasks=fedavg_dp --kills=3
"""

import atexit
import collections
import csv
import ctypes
import dataclasses
import glob
import json
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict
from typing import List
from typing import Optional
from typing import Sequence
from typing import Tuple

from absl import app
from absl import flags
import numpy as np
import psutil
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.runtime import execution_context
from fedasr_tff.speech.data import corpora
from fedasr_tff.speech.data import synthetic

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = ('fedavg_dp', 'fedavg_dp_worker', 'mixed_fl', 'dga_rehearsal', 'retriever_local_dp',
         'recipe')
_TASKS = flags.DEFINE_list('tasks', list(TASKS), f'Tasks to run, of {", ".join(TASKS)}.')
_KILLS = flags.DEFINE_integer('kills', 10, 'SIGKILLs per task.', lower_bound=0)
_ROUNDS = flags.DEFINE_integer('rounds', 16, 'Rounds of each federated run.', lower_bound=2)
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the kills\' moments and kinds.')
_WORK_DIR = flags.DEFINE_string('work_dir', None, 'Folder for the corpora and runs (default: a '
                                'temporary folder, removed at the end).')

KINDS = ('random', 'checkpoint', 'journal', 'covered', 'release', 'worker')
# The inotify events that name a moment: (kind, event mask, file name pattern).
_IN_MODIFY, _IN_CREATE, _IN_MOVED_TO, _IN_ISDIR = 0x2, 0x100, 0x80, 0x40000000
_MOMENTS = {
    'checkpoint': (_IN_CREATE, re.compile(r'program_state_\d+_temp\d+$')),
    'journal': (_IN_CREATE, re.compile(r'held_releases\.json\.tmp$')),
    'covered': (_IN_MOVED_TO, re.compile(r'program_state_\d+$')),
    'release': (_IN_CREATE | _IN_MODIFY, re.compile(r'metrics\.csv(_temp\d+)?$')),
}
_SEEDS = ('--seed=1', '--noise_seed=3')


@dataclasses.dataclass(frozen=True)
class Task:
  """A binary's short run: `module` with `flags`, whose federated runs write to `runs` (folders
  under the output directory, '' for itself), and `worker` if a TFF worker runs its rounds."""
  module: str
  flags: Tuple[str, ...]
  runs: Tuple[str, ...] = ('',)
  worker: bool = True
  models: Tuple[str, ...] = ()  # Other model files compared (beside each run's model.npz).


def speech_corpus(directory: str) -> str:
  """A synthetic corpus of 6 speakers (the end-to-end tests' helper), its LibriSpeech folder."""
  synthetic.make_corpus(directory, num_speakers=6, mean_utterances=2, skew=0.0, seed=0,
                        words_per_utterance=(1, 2))
  return os.path.join(directory, 'librispeech')


def manifest(directory: str) -> str:
  """The corpus at `directory` as a manifest of the user's own (`experiments.recipe`)."""
  with open(os.path.join(directory, 'all.tsv'), 'w') as f:
    f.write('path\ttranscript\tspeaker\n')
    for u in corpora.read_librispeech(os.path.join(directory, 'librispeech'), 'train'):
      f.write(f'{os.path.relpath(u.path, directory)}\t{u.transcript}\tspk{u.speaker}\n')
  return 'all.tsv'


def tasks(work_dir: str, rounds: int) -> Dict[str, Task]:
  """The six tasks, on a corpus written under `work_dir`, each `rounds` rounds long."""
  corpus_dir = os.path.join(work_dir, 'corpus')
  librispeech = speech_corpus(corpus_dir)
  split = manifest(corpus_dir)
  speech = (f'--corpus_dir={librispeech}', '--model_config=tiny', '--cohort_size=2',
            f'--rounds={rounds}', '--local_steps=1', '--checkpoint_every=1', '--eval_every=4',
            '--sigma_dp=0.01', '--clip=1.0', '--server_lr=0.01', '--noprogress',
            f'--feature_cache_dir={os.path.join(work_dir, "features")}', *_SEEDS)
  central = ('--speakers=federated', '--central_split=train', '--central_speakers=seed')
  return {
      'fedavg_dp': Task('experiments.train_federated', (*speech, '--speakers=all'),
                        worker=False),
      'fedavg_dp_worker': Task('experiments.train_federated',
                               (*speech, '--speakers=all', '--engine=worker')),
      'mixed_fl': Task('experiments.train_federated',
                       (*speech, *central, '--mixed=two_way', '--central_weight=0.3')),
      'dga_rehearsal': Task('experiments.train_federated',
                            (*speech, *central, '--aggregation=dga_softmax', '--dga_beta=0.1',
                             '--dga_loss_clip=80', '--server_optimizer=adam',
                             '--rehearsal_steps=1')),
      'retriever_local_dp': Task('experiments.train_retriever', (
          f'--rounds={rounds}', '--local_dp=fixed', '--max_classes=3',
          '--max_class_examples=5', '--min_class_examples=5', '--max_length=16',
          '--noprogress', f'--feature_cache_dir={os.path.join(work_dir, "text_features")}',
          *_SEEDS)),
      # The recipe in process, as by default: no worker.
      'recipe': Task('experiments.recipe', (
          f'--corpus_dir={corpus_dir}', '--layout=manifest', f'--split={split}',
          '--seed_steps=20', f'--rounds={max(2, rounds // 2)}', '--cohort_size=2',
          '--local_steps=1', '--eval_every=1', '--noprogress', *_SEEDS),
          runs=('fl_no_noise', 'fl_dp'), worker=False, models=('seed/model.npz',)),
  }


class _Inotify:
  """The creations, renames and writes under a folder, as they happen (Linux inotify; every
  folder made under it is watched too)."""

  def __init__(self, root: str):
    self._libc = ctypes.CDLL(None, use_errno=True)
    self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if self._fd < 0:
      raise OSError(ctypes.get_errno(), 'inotify_init1')
    self._folders = {}
    self._watch(root)

  def _watch(self, folder: str) -> None:
    mask = _IN_CREATE | _IN_MOVED_TO | _IN_MODIFY
    descriptor = self._libc.inotify_add_watch(self._fd, folder.encode(), mask)
    if descriptor >= 0:   # A folder removed meanwhile is not watched.
      self._folders[descriptor] = folder
      for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
          self._watch(entry.path)

  def events(self, timeout: float) -> List[Tuple[int, str]]:
    """[(mask, path)] that happened, waiting at most `timeout` seconds for the first."""
    if not select.select([self._fd], [], [], timeout)[0]:
      return []
    data, events, offset = os.read(self._fd, 65536), [], 0
    while offset < len(data):
      descriptor, mask, _, length = struct.unpack_from('iIII', data, offset)
      name = data[offset + 16:offset + 16 + length].rstrip(b'\0').decode()
      offset += 16 + length
      path = os.path.join(self._folders.get(descriptor, ''), name)
      if mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
        self._watch(path)
      events.append((mask, path))
    return events

  def close(self) -> None:
    os.close(self._fd)


@dataclasses.dataclass
class Attempt:
  """One start of a run: how it ended."""
  kind: Optional[str]      # The kill's kind, or None if it ran to its end.
  inside_write: bool       # The kill landed while a temporary file of a write was there.
  returncode: int
  traceback: bool          # stderr holds a traceback.
  stderr_tail: str
  stray_worker: bool = False  # A TFF worker ran under a task that runs none (`Task.worker`).


def _env() -> Dict[str, str]:
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
              PYTHONPATH=os.pathsep.join([_ROOT] + [p for p in sys.path if p]))


def _workers(process: subprocess.Popen) -> List[psutil.Process]:
  try:
    return [c for c in psutil.Process(process.pid).children(recursive=True)
            if c.name() == execution_context.WORKER_PROCESS_NAME]
  except psutil.NoSuchProcess:
    return []


def _temporary_files(output_dir: str) -> List[str]:
  return [path for path in glob.glob(os.path.join(output_dir, '**'), recursive=True)
          if re.search(r'(_temp\d+|\.tmp|\.partial)$', path)]


def run_once(task: Task, output_dir: str, log_path: str, kind: Optional[str] = None,
             nth: int = 1, delay: float = 0.0) -> Attempt:
  """Starts `task` on `output_dir` and, for a `kind`, kills it at that moment's `nth` event
  (`random`, `worker`: after `delay` seconds); returns how it ended."""
  os.makedirs(output_dir, exist_ok=True)
  watcher = _Inotify(output_dir)
  left_before = set(_temporary_files(output_dir))
  command = [sys.executable, '-m', task.module, f'--output_dir={output_dir}', *task.flags]
  with open(log_path, 'a') as log, tempfile.TemporaryFile('w+') as stderr:
    log.write(f'\n== {kind or "to the end"} (n={nth}, delay={delay:.2f})\n')
    log.flush()
    process = subprocess.Popen(command, stdout=log, stderr=stderr, text=True, env=_env(),
                               cwd=_ROOT)
    started, seen, fired, stray = time.monotonic(), 0, False, False
    # A task that runs no worker is watched to its end for one that starts all the same.
    while process.poll() is None and ((kind is not None and not fired) or not task.worker):
      events = watcher.events(0.05)
      if not task.worker and not stray:
        stray = bool(_workers(process))
      if kind is None or fired:
        continue
      if kind in ('random', 'worker'):
        if time.monotonic() - started < delay:
          continue
        targets = [process] if kind == 'random' else _workers(process)
        if kind == 'worker' and not targets:
          continue   # No worker yet: its first round starts it.
      else:
        mask, pattern = _MOMENTS[kind]
        seen += sum(1 for m, path in events if m & mask and pattern.search(path))
        if seen < nth:
          continue
        targets = [process]
      for target in targets:
        try:
          target.send_signal(signal.SIGKILL)
        except (ProcessLookupError, psutil.NoSuchProcess):
          pass
      fired = True
    process.wait()
    watcher.close()
    stderr.seek(0)
    err = stderr.read()
    log.write(err)
    # A write the kill cut short leaves its temporary file (no clean-up runs after SIGKILL).
    inside = fired and bool(set(_temporary_files(output_dir)) - left_before)
    log.write(f'== exit status {process.returncode}' + (', inside a write' if inside else '')
              + '\n')
    log.flush()
  return Attempt(kind if fired else None, inside, process.returncode, 'Traceback' in err,
                 err[-2000:], stray)


def _arrays(path: str) -> Dict[str, np.ndarray]:
  with np.load(path, allow_pickle=False) as f:
    return {name: f[name] for name in f.files}


def _same_arrays(a: str, b: str) -> bool:
  want, got = _arrays(a), _arrays(b)
  return want.keys() == got.keys() and all(
      want[k].dtype == got[k].dtype and want[k].shape == got[k].shape and
      want[k].tobytes() == got[k].tobytes() for k in want)


def _latest_state(run_dir: str) -> str:
  versions = [int(m.group(1)) for name in os.listdir(os.path.join(run_dir, 'checkpoints'))
              if (m := re.fullmatch(r'program_state_(\d+)', name))]
  return os.path.join(run_dir, 'checkpoints', f'program_state_{max(versions)}', 'state.npz')


def _rows(run_dir: str) -> List[Dict[str, str]]:
  with open(os.path.join(run_dir, 'metrics.csv'), newline='') as f:
    return list(csv.DictReader(f))


def is_timing_column(column: str) -> bool:
  """Whether a `metrics.csv` column holds a wall time (differs from run to run)."""
  return bool(re.search(r'seconds|time', column))


def _tensorboard(run_dir: str) -> Dict[Tuple[str, int], List[bytes]]:
  """{(tag, step): [value bytes of each event]} over every event file of the run."""
  values = collections.defaultdict(list)
  for path in sorted(glob.glob(os.path.join(run_dir, 'tensorboard', 'events.*'))):
    try:
      for record in tf.data.TFRecordDataset(path):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for value in event.summary.value:
          values[(value.tag, event.step)].append(value.SerializeToString())
    except tf.errors.DataLossError:
      pass  # A record torn by a kill: TensorBoard stops reading the file there too.
  return values


@dataclasses.dataclass
class Comparison:
  """The chaos run against the reference."""
  bit_identical: bool = True
  released_identical: bool = True
  duplicated: int = 0
  missing: int = 0
  tensorboard_replayed: int = 0
  tensorboard_two_values: int = 0
  differences: List[str] = dataclasses.field(default_factory=list)


def compare(task: Task, reference: str, chaos: str) -> Comparison:
  """The final state and releases of `chaos` against `reference` (module docstring)."""
  result = Comparison()
  models = [*[os.path.join(run, 'model.npz') for run in task.runs], *task.models]
  for run in task.runs:
    models.append(os.path.relpath(_latest_state(os.path.join(reference, run)), reference))
  for model in models:
    if not os.path.isfile(os.path.join(chaos, model)) or not _same_arrays(
        os.path.join(reference, model), os.path.join(chaos, model)):
      result.bit_identical = False
      result.differences.append(model)
  for run in task.runs:
    want, got = _rows(os.path.join(reference, run)), _rows(os.path.join(chaos, run))
    keys = collections.Counter(row['key'] for row in got)
    result.duplicated += sum(count - 1 for count in keys.values())
    result.missing += len({row['key'] for row in want} - set(keys))
    strip = lambda rows: [{k: v for k, v in row.items() if not is_timing_column(k)} for row in rows]  # noqa: E731
    if strip(want) != strip(got):
      result.released_identical = False
      result.differences.append(os.path.join(run, 'metrics.csv'))
    for (tag, _), values in _tensorboard(os.path.join(chaos, run)).items():
      if len(set(values)) > 1:
        result.tensorboard_two_values += 1
        result.differences.append(f'{run}/tensorboard {tag}')
      elif len(values) > 1:
        result.tensorboard_replayed += 1
  return result


def _checkpointed_rounds(task: Task, output_dir: str) -> int:
  """Rounds of the task's runs covered by a checkpoint so far."""
  done = 0
  for run in task.runs:
    folder = os.path.join(output_dir, run, 'checkpoints')
    if os.path.isdir(folder):
      done += max([int(m.group(1)) for name in os.listdir(folder)
                   if (m := re.fullmatch(r'program_state_(\d+)', name))], default=0)
  return done


@dataclasses.dataclass
class Outcome:
  """What `run_task` measured."""
  kills: collections.Counter
  inside_write: int
  resumes: int
  tracebacks: int
  comparison: Comparison
  reference_seconds: float
  chaos_seconds: float
  failed: Optional[str] = None
  stray_workers: int = 0  # Starts of a task that runs no worker during which one ran.


def run_task(task: Task, work_dir: str, kills: int, rounds: int, rng: random.Random) -> Outcome:
  """The reference run of `task`, then a run killed `kills` times and resumed after each."""
  reference = os.path.join(work_dir, 'reference')
  log = os.path.join(work_dir, 'log.txt')
  start = time.monotonic()
  ended = run_once(task, reference, log)
  reference_seconds = time.monotonic() - start
  stray = int(ended.stray_worker)
  total_rounds = rounds * len(task.runs)
  if ended.returncode != 0:
    return Outcome(collections.Counter(), 0, 0, ended.traceback, Comparison(False, False),
                   reference_seconds, 0.0, f'the reference run failed:\n{ended.stderr_tail}')
  kinds = [k for k in KINDS if task.worker or k != 'worker']
  chaos = os.path.join(work_dir, 'chaos')
  counted, inside, resumes, tracebacks, failed = collections.Counter(), 0, 0, 0, None
  start = time.monotonic()
  while True:
    left = kills - sum(counted.values())
    kind, nth, delay = None, 1, 0.0
    if left > 0:
      kind = kinds[sum(counted.values()) % len(kinds)]
      # Rounds this attempt may move on by, keeping one a kill for the kills still to come.
      spare = max(0, total_rounds - _checkpointed_rounds(task, chaos) - left)
      nth = 1 + rng.randint(0, min(2, spare))
      delay = rng.uniform(0, reference_seconds * min(1.0, (1 + spare) / total_rounds) + 5)
    ended = run_once(task, chaos, log, kind, nth, delay)
    tracebacks += ended.traceback
    stray += ended.stray_worker
    if ended.kind is None:
      if ended.returncode != 0:
        failed = f'exit status {ended.returncode} without a kill:\n{ended.stderr_tail}'
      break
    counted[ended.kind] += 1
    inside += ended.inside_write
    resumes += 1
  chaos_seconds = time.monotonic() - start
  comparison = compare(task, reference, chaos) if failed is None else Comparison(False, False)
  return Outcome(counted, inside, resumes, tracebacks, comparison, reference_seconds,
                 chaos_seconds, failed, stray)


def _row(name: str, outcome: Outcome) -> str:
  c = outcome.comparison
  kills = ', '.join(f'{kind} {outcome.kills[kind]}' for kind in KINDS if outcome.kills[kind])
  yes = lambda value: 'yes' if value else '**no**'  # noqa: E731
  return (f'| {name} | {sum(outcome.kills.values())} ({kills or "none"}) | '
          f'{outcome.inside_write} | {outcome.resumes} | {outcome.tracebacks} | '
          f'{yes(c.bit_identical)} | {yes(c.released_identical)} | {c.duplicated} | '
          f'{c.missing} | {c.tensorboard_replayed} / {c.tensorboard_two_values} | '
          f'{outcome.reference_seconds:.0f} / {outcome.chaos_seconds:.0f} |')


HEADER = ('| task | kills survived (by moment) | inside a write | resumes | tracebacks | '
          'bit-identical | released values identical | rows duplicated | rows missing | '
          'TensorBoard steps replayed / two-valued | wall s (reference / chaos) |\n'
          '|---|---|---|---|---|---|---|---|---|---|---|')


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  unknown = sorted(set(_TASKS.value) - set(TASKS))
  if unknown:
    raise app.UsageError(f'--tasks: unknown {", ".join(unknown)}; of {", ".join(TASKS)}.')
  work_dir = _WORK_DIR.value or tempfile.mkdtemp(prefix='chaos_')
  # The runs' compile and process caches in the work folder, not the user's.
  os.environ['XDG_CACHE_HOME'] = os.path.join(work_dir, 'cache')
  rng = random.Random(_SEED.value)
  print(f'{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; {work_dir}')
  defined = tasks(work_dir, _ROUNDS.value)
  print(HEADER, flush=True)
  failures = []
  for name in _TASKS.value:
    outcome = run_task(defined[name], os.path.join(work_dir, name), _KILLS.value,
                       _ROUNDS.value, rng)
    print(_row(name, outcome), flush=True)
    if outcome.failed or outcome.comparison.differences:
      failures.append(f'{name}: {outcome.failed or ", ".join(outcome.comparison.differences)}')
    if outcome.stray_workers:
      failures.append(f'{name}: a TFF worker ran in {outcome.stray_workers} starts of a run '
                      'that runs in process')
  for failure in failures:
    print(failure)
  with open(os.path.join(work_dir, 'summary.json'), 'w') as f:
    json.dump({'failures': failures}, f)
  if _WORK_DIR.value is None and not failures:
    shutil.rmtree(work_dir)


# Importing TFF (for the worker's name) set its default context, whose clean-up at interpreter
# teardown fails noisily: dropped at exit, as the binaries do (experiments/common.py).
atexit.register(tff.test.set_no_default_context)

if __name__ == '__main__':
  app.run(main)
