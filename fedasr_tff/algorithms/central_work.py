"""Server-side training on central (server-held) data, as TFF computations.

The centralized loss term of mixed federated learning (Augenstein et al., "Mixed Federated
Learning: Joint Decentralized and Centralized Learning", arXiv:2205.13655, Sec. 3 and
Algorithm 1) and the server rehearsal of dynamic gradient aggregation (`dga`) both train the
global model on the server's own data between client rounds; this module is that one component.

Privacy: nothing here reads client data. What it computes is a function of the global model
(already a DP release in a DP run) and the server's data, which no client-level guarantee covers.
"""

import dataclasses
from typing import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.algorithms import local_training


def model_loss(model: tff.learning.models.VariableModel, batch) -> tf.Tensor:
  """The model's own training loss on a server batch (the default central loss).

  Args:
    model: the model, whose `forward_pass` gives the loss.
    batch: a batch of the model's `input_spec`.

  Returns:
    The scalar loss of a training-mode forward pass.
  """
  # The forward pass traced inline, as in client work (`local_training`).
  forward_pass = getattr(model.forward_pass, 'python_function', model.forward_pass)
  return forward_pass(batch, training=True).loss


@dataclasses.dataclass(frozen=True)
class CentralWork:
  """The central component's TFF computations (`build_central_work`).

  Attributes:
    initialize: () -> the central optimizer's initial state.
    steps: (optimizer_state, model_weights, batches[, augmenting_gradient]) ->
      (optimizer_state, delta, mean_gradient, mean_loss).
    gradient: (model_weights, batches) -> (mean_gradient, mean_loss); None when not asked for.
    data_type: the `tff.SequenceType` of the batches, None for a data-free loss (the
      computations then take no batches).
  """
  initialize: tff.Computation
  steps: tff.Computation
  gradient: Optional[tff.Computation]
  data_type: Optional[tff.SequenceType]


class ServerDataProcess(tff.templates.IterativeProcess):
  """A learning process whose rounds also take server data.

  `next(state, client_data, central_data)`, or `next(state, client_data)` when the server's
  loss is data-free, returns `tff.learning.templates.LearningProcessOutput`; the process has the
  model-weight accessors of a `LearningProcess`. The central batches are a SERVER-placed
  sequence argument, not data read inside the computation, so a round is a pure function of its
  inputs (the runner draws them from its secret and the round, and a replayed round is
  bit-identical). Mixed FL (`mixed_fl`) and DGA's server rehearsal (`dga`) are such processes.
  """

  def __init__(self, initialize_fn, next_fn, get_model_weights, set_model_weights,
               central_data_type):
    """Initializes the process.

    Args:
      initialize_fn: the TFF computation of the initial server state.
      next_fn: the TFF computation of a round (above).
      get_model_weights: TFF computation from state to its `ModelWeights`.
      set_model_weights: TFF computation from (state, `ModelWeights`) to state.
      central_data_type: the `tff.SequenceType` of the central batches; None when data-free.
    """
    super().__init__(initialize_fn, next_fn)
    self._get_model_weights = get_model_weights
    self._set_model_weights = set_model_weights
    self._central_data_type = central_data_type

  @property
  def get_model_weights(self) -> tff.Computation:
    """TFF computation from state to the global `ModelWeights`."""
    return self._get_model_weights

  @property
  def set_model_weights(self) -> tff.Computation:
    """TFF computation from (state, `ModelWeights`) to the state holding them."""
    return self._set_model_weights

  @property
  def central_data_type(self) -> Optional[tff.SequenceType]:
    """The type of `next`'s central batches; None when the server takes no data."""
    return self._central_data_type


def model_weight_accessors(state_type: tff.Type, model_weights_type: tff.Type):
  """The model-weight accessors of a process whose state has `global_model_weights`.

  Args:
    state_type: the federated type of the server state, a NamedTuple with a
      `global_model_weights` field (mixed FL's and DGA's states).
    model_weights_type: the TFF type of the `ModelWeights`.

  Returns:
    (get_model_weights, set_model_weights), TFF computations.
  """

  @tff.tensorflow.computation(state_type.member)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type.member, model_weights_type)
  def set_model_weights(state, model_weights):
    return state._replace(global_model_weights=model_weights)

  return get_model_weights, set_model_weights


