"""Flags shared by every experiment binary, and what every binary does first.

The flags here (output, progress, TFF workers) configure every binary, of either wing, and are
defined once, so binaries (and their tests, which may import several binaries into one process)
never define the same flag twice. A binary defines the flags of its task itself, from the
configuration classes (`config_flags.define_flags`): only those that configure it. Importing this
module imports no TensorFlow Federated (`fedasr_tff.runtime` loads it on first use), so binaries
that run no TFF computation (transcription) start without it.
"""

import atexit
import logging
import sys
from typing import List
from typing import Optional

from absl import app
from absl import flags
from absl import logging as absl_logging

from experiments import cli
from experiments import local_worker
from fedasr_tff import private_files
from fedasr_tff import runtime

FLAGS = flags.FLAGS

OUTPUT_DIR = flags.DEFINE_string('output_dir', None, 'Folder for the run\'s files.')
PROGRESS = flags.DEFINE_bool('progress', True, 'Show a progress bar on stderr.')
WORKERS = flags.DEFINE_string(
    'workers', None, 'host:port,... of TFF workers already running elsewhere (python -m '
    'fedasr_tff.runtime.worker --port=N): each round\'s cohort is split across them and their '
    'partial aggregates merged (TFF\'s mergeable-computation context). They run client code on '
    'raw data and see un-noised sums: trusted like the server, on a private network. Default: '
    'one local worker.')
WORKERS_FILE = flags.DEFINE_string(
    'workers_file', None, 'A file listing the TFF workers (host:port per line or comma-separated, '
    '# comments), instead of --workers.')
ENGINE = flags.DEFINE_enum(
    'engine', 'inprocess', ['inprocess', 'worker'],
    'What runs a local run\'s TFF computations. inprocess: TFF\'s compiled round (FedAvg with '
    'any DP aggregation, DGA softmax without rehearsal, the audit\'s processes) run by '
    'TensorFlow in this process, --clients_in_parallel clients at once (default 2), on a GPU '
    'where TensorFlow sees one; what has no such form (mixed FL, DGA with rehearsal, DGA-RL, the '
    'retriever) runs on a local TFF worker started when first needed. worker: everything on '
    'TFF\'s local C++ worker (CPU only). With --workers, rounds run on the workers '
    '(docs/running.md, "Engines").')
WORKER_TIMEOUT = flags.DEFINE_float(
    'worker_timeout', runtime.DEFAULT_WORKER_TIMEOUT_SECONDS,
    'Seconds a TFF worker may stay unreachable before the run stops with an error naming it '
    '(after its last checkpoint; rerun the same command to resume).', lower_bound=0.001)
WORKER_TLS_ROOT_CERTS = flags.DEFINE_string(
    'worker_tls_root_certs', None, 'PEM file of the certificate authority of the TLS proxies in '
    'front of the --workers: the channels to them use TLS.')
WORKER_TLS_KEY = flags.DEFINE_string(
    'worker_tls_key', None, 'PEM private key of this driver, for mutual TLS (with '
    '--worker_tls_cert).')
WORKER_TLS_CERT = flags.DEFINE_string(
    'worker_tls_cert', None, 'PEM certificate chain of this driver, for mutual TLS (with '
    '--worker_tls_key).')


