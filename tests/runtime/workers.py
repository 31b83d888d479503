"""TFF workers for tests, each in a network namespace of its own behind a Unix socket (started as
users start a worker on the driver's machine: `python -m fedasr_tff.runtime.worker
--unix_socket=PATH`), and a mutual-TLS-terminating proxy on loopback in front of one."""

import asyncio
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time

import grpc
import portpicker

from fedasr_tff import runtime
from fedasr_tff.runtime import execution_context

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def subprocess_env():
  """The environment of a subprocess that runs this project's modules (`python -m ...`)."""
  path = os.pathsep.join([ROOT] + [p for p in sys.path if p])
  return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL='2')


def start_worker(socket_path: str) -> subprocess.Popen:
  """A worker serving on the Unix socket `socket_path`, killed by the kernel if the test dies."""
  pdeathsig = ['setpriv', '--pdeathsig', 'KILL', '--'] if shutil.which('setpriv') else []
  return subprocess.Popen([*pdeathsig, sys.executable, '-m', 'fedasr_tff.runtime.worker',
                           f'--unix_socket={socket_path}'], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=subprocess_env(), cwd=ROOT, start_new_session=True)


def wait_until_serving(target: str, timeout: float = 120) -> None:
  with grpc.insecure_channel(target) as channel:
    grpc.channel_ready_future(channel).result(timeout=timeout)


class Workers:
  """`count` workers on Unix sockets in an owner-only folder, serving when the constructor
  returns."""

  def __init__(self, count: int):
    self.folder = execution_context.socket_folder()
    self.sockets = [os.path.join(self.folder, f'worker{i}.sock') for i in range(count)]
    self.processes = [start_worker(path) for path in self.sockets]
    try:
      for address in self.addresses:
        wait_until_serving(address)
    except Exception:
      self.stop()
      raise

  @property
  def addresses(self):
    return [f'unix:{path}' for path in self.sockets]

  def kill(self, index: int) -> None:
    self.processes[index].kill()
    self.processes[index].wait()

  def restart(self, index: int, timeout: float = 120) -> None:
    """Starts worker `index` again on its socket (after `kill`), serving when this returns.

    The new worker imports TensorFlow before it serves: seconds on an idle machine, many more
    under a loaded test run, so it is waited for as long as the first start (`timeout`), and
    started again only if it exited (its socket still held by the killed one)."""
    deadline = time.monotonic() + timeout
    while True:
      self.processes[index] = start_worker(self.sockets[index])
      while self.processes[index].poll() is None:
        try:
          wait_until_serving(self.addresses[index], timeout=1)
          return
        except grpc.FutureTimeoutError:
          if time.monotonic() > deadline:
            self.kill(index)
            raise
      if time.monotonic() > deadline:
        raise RuntimeError(f'worker {index} exited with status '
                           f'{self.processes[index].returncode} at each restart')
      time.sleep(0.5)

  def stop(self) -> None:
    for process in self.processes:
      process.kill()
      process.wait()
    shutil.rmtree(self.folder, ignore_errors=True)


class TwoWorkersMixin:
  """For a test class: two workers started once (`cls.workers`), stopped after its tests, and
  the local context set again for the test classes that follow."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workers = Workers(2)

  @classmethod
  def tearDownClass(cls):
    cls.workers.stop()
    runtime.set_local_cpp_execution_context()
    super().tearDownClass()


class TLSProxy:
  """Terminates mutual TLS (with ALPN h2, which gRPC clients require) on a free loopback port and
  pipes the bytes to a worker's Unix socket `target`: what haproxy or a service mesh does in front
  of a worker in a deployment. It requires a client certificate signed by `client_ca`."""

  def __init__(self, target: str, certificate: str, key: str, client_ca: str):
    self.port = portpicker.pick_unused_port()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_REQUIRED  # no client certificate, no connection
    context.set_alpn_protocols(['h2'])
    self._loop = asyncio.new_event_loop()
    started = threading.Event()

    async def pipe(reader, writer):
      try:
        while data := await reader.read(1 << 16):
          writer.write(data)
          await writer.drain()
      finally:
        writer.close()

    async def handle(client_reader, client_writer):
      reader, writer = await asyncio.open_unix_connection(target.removeprefix('unix:'))
      await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer),
                           return_exceptions=True)

    async def serve():
      self._server = await asyncio.start_server(handle, '127.0.0.1', self.port, ssl=context)
      started.set()

    def run():
      self._loop.run_until_complete(serve())
      self._loop.run_forever()

    self._thread = threading.Thread(target=run, daemon=True)
    self._thread.start()
    if not started.wait(30):
      raise RuntimeError('The TLS proxy did not start.')

  def stop(self) -> None:
    async def shutdown():
      self._server.close()
      tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
      for task in tasks:
        task.cancel()
      await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join(timeout=30)
    self._loop.close()
