"""TFF workers on loopback ports for tests (started as users start them: `python -m
fedasr_tff.runtime.worker`), and a TLS-terminating proxy in front of one."""

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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def subprocess_env():
  """The environment of a subprocess that runs this project's modules (`python -m ...`)."""
  path = os.pathsep.join([ROOT] + [p for p in sys.path if p])
  return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL='2')


def start_worker(port: int) -> subprocess.Popen:
  """A worker serving on `port`, killed by the kernel if the test process dies."""
  pdeathsig = ['setpriv', '--pdeathsig', 'KILL', '--'] if shutil.which('setpriv') else []
  return subprocess.Popen([*pdeathsig, sys.executable, '-m', 'fedasr_tff.runtime.worker',
                           f'--port={port}'], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=subprocess_env(), cwd=ROOT, start_new_session=True)


def wait_until_serving(port: int, timeout: float = 120) -> None:
  with grpc.insecure_channel(f'localhost:{port}') as channel:
    grpc.channel_ready_future(channel).result(timeout=timeout)


class Workers:
  """`count` workers on free loopback ports, serving when the constructor returns."""

  def __init__(self, count: int):
    self.ports = [portpicker.pick_unused_port() for _ in range(count)]
    self.processes = [start_worker(port) for port in self.ports]
    try:
      for port in self.ports:
        wait_until_serving(port)
    except Exception:
      self.stop()
      raise

  @property
  def addresses(self):
    return [f'localhost:{port}' for port in self.ports]

  def kill(self, index: int) -> None:
    self.processes[index].kill()
    self.processes[index].wait()

  def restart(self, index: int) -> None:
    """Starts worker `index` again on its port (after `kill`)."""
    deadline = time.monotonic() + 30
    while True:   # The port may linger a moment after the kill.
      self.processes[index] = start_worker(self.ports[index])
      try:
        wait_until_serving(self.ports[index], timeout=15)
        return
      except grpc.FutureTimeoutError:
        self.kill(index)
        if time.monotonic() > deadline:
          raise

  def stop(self) -> None:
    for process in self.processes:
      process.kill()
      process.wait()


class TLSProxy:
  """Terminates TLS (with ALPN h2, which gRPC clients require) on a free loopback port and pipes
  the bytes to a plaintext worker on `target_port`: what haproxy or a service mesh does in front
  of a worker in a deployment."""

  def __init__(self, target_port: int, certificate: str, key: str):
    self.port = portpicker.pick_unused_port()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
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
      reader, writer = await asyncio.open_connection('127.0.0.1', target_port)
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
