"""Mixed federated learning: a centralized loss trained server-side, joined with the federated one.

Augenstein, Hard, Ning, Singhal, Kale, Partridge and Mathews, "Mixed Federated Learning: Joint
Decentralized and Centralized Learning", arXiv:2205.13655 (Algorithm 1, App. A). The model x
minimises f = w_f·f_fed + w_c·f_c with w_f = 1 − w_c: f_fed is the clients' loss, f_c a loss the
server computes (the same loss on its own data, or a data-free term; `central_work`). The
paper's three algorithms, parallel training and the 1-way and 2-way gradient transfers, are in
`build_mixed_fl_process`; usage and evidence in `docs/mixed_fl.md`.

Privacy. The central branch reads the server's data and the global model only: it costs the
clients no privacy, and the server's data is covered by no guarantee. Clients send only the
private part of their delta, which the model aggregator clips and noises exactly as in DP FedAvg;
everything the server derives from client data (x_f, the merge, 2-w GT's g̃_f) is post-processing
of that noised aggregate, so a round is one Gaussian mechanism at the aggregator's z and the
account is FedAvg's at the same (q, z, T). The broadcast g̃_c is a function of x (a DP release)
and server data, and the η K g̃_c the server adds back is public. What a run releases:
`docs/privacy.md`.
"""

import collections
from typing import Any
from typing import Callable
from typing import NamedTuple
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.algorithms import central_work as central_work_lib
from fedasr_tff.algorithms import fed_avg
from fedasr_tff.algorithms import local_training
from fedasr_tff.optimizers import hparams

PARALLEL, ONE_WAY, TWO_WAY = 'parallel', 'one_way', 'two_way'
ALGORITHMS = (PARALLEL, ONE_WAY, TWO_WAY)


class MixedState(NamedTuple):
  """The state of a mixed FL process.

  Attributes:
    global_model_weights: the model x, a `ModelWeights`.
    distributor: the broadcast process's state.
    client_work: the client work's state (its learning rate).
    aggregator: the model aggregator's state.
    finalizer: the server optimizer's state.
    central: by algorithm, `optimizer` (CentralOpt's state), `merge` (MergeOpt's) and 2-w GT's
      `central_gradient` g̃_c and `federated_gradient` g̃_f; empty without a central branch.
  """
  global_model_weights: Any
  distributor: Any
  client_work: Any
  aggregator: Any
  finalizer: Any
  central: Any


def gradient_dissimilarity(federated_gradient, central_gradient, federated_weight: float,
                           central_weight: float):
  """G̃² and B̃² of Augenstein et al. 2022, eq. 7, from gradients of the weighted losses.

  With a = the mean client gradient and b = the central gradient at x, s = a + b:
      G̃² = ||a||²/w_f + ||b||²/w_c − ||s||²        (assuming B = 1),
      B̃² = (||a||²/w_f + ||b||²/w_c) / ||s||²      (assuming G = 0).
  For w_f + w_c = 1, G̃² >= 0 and B̃² >= 1 (Jensen).

  Args:
    federated_gradient: a, the mean over clients of ∇ w_f·f_i at x.
    central_gradient: b, ∇ w_c·f_c at x, of the same structure.
    federated_weight: w_f > 0.
    central_weight: w_c > 0.

  Returns:
    An OrderedDict {`G2`: G̃², `B2`: B̃² (0 when s = 0)} of float32 scalars.
  """
  flat_a = [tf.cast(t, tf.float32) for t in tf.nest.flatten(federated_gradient)]
  flat_b = [tf.cast(t, tf.float32) for t in tf.nest.flatten(central_gradient)]
  a2 = tf.add_n([tf.reduce_sum(tf.square(t)) for t in flat_a])
  b2 = tf.add_n([tf.reduce_sum(tf.square(t)) for t in flat_b])
  s2 = tf.add_n([tf.reduce_sum(tf.square(a + b)) for a, b in zip(flat_a, flat_b, strict=True)])
  weighted = a2 / federated_weight + b2 / central_weight
  return collections.OrderedDict(G2=weighted - s2, B2=tf.math.divide_no_nan(weighted, s2))


