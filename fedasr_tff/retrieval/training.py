"""The classifier-as-retriever training run, on the one round loop (`program.training_loop`).

The paper's FL + local DP (Fofonjka, Zehtabi, Behtash, Mauer and Stout, webAI 2025): a labelled
corpus split into a held-out test set (the server's) and clients; a frozen backbone whose pooled
features are cached (classifier only) or through which the clients train an adapter; rounds of
`process.build_retrieval_process` with every client (the paper's full participation) or a
Poisson cohort, with local DP per client, the project's central DP (`PerLayerDPFactory`) or
none; top-1 and top-K accuracy and macro-F1 on the test set (`classification_report`), and the
final model's top-K classes for each test example (`predictions.tsv`). Modes, corpora and
evidence: docs/retrieval.md.

Privacy. `seed` is public (initialisation, batch orders, dropout). The DP noise and the cohorts
come from a separate noise secret, drawn from OS entropy and kept only in the owner-only
checkpoints (`noise_seed` makes it public, and the run has no guarantee), so the cohorts stay
secret for amplification by sampling and a resumed run replays identical rounds. Client training
statistics are never noised: under DP they are released only with `release_client_diagnostics`
(`privacy_statement` says what is covered; docs/retrieval.md, "Training").
"""

import dataclasses
import hashlib
import json
import os
import time
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import privacy
from fedasr_tff.program import cohorts
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import run_record
from fedasr_tff.program import training_loop
from fedasr_tff.retrieval import classification_report
from fedasr_tff.retrieval import data as data_lib
from fedasr_tff.retrieval import dp_prototypes
from fedasr_tff.retrieval import local_dp as local_dp_lib
from fedasr_tff.retrieval import logit_gap_check
from fedasr_tff.retrieval import model as model_lib
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.retrieval import retrieve
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.retrieval import tff_model
from fedasr_tff.text_models import frozen as frozen_lib

_FORMAT = 1
# The final model's top-K classes for each held-out example
# (`classification_report.write_predictions`).
PREDICTIONS_FILE = 'predictions.tsv'
_SHOWN = ('eval/top1', 'privacy/local_epsilon_max', 'privacy/epsilon_run_rdp')


