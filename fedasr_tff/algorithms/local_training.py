"""Client work of DP federated learning: local SGD with local gradient clipping.

Each client starts from the broadcast global weights, takes SGD steps with every gradient clipped
to a global L2 norm and returns its delta with weight 1 (Pelikan et al., "Enabling Differentially
Private Federated Learning for Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient
Clipping", NeurIPS 2025, arXiv:2310.00098, Algorithm 1 and Sec. 4: SGD with a constant learning
rate, local gradients clipped to norm 1), optionally with FedProx's proximal term (Li et al.,
"Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127). Mixed FL
(`mixed_fl`) and DGA (`dga`) reuse it through the options of `build_local_training_client_work`.
"""

import collections
from collections import abc
from typing import Callable
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import tff_default_context
from fedasr_tff import validation
from fedasr_tff.optimizers import hparams


def check_local_work(local_steps: Optional[int], local_epochs: Optional[int]) -> None:
  """Checks that exactly one of `local_steps` and `local_epochs` is given, a positive integer.

  Args:
    local_steps: the number of local steps, or None.
    local_epochs: the number of local epochs, or None.

  Raises:
    ValueError: if both or neither are given, or the one given is not a positive integer.
  """
  if (local_steps is None) == (local_epochs is None):
    raise ValueError('Give exactly one of `local_steps` and `local_epochs`, got '
                     f'local_steps={local_steps!r}, local_epochs={local_epochs!r}.')
  if local_steps is not None:
    validation.check_positive_integer('local_steps', local_steps)
  else:
    validation.check_positive_integer('local_epochs', local_epochs)


# The client maxima travel as one vector: (largest gradient norm, largest clipped one).
_MAXIMA = ('max_grad_norm', 'max_clipped_grad_norm')
_MAXIMA_TYPE = tff.TensorType(np.float32, [len(_MAXIMA)])


@tff.tensorflow.computation(_MAXIMA_TYPE, _MAXIMA_TYPE)
def _maximum(a, b):
  return tf.maximum(a, b)


@tff.tensorflow.computation(_MAXIMA_TYPE)
def _identity(a):
  return a


def _federated_max(value):
  """Elementwise largest of non-negative float32 client vectors, 0 without clients (TFF 0.87
  has no federated max)."""
  return tff.federated_aggregate(value, np.zeros([len(_MAXIMA)], np.float32), _maximum, _maximum,
                                 _identity)


def _finalize_measurements(sums, maxima):
  """The `train` measurements from the clients' summed statistics and maxima: means are sums
  over `clients`, 0 in a round of no clients (not NaN, as `tff.federated_mean` would give)."""
  clients = tf.cast(sums['clients'], tf.float32)
  train = collections.OrderedDict(
      loss=tf.math.divide_no_nan(sums['loss'], clients),
      examples=sums['examples'],
      steps=sums['steps'],
      clients=sums['clients'],
      delta_norm=tf.math.divide_no_nan(sums['delta_norm'], clients))
  train.update((name, maxima[i]) for i, name in enumerate(_MAXIMA))
  measurements = collections.OrderedDict(train=train)
  if 'weight_sum' in sums:
    measurements['weights'] = weight_statistics(sums['weight_sum'], sums['weight_square_sum'])
  return measurements


def weight_statistics(weight_sum, weight_square_sum) -> collections.OrderedDict:
  """The `weights` measurements of weighted client updates.

  Args:
    weight_sum: Σ_j w_j over the round's clients.
    weight_square_sum: Σ_j w_j².

  Returns:
    {`weight_sum`: Σ_j w_j, `effective_clients`: (Σ_j w_j)² / Σ_j w_j² (Kish's effective sample
    size; 0 without clients)}.
  """
  return collections.OrderedDict(
      weight_sum=weight_sum,
      effective_clients=tf.math.divide_no_nan(tf.square(weight_sum), weight_square_sum))


_MODEL_WEIGHTS, _AUGMENTING_GRADIENT = 'model_weights', 'augmenting_gradient'


def augmented_broadcast_type(model_weights_type: tff.Type) -> tff.StructType:
  """The type of `augmented_broadcast`.

  Args:
    model_weights_type: the TFF type of the model's `ModelWeights`.

  Returns:
    A struct of the model weights and one tensor per trainable weight (the augmenting gradient).
  """
  return tff.StructWithPythonType(
      [(_MODEL_WEIGHTS, model_weights_type),
       (_AUGMENTING_GRADIENT, model_weights_type.trainable)], collections.OrderedDict)