def central_batch_size(algorithm: str, cohort_size: int, client_batch_size: int,
                       local_steps: int) -> int:
  """The paper's central batch size (Augenstein et al. 2022, App. C.2).

  |B_c| = S·|B_i| for PT and 2-w GT (the server's step matches the cohort's), K·S·|B_i| for
  1-w GT (its one central gradient stands for K steps, so its variance is K times more costly,
  Table 1).

  Args:
    algorithm: one of `ALGORITHMS`.
    cohort_size: S, clients per round.
    client_batch_size: |B_i|, a client's batch size.
    local_steps: K, local steps per round.

  Returns:
    |B_c|.

  Raises:
    ValueError: for an unknown algorithm or a size that is not a positive integer.
  """
  if algorithm not in ALGORITHMS:
    raise ValueError(f'`algorithm` must be one of {ALGORITHMS}, got {algorithm!r}.')
  for name, value in (('cohort_size', cohort_size), ('client_batch_size', client_batch_size),
                      ('local_steps', local_steps)):
    validation.check_positive_integer(name, value)
  size = cohort_size * client_batch_size
  return size * local_steps if algorithm == ONE_WAY else size


def build_mixed_fl_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    algorithm: str,
    central_weight: float,
    client_learning_rate: float,
    local_steps: Optional[int] = None,
    local_epochs: Optional[int] = None,
    local_clip_norm: Optional[float] = 1.0,
    fedprox_mu: float = 0.0,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_lr_schedule: Optional[Callable] = None,
    model_aggregator: Optional[tff.aggregators.UnweightedAggregationFactory] = None,
    central_optimizer: Optional[tff.learning.optimizers.Optimizer] = None,
    merge_optimizer: Optional[tff.learning.optimizers.Optimizer] = None,
    central_steps: Optional[int] = None,
    central_loss_fn: Callable = central_work_lib.model_loss,
    central_data_free: bool = False,
    gradient_dissimilarity: bool = False,  # pylint: disable=redefined-outer-name
    diagnostics: bool = False,
) -> central_work_lib.ServerDataProcess:
  """Builds the mixed FL process of `algorithm`.

  Deltas here are old minus new (Δ = x − x_new), the sign of client updates, so an optimizer
  applied to Δ as a gradient moves the model by −lr·Δ. The loss weights enter through the
  losses: clients train on w_f·loss, the server on w_c·f_c, and the two branches' deltas are
  summed (the paper's pseudocode, not its prose's "averaged"). A round of each algorithm, with
  FedAvg's Δ̄ = mean_i Δ_i (uniform weights) and ServerOpt giving x_f, and the central branch's K
  steps of CentralOpt from x giving x_c (`central_work.build_central_work`, `steps`):

  * Parallel training (PT): x_c from x on fresh central batches; the federated round is FedAvg;
    x ← MergeOpt(x, (x − x_c) + (x − x_f)) (with SGD at η_m = 1: x_c + x_f − x).
  * 1-way gradient transfer (1-w GT): before the broadcast the server computes
    g̃_c = ∇ w_c·f_c(x) (mean over the round's central batches, `gradient`) and broadcasts it
    with x; every client adds it to every local step's gradient (`local_training`,
    `augmented`); x ← ServerOpt(x, Δ̄). No CentralOpt or MergeOpt, no augmenting state.
  * 2-way gradient transfer (2-w GT): PT whose clients add the state's g̃_c and whose central
    steps add the state's g̃_f; then g̃_c ← the mean of the round's K central stochastic
    gradients and g̃_f ← the federated average data gradient, recovered from the aggregate with
    no extra upload (App. A.2): for SGD clients of K steps, Δ_i = η Σ_k (ĝ_k + g̃_c), so
    g̃_f = Δ̄_private / (η K). Both are one round stale; in round 0 (g̃ = 0) 2-w GT equals PT.
    It takes about twice PT's step at the same learning rate (both branches move along the
    whole gradient of f), which is why the paper gives it a smaller one.

  Clients return only the private part of their delta, Δ_i − η K g̃_c = η Σ_k clip(∇ w_f·f_i)
  (`local_training`): the server adds η K g̃_c back after aggregation. For SGD clients (ours)
  this is exact, so the round equals the paper's; the gain is that the clip (and any noise) acts
  on client data only. With w_c = 0 there is no central branch: all three processes are FedAvg,
  bit for bit (the paper's 2-w GT would still take a stale federated step in its central
  branch; the merge of a single branch is skipped too, so MergeOpt is unused).

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`.
    algorithm: "parallel", "one_way" or "two_way" (`ALGORITHMS`).
    central_weight: w_c in [0, 1]; clients train on (1 − w_c)·loss.
    client_learning_rate: η > 0 of the clients' local SGD (`local_training`).
    local_steps: K local steps per round; the gradient transfers need it.
    local_epochs: local epochs per round instead of `local_steps`; not with a gradient transfer
      (w_c > 0), and PT then needs `central_steps`.
    local_clip_norm: the clients' local gradient clip, or None. The central branch clips its
      data gradients at it too (`central_work`).
    fedprox_mu: μ >= 0 of the clients' proximal term.
    server_optimizer: ServerOpt of the federated branch, as in `fed_avg.build_fed_avg_process`.
    server_lr_schedule: as in `fed_avg.build_fed_avg_process`.
    model_aggregator: the aggregator of the client deltas, as in
      `fed_avg.build_fed_avg_process` (a DP factory for DP).
    central_optimizer: CentralOpt of PT and 2-w GT; default SGD at `client_learning_rate` (the
      paper's η_c = η·η_s with η_s = 1). 1-w GT takes none.
    merge_optimizer: MergeOpt of PT and 2-w GT; default SGD at 1 (the paper's η_m). 1-w GT
      takes none.
    central_steps: K central steps of PT and 2-w GT; default `local_steps` (the paper's choice).
    central_loss_fn: (model, batch) -> scalar f_c; default the model's own loss.
    central_data_free: f_c needs no server data (`central_loss_fn(model, None)`).
    gradient_dissimilarity: measure G̃² and B̃² (one extra gradient per client); needs
      0 < `central_weight` < 1 and `diagnostics` (they read un-noised client gradients).
    diagnostics: also measure the clients' un-noised training statistics under
      `client_work/train` (outside any DP guarantee), as in `fed_avg.build_fed_avg_process`;
      off by default.

  Returns:
    A `central_work.ServerDataProcess`: `next(state, client_data, central_data)`, the round's
    central batches a SERVER-placed sequence, or `next(state, client_data)` for a data-free
    central loss. One federated computation holds both branches, so TFF runs the server's steps
    concurrently with the clients'. Measurements: `client_work`, `aggregator` and `finalizer`
    as in FedAvg (`client_work` empty unless `diagnostics`); `merge` (MergeOpt's); `mixed`:
    `federated_delta_norm` ||x − x_f||, and where the algorithm has them `central_loss` (mean of
    the unweighted f_c over the central steps or batches), `central_delta_norm` ||x − x_c||,
    `central_gradient_norm` (the g̃_c sent to clients; PT: the mean central gradient) and
    `federated_gradient_norm` (the g̃_f the central steps used). With `gradient_dissimilarity`,
    `client_work/gradient_dissimilarity` holds G̃² and B̃² from one extra gradient per client at
    x and the central gradient at x.

  Raises:
    ValueError: for an unknown algorithm, an argument out of range, optimizers or steps given to
      1-w GT, `gradient_dissimilarity` without `diagnostics` or with w_c not in (0, 1), or a
      gradient transfer without `local_steps`.
  """
  tff_default_context.warn_if_current('algorithms.build_mixed_fl_process')
  if algorithm not in ALGORITHMS:
    raise ValueError(f'`algorithm` must be one of {ALGORITHMS}, got {algorithm!r}.')
  validation.check_unit_interval('central_weight', central_weight)
  if algorithm == ONE_WAY:
    given = [name for name, value in (('central_optimizer', central_optimizer),
                                      ('merge_optimizer', merge_optimizer),
                                      ('central_steps', central_steps)) if value is not None]
    if given:
      raise ValueError(f'The one-way gradient transfer takes no {", ".join(given)}: it computes '
                       'one central gradient per round and applies only the server optimizer.')
  if gradient_dissimilarity and not diagnostics:
    raise ValueError('`gradient_dissimilarity` is an un-noised client statistic: it needs '
                     '`diagnostics`=True.')
  if gradient_dissimilarity and not 0.0 < central_weight < 1.0:
    raise ValueError('`gradient_dissimilarity` needs 0 < `central_weight` < 1, got '
                     f'{central_weight!r}.')
  if central_steps is not None:
    validation.check_positive_integer('central_steps', central_steps)
  federated_weight = 1.0 - central_weight
  has_central = central_weight > 0
  transfers = has_central and algorithm in (ONE_WAY, TWO_WAY)
  central_steps_run = has_central and algorithm in (PARALLEL, TWO_WAY)
  if transfers and local_steps is None:
    raise ValueError(f'The gradient transfer ({algorithm}) needs `local_steps`, not '
                     '`local_epochs`: the server adds back η·local_steps·g̃_c, so every '
                     "client's step count must be public.")
  if central_steps_run:
    if central_steps is None:
      if local_steps is None:
        raise ValueError('Give `central_steps` when clients train for `local_epochs`.')
      central_steps = local_steps
    central_optimizer = central_optimizer or tff.learning.optimizers.build_sgdm(
        learning_rate=client_learning_rate)
    merge_optimizer = merge_optimizer or tff.learning.optimizers.build_sgdm(learning_rate=1.0)

  client_work = local_training.build_local_training_client_work(
      model_fn, client_learning_rate=client_learning_rate, local_steps=local_steps,
      local_epochs=local_epochs, local_clip_norm=local_clip_norm, fedprox_mu=fedprox_mu,
      loss_weight=federated_weight, augmented=transfers, start_gradient=gradient_dissimilarity,
      diagnostics=diagnostics)
  central_kwargs = dict(loss_weight=central_weight, loss_fn=central_loss_fn,
                        data_free=central_data_free)
  central = central_work_lib.build_central_work(
      model_fn, optimizer=central_optimizer if central_steps_run else None,
      steps=central_steps or 1, augmented=algorithm == TWO_WAY, clip_norm=local_clip_norm,
      # Only the 1-way transfer calls `gradient`.
      gradient=not central_steps_run or algorithm == ONE_WAY, **central_kwargs)
  raw_central_gradient = None
  if gradient_dissimilarity:
    # G̃² and B̃² compare raw gradients: the clients' is unclipped, so the server's is too.
    raw_central_gradient = central_work_lib.build_central_work(
        model_fn, optimizer=None, steps=1, **central_kwargs).gradient

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  model_weights_type = initial_model_weights_fn.type_signature.result
  trainable_type = model_weights_type.trainable
  broadcast_type = (local_training.augmented_broadcast_type(model_weights_type) if transfers
                    else model_weights_type)
  distributor = tff.learning.templates.build_broadcast_process(broadcast_type)
  aggregator, finalizer = fed_avg.build_server_components(
      model_weights_type, server_optimizer=server_optimizer,
      server_lr_schedule=server_lr_schedule, model_aggregator=model_aggregator)
  merger = None
  if central_steps_run:
    merger = fed_avg.build_finalizer(merge_optimizer, model_weights_type)
  tf_ops = _TensorflowOps(trainable_type, model_weights_type, local_steps)

  @tff.federated_computation
  def init_fn():
    central_state = collections.OrderedDict()
    if central_steps_run:
      central_state['optimizer'] = tff.federated_eval(central.initialize, tff.SERVER)
      central_state['merge'] = merger.initialize()
    if transfers and algorithm == TWO_WAY:
      central_state['central_gradient'] = tff.federated_eval(tf_ops.zeros, tff.SERVER)
      central_state['federated_gradient'] = tff.federated_eval(tf_ops.zeros, tff.SERVER)
    central_state = (tff.federated_zip(central_state) if central_state
                     else tff.federated_value(collections.OrderedDict(), tff.SERVER))
    return tff.federated_zip(MixedState(
        global_model_weights=tff.federated_eval(initial_model_weights_fn, tff.SERVER),
        distributor=distributor.initialize(), client_work=client_work.initialize(),
        aggregator=aggregator.initialize(), finalizer=finalizer.initialize(),
        central=central_state))

  state_type = init_fn.type_signature.result
  client_data_type = client_work.next.type_signature.parameter[2]

  def round_fn(state, client_data, central_data):
    x = state.global_model_weights
    central_state = state.central
    central_args = (x,) if central.data_type is None else (x, central_data)
    mixed = collections.OrderedDict()
    new_central = collections.OrderedDict()
    if transfers and algorithm == ONE_WAY:
      augmenting, mixed['central_loss'] = tff.federated_map(central.gradient, central_args)
      mixed['central_gradient_norm'] = tff.federated_map(tf_ops.norm, augmenting)
    elif transfers:
      augmenting = central_state.central_gradient
      mixed['central_gradient_norm'] = tff.federated_map(tf_ops.norm, augmenting)
    broadcast_value = (tff.federated_map(tf_ops.augmented_broadcast, (x, augmenting))
                       if transfers else x)
    distributed = distributor.next(state.distributor, broadcast_value)
    client_output = client_work.next(state.client_work, distributed.result, client_data)
    aggregated = aggregator.next(state.aggregator, client_output.result.update,
                                 client_output.result.update_weight)
    client_lr = tff.federated_map(tf_ops.learning_rate, state.client_work)
    update = aggregated.result
    if transfers:
      update = tff.federated_map(tf_ops.add_public_part, (update, augmenting, client_lr))
    finalized = finalizer.next(state.finalizer, x, update)
    new_x = finalized.result
    mixed['federated_delta_norm'] = tff.federated_map(tf_ops.delta_norm, (x, new_x))
    merge_measurements = tff.federated_value(collections.OrderedDict(), tff.SERVER)
    if central_steps_run:
      step_args = (central_state.optimizer,) + central_args
      if algorithm == TWO_WAY:
        step_args += (central_state.federated_gradient,)
        mixed['federated_gradient_norm'] = tff.federated_map(
            tf_ops.norm, central_state.federated_gradient)
      (new_central['optimizer'], central_delta, central_gradient,
       mixed['central_loss']) = tff.federated_map(central.steps, step_args)
      mixed['central_delta_norm'] = tff.federated_map(tf_ops.norm, central_delta)
      if algorithm == PARALLEL:
        mixed['central_gradient_norm'] = tff.federated_map(tf_ops.norm, central_gradient)
      merged = merger.next(central_state.merge, x,
                           tff.federated_map(tf_ops.summed_deltas, (x, new_x, central_delta)))
      new_central['merge'], new_x, merge_measurements = (merged.state, merged.result,
                                                         merged.measurements)
      if algorithm == TWO_WAY:
        new_central['central_gradient'] = central_gradient
        # From the noised aggregate only: post-processing of the DP release.
        new_central['federated_gradient'] = tff.federated_map(
            tf_ops.federated_gradient, (aggregated.result, client_lr))
    client_measurements = client_output.measurements
    if gradient_dissimilarity:
      central_at_x = tff.federated_map(raw_central_gradient, central_args)[0]
      client_measurements = tff.federated_zip(collections.OrderedDict(
          train=client_measurements.train,
          gradient_dissimilarity=tff.federated_map(
              tf_ops.dissimilarity(federated_weight, central_weight),
              (client_measurements.start_gradient, central_at_x))))
    new_central = (tff.federated_zip(new_central) if new_central
                   else tff.federated_value(collections.OrderedDict(), tff.SERVER))
    new_state = tff.federated_zip(MixedState(
        global_model_weights=new_x, distributor=distributed.state,
        client_work=client_output.state, aggregator=aggregated.state,
        finalizer=finalized.state, central=new_central))
    measurements = tff.federated_zip(collections.OrderedDict(
        distributor=distributed.measurements, client_work=client_measurements,
        aggregator=aggregated.measurements, finalizer=finalized.measurements,
        merge=merge_measurements, mixed=tff.federated_zip(mixed)))
    return tff.learning.templates.LearningProcessOutput(new_state, measurements)

  central_data_type = central.data_type
  if central_data_type is None:
    next_fn = tff.federated_computation(
        lambda state, client_data: round_fn(state, client_data, None),
        state_type, client_data_type)
  else:
    next_fn = tff.federated_computation(round_fn, state_type, client_data_type,
                                        tff.FederatedType(central_data_type, tff.SERVER))

  get_model_weights, set_model_weights = central_work_lib.model_weight_accessors(
      state_type, model_weights_type)

  return central_work_lib.ServerDataProcess(init_fn, next_fn, get_model_weights,
                                           set_model_weights, central_data_type)


