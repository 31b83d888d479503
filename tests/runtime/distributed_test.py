"""TFF's distributed runtime over workers on Unix sockets (each in a network namespace of its
own): the same DP rounds as on one local worker, byte counts, a worker that dies named within the
timeout, mutual TLS channels, flag parsing."""

import os
import shutil
import subprocess
import tempfile
import time
from unittest import mock

from absl.testing import absltest
import grpc
import numpy as np
import portpicker
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2

from fedasr_tff import runtime
from fedasr_tff.runtime import distributed
from tests.runtime import dp_mlp
from tests.runtime import workers as workers_lib


def _run(rounds=3, cohort=5):
  process = dp_mlp.process()
  state = dp_mlp.initial_state(process)
  data = dp_mlp.datasets(cohort)
  for _ in range(rounds):
    output = process.next(state, data)
    state = output.state
  return state, output.metrics


class TrustStatementTest(absltest.TestCase):

  def test_says_whether_the_channel_is_mutually_authenticated(self):
    remote = ['a:1', 'b:2']
    self.assertIn('over mutual TLS', runtime.trust_statement(remote, tls=True, mutual_tls=True))
    self.assertIn('NOT the driver to them (not mutual)',
                  runtime.trust_statement(remote, tls=True))
    self.assertIn('over plaintext, unauthenticated gRPC',
                  runtime.trust_statement(remote, tls=False))
    self.assertIn('over Unix sockets on this machine',
                  runtime.trust_statement(['unix:/w.sock'], tls=False))
    self.assertIn('over plaintext', runtime.trust_statement(['unix:/w.sock', 'a:1'], tls=False))


class ParseWorkersTest(absltest.TestCase):

  def test_lists_and_files(self):
    self.assertEqual(runtime.parse_workers(' a:1, b.example:8000 ,'),
                     ['a:1', 'b.example:8000'])
    self.assertEqual(runtime.parse_workers('[::1]:7000'), ['[::1]:7000'])
    self.assertEqual(runtime.parse_workers('unix:/run/w.sock,a:1'), ['unix:/run/w.sock', 'a:1'])
    path = os.path.join(tempfile.mkdtemp(), 'workers.txt')
    with open(path, 'w') as f:
      f.write('# the cluster\nhost-a:8000\n\nhost-b:8000, host-c:8001  # rack 2\n')
    self.assertEqual(runtime.read_workers_file(path),
                     ['host-a:8000', 'host-b:8000', 'host-c:8001'])

  def test_errors_name_the_source_and_entry(self):
    for spec, expected in (('a', "--workers: 'a' is not host:port"),
                           ('a:0', "'a:0' is not host:port"),
                           ('a:x', "'a:x'"), (':80', "':80'"),
                           ('unix:w.sock', "'unix:w.sock' is not unix:/absolute/path"),
                           ('a:1,a:1', "worker 'a:1' is listed twice"),
                           (' , ', '--workers lists no worker')):
      with self.assertRaisesRegex(ValueError, expected, msg=spec):
        runtime.parse_workers(spec)
    path = os.path.join(tempfile.mkdtemp(), 'workers.txt')
    with open(path, 'w') as f:
      f.write('a:1\n# fine\nb:99999\n')
    with self.assertRaisesRegex(ValueError, f'{path} line 3:'):
      runtime.read_workers_file(path)
    with self.assertRaisesRegex(ValueError, '--workers_file: cannot read'):
      runtime.read_workers_file(path + '.missing')

  def test_tls_needs_key_and_certificate_together(self):
    with self.assertRaisesRegex(ValueError, 'both the private key and the certificate'):
      runtime.TLSCredentials(b'ca', private_key=b'key')
    with self.assertRaisesRegex(ValueError, 'Cannot read'):
      runtime.TLSCredentials.from_files('/no/such/ca.pem')


class _Unavailable(grpc.RpcError):

  def code(self):
    return grpc.StatusCode.UNAVAILABLE

  def details(self):
    return 'failed to connect'


class _UnavailableCall:

  def result(self):
    raise _Unavailable()


