"""A federated round run in this process from TFF's own compiled map-reduce form.

TFF compiles a round `next(server_state, client_data)` with one aggregation into a
`tff.backends.mapreduce.MapReduceForm`, whose parts are TensorFlow computations with documented
semantics (TFF's `forms.py`). `MapReduceRound` runs them as one TensorFlow function: `prepare`,
`work` per client (`lanes` clients at a time), the updates accumulated in cohort order (`zero`,
`accumulate`, `report`), and `update` once per round (where a DP aggregator adds its noise). It
is the computation TFF's C++ worker runs, not a re-implementation, and differs from the worker
in how it runs, not what: client datasets skip tf.data's graph rewrites (`_for_one_pass`) and
the round runs without Grappler (`_without_grappler_calls`). `inprocess_context` runs processes'
rounds with it, the binaries' default engine (docs/running.md, "Engines").
"""

import contextlib
import functools
from typing import Any
from typing import Optional
from typing import Sequence

import tensorflow as tf

# The thread's function-call options: the one way to run a function without Grappler and leave
# the process's other functions as they are (TensorFlow 2.14).
from tensorflow.python.eager import context as eager_context
import tensorflow_federated as tff

# TFF's conversion of a result to the Python containers of its type, as its contexts use.
from tensorflow_federated.python.core.impl.types import type_conversions

from fedasr_tff.runtime import compile_cache
from fedasr_tff.runtime import tff_graphs

_PARTS = ('prepare', 'work', 'zero', 'accumulate', 'report', 'update')


def _without_grappler() -> tf.compat.v1.ConfigProto:
  config = tf.compat.v1.ConfigProto()
  config.graph_options.rewrite_options.disable_meta_optimizer = True
  return config


# TFF's compiler runs Grappler over each part it extracts (seconds for a transformer's round,
# and it fails on some parts: "Failed to import metagraph"), and TensorFlow's function runtime
# again over the whole round when it first runs it; the round runs without both.
WITHOUT_GRAPPLER = _without_grappler()


