r"""One TFF worker of a distributed run, on any machine with this project's set-up.

  python -m fedasr_tff.runtime.worker --port=8000 [--max_concurrent_computation_calls=4]
  python -m fedasr_tff.runtime.worker --unix_socket=/run/fedasr/worker.sock

It execs the C++ `worker_binary` of the tensorflow-federated wheel (the driver's version). The
worker serves plaintext, unauthenticated gRPC and runs any TensorFlow graph it is sent, with raw
client data and un-noised sums in memory: with `--port` (every interface) run it only on a
private network or behind a mutual-TLS proxy; with `--unix_socket` only local processes of this
user reach it (docs/distributed.md; docs/privacy.md, "Security").
"""

import os
import sys

from absl import app
from absl import flags
import tensorflow_federated as tff

from fedasr_tff.runtime import execution_context

_PORT = flags.DEFINE_integer('port', None, 'TCP port to serve on (every interface).',
                             lower_bound=1, upper_bound=65535)
_UNIX_SOCKET = flags.DEFINE_string(
    'unix_socket', None, 'Serve on this Unix socket (created 0600) instead, from a network '
    'namespace of the worker\'s own: reachable by local processes of this user alone.')
_CALLS = flags.DEFINE_integer(
    'max_concurrent_computation_calls', None, 'Clients this worker trains at once (default: '
    'no limit); bound it to what fits in its memory.', lower_bound=1)


def main(argv):
  """Execs TFF's worker binary on the port or socket the flags give.

  Args:
    argv: the command line after absl's flags; no positional arguments are taken.

  Raises:
    app.UsageError: for positional arguments, or not exactly one of --port and --unix_socket.
  """
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  if (_PORT.value is None) == (_UNIX_SOCKET.value is None):
    raise app.UsageError('Give --port or --unix_socket (one of them).')
  if _PORT.value is not None:
    command = execution_context.worker_command(_PORT.value, _CALLS.value)
    where = f'port {_PORT.value} (every interface)'
  else:
    try:
      command = execution_context.isolated_worker_command(os.path.abspath(_UNIX_SOCKET.value),
                                                          _CALLS.value)
    except execution_context.WorkerIsolationError as e:
      raise app.UsageError(f'--unix_socket: {e}') from e
    where = f'unix socket {_UNIX_SOCKET.value}'
  # The version served: the driver's must match (the worker runs the graphs it serialises).
  print(f'fedasr-tff worker: tensorflow-federated {tff.__version__}, {where}, '
        f'pid {os.getpid()}', flush=True)
  sys.stdout.flush()
  # In place of this process, in the foreground: signals and the exit status are the worker's.
  os.execvp(command[0], command)


if __name__ == '__main__':
  app.run(main)