def augmented_broadcast(model_weights, augmenting_gradient):
  """What the server broadcasts to `augmented` client work.

  Args:
    model_weights: the global `ModelWeights`.
    augmenting_gradient: g_aug, one tensor per trainable weight.

  Returns:
    An ordered dict of the two, of type `augmented_broadcast_type`.
  """
  return collections.OrderedDict([(_MODEL_WEIGHTS, model_weights),
                                  (_AUGMENTING_GRADIENT, augmenting_gradient)])


def local_step_seed(seed, step) -> tf.Tensor:
  """The seed of a local step over a batch (`with_step_seed`).

  Args:
    seed: the batch's seed, a [2] integer tensor.
    step: the local step k.

  Returns:
    `seed` with k folded in, a [2] int64 tensor.
  """
  return tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))


def dense_gradients(gradients, variables):
  """Gradients as dense tensors of their variables' static shapes.

  Loop state must keep its shape, and an embedding's gradient comes as `IndexedSlices` of
  unknown row count.

  Args:
    gradients: one gradient per variable, dense or `IndexedSlices`.
    variables: the variables.

  Returns:
    A list of dense tensors, each of its variable's shape.
  """
  return [tf.ensure_shape(tf.convert_to_tensor(g), v.shape)
          for g, v in zip(gradients, variables, strict=True)]


def with_step_seed(batch, step):
  """`batch` with the local step folded into its seed, if it is a mapping holding one.

  Every training-time random draw of client work is a function of the client's dataset and the
  local step, never of TF's global random state. A batch that is a mapping with a `seed` entry
  (a [2] integer tensor, as the speech pipeline's batches are) reaches the model's forward pass
  with the local step k (0, 1, ...) folded into that seed, so a batch seen again (`local_steps`
  cycling the data, `local_epochs`) draws fresh dropout masks, yet the whole client update is a
  function of the dataset's seeds. This is what makes a replayed round (a resumed DP run replays
  the round's noise) bit-identical: were client work random, two executions with the same noise
  would differ by a noise-free difference of client updates, which cancels the noise. Batches of
  other structures (tuples of generic models) pass unchanged; such models must then draw nothing
  at random in training for the guarantee to hold.

  Args:
    batch: a batch of the client's dataset.
    step: the local step k, 0-based.

  Returns:
    `batch` with its seed replaced by `local_step_seed(seed, step)`, or `batch` unchanged.
  """
  if isinstance(batch, abc.Mapping) and 'seed' in batch:
    return collections.OrderedDict(batch, seed=local_step_seed(batch['seed'], step))
  return batch


def client_model(model_fn: Callable[[], tff.learning.models.VariableModel]):
  """The model of a client's computation, its trainable variables created as zeros.

  A client's model starts from the broadcast weights: client work assigns every variable of its
  `ModelWeights` before the first use, so the initial values `model_fn` gives the trainable
  variables (Keras's random initializers) are dead work. Zeros instead make the per-client
  variable initialisation cheap and keep random seeds out of the round's graph: Keras draws an
  unseeded initializer's seed in Python when the model is built, so every process would trace a
  different round, and a cache of its compiled form (`fedasr_tff.runtime.compile_cache`) could
  never hit.

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`.

  Returns:
    `model_fn()`, built inside the caller's graph.

  Raises:
    ValueError: if the model made a trainable variable it does not list in
      `trainable_variables` (client work would not overwrite its zeros).
  """
  zeroed = []

  def zeros_for_trainable(next_creator, **kwargs):
    shape, dtype = kwargs.get('shape'), kwargs.get('dtype')
    if (kwargs.get('trainable') is True and dtype is not None and shape is not None
        and tf.TensorShape(shape).is_fully_defined()):
      kwargs['initial_value'] = lambda: tf.zeros(shape, tf.as_dtype(dtype).base_dtype)
      variable = next_creator(**kwargs)
      zeroed.append(variable)
      return variable
    return next_creator(**kwargs)

  with tf.variable_creator_scope(zeros_for_trainable):
    model = model_fn()
  listed = {id(v) for v in model.trainable_variables}
  unlisted = [v.name for v in zeroed if id(v) not in listed]
  if unlisted:
    raise ValueError('`model_fn` made trainable variables its model does not list in '
                     f'`trainable_variables`: {unlisted}.')
  return model


def _local_dataset(dataset: tf.data.Dataset, local_steps, local_epochs) -> tf.data.Dataset:
  if local_steps is not None:
    return dataset.repeat().take(local_steps)
  return dataset.repeat(local_epochs)


