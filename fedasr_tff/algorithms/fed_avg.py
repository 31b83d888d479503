"""The DP federated averaging process, composed from TFF templates.

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 2,
Algorithm 1:

    distributor (TFF broadcast) -> local training (`local_training`) -> model aggregator
    (default unweighted mean; `PerLayerDPFactory` for DP) -> apply the server optimizer
    (LAMB, LARS, ... with an optional learning-rate schedule) to the aggregated delta.

The process is independent of the model: anything `model_fn` returns as a
`tff.learning.models.VariableModel` trains, so mixed FL, DGA and retrieval reuse it.
"""

from typing import Callable
from typing import Optional
from typing import Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import tff_default_context
from fedasr_tff.algorithms import local_training


def build_fed_avg_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_learning_rate: float,
    local_steps: Optional[int] = None,
    local_epochs: Optional[int] = None,
    local_clip_norm: Optional[float] = 1.0,
    fedprox_mu: float = 0.0,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_lr_schedule: Optional[Callable] = None,
    model_aggregator: Optional[tff.aggregators.UnweightedAggregationFactory] = None,
    diagnostics: bool = False,
) -> tff.learning.templates.LearningProcess:
  """Builds the federated learning process.

  Measurements follow `tff.learning`'s layout (`distributor`, `client_work`, `aggregator`,
  `finalizer`). `client_work` is empty unless `diagnostics` asks for the clients' un-noised
  training statistics (`local_training`: loss, examples, clients, delta norm, gradient norm
  maxima), which are outside any DP guarantee; the aggregator's own client statistics are its
  factory's choice (`PerLayerDPFactory(..., diagnostics=...)`, off by default too).

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`.
    client_learning_rate: η_loc > 0 of local SGD.
    local_steps: local SGD steps (batches) per round, cycling the data; or
    local_epochs: passes over the client's data per round. Exactly one of the two.
    local_clip_norm: C_loc > 0 of the local gradient clip, or None for none.
    fedprox_mu: μ >= 0 of FedProx's proximal term (`local_training`).
    server_optimizer: a `tff.learning.optimizers.Optimizer` (`fedasr_tff.optimizers.build`).
    server_lr_schedule: callable from round (0-based) to server learning rate
      (`fedasr_tff.optimizers.schedules`); None keeps the optimizer's learning rate.
    model_aggregator: an unweighted aggregation factory for the client deltas; default
      `tff.aggregators.UnweightedMeanFactory()`.
    diagnostics: also measure the clients' un-noised training statistics under
      `client_work/train` (outside any DP guarantee); off by default.

  Returns:
    A `tff.learning.templates.LearningProcess` (`compose_process`).
  """
  tff_default_context.warn_if_current('algorithms.build_fed_avg_process')
  client_work = local_training.build_local_training_client_work(
      model_fn,
      client_learning_rate=client_learning_rate,
      local_steps=local_steps,
      local_epochs=local_epochs,
      local_clip_norm=local_clip_norm,
      fedprox_mu=fedprox_mu,
      diagnostics=diagnostics)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return compose_process(initial_model_weights_fn, client_work, server_optimizer=server_optimizer,
                         server_lr_schedule=server_lr_schedule, model_aggregator=model_aggregator)


def compose_process(
    initial_model_weights_fn: tff.Computation,
    client_work: tff.learning.templates.ClientWorkProcess,
    *,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_lr_schedule: Optional[Callable] = None,
    model_aggregator: Optional[tff.aggregators.UnweightedAggregationFactory] = None,
) -> tff.learning.templates.LearningProcess:
  """The process around any client work: TFF's broadcast, the aggregator, the server optimizer.

  `build_fed_avg_process` passes local training; other client work (the privacy audit's canary
  clients, `fedasr_tff.audit`) runs through the same server side.

  Args:
    initial_model_weights_fn: a no-argument TFF computation returning the initial
      `tff.learning.models.ModelWeights`.
    client_work: a `ClientWorkProcess` whose updates are client deltas (global minus local).
    server_optimizer: as in `build_fed_avg_process`.
    server_lr_schedule: as in `build_fed_avg_process`.
    model_aggregator: as in `build_fed_avg_process`.

  Returns:
    The `LearningProcess` of TFF's `compose_learning_process` over TFF's broadcast,
    `client_work` and `build_server_components`.
  """
  tff_default_context.warn_if_current('algorithms.compose_process')
  model_weights_type = initial_model_weights_fn.type_signature.result
  distributor = tff.learning.templates.build_broadcast_process(model_weights_type)
  aggregator, finalizer = build_server_components(
      model_weights_type, server_optimizer=server_optimizer,
      server_lr_schedule=server_lr_schedule, model_aggregator=model_aggregator)
  return tff.learning.templates.compose_learning_process(initial_model_weights_fn, distributor,
                                                         client_work, aggregator, finalizer)


