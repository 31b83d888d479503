"""The CTC transformer as a `tff.learning.models.VariableModel`, with loss, WER and CER metrics."""

import collections
from typing import Callable
from typing import Sequence

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff.speech import metrics
from fedasr_tff.speech.models import ctc
from fedasr_tff.speech.models import transformer

INPUT_SPEC = collections.OrderedDict(
    features=tf.TensorSpec([None, None, None], tf.float32),
    feature_lengths=tf.TensorSpec([None], tf.int32),
    labels=tf.TensorSpec([None, None], tf.int32),
    label_lengths=tf.TensorSpec([None], tf.int32),
    seed=tf.TensorSpec([2], tf.int64),
)

_METRIC_NAMES = ('loss_sum', 'utterances', 'word_edits', 'words', 'char_edits', 'chars')


def _ratio(values):
  numerator, denominator = values
  return tf.math.divide_no_nan(numerator, denominator)


class CTCSpeechModel(tff.learning.models.VariableModel):
  """The CTC transformer with its loss and metrics, for TFF.

  Batches are the data pipeline's dicts (`features`, `feature_lengths`, `labels`,
  `label_lengths`, `seed`). `forward_pass` returns the mean CTC loss over the batch's
  utterances; it also accumulates, over all batches since `reset_metrics`:

  * `loss`: utterance-weighted mean CTC loss;
  * `wer`, `cer`: corpus-level error rates of greedy decoding against the labels (computed only
    when `training=False`, since decoding every training batch would cost time and the training
    metric would lag the model anyway).

  The metrics are sums and counts, so TFF's `sum_then_finalize` aggregation across clients gives
  corpus-level rates.

  Randomness: a training pass (`forward_pass(batch, training=True)`) draws every random number
  (dropout, layer drop, CAPE's shift) statelessly from the batch's `seed`, a [2] int64 tensor
  (`transformer`), so it is a deterministic function of the weights and the batch. Federated
  local training folds the local step into that seed before the pass
  (`algorithms.local_training`), so a client's whole update is a function of its dataset's seed.
  Evaluation (`training=False`) ignores the seed.
  """

  def __init__(self, keras_model: transformer.CTCTransformer, tokens: Sequence[str]):
    """Wraps a built transformer.

    Args:
      keras_model: the `CTCTransformer`.
      tokens: the vocabulary's tokens (blank excluded), for decoding in evaluation.
    """
    self._model = keras_model
    self._tokens = list(tokens)
    self._metric_vars = collections.OrderedDict(
        (name, tf.Variable(0.0, trainable=False, name=name)) for name in _METRIC_NAMES)
    num_mels = keras_model.config.num_mels
    self._input_spec = collections.OrderedDict(
        INPUT_SPEC, features=tf.TensorSpec([None, None, num_mels], tf.float32))

  @property
  def keras_model(self) -> transformer.CTCTransformer:
    """The wrapped `CTCTransformer`."""
    return self._model

  @property
  def trainable_variables(self):
    """The transformer's trainable variables."""
    return self._model.trainable_variables

  @property
  def non_trainable_variables(self):
    """The transformer's non-trainable variables."""
    return self._model.non_trainable_variables

  @property
  def local_variables(self):
    """The metric sums and counts."""
    return list(self._metric_vars.values())

  @property
  def input_spec(self):
    """The batches' `tf.TensorSpec`s (`INPUT_SPEC` with the model's mels)."""
    return self._input_spec

  # reduce_retracing: dynamic batches differ in shape, so trace once with relaxed shapes.
  @tf.function(reduce_retracing=True)
  def predict_on_batch(self, batch_input, training=True):
    """The logits of a batch.

    Args:
      batch_input: a batch of `input_spec`; `seed` is needed when training.
      training: a training pass (dropout, layer drop, CAPE's shift from the batch's seed).

    Returns:
      [B, T', V + 1] logits.
    """
    return self._logits(batch_input, training)

  def _logits(self, batch_input, training):
    # Not a nested tf.function call in forward_pass: client training differentiates
    # forward_pass inside a while loop, where a nested call's gradient makes Grappler's function
    # optimizer fail ("inputs from different frames") and log an error.
    inputs = (batch_input['features'], batch_input['feature_lengths'])
    if not training:
      return self._model(inputs, training=False)
    # A batch without a seed reaches the model's error, which says what is missing.
    return self._model(inputs, training=True, seed=batch_input.get('seed'))

  @tf.function(reduce_retracing=True)
  def forward_pass(self, batch_input, training=True):
    """The loss of a batch; also accumulates the metrics (class docstring).

    Args:
      batch_input: a batch of `input_spec`; `seed` is needed when training.
      training: a training pass; WER and CER are accumulated only when False.

    Returns:
      `BatchOutput` of the mean CTC loss, the logits and the number of utterances.
    """
    logits = self._logits(batch_input, training)
    logit_lengths = transformer.output_lengths(batch_input['feature_lengths'],
                                               self._model.config)
    loss = ctc.ctc_loss(batch_input['labels'], batch_input['label_lengths'], logits,
                        logit_lengths)
    utterances = tf.cast(tf.shape(logits)[0], tf.float32)
    self._metric_vars['loss_sum'].assign_add(loss * utterances)
    self._metric_vars['utterances'].assign_add(utterances)
    if not training:
      references = ctc.ids_to_texts(
          tf.RaggedTensor.from_tensor(batch_input['labels'], lengths=batch_input['label_lengths']),
          self._tokens)
      hypotheses = ctc.ids_to_texts(ctc.greedy_decode(logits, logit_lengths), self._tokens)
      for unit, edits_name, total_name in (('word', 'word_edits', 'words'),
                                           ('char', 'char_edits', 'chars')):
        edits, total = metrics.error_counts(references, hypotheses, unit)
        self._metric_vars[edits_name].assign_add(edits)
        self._metric_vars[total_name].assign_add(total)
    return tff.learning.models.BatchOutput(
        loss=loss, predictions=logits, num_examples=tf.cast(utterances, tf.int32))

  @tf.function
  def report_local_unfinalized_metrics(self):
    """Returns the metrics as [sum, count] lists (`num_examples` as [count])."""
    v = self._metric_vars
    return collections.OrderedDict(
        loss=[v['loss_sum'].read_value(), v['utterances'].read_value()],
        wer=[v['word_edits'].read_value(), v['words'].read_value()],
        cer=[v['char_edits'].read_value(), v['chars'].read_value()],
        num_examples=[v['utterances'].read_value()],
    )

  def metric_finalizers(self):
    """Returns the finalizers: sum / count (0 for no count), and the count itself."""
    return collections.OrderedDict(
        loss=tf.function(_ratio), wer=tf.function(_ratio), cer=tf.function(_ratio),
        num_examples=tf.function(lambda values: values[0]))

  @tf.function
  def reset_metrics(self):
    """Zeroes the metric sums and counts."""
    for variable in self._metric_vars.values():
      variable.assign(0.0)


def build_tff_model_fn(config, tokens: Sequence[str]) -> Callable[[], CTCSpeechModel]:
  """A no-argument `model_fn` for TFF.

  Args:
    config: a `TransformerConfig` or the name of one (`configs.CONFIGS`); checked now by
      building the model once.
    tokens: the vocabulary's tokens (blank excluded).

  Returns:
    A callable building a fresh `CTCSpeechModel` every call.
  """
  tokens = list(tokens)
  transformer.build_ctc_transformer(config, len(tokens))  # Fail early on a bad config.

  def model_fn():
    return CTCSpeechModel(transformer.build_ctc_transformer(config, len(tokens)), tokens)

  return model_fn
