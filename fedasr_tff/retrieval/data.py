"""A retriever run's data: the labelled corpus, its test split and clients, tokens and features.

The corpus (`text_corpora`) is filtered to classes of enough examples, split into a held-out test
set (stratified, the server's own evaluation data; or a separate test file, --test_path) and
training examples dealt to clients (`partitions`: evenly, the paper's, by a client column, or by
Dirichlet shares of each class), and tokenized once; the classifier-only mode's pooled
features of the frozen backbone are computed once (the paper's mode A).
"""

import collections
import dataclasses
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from fedasr_tff import reading
from fedasr_tff import text_models
from fedasr_tff.retrieval import feature_cache
from fedasr_tff.retrieval import partitions
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.retrieval import text_corpora
from fedasr_tff.retrieval import tff_model
from fedasr_tff.text_models import checkpoints
from fedasr_tff.text_models import frozen as frozen_lib
from fedasr_tff.text_models import minilm

FEATURE_BATCH = 64
# Keeps the per-class sample's draws apart from the splits' (`partitions`), also of data_seed.
_SAMPLING_STREAM = 1


@dataclasses.dataclass
class RetrievalData:
  """Tokenized examples, the test indices and each client's training indices.

  Attributes:
    texts: the corpus (`load_corpus`), followed by --test_path's examples if given.
    tokens: {"token_ids", "mask"}: int32 [N, max_length] of every text.
    test: the indices of the held-out test set.
    client_ids: the clients (`client_000`, ... for even splits, else the sorted column values).
    client_indices: {client: the indices of its training examples}.
    test_left_out: examples of --test_path left out, their class not among the training
      corpus's (`with_test_file`).
    read_report: what the readers read of --corpus_path and --test_path, line by line.
    left_out: examples read but left out by the run's flags, by reason (`load_corpus`,
      `with_test_file`).
  """
  texts: text_corpora.LabelledTexts
  tokens: Dict[str, np.ndarray]
  test: np.ndarray
  client_ids: List[str]
  client_indices: Dict[str, np.ndarray]
  test_left_out: int = 0
  read_report: reading.ReadReport = dataclasses.field(default_factory=reading.ReadReport)
  left_out: Dict[str, int] = dataclasses.field(default_factory=dict)

  def inputs(self) -> dict:
    """What became of the input: each file's lines and records (`reading.FileAccount`), the
    problems skipped, and the examples the flags left out, as `summary.json` stores it."""
    return {**self.read_report.as_dict(), 'left_out': dict(self.left_out)}


def load_corpus(config: retriever_config.RetrieverConfig,
                report: Optional[reading.ReadReport] = None,
                left_out: Optional[Dict[str, int]] = None) -> text_corpora.LabelledTexts:
  """The corpus, without classes of fewer than `min_class_examples` examples, with at most
  `max_classes` classes (the first by name) and `max_class_examples` per class (a uniform sample
  without replacement drawn with `data_seed`, kept in file order: the first N of a file sorted
  by date or source would be no sample).

  Args:
    config: the run (its corpus flags).
    report: where the reader counts the file's lines (`reading.ReadReport`), or None.
    left_out: where the examples these flags leave out are counted by reason, or None.

  Returns:
    The kept examples, their classes renumbered 0.. in the kept classes' order.

  Raises:
    ValueError: if no class has `min_class_examples` examples.
  """
  data = _read(config, config.corpus_path, report)
  left_out = {} if left_out is None else left_out
  keep = []
  classes = 0
  rng = np.random.default_rng([config.data_seed, _SAMPLING_STREAM])
  for label in range(data.num_classes):
    members = np.flatnonzero(data.labels == label)
    if len(members) < config.min_class_examples:
      reason = f'class with fewer than --min_class_examples={config.min_class_examples}'
    elif classes == config.max_classes:
      reason = f'class after the first --max_classes={config.max_classes}'
    else:
      if config.max_class_examples is not None and len(members) > config.max_class_examples:
        reason = f'beyond --max_class_examples={config.max_class_examples} of its class'
        left_out[reason] = left_out.get(reason, 0) + len(members) - config.max_class_examples
        members = rng.choice(members, config.max_class_examples, replace=False)
      keep.extend(members)
      classes += 1
      continue
    left_out[reason] = left_out.get(reason, 0) + len(members)
  if not keep:
    raise ValueError(f'No class of {config.corpus_path or config.corpus!r} has '
                     f'--min_class_examples={config.min_class_examples} examples.')
  kept = data.subset(np.sort(np.asarray(keep)))
  # Relabel to the kept classes only.
  used = np.unique(kept.labels)
  relabel = np.full(data.num_classes, -1, np.int32)
  relabel[used] = np.arange(len(used), dtype=np.int32)
  return text_corpora.LabelledTexts(texts=kept.texts, labels=relabel[kept.labels],
                               class_names=tuple(data.class_names[i] for i in used),
                               clients=kept.clients)