def build_server_components(
    model_weights_type: tff.Type,
    *,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_lr_schedule: Optional[Callable] = None,
    model_aggregator=None,
) -> Tuple[tff.templates.AggregationProcess, tff.learning.templates.FinalizerProcess]:
  """The server side of a process: the aggregator of the client deltas and the finalizer.

  Shared by `compose_process`, the mixed FL processes (`mixed_fl`), DGA (`dga`) and the
  retrieval process.

  Args:
    model_weights_type: the TFF type of the model's `ModelWeights`.
    server_optimizer: a `tff.learning.optimizers.Optimizer`.
    server_lr_schedule: callable from round (0-based) to server learning rate; None keeps the
      optimizer's.
    model_aggregator: an unweighted factory (which ignores the clients' weights) or a weighted
      one (DGA's weights); default TFF's unweighted mean.

  Returns:
    (the aggregation process of the trainable weights' deltas, with float32 weights; TFF's
    apply-optimizer finalizer).

  Raises:
    ValueError: if `server_optimizer` or `model_aggregator` has the wrong type.
  """
  if not isinstance(server_optimizer, tff.learning.optimizers.Optimizer):
    raise ValueError('`server_optimizer` must be a tff.learning.optimizers.Optimizer, got '
                     f'{server_optimizer!r}.')
  if model_aggregator is None:
    model_aggregator = tff.aggregators.UnweightedMeanFactory()
  if isinstance(model_aggregator, tff.aggregators.UnweightedAggregationFactory):
    # FedAvg's client weights are all 1 (DP needs uniform weights): an unweighted factory
    # ignores them.
    model_aggregator = tff.aggregators.as_weighted_aggregator(model_aggregator)
  if not isinstance(model_aggregator, tff.aggregators.WeightedAggregationFactory):
    raise ValueError('`model_aggregator` must be a TFF aggregation factory, got '
                     f'{model_aggregator!r}.')
  aggregator = model_aggregator.create(model_weights_type.trainable, tff.TensorType(np.float32))
  if server_lr_schedule is not None:
    server_optimizer = tff.learning.optimizers.schedule_learning_rate(server_optimizer,
                                                                      server_lr_schedule)
  return aggregator, build_finalizer(server_optimizer, model_weights_type)


class _TracedAsWritten(tff.learning.optimizers.Optimizer):
  """An optimizer whose `next` AutoGraph leaves as it is (`do_not_convert`)."""

  def __init__(self, optimizer: tff.learning.optimizers.Optimizer):
    self._optimizer = optimizer

  def initialize(self, specs):
    return self._optimizer.initialize(specs)

  @tf.autograph.experimental.do_not_convert
  def next(self, state, weights, gradients):
    return self._optimizer.next(state, weights, gradients)

  def get_hparams(self, state):
    return self._optimizer.get_hparams(state)

  def set_hparams(self, state, hparams):
    return self._optimizer.set_hparams(state, hparams)


def build_finalizer(optimizer: tff.learning.optimizers.Optimizer,
                    model_weights_type: tff.Type) -> tff.learning.templates.FinalizerProcess:
  """TFF's apply-optimizer finalizer (`build_apply_optimizer_finalizer`), built faster.

  TFF traces the optimizer's `next` and the non-finite check inside an AutoGraph `tf.function`;
  converting them (and every function they call) was a quarter of the time a small process took
  to build (benchmarks.md, "In-process engine"). Both are written in TensorFlow's control flow,
  so they are traced as written and AutoGraph converts only TFF's few lines around them. An
  optimizer whose Python branches on tensors cannot be traced so (TensorFlow raises), and its
  finalizer is built as TFF builds it. Same state, results and measurements either way.

  Args:
    optimizer: the `tff.learning.optimizers.Optimizer` the finalizer applies.
    model_weights_type: the TFF type of the model's `ModelWeights`.

  Returns:
    A `tff.learning.templates.FinalizerProcess`.
  """
  try:
    return tff.learning.templates.build_apply_optimizer_finalizer(
        _TracedAsWritten(optimizer), model_weights_type,
        should_reject_update=tf.autograph.experimental.do_not_convert(
            tff.learning.templates.reject_non_finite_update))
  except tf.errors.OperatorNotAllowedInGraphError:
    return tff.learning.templates.build_apply_optimizer_finalizer(optimizer, model_weights_type)


def build_evaluation_process(
    model_fn: Callable[[], tff.learning.models.VariableModel]
) -> tff.learning.templates.LearningProcess:
  """Federated evaluation of the same model (TFF's `build_fed_eval`).

  Set its weights with `process.set_model_weights(eval_state, learning_state.global_model_weights)`.

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`.

  Returns:
    TFF's federated evaluation `LearningProcess`.
  """
  tff_default_context.warn_if_current('algorithms.build_evaluation_process')
  return tff.learning.algorithms.build_fed_eval(model_fn)
