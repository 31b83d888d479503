"""Federated training of the classifier-as-retriever, with optional local (client-side) DP.

Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions:
The Case of Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025, Secs. 3.3-3.4 and
Algorithm 1 (App. A), on TFF templates:

    broadcast θ  ->  each client: E local epochs of SGD (lr α, batches as given) from θ,
                     Δ_i = θ − θ_i (old minus new), optionally privatized on the client
                     (`local_dp.privatize`: clip to its own C_i, add noise, update C_i)
                 ->  aggregate Σ_i w_i Δ_i / Σ_i w_i (TFF's `MeanFactory`; w_i = n_i for
                     `num_examples`, 1 for `uniform`; or any aggregation factory, e.g. the
                     project's central-DP `PerLayerDPFactory`, which needs `uniform`)
                 ->  server SGD, θ <- θ − η_s · mean Δ (η_s = 1 is FedAvg's plain average).

The server side is `fed_avg.build_server_components`, as for speech; the client side is our own,
since local DP keeps a state per client (`build_retrieval_process`). A round returns those states
through the round's one aggregation, keyed by each client's position in the cohort, so that TFF's
distributed runtime (`runtime.subrounds`) runs it as it runs FedAvg: client training once, on the
worker that holds the client, and every state back with its client.
"""

import collections
from typing import Callable
from typing import NamedTuple
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.algorithms import fed_avg
from fedasr_tff.algorithms import local_training
from fedasr_tff.retrieval import local_dp as local_dp_lib
from fedasr_tff.text_models import frozen as frozen_lib

WEIGHTINGS = ('num_examples', 'uniform')
DP_GRANULARITIES = ('round', 'step')

_SEED_TYPE = tff.TensorType(np.int64, [2])


class RetrievalOutput(NamedTuple):
  """What `next` returns (and `run_round`, with the states unstacked).

  Attributes:
    state: the server state (model, aggregator, finalizer).
    client_dp_states: the cohort's next `LocalDPState`s: from `next`, an OrderedDict of
      `position` and the state's fields, each a vector over the cohort sorted by position (SERVER
      placed); from `run_round`, a list of `LocalDPState`s in cohort order.
    metrics: the round's metrics (`build_retrieval_process`).
  """
  state: object
  client_dp_states: object
  metrics: object


_DP_STATE_SPEC = local_dp_lib.LocalDPState(
    clip=tf.TensorSpec([], tf.float32), smoothed_norm=tf.TensorSpec([], tf.float32),
    round=tf.TensorSpec([], tf.int32))


def _dp_state_type() -> tff.Type:
  return tff.types.tensorflow_to_type(_DP_STATE_SPEC)


def _keyed_spec(length):
  """The spec of DP states stacked over `length` clients, each with its cohort position."""
  fields = [('position', tf.int32)] + [(name, spec.dtype)
                                       for name, spec in _DP_STATE_SPEC._asdict().items()]
  return collections.OrderedDict((name, tf.TensorSpec([length], dtype)) for name, dtype in fields)


def _build_state_return():
  """The aggregation that hands each client's next DP state back keyed by its cohort position:
  rows are concatenated (in any order: blocks of a cohort are merged as they come) and sorted
  by position once, in the report.

  The states stay in the simulation: a deployment keeps C_i on the client, so the program only
  stores them (keyed by client id) for that client's next round, and releases none of them.
  """
  row_spec, keyed_spec = _keyed_spec(1), _keyed_spec(None)
  keyed_type = tff.types.tensorflow_to_type(keyed_spec)

  @tff.tensorflow.computation(np.int32, _dp_state_type())
  def to_row(position, dp_state):
    return collections.OrderedDict(
        position=tf.reshape(position, [1]),
        **{name: tf.reshape(value, [1])
           for name, value in zip(local_dp_lib.LocalDPState._fields, dp_state, strict=True)})

  @tff.tensorflow.computation
  def no_rows():
    # A [None] shape (not [0]), the type rows accumulate into.
    return collections.OrderedDict(
        (name, tf.raw_ops.PlaceholderWithDefault(input=tf.zeros([0], spec.dtype),
                                                 shape=[None]))
        for name, spec in keyed_spec.items())

  def join(a, b):
    return collections.OrderedDict((k, tf.concat([a[k], b[k]], 0)) for k in a)

  # A row onto the rows (accumulate), and two blocks' rows (merge).
  accumulate = tff.tensorflow.computation(join, keyed_type,
                                          tff.types.tensorflow_to_type(row_spec))
  concatenate = tff.tensorflow.computation(join, keyed_type, keyed_type)

  @tff.tensorflow.computation(keyed_type)
  def sort_by_position(rows):
    order = tf.argsort(rows['position'], stable=True)
    return collections.OrderedDict((k, tf.gather(v, order)) for k, v in rows.items())

  def state_return(positions, next_dp_states):
    rows = tff.federated_map(to_row, (positions, next_dp_states))
    return tff.federated_aggregate(rows, no_rows(), accumulate, concatenate, sort_by_position)

  return state_return


