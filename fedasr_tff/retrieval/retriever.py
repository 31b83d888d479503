"""A trained retriever as a tool: query strings in, the top-K documents out.

The classifier-as-retriever (Fofonjka et al., webAI 2025) hands the classifier's top-K classes to
the generator as the retrieved documents. `load_retriever` rebuilds a `train_retriever` run's
model and tokenizer from its `model.npz` alone; `Retriever.retrieve` is one `tf.function` from
strings to {ids, names, scores}, and `export_saved_model` writes it as a SavedModel that plain
`tf.saved_model.load` runs. The SavedModel needs the tokenizer as TensorFlow ops: WordPiece
backbones (MiniLM, BERT) use tensorflow-text's, so `import tensorflow_text` before loading it;
Llama backbones tokenize outside the graph, so their retrievers run in Python
(`Retriever.retrieve_texts`) and are not exported (docs/retrieval.md, "Retrieve").
"""

import json
from typing import Dict
from typing import List
from typing import Optional
from typing import Sequence

import numpy as np
import tensorflow as tf

from fedasr_tff.program import model_io
from fedasr_tff.retrieval import data as data_lib
from fedasr_tff.retrieval import model as model_lib
from fedasr_tff.retrieval import retrieve
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.retrieval import tff_model
from fedasr_tff.text_models import tokenizer as tokenizer_lib


class Retriever(tf.Module):
  """Queries -> {'ids': [B, K] int32, 'names': [B, K] string, 'scores': [B, K] float32}.

  The scores are the classifier's softmax probabilities over the classes.

  Attributes:
    class_names: the documents, by class id.
    k: K, the documents retrieved per query.
    exportable: whether the tokenizer is TensorFlow ops (`export_saved_model` can write it).
  """

  def __init__(self, classifier: model_lib.AdapterClassifier, tokenizer,
               class_names: Sequence[str], k: int):
    super().__init__(name='retriever')
    if not 1 <= k <= len(class_names):
      raise ValueError(f'`k` ({k}) must be between 1 and the {len(class_names)} classes.')
    self.classifier = classifier
    self.tokenizer = tokenizer
    self.class_names = list(class_names)
    self.k = k
    self.exportable = isinstance(tokenizer, tokenizer_lib.WordPieceTokenizer)
    self._names = tf.constant(self.class_names)
    self.retrieve = tf.function(self._retrieve,
                                input_signature=[tf.TensorSpec([None], tf.string)])

  def _retrieve(self, queries):
    probabilities = tf.nn.softmax(self.classifier(self.tokenizer(queries), training=False))
    ids = retrieve.top_k(probabilities, self.k)  # ranked as the evaluation ranks them
    return {'ids': ids, 'names': tf.gather(self._names, ids),
            'scores': tf.gather(probabilities, ids, batch_dims=1)}

  def retrieve_texts(self, queries: Sequence[str]) -> List[List[Dict[str, object]]]:
    """For each query, its K documents best first: [{'id', 'name', 'score'}, ...].

    Args:
      queries: the query strings.
    """
    if not queries:
      return []
    if self.exportable:
      out = {key: value.numpy() for key, value in self.retrieve(tf.constant(list(queries)))
             .items()}
    else:  # A tokenizer outside the graph: the same steps, eagerly.
      out = {key: value.numpy() for key, value in self._retrieve(list(queries)).items()}
    return [[{'id': int(i), 'name': self.class_names[int(i)], 'score': float(s)}
             for i, s in zip(ids, scores, strict=True)]
            for ids, scores in zip(out['ids'], out['scores'], strict=True)]


def load_retriever(model_path: str, k: Optional[int] = None) -> Retriever:
  """The retriever a `train_retriever` run wrote to `model_path` (its `model.npz`).

  Rebuilt from the file alone, its tensors and the metadata beside them (class names, mode,
  head, pooling, `max_length`, backbone): the frozen backbone, the adapter in the adapter mode,
  the trained head, and the backbone's tokenizer.

  Args:
    model_path: the run's `model.npz`.
    k: K (default 3, or the number of classes if fewer).

  Returns:
    The `Retriever`.

  Raises:
    ValueError: naming the file, if it is no retriever's `model.npz` (no class names beside
      its tensors) or its tensors do not fit the model its metadata describes; or `k` out of
      range.
  """
  metadata = model_io.read_metadata(model_path, 'retriever')
  missing = [key for key in ('class_names', 'mode', 'head', 'pooling', 'max_length')
             if key not in metadata]
  if missing:
    raise ValueError(f'{model_path!r} is no retriever written by train_retriever: it records '
                     f'no {", ".join(missing)} beside its tensors.')
  class_names = json.loads(metadata['class_names'])
  backbone, tokenizer = data_lib.load_backbone_from(
      metadata.get('checkpoint_dir') or None, int(metadata['max_length']), metadata['mode'])
  classifier = model_lib.AdapterClassifier(
      backbone, len(class_names), head=metadata['head'], pooling=metadata['pooling'],
      adapter=metadata['mode'] == tff_model.ADAPTER_CLASSIFIER,
      hidden_size=int(metadata['hidden_size']) if metadata.get('hidden_size') else None)
  classifier(tokenizer(tf.constant(['']))).numpy()  # builds the head
  arrays = np.load(model_path, allow_pickle=False)
  names = model_lib.trainable_weight_names(classifier)
  for name, variable in zip(names, classifier.trainable_variables, strict=True):
    if name not in arrays.files or tuple(arrays[name].shape) != tuple(variable.shape):
      raise ValueError(f'{model_path!r}: no tensor {name!r} of shape {tuple(variable.shape)}, '
                       'as its metadata describes the model.')
    variable.assign(arrays[name])
  return Retriever(classifier, tokenizer, class_names,
                   min(retriever_config.DEFAULT_TOP_K, len(class_names)) if k is None else k)


def export_saved_model(retriever: Retriever, directory: str) -> None:
  """Writes `retriever` as a SavedModel: signature `serving_default` (and the module's
  `retrieve`) from a [None] string tensor of queries to {ids, names, scores}.

  Args:
    retriever: a `Retriever` whose tokenizer is TensorFlow ops (WordPiece backbones).
    directory: the SavedModel's folder.

  Raises:
    ValueError: for a tokenizer outside the graph (Llama backbones; module docstring).
  """
  if not retriever.exportable:
    raise ValueError('This retriever\'s tokenizer is not TensorFlow ops (a Llama backbone): it '
                     'cannot be exported; use `Retriever.retrieve_texts` from Python.')
  tf.saved_model.save(retriever, directory,
                      signatures={'serving_default': retriever.retrieve.get_concrete_function()})
