"""Hierarchical optimization with dynamic gradient aggregation (DGA) and server rehearsal.

Dimitriadis, Kumatani, Gmyr, Gaur and Eskimez, "Federated Transfer Learning with Dynamic
Gradient Aggregation", arXiv:2008.02452 (Sec. 2-3, Algorithms 1-2, eqs. 4-6). A round:

    clients j in the cohort: Δ_j = x − x_j after local SGD (`local_training`), loss L_j
    g = Σ_j α_j Δ_j,  Σ_j α_j = 1                    (the paper's eq. 4, without its stray 1/N)
    x <- ServerOpt(x, g)                              (the paper: server Adam, client SGD)
    x <- x − η_w ∇L_H(x), `rehearsal_steps` times     (server rehearsal on held-out data, eq. 5)

Deltas are old minus new (the paper writes local minus global, then descends along it, which
would move away from the clients), so with uniform α_j = 1/N and server SGD at learning rate 1
the round is FedAvg exactly. The weights α are uniform (the paper's "hierarchical optimization"
baseline), DGA's softmax of the losses (`SoftmaxWeighting`) or learned (DGA-RL, `dga_rl`).
Usage and evidence: `docs/dga.md`.

Privacy. Uniform weighting with `aggregators.PerLayerDPFactory` is DP FedAvg. The softmax
weights are client data: with noise, aggregate with `aggregators.BoundedWeightDPFactory`
(`BoundedWeightMeanQuery` states the argument). Rehearsal reads the server's data and the
(already released) model: it costs the clients nothing, and no client guarantee covers the
server's data. What a run releases: `docs/privacy.md`.
"""

import collections
import dataclasses
import math
from typing import Any
from typing import Callable
from typing import NamedTuple
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.aggregators import bounded_weight_dp
from fedasr_tff.algorithms import central_work as central_work_lib
from fedasr_tff.algorithms import fed_avg
from fedasr_tff.algorithms import local_training

# The widest range of log-weights −β (L − L_lo): e^-80 ≈ 1.8e-35 is a normal float32, so even a
# cohort of weights at w_min sums without underflow.
MAX_LOG_WEIGHT_RANGE = 80.0