class MapReduceRound:
  """One round of a computation in its map-reduce form, in this process (module docstring)."""

  def __init__(self, computation: tff.Computation, lanes: int = 1,
               cache: Optional[compile_cache.CompileCache] = None):
    """Compiles `computation` and imports the parts of its map-reduce form.

    Args:
      computation: a federated computation (server state, client data) -> (server state, server
        output), for example a learning process's `next`.
      lanes: clients trained at once, each lane by an import of `work` of its own (its own
        variables); their updates are still accumulated one by one in cohort order, so the
        round's result does not depend on `lanes`.
      cache: where the compiled parts are kept across processes (`compile_cache`), or None to
        compile every time.

    Raises:
      ValueError: if TFF cannot compile it to a map-reduce form (its message says why), the
        form aggregates with secure sums, which this round does not run, or `lanes` < 1.
    """
    if type(lanes) is not int or lanes < 1:
      raise ValueError(f'`lanes` must be an int >= 1, got {lanes!r}.')

    def compile_parts():
      try:
        form = tff.backends.mapreduce.get_map_reduce_form_for_computation(
            computation, grappler_config=WITHOUT_GRAPPLER)
      except (TypeError, ValueError, NotImplementedError) as e:
        raise ValueError(f'The computation {computation.type_signature} has no map-reduce form '
                         f'(TFF: {e}).') from e
      if form.securely_aggregates_tensors:
        raise ValueError('The computation aggregates with secure sums, which the in-process '
                         'round does not run; run it on a TFF worker.')
      return {name: getattr(form, name) for name in _PARTS}

    if cache is None:
      compiled = compile_parts()
    else:
      compiled = cache.parts(
          cache.key(computation, WITHOUT_GRAPPLER.SerializeToString(deterministic=True)),
          _PARTS, compile_parts)
    self._result_type = computation.type_signature.result
    self._parts = {name: tff_graphs.InProcessComputation(compiled[name], name)
                   for name in _PARTS}
    self._lanes = [self._parts['work']] + [
        tff_graphs.InProcessComputation(compiled['work'], f'work (lane {lane})')
        for lane in range(1, lanes)]
    self._data_type = self._parts['work'].type_signature.parameter[0]
    if not isinstance(self._data_type, tff.SequenceType):
      raise ValueError(f'A client\'s data is {self._data_type}, not a sequence: the in-process '
                       'round takes one dataset a client.')
    # A graph without tf.function's automatic control dependencies, which would chain the
    # lanes' calls (stateful, with no resource input) one after another; what must be ordered
    # is ordered explicitly (`InProcessComputation.call_flat`) or by data.
    self._round = tf.compat.v1.wrap_function(self._round_graph, [
        *self._parts['prepare'].input_specs, tf.TensorSpec([None], tf.variant),
        tf.TensorSpec([], tf.int32)])

  def _round_graph(self, *state_and_clients):
    # TFF's semantics of the form (`forms.py`): client_input = prepare(server_state); per client
    # client_update = work(client_data, client_input); accumulator = zero(), then
    # accumulate(accumulator, client_update[0]) per client; server_state, server_output =
    # update(server_state, (report(accumulator), *secure sums)). Secure sums are refused.
    # The first `clients` of `client_variants` are the cohort's datasets (an empty cohort passes
    # one unused dataset: a tensor of variants cannot be empty).
    *state, client_variants, clients = state_and_clients
    parts = self._parts
    client_input = parts['prepare'].call_flat(*state)
    lanes = len(self._lanes)

    def train(lane, index):
      # Lane `lane` trains client `index`: work's result is the update to accumulate, then the
      # secure sums' inputs, empty (checked).
      return self._lanes[lane].call_flat(client_variants[index], *client_input)

    def no_update(lane):
      # Never accumulated; of work's static shape, unknown dimensions as 0.
      return [tf.zeros([] if spec.shape.rank is None else
                       [0 if d is None else d for d in spec.shape.as_list()], spec.dtype)
              for spec in self._lanes[lane].output_specs]

    def step(index, *accumulator):
      # Lane j trains client index + j, at the same time as the others; a lane past the end of
      # the cohort trains nobody. One call of each lane in the whole round: TensorFlow makes a
      # copy of a lane's graph for every call when it first runs the round.
      updates = [train(0, index)] + [
          tf.cond(index + lane < clients, functools.partial(train, lane, index + lane),
                  functools.partial(no_update, lane))
          for lane in range(1, lanes)]
      accumulator = parts['accumulate'].call_flat(*accumulator, *updates[0])
      for lane in range(1, lanes):  # in cohort order, whatever the lanes
        accumulator = tf.cond(
            index + lane < clients,
            functools.partial(parts['accumulate'].call_flat, *accumulator, *updates[lane]),
            lambda accumulator=accumulator: list(accumulator))
      return (index + lanes, *accumulator)

    # Iterations must not overlap: a lane's variables are shared by its calls (as a TFF
    # session's are by the calls it runs).
    loop = (tf.constant(0), *parts['zero'].call_flat())
    loop = tf.while_loop(lambda index, *_: index < clients, step, loop, parallel_iterations=1)
    return parts['update'].call_flat(*state, *parts['report'].call_flat(*loop[1:]))

  def __call__(self, server_state: Any, client_data: Sequence[Any]) -> Any:
    """Runs one round.

    Args:
      server_state: the state, as the computation takes it.
      client_data: each client's data (a `tf.data.Dataset`), in cohort order; empty for a
        round of no clients (Poisson sampling can draw one), which aggregates nothing.

    Returns:
      The computation's result, in its Python containers.

    Raises:
      TypeError: naming the client, if its data is not a `tf.data.Dataset`.
    """
    prepare = self._parts['prepare']
    state = [tf.convert_to_tensor(value, spec.dtype)
             for value, spec in zip(prepare.flatten(server_state), prepare.input_specs,
                                    strict=True)]
    variants = [variant for index, data in enumerate(client_data)
                for variant in tff_graphs.flatten(_for_one_pass(data), self._data_type,
                                                  f'client_data[{index}]')]
    clients = len(variants)
    variants = tf.stack(variants or [tf.data.experimental.to_variant(tf.data.Dataset.range(0))])
    with _without_grappler_calls():
      result = self._round(*state, variants, tf.constant(clients))
    result = self._parts['update'].unflatten(result)
    return type_conversions.type_to_py_container(result, self._result_type)


def _one_pass_options() -> tf.data.Options:
  options = tf.data.Options()
  options.experimental_optimization.apply_default_optimizations = False
  options.experimental_optimization.inject_prefetch = False
  options.autotune.enabled = False
  return options


_ONE_PASS_OPTIONS = _one_pass_options()


def _for_one_pass(data: Any) -> Any:
  """A client's dataset with tf.data's graph rewrites and autotuning off.

  A client's iterator is made once a round and read for a few batches. tf.data rewrites a
  dataset's graph (a Grappler pass) whenever an iterator is made, adds a prefetch with a thread
  of its own and autotunes it: most of a client's time with the vs_pfl MLP (5 batches a client;
  `benchmarks/inprocess_rounds.py`; docs/benchmarks.md, "Measurements behind the code"). The
  rewrites keep the elements and their order, so the
  round's result does not change; a dataset that is not one is left to `flatten`'s error.
  """
  return data.with_options(_ONE_PASS_OPTIONS) if isinstance(data, tf.data.Dataset) else data


@contextlib.contextmanager
def _without_grappler_calls():
  """Functions called in this thread run without Grappler (`WITHOUT_GRAPPLER`).

  TensorFlow runs Grappler over a function, with every function it calls inlined, when the
  function first runs: for a round of the `tiny` transformer about half of its first round, for
  no gain in the later rounds (docs/benchmarks.md, "Measurements behind the code"). The options are
  the thread's and are put back after the call; the round always runs under the same ones, so
  TensorFlow instantiates it once.
  """
  context = eager_context.context()
  saved = context.function_call_options
  config = tf.compat.v1.ConfigProto.FromString(saved.config_proto_serialized)
  config.graph_options.rewrite_options.disable_meta_optimizer = True
  context.function_call_options = eager_context.FunctionCallOptions(
      executor_type=saved.executor_type, config_proto=config)
  try:
    yield
  finally:
    context.function_call_options = saved
