"""TFF's distributed runtime: one federated round spread over TFF workers on other machines.

`set_distributed_execution_context(['host:port', ...])` connects to TFF C++ workers already
running elsewhere (`python -m fedasr_tff.runtime.worker --port=N`, the wheel's own
`worker_binary`) and runs each computation in TFF's mergeable form over them, dispatched in
cohort order by `subrounds.SubroundContext` (TFF 0.87's own mergeable context mis-splits some
rounds: `subrounds`). Under DP, the compiler puts everything after the aggregation (a DP
factory's noise, the adaptive clip's update, the server optimizer) in the part that runs once,
on the merged sum, so noise is added once per round, exactly as on one worker; the sums the
workers hold are un-noised, so the workers are trusted like the server. What holds under
distribution and how to secure the channels: `docs/distributed.md` and `docs/privacy.md`,
"Security".

Not thread-safe: set it once, from the main thread, before the first computation.
"""

import asyncio
import collections
import dataclasses
import os
import threading
import time
from typing import List
from typing import Optional
from typing import Sequence

import grpc
import tensorflow_federated as tff

from fedasr_tff.runtime import DEFAULT_WORKER_TIMEOUT_SECONDS
from fedasr_tff.runtime import execution_context
from fedasr_tff.runtime import subrounds


def trust_statement(workers: Sequence[str], tls: bool, mutual_tls: bool = False,
                    client_store: Optional[str] = None) -> str:
  """The privacy statement's line on the workers of a distributed run and their channels.

  Args:
    workers: The run's workers, as given to `set_distributed_execution_context`.
    tls: Whether the channels use TLS (`tls` credentials were given).
    mutual_tls: Whether the driver also presented its own certificate (mutual TLS).
    client_store: the client store the workers read the clients' data from
      (`speech.data.client_store`), or None when the driver sends it with each round.

  Returns:
    One line, naming the workers, what their channels protect and what the guarantee assumes.
  """
  if tls and mutual_tls:
    channel = ('mutual TLS: the driver and the TLS proxies in front of the workers authenticate '
               'each other')
  elif tls:
    channel = ('TLS that authenticates the workers\' proxies to the driver but NOT the driver to '
               'them (not mutual): whoever reaches a proxy can use its worker')
  elif all(worker.startswith('unix:') for worker in workers):
    channel = ('Unix sockets on this machine, reachable by this user\'s processes alone (and '
               'root)')
  else:
    channel = ('plaintext, unauthenticated gRPC: whoever reaches a worker can use it and read '
               'what it is sent')
  data = ('' if client_store is None else
          f' They read the clients\' features from the client store {client_store}: each '
          'can read every client in it, not only the clients of its rounds.')
  return (f'- Workers: the rounds ran on {len(workers)} TFF workers ({", ".join(workers)}), '
          f'over {channel}. A worker runs the client computation on raw client data and holds '
          'un-noised partial sums; the guarantee assumes the workers are trusted like the '
          'server (the noise is added once, after their sums are merged) and reachable only by '
          f'the driver, through mutual TLS or on a private network.{data}')


class WorkerUnavailableError(RuntimeError):
  """A TFF worker stayed unreachable for longer than the run's worker timeout."""


@dataclasses.dataclass(frozen=True)
class TLSCredentials:
  """PEM bytes for TLS channels to the workers.

  The channels reach TLS-terminating proxies in front of the workers (which serve plaintext
  gRPC); with the driver's own key and certificate they authenticate the driver to them (mutual
  TLS, which the proxies must require).

  Attributes:
    root_certificates: the certificate authority that signed the proxies' certificates.
    private_key: the driver's key, for mutual TLS; None without.
    certificate_chain: the driver's certificate, for mutual TLS; None without.
  """
  root_certificates: bytes
  private_key: Optional[bytes] = None
  certificate_chain: Optional[bytes] = None

  def __post_init__(self):
    if (self.private_key is None) != (self.certificate_chain is None):
      raise ValueError('Give both the private key and the certificate chain for mutual TLS, or '
                       'neither.')

  @classmethod
  def from_files(cls, root_certificates: str, private_key: Optional[str] = None,
                 certificate_chain: Optional[str] = None) -> 'TLSCredentials':
    """Reads the credentials from PEM files.

    Args:
      root_certificates: path of the certificate authority's certificates.
      private_key: path of the driver's key, for mutual TLS.
      certificate_chain: path of the driver's certificate, for mutual TLS.

    Returns:
      The `TLSCredentials`.

    Raises:
      ValueError: if a file cannot be read, or only one of the key and certificate is given.
    """
    def read(path):
      if path is None:
        return None
      try:
        with open(path, 'rb') as f:
          return f.read()
      except OSError as e:
        raise ValueError(f'Cannot read {path!r}: {e.strerror}.') from e
    return cls(read(root_certificates), read(private_key), read(certificate_chain))