def _run_record(config: retriever_config.RetrieverConfig,
                data: data_lib.RetrievalData) -> run_record.RunRecord:
  """The run's record: its configuration and a hash of every client's texts."""
  h = hashlib.sha256()
  for client in data.client_ids:
    h.update(client.encode())
    for i in data.client_indices[client]:
      h.update(data.texts.texts[i].encode())
  return run_record.RunRecord(config, h.hexdigest(), _FORMAT,
                              clients_description='the clients\' data', kind='retriever training')


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
    feature_seconds: the time spent computing or reading the classifier-only mode's features
      (0 in the adapter mode).
    round_seconds: the wall time of each round run by this process.
    scores: the final model's `classification_report.Scores` on the held-out test set.
    class_names: the name of each class (the documents retrieved).
    features_cached: whether the features came from the feature cache (`feature_cache`).
  """
  weights: tff.learning.models.ModelWeights
  metrics: Dict[str, Any]
  privacy_statement: str
  feature_seconds: float
  round_seconds: List[float]
  scores: classification_report.Scores
  class_names: Tuple[str, ...]
  features_cached: bool = False


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


def privacy_statement(config: retriever_config.RetrieverConfig, releases: np.ndarray,
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
                   f'a client; no amplification, every release counted): max '
                   f'{privacy.format_epsilon(max(eps))}, '
                   f'min {privacy.format_epsilon(min(eps))} over {len(eps)} clients.' +
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
                 f'{privacy.format_epsilon(m["epsilon_run_rdp"])} (RDP) / '
                 f'{privacy.format_epsilon(m["epsilon_run_pld"])} (PLD) at '
                 f'δ = {ledger.delta:g} after {rounds} rounds' +
                 (', with no amplification: every client takes part every round.'
                  if config.full_participation else ', Poisson sampling.'))
    if config.dp_prototypes:
      lines.append(f'- The head started from class prototypes released by this mechanism on a '
                   f'cohort drawn as a round\'s (a client\'s per-class sums of unit features '
                   f'clipped to {config.prototype_clip:g} examples): one of the {rounds} '
                   'rounds accounted.')
    lines.append(f'- Declared population (K\' = {ledger.declared_population}, S\' = '
                 f'{ledger.declared_cohort_size}; assumes quality depends on σ_DP only): ε = '
                 f'{privacy.format_epsilon(m["epsilon_declared_rdp"])} (RDP) / '
                 f'{privacy.format_epsilon(m["epsilon_declared_pld"])} (PLD).')
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


def train(config: retriever_config.RetrieverConfig, *, show_progress: bool = True,
          log=print, outputs: Optional[training_loop.RunOutputs] = None) -> RetrieverResult:
  """Runs (or resumes from `output_dir`) the training of the module docstring.

  Args:
    config: the run.
    show_progress: draw a progress bar on stderr.
    log: where the per-evaluation lines go (held back like the metrics).
    outputs: where checkpoints and releases go; default the binaries' own
      (`training_loop.standard_outputs` of `config.output_dir` and `config.rounds`; add a sink
      with its `with_release_manager`).

  Returns:
    The final weights, summary, privacy statement and timings.
  """
  backbone, tokenizer = data_lib.load_backbone(config)
  data = data_lib.prepare_data(config, tokenizer)
  run_record.check_or_write(config.output_dir, _run_record(config, data))
  training_loop.check_checkpoints(config.output_dir)  # Before features and the process.
  num_classes = data.texts.num_classes
  head_args = dict(head=config.head, hidden_size=config.hidden_size,
                   dropout_rate=config.dropout_rate)
  feature_seconds = 0.0
  features_cached = False
  frozen_backbone = None
  if config.mode == tff_model.CLASSIFIER_ONLY:
    started = time.perf_counter()
    features, features_cached = data_lib.features(backbone, data.tokens, config)
    inputs = {'features': features}
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
  dp = retriever_config.central_dp(config, noise_secret)
  # The prototype release is one more round of the run's mechanism (`dp_prototypes`).
  releases = config.rounds + int(config.dp_prototypes)
  aggregator = noise = prototype_release = None
  if dp is not None:
    with retriever_config.naming_central_dp_flags():
      noise = dp.noise_level(config.cohort, dp.population_cohort_size or config.cohort,
                             dp.population or config.num_clients, releases)
      aggregator = dp.aggregator(noise.noise_multiplier, config.cohort, None,
                                 diagnostics=False)
  if config.dp_prototypes:
    prototype_features = (inputs['features'] if config.mode == tff_model.CLASSIFIER_ONLY
                          else data_lib.features(backbone, data.tokens, config)[0])
    prototype_dp = retriever_config.prototype_dp(config, noise_secret)
    prototype_aggregator = (tff.aggregators.UnweightedMeanFactory() if prototype_dp is None else
                            prototype_dp.aggregator(noise.noise_multiplier, config.cohort, None,
                                                    diagnostics=False))
    prototype_release = _PrototypeRelease(
        dp_prototypes.build_prototype_release(prototype_features.shape[1], num_classes,
                                              prototype_aggregator), prototype_features)
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
                       rounds=releases, sampling='poisson')
    ledger = dataclasses.replace(ledger, noise_multiplier=privacy_ledger.applied_noise_multiplier(
        state['aggregator']))
  rounds = _RetrieverRounds(config, data, inputs, process, state, eval_model, ledger,
                            noise_secret, () if frozen_backbone is None
                            else (frozen_backbone.weights,), feature_seconds, prototype_release)
  training_loop.train(rounds, config.output_dir, outputs, show_progress=show_progress, log=log)
  # The final model's predictions on the held-out examples (the server's own evaluation data),
  # from the logits its summary scored.
  classification_report.write_predictions(
      os.path.join(config.output_dir, PREDICTIONS_FILE),
      [data.texts.texts[i] for i in data.test], data.texts.labels[data.test],
      data.texts.class_names, rounds.final_logits, rounds.final_scores.k)
  return RetrieverResult(rounds.weights, rounds.final_summary, rounds.final_summary[
      'privacy_statement'], feature_seconds, rounds.round_seconds, rounds.final_scores,
      data.texts.class_names, features_cached)


def _releases_client_statistics(config: retriever_config.RetrieverConfig) -> bool:
  """Whether the clients' un-noised statistics are measured and released (labelled)."""
  return (not config.adds_noise) or config.release_client_diagnostics


@dataclasses.dataclass(frozen=True)
class _PrototypeRelease:
  """The DP prototype release of a run (`dp_prototypes`) and every example's features."""
  release: Any
  features: np.ndarray