class _TensorflowOps:
  """The small server-side TF computations of a round, typed for one model."""

  def __init__(self, trainable_type, model_weights_type, local_steps):
    self._trainable_type = trainable_type
    self._model_weights_type = model_weights_type
    self._local_steps = local_steps

    self.zeros = tff.tensorflow.computation(
        lambda: tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype),
                                      _as_specs(trainable_type)))
    self.norm = tff.tensorflow.computation(
        lambda value: tf.linalg.global_norm(tf.nest.flatten(value)), trainable_type)
    self.augmented_broadcast = tff.tensorflow.computation(
        local_training.augmented_broadcast, model_weights_type, trainable_type)

  @property
  def learning_rate(self) -> tff.Computation:
    return tff.tensorflow.computation(
        lambda client_state: tf.cast(client_state[hparams.LEARNING_RATE_KEY], tf.float32))

  def _public_scale(self, client_lr):
    return client_lr * float(self._local_steps)

  @property
  def add_public_part(self) -> tff.Computation:
    """Δ̄_private + η K g̃_c: the update of a round with a transferred central gradient."""
    return tff.tensorflow.computation(
        lambda update, augmenting, client_lr: tf.nest.map_structure(
            lambda u, a: u + self._public_scale(client_lr) * a, update, augmenting),
        self._trainable_type, self._trainable_type, np.float32)

  @property
  def federated_gradient(self) -> tff.Computation:
    """g̃_f = Δ̄_private / (η K), from the (noised) aggregate."""
    return tff.tensorflow.computation(
        lambda update, client_lr: tf.nest.map_structure(
            lambda u: u / self._public_scale(client_lr), update),
        self._trainable_type, np.float32)

  @property
  def delta_norm(self) -> tff.Computation:
    return tff.tensorflow.computation(
        lambda old, new: tf.linalg.global_norm(
            [o - n for o, n in zip(old.trainable, new.trainable, strict=True)]),
        self._model_weights_type, self._model_weights_type)

  @property
  def summed_deltas(self) -> tff.Computation:
    """(x − x_f) + (x − x_c): the merge optimizer's pseudo-gradient."""
    return tff.tensorflow.computation(
        lambda x, x_f, central_delta: tf.nest.map_structure(
            lambda w, w_f, d: (w - w_f) + d, x.trainable, x_f.trainable, central_delta),
        self._model_weights_type, self._model_weights_type, self._trainable_type)

  def dissimilarity(self, federated_weight, central_weight) -> tff.Computation:
    return tff.tensorflow.computation(
        lambda a, b: gradient_dissimilarity(a, b, federated_weight, central_weight),
        self._trainable_type, self._trainable_type)


def _as_specs(type_spec):
  return tff.types.type_to_tf_tensor_specs(type_spec)