def _read(config: retriever_config.RetrieverConfig, path,
          report: Optional[reading.ReadReport]) -> text_corpora.LabelledTexts:
  """The corpus file (or fortunes folder) `path` in --corpus's format, counted in `report`; a
  malformed row's refusal says how to skip such rows instead."""
  try:
    return _read_format(config, path, report)
  except reading.MalformedRowError as e:
    raise reading.MalformedRowError(
        f'{e} Fix the file, or give --malformed_rows=skip to skip and count such rows.') from e


def _read_format(config: retriever_config.RetrieverConfig, path,
                 report: Optional[reading.ReadReport]) -> text_corpora.LabelledTexts:
  if config.corpus == 'fortunes':
    return text_corpora.read_fortunes(path or text_corpora.FORTUNES_DIR, max_chars=config.max_chars,
                                 report=report)
  if config.corpus == 'sms_spam':
    return text_corpora.read_sms_spam(path, report=report, malformed=config.malformed_rows)
  if config.corpus == 'ag_news':
    return text_corpora.read_ag_news(path, report=report, malformed=config.malformed_rows)
  if config.corpus == 'debian_packages':
    return text_corpora.read_debian_packages(path, config.package_label, report=report)
  return text_corpora.read_labelled_table(path, text_column=config.text_column,
                                          label_column=config.label_column,
                                          client_column=config.client_column, report=report,
                                          malformed=config.malformed_rows)


def with_test_file(train: text_corpora.LabelledTexts, config: retriever_config.RetrieverConfig,
                   report: Optional[reading.ReadReport] = None
                   ) -> Tuple[text_corpora.LabelledTexts, np.ndarray, int]:
  """`train` followed by the examples of --test_path whose class `train` has.

  Args:
    train: the kept training corpus (`load_corpus`).
    config: the run (`test_path`, and --corpus's format and columns).
    report: where the reader counts the file's lines, or None.

  Returns:
    (the joined corpus, the indices of its test examples, how many test examples were left out
    for a class the training corpus does not have).

  Raises:
    ValueError: naming --test_path, if none of its examples has a class of the training corpus.
  """
  test = _read(config, config.test_path, report)
  index = {name: i for i, name in enumerate(train.class_names)}
  known = [i for i, label in enumerate(test.labels) if test.class_names[label] in index]
  if not known:
    raise ValueError(f'--test_path {config.test_path!r}: none of its {len(test)} examples has a '
                     f'class of the training corpus ({", ".join(train.class_names[:5])}'
                     f'{", ..." if train.num_classes > 5 else ""}).')
  texts = train.texts + tuple(test.texts[i] for i in known)
  labels = np.concatenate([train.labels, [index[test.class_names[test.labels[i]]]
                                          for i in known]]).astype(np.int32)
  # Test examples belong to no client; the client split reads the training rows only.
  clients = None if train.clients is None else train.clients + ('',) * len(known)
  joined = text_corpora.LabelledTexts(texts, labels, train.class_names, clients)
  return joined, np.arange(len(train), len(joined)), len(test) - len(known)


def load_backbone(config: retriever_config.RetrieverConfig):
  """(frozen backbone, tokenizer) of the run: `load_backbone_from` its `checkpoint_dir`,
  `max_length` and `mode`."""
  return load_backbone_from(config.checkpoint_dir, config.max_length, config.mode)


