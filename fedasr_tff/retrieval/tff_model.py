"""The classifier-as-retriever as a `tff.learning.models.VariableModel`.

Either training mode of Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated Learning with
Ad-hoc Adapter Insertions: The Case of Soft-Embeddings for Training Classifier-as-Retriever",
webAI 2025 (Fig. 1: the classifier head alone, or the adapter and the head), with exactly the
trainable weights as model weights (`RetrieverModel`).
"""

import collections
from typing import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.retrieval import model as model_lib
from fedasr_tff.text_models import frozen as frozen_lib

CLASSIFIER_ONLY = 'classifier_only'
ADAPTER_CLASSIFIER = 'adapter_classifier'
MODES = (CLASSIFIER_ONLY, ADAPTER_CLASSIFIER)

_METRIC_NAMES = ('loss_sum', 'correct', 'examples')


def check_mode(mode: str) -> None:
  """Checks a mode's name.

  Args:
    mode: the name.

  Raises:
    ValueError: unless `mode` is one of `MODES`.
  """
  if mode not in MODES:
    raise ValueError(f'`mode` must be one of {MODES}, got {mode!r}.')


def _ratio(values):
  return tf.math.divide_no_nan(values[0], values[1])


class RetrieverModel(tff.learning.models.VariableModel):
  """The classifier-as-retriever for TFF, in either mode (`input_spec`).

  - classifier-only (`CLASSIFIER_ONLY`): batches of cached pooled features; the model is the
    head (`FeatureClassifier`).
  - adapter + classifier (`ADAPTER_CLASSIFIER`): batches of tokens; the model is
    `AdapterClassifier` over a frozen backbone built by a `text_models.FrozenBackbone` over
    weights given to `model_fn` (in TFF, a value the process broadcasts; never model weights).

  Either way the model weights TFF sees (`trainable_variables`) are exactly the adapter's W_a
  (adapter mode) and the head's θ_c; there are no non-trainable model weights, so the payload a
  client uploads is d² + |θ_c| or |θ_c| (tests/retrieval/process_test.py, PayloadTest). Loss:
  mean softmax cross-entropy over the batch (our choice: the paper's Eq. 2 leaves the
  classification loss unspecified). Training dropout draws from the batch's `seed`
  (`heads.apply_head`). Metrics: `loss`, `accuracy` (top-1) and `num_examples`.
  """

  def __init__(self, keras_model: tf.keras.Model, input_spec):
    """Wraps a Keras model.

    Args:
      keras_model: a `FeatureClassifier` (classifier-only) or an `AdapterClassifier` (adapter +
        classifier).
      input_spec: the batches' spec, matching `keras_model` (module function `input_spec`).
    """
    self._model = keras_model
    self._input_spec = input_spec
    self._features = 'features' in input_spec
    self._metric_vars = collections.OrderedDict(
        (name, tf.Variable(0.0, trainable=False, name=name)) for name in _METRIC_NAMES)

  @property
  def keras_model(self) -> tf.keras.Model:
    """The wrapped Keras model."""
    return self._model

  @property
  def trainable_variables(self):
    """The adapter's W_a (adapter mode) and the head's θ_c."""
    return self._model.trainable_variables

  @property
  def non_trainable_variables(self):
    """None: the frozen backbone's weights are tensors, not model weights."""
    return []

  @property
  def local_variables(self):
    """The metric sums and counts."""
    return list(self._metric_vars.values())

  @property
  def input_spec(self):
    """The batches' spec."""
    return self._input_spec

  def _logits(self, batch_input, training):
    inputs = (batch_input['features'] if self._features else
              {key: batch_input[key] for key in ('token_ids', 'mask')})
    seed = batch_input.get('seed') if training else None
    return self._model(inputs, training=training, seed=seed)

  @tf.function(reduce_retracing=True)
  def predict_on_batch(self, batch_input, training=True):
    """The class logits of a batch.

    Args:
      batch_input: a batch of `input_spec`.
      training: whether dropout applies (drawn from the batch's `seed`).

    Returns:
      [B, num_classes] logits.
    """
    return self._logits(batch_input, training)

  @tf.function(reduce_retracing=True)
  def forward_pass(self, batch_input, training=True):
    """The loss of a batch; also accumulates the metrics.

    Args:
      batch_input: a batch of `input_spec`.
      training: whether dropout applies (drawn from the batch's `seed`).

    Returns:
      `BatchOutput` of the mean cross-entropy, the logits and the number of examples.
    """
    logits = self._logits(batch_input, training)
    labels = tf.cast(batch_input['label'], tf.int32)
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    examples = tf.shape(labels)[0]
    correct = tf.reduce_sum(tf.cast(
        tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32))
    self._metric_vars['loss_sum'].assign_add(loss * tf.cast(examples, tf.float32))
    self._metric_vars['correct'].assign_add(correct)
    self._metric_vars['examples'].assign_add(tf.cast(examples, tf.float32))
    return tff.learning.models.BatchOutput(loss=loss, predictions=logits,
                                           num_examples=examples)

  @tf.function
  def report_local_unfinalized_metrics(self):
    """Returns the metrics as [sum, count] lists (`num_examples` as [count])."""
    v = self._metric_vars
    return collections.OrderedDict(
        loss=[v['loss_sum'].read_value(), v['examples'].read_value()],
        accuracy=[v['correct'].read_value(), v['examples'].read_value()],
        num_examples=[v['examples'].read_value()])

  def metric_finalizers(self):
    """Returns the finalizers: sum / count (0 for no count), and the count itself."""
    return collections.OrderedDict(
        loss=tf.function(_ratio), accuracy=tf.function(_ratio),
        num_examples=tf.function(lambda values: values[0]))

  @tf.function
  def reset_metrics(self):
    """Zeroes the metric sums and counts."""
    for variable in self._metric_vars.values():
      variable.assign(0.0)


