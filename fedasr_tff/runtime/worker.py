r"""One TFF worker of a distributed run, on any machine with this project's set-up.

  python -m fedasr_tff.runtime.worker --port=8000 [--max_concurrent_computation_calls=4]
  python -m fedasr_tff.runtime.worker --unix_socket=/run/fedasr/worker.sock

It runs, in the foreground and in place of this process (so signals and the exit status are the
worker's own), the C++ `worker_binary` that ships in the tensorflow-federated wheel: the same
binary that runs every local round (`execution_context.set_local_cpp_execution_context`). A
driver started with `--workers=host:8000,...` sends it computations and client data over gRPC;
it needs no data, checkpoints or shared filesystem of its own.

What the machine needs: this project's environment (`make setup`, or the container image of
`tools/worker.Dockerfile`), with the same tensorflow-federated version as the driver (the
worker runs the TensorFlow graphs the driver serialises; this prints the version it serves).

Trust: the worker serves plaintext, unauthenticated gRPC and runs whatever TensorFlow graph it is
sent, with raw client data and un-noised partial sums in its memory. It is trusted like the
server. With `--port` it serves on every interface (TFF's binary has no address option): run it
only on a private network reachable from the driver alone, or behind a proxy that requires
mutual TLS. With `--unix_socket` it serves on that socket alone (created 0600), from a network
namespace of its own: nothing on the network reaches it, only local processes of this user (and
root), e.g. a mutual-TLS proxy on the same machine, or a driver given `--workers=unix:PATH`
(docs/privacy.md, "Security", and docs/distributed.md).
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
  print(f'fedasr-tff worker: tensorflow-federated {tff.__version__}, {where}, '
        f'pid {os.getpid()}', flush=True)
  sys.stdout.flush()
  os.execvp(command[0], command)


if __name__ == '__main__':
  app.run(main)
