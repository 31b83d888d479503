"""`--allow_exposed_worker`, and the local execution context every binary sets before its first
round: the in-process engine, or TFF's local worker (`--engine`).

The worker runs in a network namespace of its own, reachable from the binary alone
(`fedasr_tff.runtime.execution_context`). Where this machine cannot make one, the binary stops
with an error naming the flag, unless the user accepts the exposure with it.
"""

import functools
import gc
import os
from typing import Optional

from absl import app
from absl import flags
from absl import logging

from fedasr_tff import runtime

ALLOW_EXPOSED_WORKER = flags.DEFINE_bool(
    'allow_exposed_worker', False, 'Where no network namespace can be made (user namespaces '
    'disabled, a container forbidding them), start the local TFF worker anyway: it then serves '
    'unauthenticated gRPC on every network interface, and anyone who reaches this machine can '
    'run code as you. Only on a machine no one else can reach (docs/privacy.md, '
    '"Security").')

COMPILE_CACHE_DIR = flags.DEFINE_string(
    'compile_cache_dir', None, 'With --engine=inprocess: a directory of your own where rounds\' '
    'compiled forms are kept across runs, keyed by the round itself, so a run of a round '
    'compiled before skips TFF\'s compiler (fedasr_tff.runtime.compile_cache: it holds the '
    'round\'s graphs, never state, data or the DP noise seed); train_federated keeps its '
    'federated averaging process there too, keyed by its configuration and our code '
    '(fedasr_tff.runtime.process_cache: DP noise seeds unset, filled afresh in every run). '
    'Default: $XDG_CACHE_HOME/fedasr_tff/compiled (~/.cache/...), or no cache if that cannot '
    'be made; empty: no cache.')


# The compile cache of the context `set_context` set (None: none, or the worker engine).
_context_cache = None


def compile_cache():
  """The compile cache the binary's local context uses (`set_context`; --compile_cache_dir), where
  a binary also keeps its built process (`fedasr_tff.runtime.process_cache`); None without one
  (no cache, --engine=worker, or --workers)."""
  return _context_cache


def _compile_cache():
  """The cache of --compile_cache_dir, of its default if usable, or None for no cache."""
  compile_cache = runtime.compile_cache
  if COMPILE_CACHE_DIR.value == '':
    return None
  try:
    return compile_cache.CompileCache(COMPILE_CACHE_DIR.value or
                                      compile_cache.default_directory())
  except (OSError, ValueError) as e:
    if COMPILE_CACHE_DIR.value is not None:
      raise app.UsageError(f'--compile_cache_dir: {e}') from e
    # A default never stops a run: the run compiles its rounds as without a cache.
    logging.warning('No compile cache (%s): every round is compiled in this run.', e)
    return None


def set_context(max_concurrent_computation_calls: Optional[int] = None,
                engine: str = 'inprocess') -> None:
  """Sets the local execution context: the in-process engine with a local worker for what it
  cannot run (`runtime.set_inprocess_execution_context`), or everything on the local worker
  (`runtime.set_local_cpp_execution_context`).

  Args:
    max_concurrent_computation_calls: As there.
    engine: 'inprocess' or 'worker' (--engine); in process, with --compile_cache_dir.

  Raises:
    app.UsageError: The worker cannot be isolated and --allow_exposed_worker is not given, or
      --compile_cache_dir cannot be used.
  """
  execution_context = runtime.execution_context  # imports TFF: only for a binary that uses it
  if ALLOW_EXPOSED_WORKER.value:
    # The binary's own subprocesses (study cells, ablation cells) inherit the user's choice.
    os.environ[execution_context.ALLOW_EXPOSED_WORKER_VARIABLE] = '1'
  global _context_cache
  if engine == 'inprocess':
    _context_cache = _compile_cache()
    set_local_context = functools.partial(runtime.set_inprocess_execution_context,
                                          compile_cache=_context_cache)
  else:
    set_local_context = runtime.set_local_cpp_execution_context
  try:
    set_local_context(max_concurrent_computation_calls,
                      allow_exposed_worker=ALLOW_EXPOSED_WORKER.value or None)
  except execution_context.WorkerIsolationError as e:
    raise app.UsageError(str(e)) from e
  # What the imports made (TensorFlow, TFF, Keras: 420,000 objects) lives as long as the
  # binary: out of the collector's way, a full collection scans what the run makes, not them
  # (one took 0.2-0.27 s, and could land in building the process or the first round;
  # docs/benchmarks.md, "In-process engine").
  gc.freeze()