class _RetrieverRounds(training_loop.Task):
  """The rounds of a retriever run, as `training_loop` drives them (module docstring)."""

  shown_metrics = _SHOWN

  def __init__(self, config: retriever_config.RetrieverConfig, data: data_lib.RetrievalData,
               inputs: Dict[str, np.ndarray], process, state, eval_model,
               ledger: Optional[privacy_ledger.PrivacyLedger], noise_secret: int,
               round_arguments: Tuple[Any, ...], feature_seconds: float,
               prototype_release: Optional[_PrototypeRelease] = None):
    self.config, self.data, self.inputs, self.process = config, data, inputs, process
    self.state, self.eval_model, self.ledger = state, eval_model, ledger
    self.noise_secret, self.round_arguments = noise_secret, round_arguments
    self.feature_seconds = feature_seconds
    self.prototype_release = prototype_release
    # Releases of the mechanism before round 1: the prototype release, accounted as a round.
    self.initial_releases = int(prototype_release is not None)
    self.rounds = config.rounds
    self.eval_every = config.eval_every
    self.checkpoint_every = config.checkpoint_every
    self.local = config.local_dp_config()
    self.dp_states = _DPStates(data.client_ids, process_lib.initial_client_dp_state(self.local))
    self.test_inputs = {key: value[data.test] for key, value in inputs.items()}
    self.weights = state['model']
    self.round_seconds = []
    # Set by `summary`, once the last round is trained.
    self.final_summary = self.final_logits = self.final_scores = None

  def program_state(self):
    """The process state, every client's local DP state and the noise secret."""
    return (self.state, self.dp_states.arrays, cohorts.secret_to_words(self.noise_secret))

  def restore(self, saved) -> None:
    self.state, arrays, words = saved
    self.dp_states.arrays = [np.asarray(a).copy() for a in arrays]
    self.noise_secret = cohorts.secret_from_words(words)
    self.weights = self.state['model']

  def opening_lines(self) -> List[str]:
    config, classes = self.config, self.data.texts.num_classes
    if not config.adds_noise or classes < 2:
      return []
    warning = config.noise_warning(classes)
    if warning is None:
      return [f'DP noise check: ρ = {config.noise_to_gap_ratio(classes):.2f} (the noise in the '
              'largest competing logit against the largest gap the updates can build; warned '
              f'above {logit_gap_check.SWAMP_THRESHOLD}, and it costs accuracy below: '
              'docs/retrieval.md, "DP at many classes").']
    logging.warning(warning)
    return [f'Warning: {warning}']

  def initialize(self) -> None:
    """Starts the linear head from DP class prototypes (`dp_prototypes`), with a new run only:
    the checkpoint of round 0 holds the result, so a resumed run never releases them again."""
    if self.prototype_release is None:
      return
    config, data = self.config, self.data
    # Round 0 of the rounds' secret, Poisson sampling: a cohort drawn as a round's.
    cohort = (list(data.client_ids) if config.full_participation else cohorts.sample_cohort(
        data.client_ids, config.cohort, self.noise_secret, 0, 'poisson'))
    if not cohort:  # An empty Poisson cohort releases only noise; the head keeps its start.
      return
    release = self.prototype_release
    prototypes, aggregator_state, _ = release.release(dp_prototypes.client_datasets(
        release.features, data.texts.labels, [data.client_indices[c] for c in cohort]))
    if self.ledger is not None:
      self.ledger.check_round(aggregator_state)
    kernel, bias = dp_prototypes.linear_head_weights(prototypes)
    names = model_lib.trainable_weight_names(self.eval_model.keras_model)
    trainable = list(self.state['model'].trainable)
    trainable[names.index('head/classifier/kernel')] = kernel
    trainable[names.index('head/classifier/bias')] = bias
    self.state = process_lib.with_model_weights(
        self.state, tff.learning.models.ModelWeights(trainable=trainable, non_trainable=[]))
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
      datasets.append(data_lib.client_dataset({k: v[index] for k, v in self.inputs.items()},
                                     labels[index], config.batch_size,
                                     cohorts.client_seed(config.seed, round_num, client)))
      states.append(self.dp_states.get(client))
      seed = cohorts.client_seed(self.noise_secret, round_num, client)
      seeds.append(np.array([seed, round_num], np.int64))
    metrics = None
    if cohort:
      output = process_lib.run_round(self.process, self.state, datasets, states, seeds,
                                     *self.round_arguments)
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
    names = model_lib.trainable_weight_names(self.eval_model.keras_model)
    return (names, []), self.weights

  def model_metadata(self) -> Dict[str, str]:
    # What rebuilds the retriever from `model.npz` alone: the classes it retrieves (the
    # server's catalogue of documents, public like the model) and how its inputs are made.
    config = self.config
    return {'class_names': json.dumps(list(self.data.texts.class_names)), 'mode': config.mode,
            'head': config.head, 'hidden_size': str(config.hidden_size or ''),
            'pooling': config.pooling, 'max_length': str(config.max_length),
            'checkpoint_dir': config.checkpoint_dir or ''}

  def summary(self) -> Dict[str, Any]:
    config, data = self.config, self.data
    statement = privacy_statement(config, self.dp_states.releases(), self.ledger,
                                  config.rounds + self.initial_releases)
    # Owner-only (`training_loop`): it lists every client by ID (with local DP, each one's ε
    # and so how often it was sampled).
    self.final_logits = self.test_logits()
    self.final_scores = self._score(self.final_logits)
    self.final_summary = {
        'rounds': config.rounds, 'eval': self.final_scores.metrics(),
        'num_classes': data.texts.num_classes, 'top_k': self.final_scores.k,
        'train_examples': int(sum(len(v) for v in data.client_indices.values())),
        'test_examples': int(len(data.test)), 'test_examples_left_out': data.test_left_out,
        # What the readers made of the input files before training (public, as K is).
        'inputs': {'corpus': data.inputs()},
        'feature_seconds': self.feature_seconds,
        'median_round_seconds': (float(np.median(self.round_seconds)) if self.round_seconds
                                 else None),
        'privacy': self._privacy_values(config.rounds) if config.adds_noise else None,
        # `logit_gap_check`'s ρ, from the configuration alone (no data).
        'noise_to_gap_ratio': (config.noise_to_gap_ratio(data.texts.num_classes)
                               if data.texts.num_classes > 1 else None),
        'local_epsilon_per_client': _local_epsilons(config, data.client_ids,
                                                    self.dp_states.releases()),
        'privacy_statement': statement,
    }
    return self.final_summary

  def test_logits(self) -> np.ndarray:
    """[test examples, classes]: the current model's logits on the held-out test set."""
    _assign(self.eval_model, self.weights)
    return np.concatenate([
        self.eval_model.predict_on_batch(
            {key: tf.constant(value[i:i + data_lib.FEATURE_BATCH])
             for key, value in self.test_inputs.items()}, training=False).numpy()
        for i in range(0, len(self.data.test), data_lib.FEATURE_BATCH)])

  def _score(self, logits: np.ndarray) -> classification_report.Scores:
    """The `classification_report.Scores` of held-out `logits` (`test_logits`)."""
    return classification_report.score(logits, self.data.texts.labels[self.data.test],
                                       self.config.retrieval_k(self.data.texts.num_classes))

  def _scores(self) -> Dict[str, float]:
    """Top-1, top-K accuracy and macro-F1 of the current model on the held-out test set."""
    return self._score(self.test_logits()).metrics()

  def _privacy_values(self, round_num: int) -> Dict[str, float]:
    if self.local is not None:
      eps = _local_epsilons(self.config, self.data.client_ids, self.dp_states.releases())
      return {} if eps is None else {'local_epsilon_max': max(eps.values()),
                                     'local_epsilon_min': min(eps.values())}
    if self.ledger is not None:
      return self.ledger.metrics(round_num + self.initial_releases)
    return {}

  def _line(self, round_num: int, values) -> str:
    parts = [f'round {round_num}/{self.rounds}']
    if 'eval' in values:
      parts.append(' '.join(f'{k} {100 * v:.1f}%' for k, v in values['eval'].items()))
    priv = values.get('privacy', {})
    if 'local_epsilon_max' in priv:
      parts.append('local epsilon (max over clients) '
                   f'{privacy.format_epsilon(priv["local_epsilon_max"])}')
    elif 'epsilon_run_rdp' in priv:
      parts.append(f'epsilon_run {privacy.format_epsilon(priv["epsilon_run_rdp"])}')
    return ' | '.join(parts)


def mips_baseline(config: retriever_config.RetrieverConfig) -> Dict[str, float]:
  """Top-1/top-K of MIPS on the frozen model, a non-private baseline computed centrally.

  The paper's MIPS baseline: class prototypes of the training queries' pooled states, scored
  by inner product.

  Args:
    config: the run (its corpus, backbone and split).

  Returns:
    {'top1': ..., 'topK': ..., 'macro_f1': ...} on the held-out test set.
  """
  backbone, tokenizer = data_lib.load_backbone(config)
  data = data_lib.prepare_data(config, tokenizer)
  features, _ = data_lib.features(backbone, data.tokens, config)
  train = np.sort(np.concatenate(list(data.client_indices.values())))
  labels = data.texts.labels
  prototypes = retrieve.class_prototypes(features[train], labels[train], data.texts.num_classes)
  scores = retrieve.mips_scores(features[data.test], prototypes)
  return classification_report.score(scores, labels[data.test],
                                     config.retrieval_k(data.texts.num_classes)).metrics()