def input_spec(mode: str, *, feature_dim: Optional[int] = None,
               max_length: Optional[int] = None) -> collections.OrderedDict:
  """The batch spec of a mode.

  Args:
    mode: one of `MODES`.
    feature_dim: d, classifier-only.
    max_length: T, adapter + classifier (None for any length).

  Returns:
    classifier-only: {'features': [B, d] float32, 'label': [B] int32, 'seed': [2] int64};
    adapter + classifier: {'token_ids': [B, T] int32, 'mask': [B, T] int32, 'label', 'seed'}.
  """
  check_mode(mode)
  spec = collections.OrderedDict()
  if mode == CLASSIFIER_ONLY:
    spec['features'] = tf.TensorSpec([None, feature_dim], tf.float32)
  else:
    spec['token_ids'] = tf.TensorSpec([None, max_length], tf.int32)
    spec['mask'] = tf.TensorSpec([None, max_length], tf.int32)
  spec['label'] = tf.TensorSpec([None], tf.int32)
  spec['seed'] = tf.TensorSpec([2], tf.int64)
  return spec


def build_model_fn(mode: str, num_classes: int, *, head: str = 'linear',
                   hidden_size: Optional[int] = None, dropout_rate: float = 0.1,
                   feature_dim: Optional[int] = None,
                   frozen_backbone: Optional[frozen_lib.FrozenBackbone] = None,
                   pooling: str = 'mean',
                   max_length: Optional[int] = None) -> Callable[[], RetrieverModel]:
  """A no-argument `model_fn` for TFF.

  Args:
    mode: one of `MODES`.
    num_classes: D, the head's classes.
    head: one of `heads.HEADS`.
    hidden_size: of the 'pre_classifier' head (`heads.build_head`).
    dropout_rate: of the 'pre_classifier' head.
    feature_dim: d, classifier-only only.
    frozen_backbone: the backbone, adapter + classifier only. Then `model_fn` takes an
      optional argument, the backbone's weights (tensors keyed as `frozen_backbone.weights`;
      default its recorded values as constants), which `process.build_retrieval_process`
      passes in as a value of its computation.
    pooling: adapter + classifier only (classifier-only's features are pooled already).
    max_length: T of the token batches, or None.

  Returns:
    A callable building a fresh `RetrieverModel` every call.

  Raises:
    ValueError: for an unknown mode, or arguments of the other mode.
  """
  check_mode(mode)
  head_args = dict(head=head, hidden_size=hidden_size, dropout_rate=dropout_rate)
  if mode == CLASSIFIER_ONLY:
    if feature_dim is None or frozen_backbone is not None:
      raise ValueError('The classifier-only mode takes `feature_dim` and no `frozen_backbone`.')
    spec = input_spec(mode, feature_dim=feature_dim)
    model_lib.FeatureClassifier(feature_dim, num_classes, **head_args)  # Fail early.

    def model_fn():
      return RetrieverModel(model_lib.FeatureClassifier(feature_dim, num_classes, **head_args),
                            spec)
    return model_fn

  if frozen_backbone is None or feature_dim is not None:
    raise ValueError('The adapter + classifier mode takes a `frozen_backbone` and no '
                     '`feature_dim`.')
  spec = input_spec(mode, max_length=max_length)

  def model_fn(backbone_weights=None):
    return RetrieverModel(
        model_lib.AdapterClassifier(frozen_backbone.build(backbone_weights), num_classes,
                                    pooling=pooling, adapter=True, **head_args), spec)
  return model_fn