def _build_client_update(model, local_epochs: int, local_dp: Optional[local_dp_lib.LocalDPConfig],
                         dp_granularity: str, weighting: str):
  """One client's round as one `tf.function` (ops run in program order)."""
  forward_pass = getattr(model.forward_pass, 'python_function', model.forward_pass)
  privatize_steps = local_dp is not None and dp_granularity == 'step'

  @tf.function
  def client_update(learning_rate, initial_weights, dataset, dp_state, noise_seed):
    trainable = model.trainable_variables
    initial = tf.nest.flatten(initial_weights.trainable)
    for variable, value in zip(trainable, initial, strict=True):
      variable.assign(value)
    loss_sum = tf.constant(0.0)
    examples = tf.constant(0, tf.int64)
    steps = tf.constant(0, tf.int64)
    clipped = tf.constant(0, tf.int64)
    nonfinite = tf.constant(0, tf.int64)
    noise_std = tf.constant(0.0)
    release_clip = dp_state.clip   # C_i of the last release (none yet)
    for batch in iter(dataset.repeat(local_epochs)):
      # Dropout draws from the batch's seed with the local step folded in, so a client's update
      # is a function of its data, its seeds and θ: the same inputs give the same result
      # (tests/retrieval/process_test.py, DeterminismTest).
      with tf.GradientTape() as tape:
        output = forward_pass(local_training.with_step_seed(batch, steps), training=True)
      grads = local_training.dense_gradients(tape.gradient(output.loss, trainable), trainable)
      update = [tf.cast(learning_rate, g.dtype) * g for g in grads]
      if privatize_steps:
        update, dp_state, step_measured = local_dp_lib.privatize(
            update, dp_state, local_dp, local_training.local_step_seed(noise_seed, steps))
        clipped += tf.cast(step_measured['clipped'], tf.int64)
        nonfinite += tf.cast(step_measured['nonfinite'], tf.int64)
        noise_std = step_measured['noise_std']
        release_clip = step_measured['clip']
      for variable, u in zip(trainable, update, strict=True):
        variable.assign_sub(u)
      loss_sum += tf.cast(output.loss, tf.float32)
      examples += tf.cast(output.num_examples, tf.int64)
      steps += 1
    delta = [w0 - w for w0, w in zip(initial, trainable, strict=True)]
    delta_norm = tf.linalg.global_norm(delta)
    if local_dp is None:
      dp_state = local_dp_lib.LocalDPState(dp_state.clip, dp_state.smoothed_norm,
                                           dp_state.round + 1)
    elif not privatize_steps:
      delta, dp_state, measured = local_dp_lib.privatize(delta, dp_state, local_dp, noise_seed)
      clipped += tf.cast(measured['clipped'], tf.int64)
      nonfinite += tf.cast(measured['nonfinite'], tf.int64)
      noise_std = measured['noise_std']
      release_clip = measured['clip']
    # Examples per epoch: the data size n_i, the paper's weight.
    weight = (tf.cast(examples, tf.float32) / local_epochs if weighting == 'num_examples'
              else tf.constant(1.0))
    sums = collections.OrderedDict(
        loss=loss_sum / tf.maximum(tf.cast(steps, tf.float32), 1.0),
        examples=examples, steps=steps, clients=tf.constant(1, tf.int64),
        delta_norm=delta_norm)
    if local_dp is not None:
      sums.update(clipped=clipped, nonfinite=nonfinite, clip=release_clip, noise_std=noise_std)
    result = tff.learning.templates.ClientResult(
        update=tf.nest.pack_sequence_as(initial_weights.trainable, delta), update_weight=weight)
    return result, dp_state, sums

  return client_update