def workers() -> Optional[List[str]]:
  """The TFF workers of --workers or --workers_file, or None for a local worker."""
  if WORKERS.value is not None and WORKERS_FILE.value is not None:
    raise app.UsageError('Give --workers or --workers_file, not both.')
  try:
    if WORKERS_FILE.value is not None:
      return runtime.read_workers_file(WORKERS_FILE.value)
    return None if WORKERS.value is None else runtime.parse_workers(WORKERS.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e


def start_binary(max_concurrent_computation_calls=None,
                 distributed_refusal: Optional[str] = None, *,
                 tff_computations: bool = True) -> Optional[List[str]]:
  """What every binary's `main` does first, before any TFF computation; returns the workers
  (None: local).

  Sets the local execution context of --engine (the in-process engine, whose local worker, for
  what it cannot run, starts on first need; or TFF's local C++ worker), the worker dying with the
  run however it ends and reachable from it alone (`local_worker.set_context`;
  `max_concurrent_computation_calls` as there), or with --workers TFF's
  distributed context over them (`runtime.set_distributed_execution_context`), refused with
  `distributed_refusal` if given (why this binary cannot run distributed). Unless --verbosity
  is given, keeps the log to warnings from our code: TF and TFF log a line per checkpoint file
  written and warn when evaluation traces the model for a new batch shape, which would bury the
  per-evaluation lines. A local worker that dies during the run, or a full disk, ends it with
  one line on stderr naming the worker or the file (`_report_outside_cause`).

  Args:
    max_concurrent_computation_calls: as in `local_worker.set_context`.
    distributed_refusal: why this binary cannot run on --workers, or None if it can.
    tff_computations: False for a binary that runs no TFF computation: no worker is started
      (nor TFF imported), and --workers is refused with `distributed_refusal`.

  Returns:
    The --workers (None: local).

  Raises:
    app.UsageError: for worker flags this binary or this combination cannot take, or an
      --output_dir that cannot be a folder (`cli.check_output`).
  """
  # First: the local worker starts below, and may be killed while it does.
  if sys.excepthook is sys.__excepthook__:
    sys.excepthook = _report_outside_cause
  if OUTPUT_DIR.value:
    cli.check_output('output_dir', OUTPUT_DIR.value)
  remote = workers()
  tls_flags = [f'--{flag.name}' for flag in (WORKER_TLS_ROOT_CERTS, WORKER_TLS_KEY,
                                             WORKER_TLS_CERT) if flag.value is not None]
  if not tff_computations:
    if remote is not None or tls_flags:
      raise app.UsageError(f'{"--workers" if remote is not None else tls_flags[0]}: '
                           f'{distributed_refusal}')
  elif remote is None:
    if tls_flags:
      raise app.UsageError(f'{", ".join(tls_flags)} appl{"y" if len(tls_flags) > 1 else "ies"} '
                           'to --workers, which is not given.')
    local_worker.set_context(max_concurrent_computation_calls, ENGINE.value)
  else:
    if distributed_refusal is not None:
      raise app.UsageError(f'--workers: {distributed_refusal}')
    if FLAGS['engine'].present:
      raise app.UsageError(f'--engine={ENGINE.value} picks what runs a local run; with --workers '
                           'the rounds run on the workers: give one of the two.')
    if max_concurrent_computation_calls is not None:
      raise app.UsageError('--clients_in_parallel bounds the local worker; with --workers give '
                           'each worker --max_concurrent_computation_calls when you start it.')
    tls = None
    if tls_flags:
      if WORKER_TLS_ROOT_CERTS.value is None:
        raise app.UsageError('--worker_tls_key and --worker_tls_cert need '
                             '--worker_tls_root_certs.')
      try:
        tls = runtime.TLSCredentials.from_files(WORKER_TLS_ROOT_CERTS.value,
                                                WORKER_TLS_KEY.value, WORKER_TLS_CERT.value)
      except ValueError as e:
        raise app.UsageError(f'--worker_tls_*: {e}') from e
    runtime.set_distributed_execution_context(remote, worker_timeout=WORKER_TIMEOUT.value,
                                              tls=tls)
  if not FLAGS['verbosity'].present:
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger('tensorflow').setLevel(logging.ERROR)
  return remote


def worker_trust_line(workers: Optional[List[str]],
                      client_store: Optional[str] = None) -> Optional[str]:
  """The privacy statement's line on a --workers run's workers and their channels
  (`runtime.trust_statement`), or None for a local run.

  Args:
    workers: what `start_binary` returned (None: a local run).
    client_store: the --client_store_dir the workers read, or None.

  Returns:
    The line, or None.
  """
  if workers is None:
    return None
  return runtime.trust_statement(
      workers, tls=WORKER_TLS_ROOT_CERTS.value is not None,
      mutual_tls=WORKER_TLS_CERT.value is not None, client_store=client_store)


def with_trust_statement(statement: str, workers: Optional[List[str]],
                         client_store: Optional[str] = None) -> str:
  """A run's privacy statement with, for a run on --workers, `worker_trust_line` after it.

  Args:
    statement: the privacy statement.
    workers: what `start_binary` returned (None: a local run, returned unchanged).
    client_store: the --client_store_dir the workers read, or None.

  Returns:
    The statement.
  """
  line = worker_trust_line(workers, client_store)
  return statement if line is None else f'{statement}\n{line}'


def _report_outside_cause(kind, value, traceback) -> None:
  """sys.excepthook: a run ended by its local worker's death or by a full disk gets one line, not
  a traceback.

  Both come from outside (a kill, the OOM killer, another program filling the disk), not from a
  bug here, and the run's last checkpoint is intact (checkpoints are written to a temporary
  folder, renamed when complete), so the line says what happened, where, and how to go on; any
  other error keeps its traceback.
  """
  died = getattr(sys.modules.get('fedasr_tff.runtime.execution_context'), 'WorkerDiedError', ())
  error = value
  while error is not None and not isinstance(error, died) and not _full_disk(error):
    error = error.__cause__ or error.__context__  # TFF may re-raise it inside its own error
  if error is None:
    sys.__excepthook__(kind, value, traceback)
    return
  if isinstance(error, died):
    what, then = error.summary(), 'rerun the same command'
  else:
    where = f' writing {error.filename}' if error.filename else ''
    what, then = f'{error.strerror}{where}', 'free space and rerun the same command'
  print(f'{cli.program_name()}: {what}; {then} to resume from the latest checkpoint.',
        file=sys.stderr)


def _full_disk(error: BaseException) -> bool:
  return isinstance(error, OSError) and error.errno in private_files.FULL_DISK


def _release_tff_default_context() -> None:
  """At exit, drops the context TFF sets when imported, while the modules it needs still exist.

  Importing TFF 0.87 sets a local C++ context whose `ServiceManager.__del__` otherwise runs at
  interpreter teardown, after `subprocess` is gone, and prints "Exception ignored in ...
  AttributeError: 'NoneType' object has no attribute 'Popen'" (after --helpfull, say). A run's
  own context (`start_binary`) replaced it already; this is for the binaries that end before.
  """
  tff = sys.modules.get('tensorflow_federated')
  if tff is not None:
    tff.test.set_no_default_context()


atexit.register(_release_tff_default_context)


def require(*names: str) -> None:
  """Checks required flags in main (not with required=True, so tests can share a process)."""
  missing = [f'--{name}' for name in names if FLAGS[name].value in (None, '')]
  if missing:
    raise app.UsageError(f'{", ".join(missing)} must be given.')


def seeds(flag) -> List[int]:
  """The seeds of a study's list flag (--seeds): distinct integers, at least one.

  Args:
    flag: the flag's holder (`flags.DEFINE_list`).

  Raises:
    app.UsageError: naming the flag otherwise.
  """
  try:
    values = [int(value) for value in flag.value]
  except ValueError:
    values = []
  if not values or len(set(values)) != len(values):
    raise app.UsageError(f'--{flag.name} must be distinct integers, got {flag.value}.')
  return values