@dataclasses.dataclass(frozen=True)
class SoftmaxWeighting:
  """DGA softmax weights over a public loss range (the paper's eq. 6).

  α_j = exp(−β L_j) / Σ_i exp(−β L_i): a client the model fits badly weighs less. The weights
  are computed inside the round's federated computation: every client maps its mean training
  loss over its local steps to an unnormalised weight w_j = exp(−β (clip(L_j, L_lo, L_max) −
  L_lo)) ∈ [w_min, 1], w_min = exp(−β (L_max − L_lo)), inside its local training
  (`local_training`, `update_weight_fn`, so the weight costs the round no step of its own), and
  the weighted mean Σ w_j Δ_j / Σ w_j (TFF's `MeanFactory`, or
  `aggregators.BoundedWeightDPFactory` with DP) is the softmax aggregate. Shifting by the fixed,
  public L_lo instead of the cohort's min L (the usual log-sum-exp shift) leaves the softmax
  unchanged (it is shift-invariant) and keeps the round one aggregation of client values, which
  TFF's mergeable multi-worker form needs; the public loss range keeps every exponent in
  [−β (L_max − L_lo), 0], so no weight overflows or underflows (`MAX_LOG_WEIGHT_RANGE`).
  Within the range the ratio is exact, α_i/α_j = exp(−β (L_i − L_j)); a loss outside it
  saturates at its bound.

  The range matters with DP noise (`aggregators.BoundedWeightDPFactory`): the noise is sized
  for the largest weight, 1, so the noised mean Σ w_j Δ_j / Σ w_j carries noise S / Σ w_j times
  that of uniform weights over S clients. With L_lo = 0 and per-utterance CTC losses of ~40,
  every weight is far below 1 and the noise grows by that factor; put L_lo near the loss a
  well-fitted client reaches (public knowledge, such as the model's loss on the server's data),
  so well-fitted clients weigh ~1 and only the badly fitted ones are scaled down.

  Attributes:
    beta: β >= 0, the softmax's inverse temperature (0: uniform weights).
    loss_clip: L_max, the largest loss that still lowers a weight.
    loss_floor: L_lo < L_max, the reference (a client at or below it gets weight 1).
  """
  beta: float
  loss_clip: float
  loss_floor: float = 0.0

  def __post_init__(self):
    validation.check_non_negative('beta', self.beta)
    for name in ('loss_clip', 'loss_floor'):
      value = getattr(self, name)
      if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f'`{name}` must be a finite number, got {value!r}.')
    if self.loss_clip <= self.loss_floor:
      raise ValueError(f'`loss_clip` ({self.loss_clip!r}) must exceed `loss_floor` '
                       f'({self.loss_floor!r}).')
    log_range = self.beta * (self.loss_clip - self.loss_floor)
    if log_range > MAX_LOG_WEIGHT_RANGE:
      raise ValueError(
          f'`beta` * (`loss_clip` - `loss_floor`) = {log_range:g} '
          f'exceeds {MAX_LOG_WEIGHT_RANGE:g}: the smallest weight e^-{MAX_LOG_WEIGHT_RANGE:g} '
          'would underflow. Lower `beta` or narrow the loss range.')

  @property
  def min_weight(self) -> float:
    """w_min = exp(−β (L_max − L_lo)), the weight of a client at or above the loss clip."""
    return math.exp(-self.beta * (self.loss_clip - self.loss_floor))

  def client_weight(self, loss) -> tf.Tensor:
    """A client's unnormalised weight.

    Args:
      loss: L, the client's mean training loss.

    Returns:
      w = exp(−β (clip(L, L_lo, L_max) − L_lo)) ∈ [w_min, 1], float32; w_min for a non-finite
      loss (a client whose training diverged).
    """
    loss = tf.cast(loss, tf.float32)
    clipped = tf.clip_by_value(loss, self.loss_floor, self.loss_clip)
    clipped = tf.where(tf.math.is_finite(loss), clipped, self.loss_clip)
    return tf.exp(-self.beta * (clipped - self.loss_floor))

  def weights(self, losses) -> np.ndarray:
    """The normalised weights of a cohort (`client_weight`, then normalised; float32).

    Args:
      losses: the clients' mean training losses.

    Returns:
      α, an array summing to 1.
    """
    w = self.client_weight(tf.constant(np.asarray(losses, np.float32))).numpy()
    return w / w.sum()


def client_features(update, loss) -> tf.Tensor:
  """DGA-RL's features of one client.

  Args:
    update: the client's delta Δ, a nest of tensors.
    loss: its mean training loss L.

  Returns:
    [L, mean |Δ|, var |Δ|], float32 [3]: mean and population variance over every coordinate of
    every tensor of the delta.
  """
  flat = tf.concat([tf.reshape(tf.abs(tf.cast(t, tf.float64)), [-1])
                    for t in tf.nest.flatten(update)], axis=0)
  mean = tf.reduce_mean(flat)
  variance = tf.reduce_mean(tf.square(flat - mean))
  return tf.cast(tf.stack([tf.cast(loss, tf.float64), mean, variance]), tf.float32)


def variance_proxy(norms, weights) -> float:
  """The paper's App. A proxy for the variance of the weighted aggregate (up to 1/N²).

  Args:
    norms: ||g_j|| of the clients' pseudo-gradients.
    weights: α_j > 0.

  Returns:
    V(α) = Σ_j ||g_j||² / α_j.
  """
  norms, weights = np.asarray(norms, np.float64), np.asarray(weights, np.float64)
  return float(np.sum(np.square(norms) / weights))


