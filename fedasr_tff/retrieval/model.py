"""The classifier-as-retriever: a frozen backbone, a trainable adapter and a classifier head.

logits = CLS(POOL(TRF(ADP(TKN(x))))) (Fofonjka, Zehtabi, Behtash, Mauer and Stout, "Federated
Learning with Ad-hoc Adapter Insertions: The Case of Soft-Embeddings for Training
Classifier-as-Retriever", webAI 2025, Secs. 3.1-3.2, Eq. 2), here
`head(pool(backbone.encode(adapter(backbone.embed(ids)), mask)))`. The backbone (TKN, TRF and
the final norm) is frozen, so the trainable variables are exactly the adapter's W_a and the
head's theta_c.
"""

from typing import List

import tensorflow as tf

from fedasr_tff import validation
from fedasr_tff.retrieval import adapter as adapter_lib
from fedasr_tff.retrieval import heads
from fedasr_tff.text_models import backbone as backbone_lib
from fedasr_tff.text_models import pooling as pooling_lib


class AdapterClassifier(tf.keras.Model):
  """Class logits [B, num_classes] of inputs {'token_ids': [B, T], 'mask': [B, T], extras}
  (extras, e.g. BERT's `token_type_ids`, go to `backbone.encode`).

  The paper's two training modes:
  - adapter + classifier (`adapter=True`): gradients flow through the frozen transformer to W_a;
    d^2 + |theta_c| trainable parameters.
  - classifier-only (`adapter=False`): W_a stays the identity, so there is no adapter at all; the
    pooled features do not change during training and can be computed once (`features`) and the
    head trained on them (`head_logits`, `FeatureClassifier`); |theta_c| trainable parameters.

  Args:
    backbone: a `text_models.Backbone`; it is frozen (`trainable = False`) here.
    num_classes: D, the number of classes (retrievable documents).
    head: one of `heads.HEADS`.
    pooling: one of `text_models.POOLINGS`.
    adapter: whether to insert the trainable `EmbeddingAdapter` (identity at start).
    hidden_size: of the 'pre_classifier' head (`heads.build_head`).
    dropout_rate: of the 'pre_classifier' head (`heads.build_head`).
    **kwargs: passed to `tf.keras.Model`.
  """

  def __init__(self, backbone, num_classes: int, *, head: str = 'linear',
               pooling: str = 'mean', adapter: bool = True, hidden_size: int = None,
               dropout_rate: float = heads.DEFAULT_DROPOUT_RATE, **kwargs):
    super().__init__(**kwargs)
    pooling_lib.check_pooling(pooling)
    heads.check_head(head)
    validation.check_positive_integer('num_classes', num_classes)
    if not isinstance(adapter, bool):
      raise ValueError(f'`adapter` must be True or False, got {adapter!r}.')
    backbone.trainable = False
    backbone.build_weights()
    dim = int(backbone.embed(tf.zeros([1, 1], tf.int32)).shape[-1])
    self.backbone = backbone
    self.pooling = pooling
    if adapter:
      self.adapter = adapter_lib.EmbeddingAdapter(name='adapter')
      self.adapter.build([None, None, dim])
    else:
      self.adapter = None
    self.head = heads.build_head(head, num_classes, dim, hidden_size=hidden_size,
                                 dropout_rate=dropout_rate)

  def _pooled(self, inputs, with_adapter: bool) -> tf.Tensor:
    # Every batch padded to its longest sequence, not --max_length (the same states).
    inputs = backbone_lib.trim_padding(inputs)
    extras = {key: value for key, value in inputs.items() if key not in ('token_ids', 'mask')}
    embeddings = self.backbone.embed(inputs['token_ids'])
    if with_adapter and self.adapter is not None:
      embeddings = self.adapter(embeddings)
    states = self.backbone.encode(embeddings, inputs['mask'], **extras)
    return pooling_lib.pool(states, inputs['mask'], self.pooling)

  def call(self, inputs, training=None, seed=None):
    """The class logits.

    Args:
      inputs: {'token_ids', 'mask', extras}.
      training: whether the head applies dropout.
      seed: [2] integers that make training's dropout stateless (`heads.apply_head`).

    Returns:
      [B, num_classes] logits.
    """
    return heads.apply_head(self.head, self._pooled(inputs, with_adapter=True), training, seed)

  def features(self, inputs) -> tf.Tensor:
    """The pooled states of the frozen backbone alone (the adapter at the identity).

    The classifier-only mode computes them once and caches them.

    Args:
      inputs: {'token_ids', 'mask', extras}.

    Returns:
      [B, d] pooled states.
    """
    return self._pooled(inputs, with_adapter=False)

  def head_logits(self, features, training=None, seed=None) -> tf.Tensor:
    """The head alone on pooled features (e.g. cached ones).

    Args:
      features: [B, d] pooled states.
      training: whether the head applies dropout.
      seed: as in `call`.

    Returns:
      [B, num_classes] logits.
    """
    return heads.apply_head(self.head, features, training, seed)


class FeatureClassifier(tf.keras.Model):
  """The classifier-only mode's model: the head alone on cached pooled features [B, d].

  No backbone in the graph; `AdapterClassifier(..., adapter=False).features` computes the
  features. Same head, same arguments as `AdapterClassifier`.
  """

  def __init__(self, feature_dim: int, num_classes: int, *, head: str = 'linear',
               hidden_size: int = None, dropout_rate: float = heads.DEFAULT_DROPOUT_RATE,
               **kwargs):
    """Builds the head.

    Args:
      feature_dim: d.
      num_classes: D.
      head: one of `heads.HEADS`.
      hidden_size: of the 'pre_classifier' head.
      dropout_rate: of the 'pre_classifier' head.
      **kwargs: passed to `tf.keras.Model`.
    """
    super().__init__(**kwargs)
    self.head = heads.build_head(head, num_classes, feature_dim, hidden_size=hidden_size,
                                 dropout_rate=dropout_rate)

  def call(self, features, training=None, seed=None):
    """The head's logits (`AdapterClassifier.head_logits`).

    Args:
      features: [B, d] cached pooled states.
      training: whether the head applies dropout.
      seed: [2] integers that make training's dropout stateless.

    Returns:
      [B, num_classes] logits.
    """
    return heads.apply_head(self.head, features, training, seed)


def trainable_weight_names(model: tf.keras.Model) -> List[str]:
  """Unique names of an `AdapterClassifier`'s or `FeatureClassifier`'s trainable weights, in
  `model.trainable_variables` order: `adapter/kernel` (the adapter mode's W_a), then
  `head/<layer>/<weight>` (e.g. `head/classifier/kernel`), the same for both classes, so a
  classifier-only head loads into either.

  Keras names the adapter's weight and the linear head's kernel alike (`kernel`), so the names
  are built from the model's structure rather than the variables' own.

  Args:
    model: a built `AdapterClassifier` or `FeatureClassifier`.

  Returns:
    The names.

  Raises:
    ValueError: if the model has trainable weights outside its adapter and head.
  """
  adapter = getattr(model, 'adapter', None)
  named = []
  if adapter is not None:
    named += [(f'adapter/{v.name.split(":")[0].split("/")[-1]}', v)
              for v in adapter.trainable_variables]
  named += [(f'head/{v.name.split(":")[0]}', v) for v in model.head.trainable_variables]
  if [id(v) for _, v in named] != [id(v) for v in model.trainable_variables]:
    raise ValueError(f'{type(model).__name__} has trainable weights outside its adapter and '
                     'head.')
  return [name for name, _ in named]
