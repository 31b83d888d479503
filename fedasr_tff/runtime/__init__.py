"""Process-level runtime: the in-process engine (TFF's compiled rounds run by TensorFlow in this
process), TFF's local C++ execution context, with a worker that dies with us, and TFF's
distributed runtime over workers on other machines.

The names below load their module (and so TensorFlow Federated) on first use (PEP 562), so a
binary that runs no TFF computation can define the runtime's flags without importing TFF.
"""

import importlib

# Seconds a distributed worker may stay unreachable (`distributed`); here, so flags need no TFF.
DEFAULT_WORKER_TIMEOUT_SECONDS = 300.0

_EXPORTS = {
    'DistributedContext': 'distributed',
    'TLSCredentials': 'distributed',
    'WorkerUnavailableError': 'distributed',
    'create_distributed_execution_context': 'distributed',
    'parse_workers': 'distributed',
    'read_workers_file': 'distributed',
    'set_distributed_execution_context': 'distributed',
    'trust_statement': 'distributed',
    'WorkerDiedError': 'execution_context',
    'set_inprocess_execution_context': 'execution_context',
    'set_local_cpp_execution_context': 'execution_context',
}


def __getattr__(name):
  if name in _EXPORTS:
    return getattr(importlib.import_module(f'{__name__}.{_EXPORTS[name]}'), name)
  if name in ('compile_cache', 'distributed', 'execution_context', 'inprocess', 'inprocess_context',
              'namespace_bridge', 'process_cache', 'subrounds', 'tff_graphs', 'worker'):
    return importlib.import_module(f'{__name__}.{name}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted([*globals(), *_EXPORTS])