def parse_workers(spec: str, source: str = '--workers') -> List[str]:
  """The workers of a comma- or newline-separated list (`#` starts a comment).

  Args:
    spec: the list.
    source: what to name it in errors (a flag or a file).

  Returns:
    ['host:port' or 'unix:/path', ...], in order.

  Raises:
    ValueError: naming `source` and the entry that is not host:port with a port in 1..65535,
      a repeated entry, or an empty list.
  """
  workers = []
  for number, line in enumerate(spec.splitlines(), start=1):
    line = line.split('#', 1)[0]
    for entry in (part.strip() for part in line.split(',')):
      if not entry:
        continue
      where = f'{source} line {number}' if '\n' in spec else source
      if entry.startswith('unix:'):  # a worker started with --unix_socket (worker.py)
        if not os.path.isabs(entry[len('unix:'):]):
          raise ValueError(f'{where}: {entry!r} is not unix:/absolute/path.')
      else:
        host, separator, port = entry.rpartition(':')
        if not separator or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
          raise ValueError(f'{where}: {entry!r} is not host:port (a port in 1..65535) or '
                           'unix:/absolute/path.')
      if entry in workers:
        raise ValueError(f'{where}: worker {entry!r} is listed twice.')
      workers.append(entry)
  if not workers:
    raise ValueError(f'{source} lists no worker.')
  return workers


def read_workers_file(path: str) -> List[str]:
  """The workers listed in a file (`parse_workers`).

  Args:
    path: the file: host:port per line or comma-separated; `#` comments.

  Returns:
    The workers.

  Raises:
    ValueError: if the file cannot be read, or as `parse_workers`.
  """
  try:
    with open(path) as f:
      text = f.read()
  except OSError as e:
    raise ValueError(f'--workers_file: cannot read {path!r}: {e.strerror}.') from e
  return parse_workers(text + '\n', source=path)


_DISPOSALS = ('/Dispose', '/DisposeExecutor')  # TFF's executor service's methods
# Seconds a disposal may take: TFF sends them without a deadline, from finalizers and at exit,
# where a worker that accepts connections but does not answer would hang the process.
DISPOSAL_TIMEOUT_SECONDS = 5.0


class _CallDetails(
    collections.namedtuple('_CallDetails', ('method', 'timeout', 'metadata', 'credentials',
                                            'wait_for_ready', 'compression')),
    grpc.ClientCallDetails):
  """A call's details with one field changed (gRPC's own is read-only)."""


class _WorkerWatch(grpc.UnaryUnaryClientInterceptor):
  """Counts the bytes of every call to one worker, and turns its unavailability for longer
  than `timeout` seconds into a `WorkerUnavailableError`.

  TFF's remote executor retries gRPC's UNAVAILABLE forever and does not retry other errors: the
  round fails, and a run resumes from its last checkpoint once the worker is back.
  """

  def __init__(self, address: str, channel: grpc.Channel, timeout: float):
    self.address = address
    self._channel = channel
    self._timeout = timeout
    self._lock = threading.Lock()
    self._unreachable_since = None
    self.bytes_sent = 0
    self.bytes_received = 0

  def intercept_unary_unary(self, continuation, client_call_details, request):
    with self._lock:
      self.bytes_sent += request.ByteSize()
    if client_call_details.method.endswith(_DISPOSALS) and client_call_details.timeout is None:
      client_call_details = _CallDetails(
          client_call_details.method, DISPOSAL_TIMEOUT_SECONDS, client_call_details.metadata,
          client_call_details.credentials, client_call_details.wait_for_ready,
          client_call_details.compression)
    call = continuation(client_call_details, request)
    try:
      response = call.result()
    except grpc.RpcError as error:
      # Disposals are not retried: nothing is lost if an unreachable worker keeps a value, and
      # TFF disposes from finalizers and at exit, where waiting would hang the process.
      if (error.code() != grpc.StatusCode.UNAVAILABLE or
          client_call_details.method.endswith(_DISPOSALS)):
        raise
      self._wait_or_give_up(error)
      return call   # Reachable again: TFF retries the call.
    with self._lock:
      self._unreachable_since = None
      self.bytes_received += response.ByteSize()
    return call

  def _wait_or_give_up(self, error: grpc.RpcError) -> None:
    with self._lock:
      if self._unreachable_since is None:
        self._unreachable_since = time.monotonic()
      remaining = self._unreachable_since + self._timeout - time.monotonic()
    try:
      grpc.channel_ready_future(self._channel).result(timeout=max(remaining, 0.0))
    except grpc.FutureTimeoutError:
      raise WorkerUnavailableError(
          f'TFF worker {self.address} has been unreachable for {self._timeout:g} s (last '
          f'error: {error.code().name}: {error.details()}). The run stops here; start the '
          'worker again and rerun the same command to resume from the last checkpoint.'
      ) from None


