"""Runs inside the worker's own network namespace: loopback up, TFF's worker, a Unix-socket bridge.

  python -I -S namespace_bridge.py SOCKET_PATH PORT WORKER_COMMAND...

`execution_context.isolated_worker_command` starts this under `unshare --net`, so the namespace
has one interface, `lo`, and no route to any other host. It brings `lo` up (a new namespace's is
down), starts the worker command (serving on `PORT` of every interface of this namespace: its
loopback alone), and bridges every connection to the Unix socket `SOCKET_PATH` (created 0600) to
that port. A path-named Unix socket is a file, not a network endpoint: the driver outside the
namespace reaches it, no other host does, and no other local user (file permissions), root aside.
Standard library only (it starts with `-S`, outside the driver's environment).
"""

import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_F_SETPIPE_SZ = 1031
_CHUNK = 1 << 20  # bytes a splice moves at most; the pipe is grown to match
WORKER_PID_FILE = 'worker.pid'  # beside the socket: the worker's pid, for error messages


def bring_up_loopback() -> None:
  """Sets `lo` up (needs CAP_NET_ADMIN in the namespace, which `unshare` gives its process)."""
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack('16sH14x', b'lo', 0)
    flags = struct.unpack('16sH14x', fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack('16sH14x', b'lo', flags | _IFF_UP))


def _pump(source: socket.socket, sink: socket.socket) -> None:
  """Moves bytes from `source` to `sink` until `source` ends, then ends `sink`'s sending side.

  With `splice(2)` through a pipe, inside the kernel: the ~10 MB of computation that TFF sends
  with every call are never copied into Python.
  """
  read_end, write_end = os.pipe()
  try:
    try:
      fcntl.fcntl(write_end, _F_SETPIPE_SZ, _CHUNK)
    except OSError:
      pass  # a smaller pipe only means more splices
    while (moved := os.splice(source.fileno(), write_end, _CHUNK)) > 0:
      while moved:
        moved -= os.splice(read_end, sink.fileno(), moved)
  except OSError:
    pass  # a peer went away: the connection ends
  finally:
    os.close(read_end)
    os.close(write_end)
    for end in (sink, source):
      try:
        end.shutdown(socket.SHUT_RDWR if end is source else socket.SHUT_WR)
      except OSError:
        pass


def _bridge(client: socket.socket, port: int) -> None:
  try:
    worker = socket.create_connection(('127.0.0.1', port))
    # As gRPC does on its own sockets: Nagle's algorithm would hold back a short message (most
    # of TFF's calls) until the last one is acknowledged, tens of ms on a round trip.
    worker.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
  except OSError:
    client.close()
    return
  back = threading.Thread(target=_pump, args=(worker, client), daemon=True)
  back.start()
  _pump(client, worker)
  back.join()
  client.close()
  worker.close()


def _remove_stale(socket_path: str) -> None:
  """Removes the socket file of a bridge that is gone (a worker restarted at the same path)."""
  with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
    try:
      probe.connect(socket_path)
    except ConnectionRefusedError:
      os.unlink(socket_path)  # nothing serves it; a live one is left, and bind fails below
    except OSError:
      pass  # no such file: nothing to remove


def serve(socket_path: str, port: int) -> None:
  """Bridges every connection to a Unix socket to a port on lo; never returns.

  Args:
    socket_path: the Unix socket to create (0600), replacing a stale one.
    port: the worker's port on this namespace's loopback.
  """
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  _remove_stale(socket_path)
  old_umask = os.umask(0o177)  # the socket file is created 0600
  try:
    listener.bind(socket_path)
  finally:
    os.umask(old_umask)
  listener.listen(64)
  while True:
    client, _ = listener.accept()
    threading.Thread(target=_bridge, args=(client, port), daemon=True).start()


def main(argv: list) -> None:
  """Brings lo up, starts the worker and serves the bridge, ending as the worker ends.

  The worker dies with this process (`setpriv --pdeathsig` in its command); this process writes
  the worker's pid beside the socket (`WORKER_PID_FILE`) and ends as the worker ends (by the same
  signal, or with the same exit status).

  Args:
    argv: [program, SOCKET_PATH, PORT, WORKER_COMMAND...].
  """
  if len(argv) < 4:
    sys.exit(f'usage: {argv[0]} SOCKET_PATH PORT WORKER_COMMAND...')
  socket_path, port, *worker_command = argv[1:]
  signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python's KeyboardInterrupt would keep us alive
  bring_up_loopback()
  worker = subprocess.Popen(worker_command, stdin=subprocess.DEVNULL)
  with open(os.path.join(os.path.dirname(socket_path), WORKER_PID_FILE), 'w') as f:
    f.write(str(worker.pid))  # setpriv execs the worker in place: this is the worker's pid

  def end_as_worker_ended():
    status = worker.wait()
    if status < 0:  # killed by a signal: end by the same one, so the driver sees the same status
      os.kill(os.getpid(), -status)  # main() left every terminating signal at its default
      time.sleep(1)
    os._exit(status if status >= 0 else 128 - status)  # a signal that did not end us

  threading.Thread(target=end_as_worker_ended, daemon=True).start()

  serve(socket_path, int(port))


if __name__ == '__main__':
  main(sys.argv)