def _finalize(sums):
  clients = tf.maximum(tf.cast(sums['clients'], tf.float32), 1.0)
  metrics = collections.OrderedDict(
      loss=sums['loss'] / clients, examples=sums['examples'], steps=sums['steps'],
      clients=sums['clients'], delta_norm=sums['delta_norm'] / clients)
  if 'clipped' in sums:
    metrics.update(clipped=sums['clipped'], nonfinite=sums['nonfinite'],
                   mean_clip=sums['clip'] / clients, mean_noise_std=sums['noise_std'] / clients)
  return metrics


def build_retrieval_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_learning_rate: float,
    local_epochs: int = 1,
    local_dp: Optional[local_dp_lib.LocalDPConfig] = None,
    dp_granularity: str = 'round',
    weighting: str = 'num_examples',
    server_learning_rate: float = 1.0,
    model_aggregator=None,
    frozen_backbone: Optional[frozen_lib.FrozenBackbone] = None,
    diagnostics: bool = False,
) -> tff.templates.IterativeProcess:
  """Builds the process of the module docstring.

  Local DP keeps a state per client (C_i, the smoothed norm, the release count for warmup). So
  the process is a `tff.templates.IterativeProcess` whose `next(state, client_data,
  client_dp_states, client_noise_seeds, client_positions)` takes each cohort client's
  `local_dp.LocalDPState` in and returns the next ones stacked over the cohort, keyed by
  `client_positions` (0, 1, ... in cohort order) through the round's aggregation: no value is
  returned at the clients, which TFF's distributed runtime would hand back by block and only by
  training every client twice (`runtime.subrounds`). `run_round` fills in the positions and
  unstacks the states; the program keeps them keyed by client id, as a stand-in for state held
  on the client. `client_noise_seeds` ([2] int64 each) seed the client's noise; local DP's
  guarantee needs them secret from the server, which holds them (and the states) only because
  this is a simulation.

  Args:
    model_fn: a callable returning a `tff_model.RetrieverModel` (or any `VariableModel` whose
      batches may hold a `seed`); no argument, or the backbone's weights with
      `frozen_backbone`.
    client_learning_rate: α > 0 of local SGD.
    local_epochs: E >= 1 passes over the client's batches.
    local_dp: a `local_dp.LocalDPConfig` for local DP, or None.
    dp_granularity: one of `DP_GRANULARITIES`, where the paper is ambiguous: its Algorithm 1 and
      analysis (Sec. 5.1) clip and noise after every local SGD step, its experiments run E
      epochs per round (Sec. 6). "round" privatizes the round's delta once; "step" privatizes
      every local SGD step's update α·g, each with the seed and the step folded in, so the
      upload Δ_i = Σ_k released_k is post-processing of the step releases, and
      `LocalDPState.round` (hence `warmup_rounds`) counts steps. Without `local_dp` the client
      DP states pass through with their release count advanced by one per round.
    weighting: one of `WEIGHTINGS`.
    server_learning_rate: η_s > 0 of server SGD (1: the average of the client models).
    model_aggregator: a TFF aggregation factory for the deltas, default TFF's weighted mean
      (`num_examples`) or unweighted mean (`uniform`). An unweighted factory (central DP)
      requires `uniform`.
    frozen_backbone: the `text_models.FrozenBackbone` that `model_fn` takes the weights of
      (`tff_model.build_model_fn`'s adapter + classifier mode); `next` then takes them as its
      last argument, `backbone_weights` (SERVER-placed, the value `frozen_backbone.weights`),
      broadcast to the clients: one tensor per weight that every client's session reads
      (`text_models.frozen`), at the cost of a transfer of the weights per round.
    diagnostics: also measure the clients' un-noised statistics under `client_work` (below),
      outside every guarantee; off by default.

  Returns:
    The `IterativeProcess`; `next` returns a `RetrievalOutput`. Its metrics: `aggregator`,
    `finalizer`, and `client_work`, empty unless `diagnostics`: sums over the cohort of the
    clients' own, un-noised statistics, `loss` (mean over clients of each client's mean training
    loss), `examples`, `steps`, `clients`, `delta_norm` (mean over clients of ||Δ_i|| before a
    round's privatization; with "step", of the sum of the released steps), and with local DP
    `clipped`, `nonfinite` (releases clipped or zeroed, summed), `mean_clip` and
    `mean_noise_std` (means over clients of the C_i and noise std of the round's last release).
    They are simulation diagnostics outside every guarantee, which a program releases only as a
    labelled opt-in.

  Raises:
    ValueError: naming the argument that is out of range or the combination that is refused.
  """
  tff_default_context.warn_if_current('retrieval.build_retrieval_process')
  validation.check_positive('client_learning_rate', client_learning_rate)
  validation.check_positive_integer('local_epochs', local_epochs)
  validation.check_positive('server_learning_rate', server_learning_rate)
  if weighting not in WEIGHTINGS:
    raise ValueError(f'`weighting` must be one of {WEIGHTINGS}, got {weighting!r}.')
  if dp_granularity not in DP_GRANULARITIES:
    raise ValueError(f'`dp_granularity` must be one of {DP_GRANULARITIES}, got '
                     f'{dp_granularity!r}.')
  if local_dp is not None and not isinstance(local_dp, local_dp_lib.LocalDPConfig):
    raise ValueError(f'`local_dp` must be a LocalDPConfig or None, got {local_dp!r}.')
  if model_aggregator is None:
    model_aggregator = (tff.aggregators.MeanFactory() if weighting == 'num_examples'
                        else tff.aggregators.UnweightedMeanFactory())
  elif (isinstance(model_aggregator, tff.aggregators.UnweightedAggregationFactory) and
        weighting != 'uniform'):
    raise ValueError('An unweighted `model_aggregator` (e.g. central DP) ignores the clients\' '
                     f'weights: use `weighting`="uniform", not {weighting!r}.')

  if frozen_backbone is None:
    build_model = model_fn
  else:
    # Zeros (never computed: nothing fetched reads them) stand in where only types or the
    # trainable weights' initial values are needed.
    def build_model(backbone_weights=None):
      if backbone_weights is None:
        backbone_weights = collections.OrderedDict(
            (key, tf.zeros(spec.shape, spec.dtype))
            for key, spec in frozen_backbone.weights_spec.items())
      return model_fn(backbone_weights)

  with tf.Graph().as_default():
    model = build_model()
    model_weights_type = tff.learning.models.weights_type_from_model(model)
    data_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  dp_state_type = _dp_state_type()
  aggregator, finalizer = fed_avg.build_server_components(
      model_weights_type,
      server_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=server_learning_rate),
      model_aggregator=model_aggregator)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(build_model())

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_zip(collections.OrderedDict(
        model=tff.federated_eval(initial_model_weights_fn, tff.SERVER),
        aggregator=aggregator.initialize(), finalizer=finalizer.initialize()))

  state_type = initialize_fn.type_signature.result

  def train_client(model, weights, dataset, dp_state, noise_seed):
    update_fn = _build_client_update(model, local_epochs, local_dp, dp_granularity, weighting)
    return update_fn(client_learning_rate, weights, dataset, dp_state, noise_seed)

  client_types = (model_weights_type, data_type, dp_state_type, _SEED_TYPE)
  if frozen_backbone is None:
    @tff.tensorflow.computation(*client_types)
    def client_update(weights, dataset, dp_state, noise_seed):
      return train_client(build_model(), weights, dataset, dp_state, noise_seed)
  else:
    backbone_type = tff.types.tensorflow_to_type(frozen_backbone.weights_spec)

    @tff.tensorflow.computation(*client_types, backbone_type)
    def client_update(weights, dataset, dp_state, noise_seed, backbone_weights):
      return train_client(build_model(backbone_weights), weights, dataset, dp_state,
                          noise_seed)

  sums_type = client_update.type_signature.result[2]
  finalize = tff.tensorflow.computation(_finalize, sums_type)
  return_states = _build_state_return()

  def round_fn(state, client_inputs, positions):
    """The round, given the clients' inputs after `model` (client data, DP states, noise
    seeds and, with a frozen backbone, its weights) and their cohort positions."""
    weights = tff.federated_broadcast(state.model)
    results, next_dp_states, sums = tff.federated_map(client_update,
                                                      (weights,) + tuple(client_inputs))
    keyed_dp_states = return_states(positions, next_dp_states)
    aggregated = aggregator.next(state.aggregator, results.update, results.update_weight)
    finalized = finalizer.next(state.finalizer, state.model, aggregated.result)
    next_state = tff.federated_zip(collections.OrderedDict(
        model=finalized.result, aggregator=aggregated.state, finalizer=finalized.state))
    # Client statistics leave the clients only when asked for.
    client_work = (tff.federated_map(finalize, tff.federated_sum(sums)) if diagnostics
                   else tff.federated_value(collections.OrderedDict(), tff.SERVER))
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=client_work,
        aggregator=aggregated.measurements, finalizer=finalized.measurements))
    return RetrievalOutput(next_state, keyed_dp_states, metrics)

  next_types = (state_type, tff.FederatedType(data_type, tff.CLIENTS),
                tff.FederatedType(dp_state_type, tff.CLIENTS),
                tff.FederatedType(_SEED_TYPE, tff.CLIENTS),
                tff.FederatedType(np.int32, tff.CLIENTS))
  if frozen_backbone is None:
    @tff.federated_computation(*next_types)
    def next_fn(state, client_data, client_dp_states, client_noise_seeds, client_positions):
      return round_fn(state, (client_data, client_dp_states, client_noise_seeds),
                      client_positions)
  else:
    @tff.federated_computation(*next_types, tff.FederatedType(backbone_type, tff.SERVER))
    def next_fn(state, client_data, client_dp_states, client_noise_seeds, client_positions,
                backbone_weights):
      return round_fn(state, (client_data, client_dp_states, client_noise_seeds,
                              tff.federated_broadcast(backbone_weights)), client_positions)

  return tff.templates.IterativeProcess(initialize_fn, next_fn)