class _ThreadedContext(tff.framework.AsyncContext):
  """An async context whose calls run on an event loop of its own: TFF 0.87's remote executor
  makes blocking gRPC calls inside coroutines, so contexts sharing the mergeable context's loop
  would run their subrounds one after another instead of at once."""

  def __init__(self, inner: tff.framework.AsyncContext):
    self._inner = inner
    self._loop = asyncio.new_event_loop()
    threading.Thread(target=self._loop.run_forever, daemon=True).start()

  async def invoke(self, comp, arg):
    future = asyncio.run_coroutine_threadsafe(self._inner.invoke(comp, arg), self._loop)
    return await asyncio.wrap_future(future)


@dataclasses.dataclass
class DistributedContext:
  """TFF's mergeable-computation context over workers, and the byte counters of their channels.

  Attributes:
    workers: the workers, as given.
    context: the context, for `tff.framework.set_default_context`.
  """
  workers: List[str]
  context: tff.framework.SyncContext
  _watches: List[_WorkerWatch]

  def bytes_sent(self) -> int:
    """Returns the request bytes sent to all workers so far (protobuf payloads, no framing)."""
    return sum(watch.bytes_sent for watch in self._watches)

  def bytes_received(self) -> int:
    """Returns the response bytes received from all workers so far (protobuf payloads)."""
    return sum(watch.bytes_received for watch in self._watches)


def set_distributed_execution_context(
    workers: Sequence[str], *,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT_SECONDS,
    tls: Optional[TLSCredentials] = None,
    num_subrounds: Optional[int] = None) -> DistributedContext:
  """Sets TFF's default context to the mergeable-computation context over `workers`.

  Args:
    workers: as in `create_distributed_execution_context`.
    worker_timeout: as in `create_distributed_execution_context`.
    tls: as in `create_distributed_execution_context`.
    num_subrounds: as in `create_distributed_execution_context`.

  Returns:
    The `DistributedContext` set.

  Raises:
    ValueError: as `create_distributed_execution_context`.
    WorkerUnavailableError: as `create_distributed_execution_context`.
  """
  distributed = create_distributed_execution_context(
      workers, worker_timeout=worker_timeout, tls=tls, num_subrounds=num_subrounds)
  tff.framework.set_default_context(distributed.context)
  return distributed


def create_distributed_execution_context(
    workers: Sequence[str], *,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT_SECONDS,
    tls: Optional[TLSCredentials] = None,
    num_subrounds: Optional[int] = None) -> DistributedContext:
  """TFF's mergeable-computation context over `workers`, connected but not set.

  A program that switches between contexts passes `.context` to
  `tff.framework.set_default_context`. TFF compiles each federated computation into its
  mergeable form (the work up to the aggregation, a merge of partial aggregates, the work after
  it); `subrounds.SubroundContext` runs the first part on every worker over a contiguous block
  of the cohort's clients (a subround each, in cohort order), merges the partial aggregates in
  cohort order (float sums may differ from a local run's in the last bits), and runs the rest
  once. Client datasets are arguments like any other: built in the driver and sent, or built on
  the workers from keys (`algorithms.with_dataset_computation`, `speech.data.client_store`).

  Args:
    workers: 'host:port' of running TFF workers (`parse_workers`).
    worker_timeout: seconds a worker may stay unreachable (at start and during a run) before
      `WorkerUnavailableError` names it.
    tls: credentials for TLS channels, or None for plaintext (a private network).
    num_subrounds: subrounds a round's cohort is split into (default one per worker).

  Returns:
    The `DistributedContext`, each worker's channel watched for `worker_timeout`.

  Raises:
    ValueError: an argument is out of range.
    WorkerUnavailableError: a worker is not reachable within `worker_timeout`.
  """
  workers = list(workers)
  if not workers:
    raise ValueError('`workers` is empty.')
  if not worker_timeout > 0:
    raise ValueError(f'`worker_timeout` must be > 0 seconds, got {worker_timeout!r}.')
  if num_subrounds is not None and (type(num_subrounds) is not int or num_subrounds < 1):
    raise ValueError(f'`num_subrounds` must be None or an int > 0, got {num_subrounds!r}.')
  contexts, watches = [], []
  for address in workers:
    if tls is None:
      channel = grpc.insecure_channel(address, execution_context.CHANNEL_OPTIONS)
    else:
      credentials = grpc.ssl_channel_credentials(tls.root_certificates, tls.private_key,
                                                 tls.certificate_chain)
      channel = grpc.secure_channel(address, credentials, execution_context.CHANNEL_OPTIONS)
    try:
      grpc.channel_ready_future(channel).result(timeout=worker_timeout)
    except grpc.FutureTimeoutError:
      raise WorkerUnavailableError(
          f'TFF worker {address} is not reachable after {worker_timeout:g} s' +
          (' (over TLS: is a TLS proxy serving there, with a certificate the root certificates '
           'sign?).' if tls else '.')) from None
    watch = _WorkerWatch(address, channel, worker_timeout)
    stub = tff.framework.RemoteExecutorGrpcStub(grpc.intercept_channel(channel, watch))
    contexts.append(_ThreadedContext(execution_context.remote_context(stub, asynchronous=True)))
    watches.append(watch)
  return DistributedContext(workers, subrounds.SubroundContext(contexts, num_subrounds), watches)