def variance_optimal_weights(norms) -> np.ndarray:
  """The minimiser of `variance_proxy` on the simplex: α_j ∝ ||g_j|| (Cauchy-Schwarz).

  DGA's softmax gives large gradients (losses) *less* weight, the opposite: the paper's App. A
  argument does not show that DGA lowers the variance; DGA is a heuristic that down-weights
  badly modelled clients.

  Args:
    norms: ||g_j|| of the clients' pseudo-gradients, not all zero.

  Returns:
    α, an array summing to 1.
  """
  norms = np.asarray(norms, np.float64)
  return norms / norms.sum()


class DGAState(NamedTuple):
  """The state of a DGA process.

  Attributes:
    global_model_weights: the model x, a `ModelWeights`.
    distributor: the broadcast process's state.
    client_work: the client work's state (its learning rate).
    aggregator: the model aggregator's state.
    finalizer: the server optimizer's state.
    rehearsal: the rehearsal optimizer's state (empty without rehearsal).
  """
  global_model_weights: Any
  distributor: Any
  client_work: Any
  aggregator: Any
  finalizer: Any
  rehearsal: Any


class DGAProcess(central_work_lib.ServerDataProcess):
  """A `ServerDataProcess` (rehearsal batches as `next`'s third argument) with its stages.

  Besides `next`, the process has three federated computations that together make `next`, for
  orchestration in Python (DGA-RL's two candidate server steps from one state). Local training
  and the broadcast are stateless, so `client_round` leaves the state as it is.
  """

  def __init__(self, initialize_fn, next_fn, get_model_weights, set_model_weights,
               central_data_type, *, client_round, server_step, rehearse):
    """Initializes the process.

    Args:
      initialize_fn: as in `ServerDataProcess`.
      next_fn: as in `ServerDataProcess`.
      get_model_weights: as in `ServerDataProcess`.
      set_model_weights: as in `ServerDataProcess`.
      central_data_type: the type of the rehearsal batches; None without them.
      client_round: `client_round(state, client_data)` -> (updates, losses, weights, features)
        placed at the clients (a list in simulation, in cohort order) and the client work's
        measurements; None unless asked for (its client work reports the loss itself, a second
        trace of local training, which a softmax or uniform run does not need).
      server_step: `server_step(state, updates, weights)` -> the round's aggregator and server
        optimizer step (the process's own aggregator and finalizer) as a
        `LearningProcessOutput`.
      rehearse: `rehearse(state, batches)` -> the rehearsal steps as a `LearningProcessOutput`;
        None without rehearsal.
    """
    super().__init__(initialize_fn, next_fn, get_model_weights, set_model_weights,
                     central_data_type)
    self.client_round = client_round
    self.server_step = server_step
    self.rehearse = rehearse


def _weighted_aggregator(model_aggregator, weighting: Optional[SoftmaxWeighting]):
  """The aggregation factory of the deltas, checked against the weighting."""
  if model_aggregator is None:
    return (tff.aggregators.UnweightedMeanFactory() if weighting is None
            else tff.aggregators.MeanFactory())
  if weighting is not None and isinstance(model_aggregator,
                                          tff.aggregators.UnweightedAggregationFactory):
    raise ValueError('DGA softmax weights need a weighted `model_aggregator` (for example '
                     'tff.aggregators.MeanFactory, or aggregators.BoundedWeightDPFactory with DP)'
                     f'; {model_aggregator!r} ignores the weights.')
  if (weighting is not None and
      isinstance(model_aggregator, bounded_weight_dp.BoundedWeightDPFactory) and
      model_aggregator.min_weight > weighting.min_weight * (1 + 1e-6)):
    raise ValueError(f'The aggregator bounds the weights below by {model_aggregator.min_weight:g}'
                     f' but the weighting gives weights down to {weighting.min_weight:g}: build '
                     'the aggregator with `min_weight`=weighting.min_weight.')
  return model_aggregator