def run_round(process: tff.templates.IterativeProcess, state, client_data, client_dp_states,
              client_noise_seeds, *backbone_weights) -> RetrievalOutput:
  """One round of a `build_retrieval_process` process, with each client's DP state in and out.

  Args:
    process: the process.
    state: its state.
    client_data: the cohort's datasets, in cohort order.
    client_dp_states: their `LocalDPState`s, in the same order.
    client_noise_seeds: their noise seeds ([2] int64 each), in the same order.
    *backbone_weights: the frozen backbone's weights, for a process built with one.

  Returns:
    The `RetrievalOutput`, `client_dp_states` a list of `LocalDPState`s in cohort order.

  Raises:
    ValueError: if the states that came back are not one per cohort position (which a runtime
      that lost or repeated clients would cause).
  """
  positions = [np.int32(i) for i in range(len(client_data))]
  output = process.next(state, client_data, client_dp_states, client_noise_seeds, positions,
                        *backbone_weights)
  keyed = output.client_dp_states
  returned = np.asarray(keyed['position'])
  if not np.array_equal(returned, np.arange(len(client_data))):
    raise ValueError(f'The round returned DP states for cohort positions {returned.tolist()}, '
                     f'not one for each of the {len(client_data)} clients.')
  fields = local_dp_lib.LocalDPState._fields
  states = [local_dp_lib.LocalDPState(*(np.asarray(keyed[name])[i] for name in fields))
            for i in range(len(client_data))]
  return RetrievalOutput(output.state, states, output.metrics)


def initial_client_dp_state(local_dp: Optional[local_dp_lib.LocalDPConfig]):
  """A client's first `LocalDPState`, as NumPy values.

  Args:
    local_dp: the clients' `LocalDPConfig`, or None.

  Returns:
    C_0, n̄ = 0, round 0; a placeholder clip of 0 without local DP.
  """
  if local_dp is None:
    return local_dp_lib.LocalDPState(np.float32(0.0), np.float32(0.0), np.int32(0))
  state = local_dp_lib.initial_state(local_dp)
  return local_dp_lib.LocalDPState(*(value.numpy() for value in state))


def with_model_weights(state, model_weights):
  """The process state with its model weights replaced (e.g. by a seeded initialisation).

  Args:
    state: the process's state.
    model_weights: the new `ModelWeights`.

  Returns:
    A copy of `state` with `model` = `model_weights`.
  """
  return collections.OrderedDict(state, model=model_weights)
