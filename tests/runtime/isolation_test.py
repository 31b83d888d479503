"""Tests that a local run's TFF worker is reachable from its own process alone.

As an attacker on the machine's network, or another local user, would try it: every socket that
the run's processes listen on is read from the kernel's tables (`/proc/PID/net/tcp{,6}` of each
process's own network namespace, matched to the process by socket inode), then connected to from
this machine's non-loopback addresses, and the worker's gRPC target is connected to as user
`nobody`. Where no network namespace can be made, starting a worker is refused unless the
exposure is accepted, by argument or environment variable.
"""

import ipaddress
import os
import shutil
import socket
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
import numpy as np
import psutil
import tensorflow_federated as tff

from fedasr_tff.runtime import execution_context

_LISTEN = '0A'  # TCP_LISTEN in /proc/net/tcp's `st` column
_OTHER_USER = 65534  # nobody


@tff.tensorflow.computation(np.int32)
def _add_one(x):
  return x + 1


def _maps_uid(uid: int) -> bool:
  """Whether `uid` exists in this user namespace (Bazel's sandbox maps root alone)."""
  with open('/proc/self/uid_map') as f:
    return any(int(inside) <= uid < int(inside) + int(count)
               for inside, _, count in (line.split() for line in f))


def _run_processes():
  return [psutil.Process()] + psutil.Process().children(recursive=True)


def _socket_inodes(pid: int) -> set:
  inodes = set()
  for fd in os.listdir(f'/proc/{pid}/fd'):
    try:
      target = os.readlink(f'/proc/{pid}/fd/{fd}')
    except OSError:
      continue  # closed meanwhile
    if target.startswith('socket:['):
      inodes.add(int(target[len('socket:['):-1]))
  return inodes


def _address(hex_address: str) -> ipaddress._BaseAddress:
  """An address of /proc/net/tcp{,6}: 32-bit words, each in the host's (little-endian) order."""
  raw = bytes.fromhex(hex_address)
  return ipaddress.ip_address(b''.join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))


def _listeners(pid: int) -> list:
  """[(address, port)] of the TCP sockets process `pid` listens on, in its network namespace."""
  inodes = _socket_inodes(pid)
  found = []
  for table in ('tcp', 'tcp6'):
    with open(f'/proc/{pid}/net/{table}') as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        address, port = fields[1].split(':')
        if fields[3] == _LISTEN and int(fields[9]) in inodes:
          found.append((_address(address), int(port, 16)))
  return found


def _net_namespace(pid: int) -> str:
  return os.readlink(f'/proc/{pid}/ns/net')


def _interfaces(pid: int) -> list:
  with open(f'/proc/{pid}/net/dev') as f:
    return [line.split(':')[0].strip() for line in f.readlines()[2:]]


def _non_loopback_addresses() -> list:
  """This machine's addresses other than loopback and link-local (which need a scope)."""
  found = []
  for addresses in psutil.net_if_addrs().values():
    for address in addresses:
      if address.family in (socket.AF_INET, socket.AF_INET6):
        ip = ipaddress.ip_address(address.address.split('%')[0])
        if not (ip.is_loopback or ip.is_link_local):
          found.append(ip)
  return found


def _connects(ip, port: int) -> bool:
  family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
  with socket.socket(family, socket.SOCK_STREAM) as s:
    s.settimeout(5)
    try:
      s.bind((str(ip), 0))  # from this non-loopback address, as another host's packet would be
      s.connect((str(ip), port))
      return True
    except OSError:
      return False


class IsolatedWorkerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    execution_context.set_local_cpp_execution_context()
    assert _add_one(1) == 2  # serving

  def test_no_socket_of_the_run_listens_beyond_loopback(self):
    own_namespace = _net_namespace(os.getpid())
    listeners = 0
    for process in _run_processes():
      for address, port in _listeners(process.pid):
        listeners += 1
        if _net_namespace(process.pid) == own_namespace:
          self.assertTrue(address.is_loopback, msg=f'{process.name()} listens on {address}:{port}')
        else:  # a namespace of its own: its loopback is the only interface there is
          self.assertEqual(_interfaces(process.pid), ['lo'], msg=process.name())
    self.assertGreater(listeners, 0)  # the worker's own listener was seen (in its namespace)

  def test_the_worker_answers_no_connection_from_a_non_loopback_address(self):
    addresses = _non_loopback_addresses()
    if not addresses:
      self.skipTest('this machine has no non-loopback address to connect from')
    ports = {port for process in _run_processes() for _, port in _listeners(process.pid)}
    self.assertNotEmpty(ports)
    for ip in addresses:
      for port in ports:
        self.assertFalse(_connects(ip, port), msg=f'{ip} port {port} answers')

  @absltest.skipUnless(os.geteuid() == 0 and _maps_uid(_OTHER_USER) and shutil.which('setpriv'),
                       'needs root, and user 65534 mapped (not in Bazel\'s sandbox), to act as '
                       'another local user')
  def test_another_local_user_cannot_connect_to_the_worker(self):
    target = execution_context._worker.target  # pylint: disable=protected-access
    if target.startswith('unix:'):
      connect = f'import socket; socket.socket(socket.AF_UNIX).connect({target[5:]!r})'
    else:
      host, port = target.rsplit(':', 1)
      connect = f'import socket; socket.create_connection(({host!r}, {port}), timeout=5)'
    other_user = subprocess.run(
        ['setpriv', f'--reuid={_OTHER_USER}', f'--regid={_OTHER_USER}', '--clear-groups',
         sys.executable, '-I', '-S', '-c', connect], capture_output=True, text=True, check=False)
    self.assertNotEqual(other_user.returncode, 0, msg=f'user {_OTHER_USER} connected to it')
    self.assertIn('PermissionError', other_user.stderr)


class NoNamespaceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    execution_context.set_local_cpp_execution_context()  # isolated, before namespaces 'go'
    self.addCleanup(execution_context.set_local_cpp_execution_context)  # isolated again
    no_namespaces = mock.patch.object(execution_context, 'network_namespace_prefix',
                                      return_value=None)
    no_namespaces.start()
    self.addCleanup(no_namespaces.stop)

  def test_refuses_without_an_accepted_exposure_and_keeps_the_running_worker(self):
    running = execution_context._worker  # pylint: disable=protected-access
    for value in (None, '0', 'yes'):
      with mock.patch.dict(os.environ):
        os.environ.pop(execution_context.ALLOW_EXPOSED_WORKER_VARIABLE, None)
        if value is not None:
          os.environ[execution_context.ALLOW_EXPOSED_WORKER_VARIABLE] = value
        with self.assertRaisesRegex(execution_context.WorkerIsolationError,
                                    '--allow_exposed_worker.*FEDASR_TFF_ALLOW_EXPOSED_WORKER=1'):
          execution_context.set_local_cpp_execution_context()
    with mock.patch.dict(os.environ, {execution_context.ALLOW_EXPOSED_WORKER_VARIABLE: '1'}):
      with self.assertRaises(execution_context.WorkerIsolationError):  # the argument decides
        execution_context.set_local_cpp_execution_context(allow_exposed_worker=False)
    self.assertIs(execution_context._worker, running)  # pylint: disable=protected-access
    self.assertIsNone(running.process.poll())
    self.assertEqual(_add_one(2), 3)

  def test_an_accepted_exposure_starts_the_worker_with_a_warning(self):
    for accept in ({'allow_exposed_worker': True}, {}):
      with self.subTest(**accept), mock.patch.dict(
          os.environ, {execution_context.ALLOW_EXPOSED_WORKER_VARIABLE: '1'}), \
          self.assertLogs(level='WARNING') as logs:
        execution_context.set_local_cpp_execution_context(**accept)
        worker = execution_context._worker  # pylint: disable=protected-access
        self.assertFalse(worker.isolated)
        self.assertTrue(worker.target.startswith('localhost:'))
        self.assertEqual(_add_one(3), 4)
      self.assertIn('UNAUTHENTICATED gRPC', '\n'.join(logs.output))
      self.assertIn('EVERY network interface', '\n'.join(logs.output))


if __name__ == '__main__':
  absltest.main()