def build_dga_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    weighting: Optional[SoftmaxWeighting] = None,
    client_learning_rate: float,
    local_steps: Optional[int] = None,
    local_epochs: Optional[int] = None,
    local_clip_norm: Optional[float] = 1.0,
    fedprox_mu: float = 0.0,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_lr_schedule: Optional[Callable] = None,
    model_aggregator=None,
    rehearsal_steps: int = 0,
    rehearsal_learning_rate: float = 0.0,
    rehearsal_loss_fn: Callable = central_work_lib.model_loss,
    rehearsal_data_free: bool = False,
    with_client_round: bool = False,
    diagnostics: bool = False,
) -> DGAProcess:
  """Builds the DGA process (module docstring).

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`.
    weighting: None (uniform) or a `SoftmaxWeighting`.
    client_learning_rate: η > 0 of the clients' local SGD (`local_training`).
    local_steps: local steps per round; or
    local_epochs: local epochs per round. Exactly one of the two.
    local_clip_norm: the clients' local gradient clip, or None; the rehearsal clips at it too.
    fedprox_mu: μ >= 0 of the clients' proximal term.
    server_optimizer: ServerOpt (the paper: Adam).
    server_lr_schedule: callable from round (0-based) to server learning rate, or None.
    model_aggregator: the deltas' aggregation factory: weighted (TFF's `MeanFactory`,
      `aggregators.BoundedWeightDPFactory`) or, for uniform weights, unweighted (for example
      `aggregators.PerLayerDPFactory`). Default TFF's mean of the weighting.
    rehearsal_steps: server rehearsal steps per round (>= 0): SGD steps on server-held data
      after the server optimizer step, with mixed FL's central component
      (`central_work.build_central_work`: the same loss, the gradient clipped at the clients'
      local clip). Their batches are `next`'s third argument; 0 steps or a learning rate of 0
      is no rehearsal, and `next` then takes no batches.
    rehearsal_learning_rate: η_w >= 0 of the rehearsal's SGD.
    rehearsal_loss_fn: (model, batch) -> scalar loss of the rehearsal; default the model's.
    rehearsal_data_free: the rehearsal loss needs no server data.
    with_client_round: also build the `client_round` stage (DGA-RL needs it; otherwise None).
    diagnostics: also measure the clients' un-noised statistics (`client_work`: `train` and
      `weights`), outside any DP guarantee; off by default. The aggregator's own client
      statistics are its factory's choice.

  Returns:
    A `DGAProcess`. Measurements: `client_work` (with `diagnostics` only: local training's
    `train`, and `weights`: `weight_sum` Σ_j w_j and `effective_clients` (Σ w)²/Σ w², un-noised
    client statistics; empty by default, in `next` and `client_round` alike), `aggregator`,
    `finalizer`, and `rehearsal` (`loss`, the mean rehearsal loss; `delta_norm`), which are
    server quantities.

  Raises:
    ValueError: for a `weighting` that is not a `SoftmaxWeighting`, an argument out of range, an
      unweighted aggregator with softmax weights, or a `BoundedWeightDPFactory` whose
      `min_weight` exceeds the weighting's.
  """
  tff_default_context.warn_if_current('algorithms.build_dga_process')
  if weighting is not None and not isinstance(weighting, SoftmaxWeighting):
    raise ValueError(f'`weighting` must be None (uniform) or a SoftmaxWeighting, got '
                     f'{weighting!r}.')
  validation.check_non_negative_integer('rehearsal_steps', rehearsal_steps)
  validation.check_non_negative('rehearsal_learning_rate', rehearsal_learning_rate)
  rehearses = rehearsal_steps > 0 and rehearsal_learning_rate > 0
  model_aggregator = _weighted_aggregator(model_aggregator, weighting)

  local_work = dict(client_learning_rate=client_learning_rate, local_steps=local_steps,
                    local_epochs=local_epochs, local_clip_norm=local_clip_norm,
                    fedprox_mu=fedprox_mu)
  weight_fn = _uniform_weight if weighting is None else weighting.client_weight
  client_work = local_training.build_local_training_client_work(
      model_fn, update_weight_fn=weight_fn, diagnostics=diagnostics, **local_work)
  rehearsal = None
  if rehearses:
    rehearsal = central_work_lib.build_central_work(
        model_fn, optimizer=tff.learning.optimizers.build_sgdm(
            learning_rate=rehearsal_learning_rate),
        steps=rehearsal_steps, loss_fn=rehearsal_loss_fn, data_free=rehearsal_data_free,
        clip_norm=local_clip_norm, gradient=False)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  model_weights_type = initial_model_weights_fn.type_signature.result
  trainable_type = model_weights_type.trainable
  distributor = tff.learning.templates.build_broadcast_process(model_weights_type)
  aggregator, finalizer = fed_avg.build_server_components(
      model_weights_type, server_optimizer=server_optimizer,
      server_lr_schedule=server_lr_schedule, model_aggregator=model_aggregator)
  ops = _TensorflowOps(trainable_type, model_weights_type, weighting)

  @tff.federated_computation
  def init_fn():
    rehearsal_state = (tff.federated_eval(rehearsal.initialize, tff.SERVER) if rehearses
                       else tff.federated_value(collections.OrderedDict(), tff.SERVER))
    return tff.federated_zip(DGAState(
        global_model_weights=tff.federated_eval(initial_model_weights_fn, tff.SERVER),
        distributor=distributor.initialize(), client_work=client_work.initialize(),
        aggregator=aggregator.initialize(), finalizer=finalizer.initialize(),
        rehearsal=rehearsal_state))

  state_type = init_fn.type_signature.result
  client_data_type = client_work.next.type_signature.parameter[2]
  client_values_type = tff.FederatedType(trainable_type, tff.CLIENTS)
  client_weights_type = tff.FederatedType(np.float32, tff.CLIENTS)

  def train_clients(state, client_data):
    distributed = distributor.next(state.distributor, state.global_model_weights)
    output = client_work.next(state.client_work, distributed.result, client_data)
    return output.result.update, output.result.update_weight, output.measurements

  def step_server(state, updates, weights):
    aggregated = aggregator.next(state.aggregator, updates, weights)
    finalized = finalizer.next(state.finalizer, state.global_model_weights, aggregated.result)
    new_state = tff.federated_zip(DGAState(
        global_model_weights=finalized.result, distributor=state.distributor,
        client_work=state.client_work, aggregator=aggregated.state, finalizer=finalized.state,
        rehearsal=state.rehearsal))
    return new_state, aggregated.measurements, finalized.measurements

  def rehearse_server(state, batches):
    x = state.global_model_weights
    args = (state.rehearsal, x) if rehearsal.data_type is None else (state.rehearsal, x,
                                                                     batches)
    optimizer_state, delta, _, loss = tff.federated_map(rehearsal.steps, args)
    new_x = tff.federated_map(ops.apply_delta, (x, delta))
    measurements = tff.federated_zip(collections.OrderedDict(
        loss=loss, delta_norm=tff.federated_map(ops.norm, delta)))
    new_state = tff.federated_zip(DGAState(
        global_model_weights=new_x, distributor=state.distributor,
        client_work=state.client_work, aggregator=state.aggregator, finalizer=state.finalizer,
        rehearsal=optimizer_state))
    return new_state, measurements

  def round_fn(state, client_data, batches):
    updates, weights, client_measurements = train_clients(state, client_data)
    new_state, aggregator_measurements, finalizer_measurements = step_server(state, updates,
                                                                             weights)
    measurements = collections.OrderedDict(
        distributor=tff.federated_value(collections.OrderedDict(), tff.SERVER),
        client_work=client_measurements, aggregator=aggregator_measurements,
        finalizer=finalizer_measurements)
    if rehearses:
      new_state, measurements['rehearsal'] = rehearse_server(new_state, batches)
    return tff.learning.templates.LearningProcessOutput(new_state,
                                                        tff.federated_zip(measurements))

  central_data_type = rehearsal.data_type if rehearses else None
  if central_data_type is None:
    next_fn = tff.federated_computation(
        lambda state, client_data: round_fn(state, client_data, None),
        state_type, client_data_type)
  else:
    next_fn = tff.federated_computation(round_fn, state_type, client_data_type,
                                        tff.FederatedType(central_data_type, tff.SERVER))

  def build_client_round():
    # Built with the process, not on first use: tracing a model invalidates Keras models made
    # before it (a DGA-RL runner's validation model).
    loss_work = local_training.build_local_training_client_work(
        model_fn, update_weight_fn=tf.identity, diagnostics=diagnostics, **local_work)

    @tff.federated_computation(state_type, client_data_type)
    def client_round(state, client_data):
      distributed = distributor.next(state.distributor, state.global_model_weights)
      output = loss_work.next(state.client_work, distributed.result, client_data)
      updates, losses = output.result.update, output.result.update_weight
      weights = tff.federated_map(ops.client_weight, losses)
      features = tff.federated_map(ops.features, (updates, losses))
      if not diagnostics:
        return updates, losses, weights, features, output.measurements
      statistics = tff.federated_map(ops.weight_statistics,
                                     tff.federated_sum(tff.federated_map(ops.weight_powers,
                                                                         weights)))
      return updates, losses, weights, features, tff.federated_zip(collections.OrderedDict(
          train=output.measurements.train, weights=statistics))

    return client_round

  @tff.federated_computation(state_type, client_values_type, client_weights_type)
  def server_step(state, updates, weights):
    new_state, aggregator_measurements, finalizer_measurements = step_server(state, updates,
                                                                             weights)
    return tff.learning.templates.LearningProcessOutput(new_state, tff.federated_zip(
        collections.OrderedDict(aggregator=aggregator_measurements,
                                finalizer=finalizer_measurements)))

  rehearse = None
  if rehearses:
    def rehearse_fn(state, batches):
      new_state, measurements = rehearse_server(state, batches)
      return tff.learning.templates.LearningProcessOutput(new_state, tff.federated_zip(
          collections.OrderedDict(rehearsal=measurements)))
    if central_data_type is None:
      rehearse = tff.federated_computation(lambda state: rehearse_fn(state, None), state_type)
    else:
      rehearse = tff.federated_computation(rehearse_fn, state_type,
                                           tff.FederatedType(central_data_type, tff.SERVER))

  get_model_weights, set_model_weights = central_work_lib.model_weight_accessors(
      state_type, model_weights_type)

  return DGAProcess(init_fn, next_fn, get_model_weights, set_model_weights, central_data_type,
                    client_round=build_client_round() if with_client_round else None,
                    server_step=server_step, rehearse=rehearse)


def _uniform_weight(loss) -> tf.Tensor:
  return tf.ones_like(tf.cast(loss, tf.float32))


class _TensorflowOps:
  """The small TF computations of a DGA round, typed for one model."""

  def __init__(self, trainable_type, model_weights_type, weighting):
    weight_fn = _uniform_weight if weighting is None else weighting.client_weight
    self.client_weight = tff.tensorflow.computation(weight_fn, np.float32)
    self.weight_powers = tff.tensorflow.computation(lambda w: tf.stack([w, tf.square(w)]),
                                                    np.float32)
    self.weight_statistics = tff.tensorflow.computation(
        lambda sums: local_training.weight_statistics(sums[0], sums[1]),
        tff.TensorType(np.float32, [2]))
    self.features = tff.tensorflow.computation(client_features, trainable_type, np.float32)
    self.norm = tff.tensorflow.computation(
        lambda value: tf.linalg.global_norm(tf.nest.flatten(value)), trainable_type)
    self.apply_delta = tff.tensorflow.computation(
        lambda x, delta: tff.learning.models.ModelWeights(
            trainable=tf.nest.map_structure(lambda w, d: w - d, x.trainable, delta),
            non_trainable=x.non_trainable),
        model_weights_type, trainable_type)