def build_local_training_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_learning_rate: float,
    local_steps: Optional[int] = None,
    local_epochs: Optional[int] = None,
    local_clip_norm: Optional[float] = 1.0,
    fedprox_mu: float = 0.0,
    loss_weight: float = 1.0,
    augmented: bool = False,
    start_gradient: bool = False,
    update_weight_fn: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    diagnostics: bool = False,
) -> tff.learning.templates.ClientWorkProcess:
  """Builds the client work: local SGD with local gradient clipping.

  Each client starts from the broadcast global weights θ and, for `local_steps` batches (cycling
  its data when it has fewer) or `local_epochs` passes over its data, takes plain SGD steps

      g <- ∇ [w·loss(θ_k; B) + (μ/2) ||θ_k − θ||²]
      g <- g · min(1, C_loc / ||g||)          (global L2 norm over all trainable weights)
      θ_k <- θ_k − η_loc g

  and returns Δ_k = θ − θ_k (old minus new, so Δ acts as a gradient for the server optimizer)
  with update weight 1: DP averaging needs uniform weights (Pelikan et al. 2025, Theorem 1 and
  App. H.1: ω_k = 1/K). There is no optimizer state to carry between rounds; η_loc lives in the
  process state (`get_hparams`).

  Args:
    model_fn: no-argument callable returning a `tff.learning.models.VariableModel`.
    client_learning_rate: η_loc > 0.
    local_steps: number of local SGD steps (batches), cycling the data; or
    local_epochs: number of passes over the client's data. Exactly one of the two.
    local_clip_norm: C_loc > 0, or None for no local clipping.
    fedprox_mu: μ >= 0 of the proximal term (μ/2)||θ_k − θ||².
    loss_weight: w >= 0 multiplying the loss (the federated term's weight w_f of mixed FL's
      loss).
    augmented: mixed FL's augmenting gradient (Augenstein et al., "Mixed Federated Learning:
      Joint Decentralized and Centralized Learning", arXiv:2205.13655, Algorithm 1,
      ClientUpdate). The broadcast value is `augmented_broadcast(weights, g_aug)` and every step
      adds g_aug (the server's central gradient) after the local clip,
      θ_k <- θ_k − η_loc (clip(∇ w·loss(θ_k; B)) + g_aug); the update is the private part only,
      Δ_k − η_loc·steps·g_aug = η_loc Σ_k clip(∇ ...), since what the server adds back
      (`mixed_fl`) is public. Needs `local_steps`: the server adds back η_loc·local_steps·g_aug,
      so every client's step count must be public.
    start_gradient: also measure `start_gradient` (below).
    update_weight_fn: DGA's weighting (`dga`): maps the client's mean training loss L over its
      local steps (the loss `train/loss` averages; a float32 scalar) to its update weight,
      computed in the client's own TF computation so that the weight costs the round no step of
      its own; None: weight 1.
    diagnostics: also measure the clients' un-noised statistics (`train`, and `weights` with
      `update_weight_fn`), which are outside any DP guarantee. Off by default: the measurements
      are then empty (or `start_gradient` alone).

  Returns:
    A `ClientWorkProcess`: `next(state, weights, client_data)` returns the clients' `ClientResult`
    and measurements. With `diagnostics`, `train`: `loss`, the mean over clients of each
    client's mean loss over its local steps; `examples` and `steps` (summed over clients);
    `clients`; `delta_norm`, the mean over clients of the delta's L2 norm; `max_grad_norm` and
    `max_clipped_grad_norm`, the largest gradient norm before and after clipping on any client
    (means and maxima are 0 in a round of no clients: Poisson sampling can draw an empty
    cohort); with `update_weight_fn` also `weights` (`weight_statistics`). With
    `start_gradient`, `start_gradient`: the mean over clients of ∇ w·loss at the broadcast
    weights on the client's first batch (one extra gradient; mixed FL's gradient
    dissimilarity). These client statistics are sent without noise: simulation diagnostics
    outside the DP guarantee.

  Raises:
    ValueError: for an argument out of range, both or neither of `local_steps` and
      `local_epochs`, or `augmented` without `local_steps`.
  """
  tff_default_context.warn_if_current('algorithms.build_local_training_client_work')
  validation.check_positive('client_learning_rate', client_learning_rate)
  check_local_work(local_steps, local_epochs)
  if local_clip_norm is not None:
    validation.check_positive('local_clip_norm', local_clip_norm)
  validation.check_non_negative('fedprox_mu', fedprox_mu)
  validation.check_non_negative('loss_weight', loss_weight)
  if augmented and local_steps is None:
    raise ValueError('An augmenting gradient (`augmented`) needs a fixed number of '
                     '`local_steps`, not `local_epochs`: the server adds back '
                     'η_loc·local_steps·g_aug.')

  with tf.Graph().as_default():
    model = model_fn()
    model_weights_type = tff.learning.models.weights_type_from_model(model)
    data_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  weights_type = (augmented_broadcast_type(model_weights_type) if augmented
                  else model_weights_type)

  initial_hparams = collections.OrderedDict(
      [(hparams.LEARNING_RATE_KEY, float(client_learning_rate))])

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def client_update(state_hparams, broadcast, dataset):
    client_update_fn = _build_client_update(client_model(model_fn), local_steps, local_epochs,
                                            local_clip_norm, fedprox_mu, loss_weight,
                                            start_gradient, augmented,
                                            update_weight_fn)
    learning_rate = state_hparams[hparams.LEARNING_RATE_KEY]
    if augmented:
      return client_update_fn(learning_rate, broadcast[_MODEL_WEIGHTS], dataset,
                              broadcast[_AUGMENTING_GRADIENT])
    return client_update_fn(learning_rate, broadcast, dataset)

  sums_type = client_update.type_signature.result[1]
  finalize_measurements = tff.tensorflow.computation(_finalize_measurements, sums_type,
                                                     _MAXIMA_TYPE)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    outputs = tff.federated_map(client_update,
                                (tff.federated_broadcast(state), weights, client_data))
    if diagnostics:
      # One sum and one maximum over the clients, each of a structure: every federated
      # aggregation costs the runtime a step per client.
      measurements = tff.federated_map(
          finalize_measurements, (tff.federated_sum(outputs[1]), _federated_max(outputs[2])))
    else:
      # Client statistics leave the clients only when asked for.
      measurements = tff.federated_value(collections.OrderedDict(), tff.SERVER)
    if start_gradient:
      groups = collections.OrderedDict((name, getattr(measurements, name))
                                       for name in ('train', 'weights')
                                       if hasattr(measurements, name))
      groups['start_gradient'] = tff.federated_mean(outputs[3])
      measurements = tff.federated_zip(groups)
    return tff.templates.MeasuredProcessOutput(state, outputs[0], measurements)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, new_hparams):
    del state
    return new_hparams

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)