class WorkerWatchTest(absltest.TestCase):

  def test_waits_for_an_unreachable_worker_except_to_dispose_of_values(self):
    channel = grpc.insecure_channel(f'unix:{tempfile.mkdtemp()}/no-worker.sock')
    service = '/tensorflow_federated.v0.ExecutorGroup/'
    # TFF disposes from finalizers and at exit: a disposal that waited 600 s would hang there.
    def unavailable(details, request):
      del details, request
      return _UnavailableCall()

    watch = distributed._WorkerWatch('unix:w', channel, timeout=600)
    for method in ('Dispose', 'DisposeExecutor'):
      with self.assertRaises(_Unavailable):
        watch.intercept_unary_unary(unavailable, mock.Mock(method=service + method),
                                    executor_pb2.DisposeRequest())
    # Disposals get a deadline (TFF sends them with none): a worker that accepts connections
    # but does not answer would hang the process at exit.
    deadlines = {}

    def record(details, request):
      del request
      deadlines[details.method.rsplit('/', 1)[1]] = details.timeout
      return _UnavailableCall()

    watch = distributed._WorkerWatch('unix:w', channel, timeout=0.1)
    with self.assertRaises(runtime.WorkerUnavailableError):
      watch.intercept_unary_unary(record, mock.Mock(method=service + 'CreateValue', timeout=None),
                                  executor_pb2.CreateValueRequest())
    with self.assertRaises(_Unavailable):
      watch.intercept_unary_unary(record, mock.Mock(method=service + 'Dispose', timeout=None),
                                  executor_pb2.DisposeRequest())
    self.assertEqual(deadlines, {'CreateValue': None,
                                 'Dispose': distributed.DISPOSAL_TIMEOUT_SECONDS})
    watch = distributed._WorkerWatch('unix:w', channel, timeout=0.1)
    with self.assertRaisesRegex(runtime.WorkerUnavailableError, 'unix:w has been unreachable'):
      watch.intercept_unary_unary(unavailable, mock.Mock(method=service + 'CreateValue'),
                                  executor_pb2.CreateValueRequest())


class DistributedRoundsTest(workers_lib.TwoWorkersMixin, absltest.TestCase):

  def test_dp_rounds_equal_the_local_run_up_to_summation_order(self):
    runtime.set_local_cpp_execution_context()
    local_state, local_metrics = _run()
    context = runtime.set_distributed_execution_context(self.workers.addresses)
    state, metrics = _run()
    # The same noise (drawn once, after the merge, from the same seed) and the same adaptive
    # clip; the partial sums are merged block by block, so float sums may differ from the local
    # run's in the last bits: 1e-6 is far below the noise (std 0.5 x clip / 5 clients, about
    # 0.01 here).
    for a, b in zip(local_state.global_model_weights.trainable,
                    state.global_model_weights.trainable, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    initial = dp_mlp.initial_state(dp_mlp.process()).global_model_weights.trainable
    self.assertGreater(np.abs(np.asarray(local_state.global_model_weights.trainable[0]) -
                              initial[0]).max(), 0.01)
    dp_metrics = metrics['aggregator']['dp_query_metrics']
    local_dp_metrics = local_metrics['aggregator']['dp_query_metrics']
    # The clip went on adapting from the merged clipped count, as on one worker.
    np.testing.assert_allclose(
        tf.nest.flatten(dp_metrics['per_group']), tf.nest.flatten(local_dp_metrics['per_group']),
        rtol=1e-5)
    self.assertEqual(metrics['client_work']['train']['num_examples'],
                     local_metrics['client_work']['train']['num_examples'])
    self.assertGreater(context.bytes_sent(), 10_000)   # the computations and the client data
    self.assertGreater(context.bytes_received(), 0)

  def test_each_computation_is_sent_to_each_worker_once(self):
    context = runtime.set_distributed_execution_context(self.workers.addresses)
    process = dp_mlp.process()
    state = dp_mlp.initial_state(process)
    data = dp_mlp.datasets()
    sent = []
    for _ in range(3):
      before = context.bytes_sent()
      state = process.next(state, data).state
      sent.append(context.bytes_sent() - before)
    form = tff.backends.native.compile_to_mergeable_comp_form(process.next)
    up_to_merge = tff.framework.ConcreteComputation.get_proto(
        tff.backends.native.desugar_and_transform_to_native(form.up_to_merge)).ByteSize()
    # Round 1 sends the round's parts to both workers; later rounds send the state, the
    # clients' datasets and disposals alone.
    self.assertGreater(sent[0] - sent[1], 2 * up_to_merge, msg=sent)
    self.assertLess(max(sent[1:]), up_to_merge, msg=sent)

  def test_a_cohort_smaller_than_the_workers_still_runs(self):
    runtime.set_local_cpp_execution_context()
    local_state, _ = _run(rounds=1, cohort=1)
    runtime.set_distributed_execution_context(self.workers.addresses)
    state, _ = _run(rounds=1, cohort=1)
    for a, b in zip(local_state.global_model_weights.trainable,
                    state.global_model_weights.trainable, strict=True):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)

  def test_a_dead_worker_is_named_within_the_timeout(self):
    victim = workers_lib.Workers(1)
    try:
      runtime.set_distributed_execution_context(
          [self.workers.addresses[0], victim.addresses[0]], worker_timeout=3.0)
      process = dp_mlp.process()
      state = process.next(dp_mlp.initial_state(process), dp_mlp.datasets()).state
      victim.kill(0)
      started = time.monotonic()
      with self.assertRaisesRegex(runtime.WorkerUnavailableError,
                                  f'{victim.addresses[0]} has been unreachable for 3 s'):
        process.next(state, dp_mlp.datasets())
      # TFF alone would retry forever; 3 s of timeout, plus the other worker's subround.
      self.assertLess(time.monotonic() - started, 60)
    finally:
      victim.stop()

  def test_an_unreachable_worker_is_named_at_start(self):
    address = f'localhost:{portpicker.pick_unused_port()}'
    started = time.monotonic()
    with self.assertRaisesRegex(runtime.WorkerUnavailableError,
                                f'{address} is not reachable after 0.5 s'):
      runtime.set_distributed_execution_context([self.workers.addresses[0], address],
                                                worker_timeout=0.5)
    self.assertLess(time.monotonic() - started, 10)