def build_central_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    optimizer: Optional[tff.learning.optimizers.Optimizer],
    steps: int,
    loss_weight: float = 1.0,
    loss_fn: Callable = model_loss,
    data_free: bool = False,
    augmented: bool = False,
    clip_norm: Optional[float] = None,
    gradient: bool = True,
) -> CentralWork:
  """Builds the central component.

  The central loss is w·f_c(model; B): `loss_fn(model, batch)` on server batches (by default the
  model's own loss, `model_loss`), or a data-free term (`data_free`: `loss_fn(model, None)`, e.g.
  a regulariser on the weights), times the weight w (w_c of the mixed loss). Every data gradient
  is clipped, clip(g) = g·min(1, C/||g||) with C = `clip_norm` (global L2 norm).

  Args:
    model_fn: no-argument callable returning the `tff.learning.models.VariableModel` trained.
    optimizer: CentralOpt, a `tff.learning.optimizers.Optimizer`; None builds only `gradient`
      (`steps` and `initialize` are then None).
    steps: K >= 1 central steps per call of `steps`.
    loss_weight: w >= 0 multiplying the loss.
    loss_fn: (model, batch) -> scalar loss; `batch` is None when `data_free`.
    data_free: the loss needs no server data.
    augmented: `steps` takes an augmenting gradient added to every step's gradient.
    clip_norm: C > 0 of the global-norm clip of every data gradient, or None.
    gradient: also build `gradient` (tracing it costs as much as `steps`: a process that never
      calls it should not ask for it). Needed when `optimizer` is None.

  Returns:
    A `CentralWork` whose computations are:
    * `steps(optimizer_state, x, batches[, augmenting_gradient])`: from x, K = `steps` steps
      x_{k+1} = CentralOpt(x_k, clip(∇ w·f_c(x_k; B_k)) + g_aug) over the batches (cycled when
      there are fewer than K; the step k is folded into a batch's `seed` as on clients,
      `local_training.with_step_seed`). Returns the optimizer state, the delta x − x_K (old
      minus new, the sign of client deltas), the mean of the K (clipped) stochastic gradients
      (g_aug excluded: the 2-way transfer's g̃_c, exact for any CentralOpt) and the mean
      unweighted loss f_c(x_k; B_k). Zero batches take zero steps.
    * `gradient(x, batches)` (None unless `gradient`): the mean over the batches of
      clip(∇ w·f_c(x; B)) at x (the 1-way transfer's central gradient, one gradient on a batch
      of their union) and the mean unweighted loss.

  Raises:
    ValueError: for an argument out of range or an optimizer that is not a
      `tff.learning.optimizers.Optimizer`.
  """
  tff_default_context.warn_if_current('algorithms.build_central_work')
  validation.check_positive_integer('central_steps', steps)
  validation.check_non_negative('central_weight', loss_weight)
  if clip_norm is not None:
    validation.check_positive('local_clip_norm', clip_norm)
  if optimizer is not None and not isinstance(optimizer, tff.learning.optimizers.Optimizer):
    raise ValueError('`central_optimizer` must be a tff.learning.optimizers.Optimizer, got '
                     f'{optimizer!r}.')
  if optimizer is None and not gradient:
    raise ValueError('`gradient` must be True when `optimizer` is None: nothing would be built.')
  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    data_type = (None if data_free else
                 tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec)))
  trainable_type = weights_type.trainable

  def step_batch(batch, step):
    # A data-free loss sees None, not the placeholder `_batches_or_none` iterates.
    return None if data_free else local_training.with_step_seed(batch, step)

  def clipped(grads):
    # The clients' local clip (`local_training`): the central branch steps like one more client,
    # so plain SGD at the clients' learning rate is as stable on the server as on the clients
    # (the CTC loss's raw gradients are far larger than the clip).
    if clip_norm is None:
      return grads
    return tf.clip_by_global_norm(grads, clip_norm)[0]

  def weighted_loss(model, batch):
    loss = tf.cast(loss_fn(model, batch), tf.float32)
    # Multiplied only when weighted, so w = 1 is the plain loss, bit for bit.
    return loss, (loss if loss_weight == 1.0 else loss_weight * loss)

  def new_model():
    model = model_fn()
    return model, tff.learning.models.ModelWeights.from_model(model)

  def load(model_weights, weights):
    # Inside the tf.function, so the assignment runs before the steps (program order).
    tf.nest.map_structure(lambda v, t: v.assign(t), model_weights, weights)

  def gradient_fn(weights, batches):
    model, model_weights = new_model()
    trainable = tf.nest.flatten(model_weights.trainable)

    @tf.function
    def run(batches):
      load(model_weights, weights)
      total = [tf.zeros_like(w) for w in trainable]
      loss_sum, count = tf.constant(0.0), tf.constant(0.0)
      for batch in iter(_batches_or_none(batches, 1)):
        with tf.GradientTape() as tape:
          loss, weighted = weighted_loss(model, step_batch(batch, 0))
        grads = clipped(local_training.dense_gradients(tape.gradient(weighted, trainable),
                                                       trainable))
        total = [t + g for t, g in zip(total, grads, strict=True)]
        loss_sum, count = loss_sum + loss, count + 1.0
      mean = [t / tf.maximum(count, 1.0) for t in total]
      return (tf.nest.pack_sequence_as(weights.trainable, mean),
              loss_sum / tf.maximum(count, 1.0))

    return run(batches)

  gradient_computation = None
  if gradient and data_type is None:
    gradient_computation = tff.tensorflow.computation(
        lambda weights: gradient_fn(weights, None), weights_type)
  elif gradient:
    gradient_computation = tff.tensorflow.computation(gradient_fn, weights_type, data_type)

  if optimizer is None:
    return CentralWork(None, None, gradient_computation, data_type)

  specs = [tf.TensorSpec(t.shape, t.dtype) for t in tff.structure.flatten(trainable_type)]
  initialize = tff.tensorflow.computation(lambda: optimizer.initialize(specs))
  optimizer_state_type = initialize.type_signature.result

  def steps_fn(optimizer_state, weights, batches, augmenting_gradient):
    model, model_weights = new_model()
    trainable = tf.nest.flatten(model_weights.trainable)
    flat_augmenting = (None if augmenting_gradient is None
                       else tf.nest.flatten(augmenting_gradient))

    @tf.function
    def run(optimizer_state, batches):
      load(model_weights, weights)
      total = [tf.zeros_like(w) for w in trainable]
      loss_sum, count = tf.constant(0.0), tf.constant(0, tf.int64)
      for batch in iter(_batches_or_none(batches, steps, cycle=True)):
        with tf.GradientTape() as tape:
          loss, weighted = weighted_loss(model, step_batch(batch, count))
        grads = clipped(local_training.dense_gradients(tape.gradient(weighted, trainable),
                                                       trainable))
        total = [t + g for t, g in zip(total, grads, strict=True)]
        if flat_augmenting is not None:
          grads = [g + a for g, a in zip(grads, flat_augmenting, strict=True)]
        optimizer_state, new_weights = optimizer.next(
            optimizer_state, [w.read_value() for w in trainable], grads)
        for w, value in zip(trainable, new_weights, strict=True):
          w.assign(value)
        loss_sum, count = loss_sum + loss, count + 1
      denominator = tf.maximum(tf.cast(count, tf.float32), 1.0)
      delta = [w0 - w for w0, w in zip(tf.nest.flatten(weights.trainable), trainable,
                                       strict=True)]
      def pack(values):
        return tf.nest.pack_sequence_as(weights.trainable, values)
      return (optimizer_state, pack(delta), pack([t / denominator for t in total]),
              loss_sum / denominator)

    return run(optimizer_state, batches)

  # TFF takes no varargs: one signature per (data, augmenting gradient) combination.
  if data_type is None and not augmented:
    steps_computation = tff.tensorflow.computation(
        lambda state, weights: steps_fn(state, weights, None, None),
        optimizer_state_type, weights_type)
  elif data_type is None:
    steps_computation = tff.tensorflow.computation(
        lambda state, weights, augmenting: steps_fn(state, weights, None, augmenting),
        optimizer_state_type, weights_type, trainable_type)
  elif not augmented:
    steps_computation = tff.tensorflow.computation(
        lambda state, weights, batches: steps_fn(state, weights, batches, None),
        optimizer_state_type, weights_type, data_type)
  else:
    steps_computation = tff.tensorflow.computation(
        steps_fn, optimizer_state_type, weights_type, data_type, trainable_type)

  return CentralWork(initialize, steps_computation, gradient_computation, data_type)


def _batches_or_none(batches: Optional[tf.data.Dataset], steps: int, cycle: bool = False):
  """What a central loop iterates: the batches (cycled to `steps` when `cycle`), or `steps`
  placeholder elements for a data-free loss."""
  if batches is None:
    return tf.data.Dataset.range(steps)
  return batches.repeat().take(steps) if cycle else batches