def _build_client_update(model, local_steps, local_epochs, local_clip_norm, fedprox_mu,
                         loss_weight, start_gradient, augmented=False,
                         update_weight_fn=None):
  """The local training of one client, as one `tf.function` (so ops run in program order)."""

  # Traced inline when the model's forward pass is itself a `tf.function`: differentiating a
  # nested function call inside the while loop makes Grappler's function optimizer fail ("has
  # inputs from different frames") and log an error every time a worker compiles the round.
  forward_pass = getattr(model.forward_pass, 'python_function', model.forward_pass)

  # Variables, not loop state, so the loop is the same with and without them.
  private = [tf.Variable(tf.zeros_like(v), trainable=False, name='private_part')
             for v in model.trainable_variables] if augmented else None

  def weighted_loss(output):
    # Multiplied only when weighted, so w = 1 is bit-identical to plain local training.
    return output.loss if loss_weight == 1.0 else loss_weight * output.loss

  def client_update(learning_rate, initial_weights, dataset, augmenting_gradient=None):
    model_weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), model_weights, initial_weights)
    trainable = model_weights.trainable
    flat_trainable = tf.nest.flatten(trainable)
    flat_initial = tf.nest.flatten(initial_weights.trainable)
    flat_augmenting = (None if augmenting_gradient is None
                       else tf.nest.flatten(augmenting_gradient))
    if flat_augmenting is not None:
      # The private part η Σ_k clip(g_k), summed as it goes: recovered from the weights it
      # would lose digits to cancellation against the public part.
      for p in private:
        p.assign(tf.zeros_like(p))

    start = None
    if start_gradient:
      first = iter(dataset.take(1)).get_next_as_optional()

      def first_gradient():
        with tf.GradientTape() as tape:
          loss = weighted_loss(forward_pass(with_step_seed(first.get_value(), 0), training=True))
        return dense_gradients(tape.gradient(loss, flat_trainable), flat_trainable)

      # Zero for a client without data.
      start = tf.cond(first.has_value(), first_gradient,
                      lambda: [tf.zeros_like(w) for w in flat_trainable])

    def step(state, batch):
      loss_sum, examples, steps, max_norm, max_clipped_norm = state
      with tf.GradientTape() as tape:
        output = forward_pass(with_step_seed(batch, steps), training=True)
        loss = weighted_loss(output)
        if fedprox_mu > 0:
          loss += 0.5 * fedprox_mu * tf.add_n([
              tf.reduce_sum(tf.square(w - w0))
              for w, w0 in zip(flat_trainable, flat_initial, strict=True)])
      grads = tape.gradient(loss, flat_trainable)
      grad_norm = tf.linalg.global_norm(grads)
      if local_clip_norm is not None:
        grads, _ = tf.clip_by_global_norm(grads, local_clip_norm, use_norm=grad_norm)
      clipped_norm = tf.linalg.global_norm(grads)
      if flat_augmenting is not None:
        # g_aug is added outside the clip: it is public and the same on every client. Inside, it
        # would spend the clip budget and scale the data gradient by a factor set by the public
        # term, and the private part would no longer be the sum of clipped data gradients that
        # mixed FL's 2-way transfer recovers (η_loc times the federated average gradient).
        for p, g in zip(private, grads, strict=True):
          p.assign_add(tf.cast(learning_rate, g.dtype) * g)
        grads = [g + a for g, a in zip(grads, flat_augmenting, strict=True)]
      for w, g in zip(flat_trainable, grads, strict=True):
        w.assign_sub(tf.cast(learning_rate, g.dtype) * g)
      return (loss_sum + tf.cast(output.loss, tf.float32),
              examples + tf.cast(output.num_examples, tf.int64), steps + 1,
              tf.maximum(max_norm, grad_norm), tf.maximum(max_clipped_norm, clipped_norm))

    # A while loop over an iterator, not `dataset.reduce`: under TFF's C++ executor the reduce
    # form is slower per round and its worker's memory grows every round (docs/benchmarks.md,
    # "Measurements behind the code"). Written out rather than left to AutoGraph, whose
    # conversion of this function (and of every function it calls) dominates building a process.
    batches = iter(_local_dataset(dataset, local_steps, local_epochs))

    def next_step(more, state):
      del more
      batch = batches.get_next_as_optional()
      # The last call finds the iterator empty and leaves the state as it is.
      state = tf.cond(batch.has_value(), lambda: step(state, batch.get_value()), lambda: state)
      return batch.has_value(), state

    initial_state = (tf.constant(0.0), tf.constant(0, tf.int64), tf.constant(0, tf.int64),
                     tf.constant(0.0), tf.constant(0.0))
    _, (loss_sum, examples, steps, max_norm, max_clipped_norm) = tf.while_loop(
        lambda more, state: more, next_step, (tf.constant(True), initial_state))
    if augmenting_gradient is None:
      delta = tf.nest.map_structure(lambda w0, w: w0 - w, initial_weights.trainable, trainable)
    else:
      # The private part only: what the augmenting gradients moved is public.
      delta = tf.nest.pack_sequence_as(initial_weights.trainable,
                                       [p.read_value() for p in private])
    mean_loss = loss_sum / tf.maximum(tf.cast(steps, tf.float32), 1.0)
    sums = collections.OrderedDict(
        loss=mean_loss,
        examples=examples,
        steps=steps,
        clients=tf.constant(1, tf.int64),
        delta_norm=tf.linalg.global_norm(tf.nest.flatten(delta)))
    update_weight = tf.constant(1.0)
    if update_weight_fn is not None:
      update_weight = tf.cast(update_weight_fn(mean_loss), tf.float32)
      sums.update(weight_sum=update_weight, weight_square_sum=tf.square(update_weight))
    maxima = tf.stack([max_norm, max_clipped_norm])
    result = tff.learning.templates.ClientResult(update=delta, update_weight=update_weight)
    if start is not None:
      return result, sums, maxima, tf.nest.pack_sequence_as(initial_weights.trainable, start)
    return result, sums, maxima

  # Traced without AutoGraph: the code above is written in TensorFlow's control flow, and
  # AutoGraph's conversion of it and of every function it calls dominates building a process
  # (docs/benchmarks.md, "In-process engine"). A model or `update_weight_fn` whose
  # Python code branches on tensors needs AutoGraph, as TFF's own client work allows: tracing
  # without it raises, and the update is traced with it.
  without_autograph = tf.function(client_update, autograph=False)
  with_autograph = tf.function(client_update)

  def traced_client_update(*args):
    try:
      return without_autograph(*args)
    except tf.errors.OperatorNotAllowedInGraphError:
      return with_autograph(*args)

  return traced_client_update