def load_backbone_from(checkpoint_dir: Optional[str], max_length: int, mode: str):
  """(frozen backbone, tokenizer) of `checkpoint_dir` (BERT or Llama family), or MiniLM.

  A Llama checkpoint too large to travel in a TFF computation is refused for the adapter mode
  before its weights are read (`text_models.frozen.check_fits`, from config.json's sizes).

  Args:
    checkpoint_dir: a Hugging Face checkpoint folder, or None for the pretrained MiniLM.
    max_length: tokens per text.
    mode: the training mode (`tff_model.MODES`).

  Returns:
    (the frozen backbone, its tokenizer of `max_length` tokens).

  Raises:
    ValueError: naming `checkpoint_dir`, if it lacks a file of a checkpoint, its `model_type`
      is not bert, llama or mistral, or a Llama or Mistral backbone is too large for the adapter
      mode.
  """
  if checkpoint_dir is None:
    return minilm.load_minilm(max_length)
  try:
    return _load_checkpoint(checkpoint_dir, max_length, mode)
  except FileNotFoundError as e:  # No config.json, weights or vocabulary: not a checkpoint.
    raise ValueError(f'--checkpoint_dir {checkpoint_dir!r}: {e}') from e


def _load_checkpoint(checkpoint_dir: str, max_length: int, mode: str):
  hf_config = checkpoints.read_config(checkpoint_dir)
  model_type = hf_config.get('model_type')
  if model_type in ('llama', 'mistral') and mode == tff_model.ADAPTER_CLASSIFIER:
    size = 4 * text_models.LlamaConfig.from_hf_config(hf_config).num_parameters
    frozen_lib.check_fits(size, f'The float32 backbone of {checkpoint_dir!r}')
  if model_type == 'bert':
    return (text_models.build_bert_encoder(checkpoint_dir),
            text_models.build_wordpiece_tokenizer(checkpoint_dir, max_length))
  if model_type in ('llama', 'mistral'):
    return (text_models.build_llama_decoder(checkpoint_dir),
            text_models.build_llama_tokenizer(checkpoint_dir, max_length))
  raise ValueError(f'--checkpoint_dir {checkpoint_dir!r}: config.json has model_type '
                   f'{model_type!r}; supported are bert, llama and mistral.')


def _tokenize(tokenizer, texts, batch: int = 512) -> Dict[str, np.ndarray]:
  parts = [tokenizer(tf.constant(list(texts[i:i + batch]))) for i in range(0, len(texts), batch)]
  return {key: np.concatenate([p[key].numpy() for p in parts]) for key in parts[0]}


def _split_dirichlet(train: text_corpora.LabelledTexts, config: retriever_config.RetrieverConfig):
  try:
    return partitions.split_dirichlet(train, config.num_clients, config.dirichlet_alpha,
                                   config.data_seed)
  except ValueError as e:  # Named by the flags, not the library's arguments.
    raise ValueError(f'--client_split=dirichlet with --dirichlet_alpha={config.dirichlet_alpha} '
                     f'and --num_clients={config.num_clients}: {e}') from e