def _self_signed(directory: str, name: str):
  """(key, certificate) files of a self-signed certificate for `name` (its own authority)."""
  key, certificate = (os.path.join(directory, f'{name}-{part}.pem') for part in ('key', 'cert'))
  subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
                  '-subj', f'/CN={name}', '-addext', f'subjectAltName=DNS:{name}',
                  '-keyout', key, '-out', certificate], check=True, capture_output=True)
  return key, certificate


@absltest.skipUnless(shutil.which('openssl'), 'needs the openssl command to make certificates')
class TLSTest(absltest.TestCase):
  """Mutual TLS to a TLS-terminating proxy in front of a worker (the deployment
  docs/distributed.md describes; the test's proxy is `workers.TLSProxy`)."""

  def test_rounds_run_over_mutual_tls_and_nothing_else_is_served(self):
    directory = tempfile.mkdtemp()
    key, certificate = _self_signed(directory, 'localhost')
    driver_key, driver_certificate = _self_signed(directory, 'driver')
    worker = workers_lib.Workers(1)
    proxy = workers_lib.TLSProxy(worker.addresses[0], certificate, key,
                                 client_ca=driver_certificate)
    address = f'localhost:{proxy.port}'
    try:
      tls = runtime.TLSCredentials.from_files(certificate, driver_key, driver_certificate)
      runtime.set_distributed_execution_context([address], tls=tls)
      runtime.set_local_cpp_execution_context()
      local_state, _ = _run(rounds=1)
      runtime.set_distributed_execution_context([address], tls=tls)
      state, _ = _run(rounds=1)
      for a, b in zip(local_state.global_model_weights.trainable,
                      state.global_model_weights.trainable, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
      # TLS without the driver's certificate, and plaintext, never become ready.
      for refused in (runtime.TLSCredentials.from_files(certificate), None):
        with self.assertRaisesRegex(runtime.WorkerUnavailableError, 'not reachable after 1 s'):
          runtime.set_distributed_execution_context([address], worker_timeout=1.0, tls=refused)
    finally:
      # The last context set points at the proxy: later tests in this process run locally.
      runtime.set_local_cpp_execution_context()
      proxy.stop()
      worker.stop()


if __name__ == '__main__':
  absltest.main()
