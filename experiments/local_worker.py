"""`--allow_exposed_worker`, and the local execution context every binary sets before its first
round: the in-process engine, or TFF's local worker (`--engine`).

The worker runs in a network namespace of its own, reachable from the binary alone
(`fedasr_tff.runtime.execution_context`). Where this machine cannot make one, the binary stops
with an error naming the flag, unless the user accepts the exposure with it.
"""

import os
from typing import Optional

from absl import app
from absl import flags

from fedasr_tff import runtime

ALLOW_EXPOSED_WORKER = flags.DEFINE_bool(
    'allow_exposed_worker', False, 'Where no network namespace can be made (user namespaces '
    'disabled, a container forbidding them), start the local TFF worker anyway: it then serves '
    'unauthenticated gRPC on every network interface, and anyone who reaches this machine can '
    'run code as you. Only on a machine no one else can reach (docs/privacy.md, '
    '"Security").')


def set_context(max_concurrent_computation_calls: Optional[int] = None,
                engine: str = 'inprocess') -> None:
  """Sets the local execution context: the in-process engine with a local worker for what it
  cannot run (`runtime.set_inprocess_execution_context`), or everything on the local worker
  (`runtime.set_local_cpp_execution_context`).

  Args:
    max_concurrent_computation_calls: As there.
    engine: 'inprocess' or 'worker' (--engine).

  Raises:
    app.UsageError: The worker cannot be isolated and --allow_exposed_worker is not given.
  """
  execution_context = runtime.execution_context  # imports TFF: only for a binary that uses it
  if ALLOW_EXPOSED_WORKER.value:
    # The binary's own subprocesses (study cells, ablation cells) inherit the user's choice.
    os.environ[execution_context.ALLOW_EXPOSED_WORKER_VARIABLE] = '1'
  set_local_context = {'inprocess': runtime.set_inprocess_execution_context,
                       'worker': runtime.set_local_cpp_execution_context}[engine]
  try:
    set_local_context(max_concurrent_computation_calls,
                      allow_exposed_worker=ALLOW_EXPOSED_WORKER.value or None)
  except execution_context.WorkerIsolationError as e:
    raise app.UsageError(str(e)) from e