def prepare_data(config: retriever_config.RetrieverConfig, tokenizer) -> RetrievalData:
  """The corpus split into the test set and the clients, every text tokenized once.

  Args:
    config: the run (corpus, `test_fraction`, `client_split`, `num_clients`, `data_seed`).
    tokenizer: the backbone's tokenizer (`load_backbone`).

  Returns:
    The run's `RetrievalData`.

  Raises:
    ValueError: if `--client_column` names another number of clients than `num_clients`, or
      --top_k is more than the classes (`RetrieverConfig.retrieval_k`).
  """
  report, left_out = reading.ReadReport(), {}
  texts = load_corpus(config, report, left_out)
  config.retrieval_k(texts.num_classes)  # --top_k checked before any work.
  test_left_out = 0
  if config.test_path is None:
    train, test = partitions.train_test_split(texts, config.test_fraction, config.data_seed)
  else:
    train = np.arange(len(texts))
    texts, test, test_left_out = with_test_file(texts, config, report)
    if test_left_out:
      logging.warning('--test_path %s: %d of its examples are of classes the training corpus '
                      'does not keep; left out of the test set.', config.test_path,
                      test_left_out)
      left_out['--test_path example of a class the training corpus does not keep'] = (
          test_left_out)
  report.warn_if_skipped('--corpus_path' + (' and --test_path' if config.test_path else ''))
  if config.client_split in ('even', 'dirichlet'):
    parts = (partitions.split_evenly(texts.subset(train), config.num_clients, config.data_seed)
             if config.client_split == 'even' else
             _split_dirichlet(texts.subset(train), config))
    client_ids = [f'client_{i:03d}' for i in range(config.num_clients)]
    client_indices = {c: train[p] for c, p in zip(client_ids, parts, strict=True)}
  else:
    ids, parts = partitions.split_by_client(texts.subset(train))
    if len(ids) != config.num_clients:
      column = ('the Maintainer field' if config.corpus == 'debian_packages'
                else f'--client_column {config.client_column!r}')
      raise ValueError(f'{column} names {len(ids)} clients; set --num_clients={len(ids)}.')
    client_ids, client_indices = list(ids), {c: train[p] for c, p in zip(ids, parts, strict=True)}
  return RetrievalData(texts, _tokenize(tokenizer, texts.texts), test, client_ids,
                       client_indices, test_left_out, report, left_out)


def features(backbone, tokens: Dict[str, np.ndarray], config: retriever_config.RetrieverConfig
             ) -> Tuple[np.ndarray, bool]:
  """(the [N, d] pooled states of the texts, whether they came from the feature cache): the
  classifier-only mode's inputs, cached across runs (`feature_cache`, --feature_cache_dir).

  Args:
    backbone: the frozen backbone (`load_backbone`).
    tokens: {"token_ids", "mask"} of the N texts.
    config: the run (`pooling`, `feature_cache`).
  """
  return feature_cache.cached_features(
      config.feature_cache, backbone, tokens, config.pooling,
      lambda: compute_features(backbone, tokens, config.pooling))


def compute_features(backbone, tokens: Dict[str, np.ndarray], pooling: str) -> np.ndarray:
  """[N, d] pooled states of the frozen backbone, computed (`features` caches them).

  Args:
    backbone: the frozen backbone (`load_backbone`).
    tokens: {"token_ids", "mask"} of the N texts.
    pooling: "mean" or "last" (`retriever_config.RetrieverConfig.pooling`).

  Returns:
    The pooled states, computed eagerly in batches of 64.
  """
  @tf.function(reduce_retracing=True)
  def pooled(batch):
    return backbone.pooled(batch, pooling)
  count = len(tokens['token_ids'])
  return np.concatenate([
      pooled({key: tf.constant(value[i:i + FEATURE_BATCH]) for key, value in tokens.items()})
      .numpy() for i in range(0, count, FEATURE_BATCH)])


def client_dataset(inputs: Dict[str, np.ndarray], labels: np.ndarray, batch_size: int,
                   seed: int) -> tf.data.Dataset:
  """A client's batches for one round: its examples in an order drawn from `seed`, each batch
  with a [2] seed (`seed`, batch index) for its dropout.

  Args:
    inputs: {input name: array} of the client's examples (cached features, or tokens).
    labels: their class ids.
    batch_size: examples a batch (the last may be smaller).
    seed: the client's seed of the round (from the public `seed`).

  Returns:
    Batches of OrderedDicts: the inputs, `label` and `seed`, in the model's `input_spec` order.
  """
  order = np.random.default_rng(seed).permutation(len(labels))
  # OrderedDicts in the model's `input_spec` order (inputs, label, seed), as TFF requires.
  elements = collections.OrderedDict((key, value[order]) for key, value in inputs.items())
  elements['label'] = labels[order].astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(elements).batch(batch_size)
  seed64 = tf.constant(seed % 2**63, tf.int64)
  return dataset.enumerate().map(
      lambda i, batch: collections.OrderedDict(batch, seed=tf.stack([seed64, i])))
