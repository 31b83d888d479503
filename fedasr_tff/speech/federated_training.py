"""The DP federated speech run: speakers as clients, on the one round loop (`training_loop`).

A round (Pelikan et al., NeurIPS 2025, arXiv:2310.00098, Algorithm 1, after McMahan et al.,
ICLR 2018): draw the cohort from the run secret (`cohorts`, Poisson by default with noise), build
each sampled speaker's batches from a seed of (secret, round, speaker), and run the learning
process `config.FederatedConfig.process` builds: federated averaging with local clipping, mixed
FL (`--mixed`, the server trains on its own data inside the round) or DGA (`--aggregation`,
`--rehearsal_steps`; DGA-RL's learner is orchestrated here and checkpointed).

Privacy argument. A client is a speaker and contributes one delta a round, clipped to total L2
norm C (per-layer bounds C_h with sum_h C_h^2 = C^2, for any finite input), so adding or removing
a speaker moves the sum by at most C; the aggregator adds Gaussian noise of std z·C to the sum and
divides by the expected cohort S (σ_DP·C on the average). z is resolved once
(`dp_config.DPConfig.noise_level`), given to the aggregator, and the ledger accounts the z the
aggregator's state applies (`privacy_ledger.applied_noise_multiplier`, checked every round) at
q = S/K, and z' = σ_DP·S' at q' = S'/K' for the declared population. What a run releases, keeps
private and replays is in docs/privacy.md; `released_metrics` is where the code applies it.
"""

import dataclasses
import hashlib
import os
import time
from typing import Any
from typing import Callable
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import algorithms
from fedasr_tff.algorithms import dga_rl
from fedasr_tff.program import cohorts
from fedasr_tff.program import dp_config
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import round_step
from fedasr_tff.program import run_record
from fedasr_tff.program import training_loop
from fedasr_tff.runtime import compile_cache
from fedasr_tff.runtime import process_cache as process_cache_lib
from fedasr_tff.speech import central_batches
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models
from fedasr_tff.speech import released_metrics
from fedasr_tff.speech.data import client_store
from fedasr_tff.speech.data import pipeline
from fedasr_tff.speech.data import text as text_lib


@dataclasses.dataclass(frozen=True)
class FederatedResult:
  """What `train` returns.

  Attributes:
    weights: the final model weights.
    rounds: the rounds of the run.
    evaluation: the final evaluation on the evaluation data, or None without it.
    ledger: the run's privacy ledger.
    disclosures: what the run released or assumed beyond the mechanism.
  """
  weights: tff.learning.models.ModelWeights
  rounds: int
  evaluation: Optional[evaluation.EvaluationResult]
  ledger: privacy_ledger.PrivacyLedger
  disclosures: privacy_ledger.Disclosures

  def privacy_statement(self) -> str:
    """The run's privacy statement, in Markdown (`PrivacyLedger.statement`)."""
    return self.ledger.statement(self.rounds, self.disclosures)


def check_eval_data(config: config_lib.FederatedConfig,
                    eval_data: Optional[pipeline.SpeechClientData],
                    train_client_ids: List[str]) -> int:
  """Refuses evaluation data that shares speakers with the clients in a run with noise, unless
  `release_client_evaluation`.

  Its scores would be un-noised statistics of those clients' data (the same rule as the
  server's central data, `central_batches.check_central_data`); with the opt-in they are
  released and labelled outside the guarantee. A run without noise evaluates on anything.

  Args:
    config: the run.
    eval_data: the evaluation data, or None.
    train_client_ids: the federated clients.

  Returns:
    How many federated clients the evaluation data holds (0 for the server's own data).

  Raises:
    ValueError: if it holds a federated client in a run with noise without
      `release_client_evaluation`.
  """
  if eval_data is None:
    return 0
  shared = sorted(set(eval_data.client_ids) & set(train_client_ids))
  if shared and config.dp.adds_noise and not config.dp.release_client_evaluation:
    raise ValueError(
        f'The evaluation data shares {len(shared)} speaker(s) with the federated clients (for '
        f'example {shared[0]!r}): in a run with DP noise its scores would be un-noised '
        'statistics of the clients\' data. Give an `eval_split` of held-out speakers, or '
        '`release_client_evaluation` to release them OUTSIDE the DP guarantee.')
  return len(shared)


# config.json layout: 2 holds the grouped configuration (`config.FederatedConfig`); 3 adds
# --spec_augment. A run of format 2 cannot say whether it applied SpecAugment (train_federated and
# the studies always did, the demo as its own --spec_augment said), so it is refused, not resumed
# with a guess. 4: a client's seeded sample of utterances is drawn by a stateless TF op
# (`client_store.utterance_order`, which workers building batches from a client store repeat),
# not NumPy's generator, so a run of format 3 would resume with other samples: refused. (A field
# added since, such as --feature_normalization, takes its default in a saved run that lacks it,
# `run_record.check`: that default is what those runs did.)
_CONFIG_FORMAT = 4
_FORMAT_NOTE = ('format 3 added --spec_augment, which runs before it did not record '
                '(train_federated then always applied SpecAugment, which its default, '
                '--preset=cpu, no longer does); format 4 draws each client\'s sample of utterances '
                'with a TensorFlow op instead of NumPy\'s generator, so an older run resumed here '
                'would train on other samples than it started with')


def _run_record(config: config_lib.FederatedConfig, client_ids: List[str],
                initial_weights: Optional[tff.learning.models.ModelWeights],
                central_ids: Optional[List[str]] = None) -> run_record.RunRecord:
  """The run's record: its configuration, the seed model's hash and the clients' fingerprint."""
  digest = hashlib.sha256('\n'.join(client_ids).encode()).hexdigest()
  if central_ids is not None:
    # The server's speakers too: a resumed mixed run must draw the same central batches.
    central = '\n'.join(central_ids)
    digest = hashlib.sha256(f'{digest}\ncentral:\n{central}'.encode()).hexdigest()
  weights_digest = None
  if initial_weights is not None:
    h = hashlib.sha256()
    for array in initial_weights.trainable:
      h.update(np.ascontiguousarray(array).tobytes())
    weights_digest = h.hexdigest()
  return run_record.RunRecord(
      config, digest, _CONFIG_FORMAT, _FORMAT_NOTE,
      checks={'seed_model_sha256': (weights_digest, 'the seed model')},
      clients_description='the training clients (corpus, split or speaker split)',
      kind='federated speech training')


def _initial_weights(model_fn, seed) -> tff.learning.models.ModelWeights:
  """Seeded random initialisation, done eagerly so it does not depend on TFF's tracing."""
  tf.keras.utils.set_random_seed(seed)
  return model_io.model_weights(model_fn().keras_model)


@dataclasses.dataclass
class FederatedRun:
  """A built run, ready to train (`build_run`); every argument has been checked.

  Attributes:
    config: the run's configuration.
    train_data: the clients, one per speaker.
    output_dir: where the run keeps its files.
    model_fn: builds the TFF model.
    process: the learning process (`config.FederatedConfig.process`).
    schedule: the server learning rate by round (from 0).
    noise: the run's noise level.
    ledger: the privacy ledger, its z read from the aggregator's state.
    initial_state: the process state at the seed weights.
    central: the server's batches (mixed FL, rehearsal), or None.
    rl: DGA-RL's learner, or None.
    eval_data: the evaluation data, or None.
    evaluated_clients: how many federated clients the evaluation data holds.
    client_keys: with a client store, each client's index in it (the process then takes
      (index, seed) per client instead of its dataset); None: the driver ships datasets.
    inputs: what the corpus readers read for each data set the run was given ("train",
      "eval", "central", "validation"): each file's lines and the rows skipped, known before
      any client is sampled (`reading.ReadReport.as_dict`), for `summary.json`.
  """
  config: config_lib.FederatedConfig
  train_data: pipeline.SpeechClientData
  output_dir: str
  model_fn: Callable[[], tff.learning.models.VariableModel]
  process: tff.templates.IterativeProcess
  schedule: Callable[[int], float]
  noise: dp_config.NoiseLevel
  ledger: privacy_ledger.PrivacyLedger
  initial_state: Any
  central: Optional[central_batches.CentralBatches] = None
  rl: Optional[dga_rl.DGARL] = None
  eval_data: Optional[pipeline.SpeechClientData] = None
  evaluated_clients: int = 0   # Federated clients among the evaluation's speakers.
  client_keys: Optional[Dict[str, int]] = None
  inputs: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def next(self, state, client_datasets, secret: int, round_num: int):
    """One round of the process; a mixed FL or rehearsing round also takes the server's
    batches, and a DGA-RL round is orchestrated by `rl`.

    Args:
      state: the process state.
      client_datasets: the cohort's datasets.
      secret: the run secret, from which the round's server batches are drawn.
      round_num: the round.

    Returns:
      The round's `tff.learning.templates.LearningProcessOutput`; a DGA-RL round adds its
      choice under `dga_rl` in the metrics.
    """
    batches = None if self.central is None else self.central.for_round(secret, round_num)
    if self.rl is not None:
      result = self.rl.round(state, client_datasets, batches, round_num=round_num)
      metrics = dict(result.measurements)
      metrics['dga_rl'] = {'validation_cer_rl': result.errors[0],
                           'validation_cer_softmax': result.errors[1],
                           'kept_rl': float(result.kept_rl), 'reward': result.reward}
      return tff.learning.templates.LearningProcessOutput(result.state, metrics)
    if batches is None:
      return self.process.next(state, client_datasets)
    return self.process.next(state, client_datasets, batches)

  def train(self, *, show_progress: bool = True, log=print,
            outputs: Optional[training_loop.RunOutputs] = None) -> FederatedResult:
    """Runs (or resumes) the training in `training_loop`; see `train`.

    Args:
      show_progress: draw a progress bar on stderr.
      log: where the per-evaluation lines go (held back like the metrics).
      outputs: where checkpoints and releases go; default the binaries' own
        (`training_loop.standard_outputs` of the output directory, the run's rounds and
        `evaluation.SHOWN_METRICS`; add a sink with its `with_release_manager`).

    Returns:
      The run's `FederatedResult`.
    """
    rounds = _SpeechRounds(self)
    training_loop.train(rounds, self.output_dir, outputs, show_progress=show_progress, log=log)
    return FederatedResult(
        rounds.weights, self.config.run.rounds, rounds.final_evaluation, self.ledger,
        released_metrics.disclosures(self.config, self.evaluated_clients))


def build_run(config: config_lib.FederatedConfig,
              train_data: pipeline.SpeechClientData,
              vocabulary: text_lib.Vocabulary,
              output_dir: str,
              *,
              eval_data: Optional[pipeline.SpeechClientData] = None,
              initial_weights: Optional[tff.learning.models.ModelWeights] = None,
              central_data: Optional[pipeline.SpeechClientData] = None,
              validation_data: Optional[pipeline.SpeechClientData] = None,
              process_cache: Optional[compile_cache.CompileCache] = None
              ) -> FederatedRun:
  """Builds the run of `config` on `train_data`: every library builder checks its arguments
  here, before anything is trained or written except `config.json`.

  Args:
    config, train_data, vocabulary, output_dir, eval_data, initial_weights, central_data,
      validation_data: as in `train`.
    process_cache: where a federated averaging process (not mixed FL's or DGA's) is kept once
      built (`fedasr_tff.runtime.process_cache`, keyed by `config.process_recipe`); None builds
      it in every run.

  Returns:
    The run, its process state at the seed weights and its ledger's z read from the
    aggregator's state.

  Raises:
    ValueError: naming the configuration field a builder refused; for evaluation, central or
      validation data that the run refuses, needs or does not use; for data whose features
      are not the configuration's `feature_normalization`; or for an `output_dir` that holds a
      different run (`run_record.check_or_write`).
  """
  client_ids = train_data.client_ids
  data_config.check_same_features({
      'the configuration (`feature_normalization`)': config.data.feature_normalization,
      'the training data': train_data.feature_normalization,
      **{what: d.feature_normalization for what, d in (
          ('the evaluation data', eval_data), ('the central data', central_data),
          ('the validation data', validation_data)) if d is not None}})
  evaluated_clients = check_eval_data(config, eval_data, client_ids)
  central = None
  if config.uses_central_data:
    if central_data is None:
      raise ValueError('The run needs the server\'s data (`central_split`).')
    central_batches.check_central_data(central_data, client_ids, vocabulary)
    count = (config.mixed.central_batch_count(config.client) if config.mixed.enabled
             else config.dga.rehearsal_steps if config.dga.rehearses else 0)
    if count:
      central = central_batches.CentralBatches(central_data, count)
  elif central_data is not None:
    raise ValueError('Central data was given, but neither `mixed`, `rehearsal_steps` nor '
                     '`aggregation`=dga_rl uses it.')
  if config.dga.rl:
    if validation_data is None:
      raise ValueError('`aggregation`=dga_rl needs validation data (the server\'s data, '
                       '`central_split`, without SpecAugment).')
    central_batches.check_central_data(validation_data, client_ids, vocabulary)
  elif validation_data is not None:
    raise ValueError('Validation data is only used by `aggregation`=dga_rl.')
  noise = config.noise_level(len(client_ids))
  # Checks the cohorts against the population now; the run's z is read back from the
  # aggregator once the process exists.
  ledger = config.ledger(noise, len(client_ids))
  record = _run_record(config, client_ids, initial_weights,
                       central_data.client_ids if central_data is not None else None)
  # Another run's directory, or a damaged checkpoint, is refused before the process is built
  # (tens of seconds); a new record is written only after, so that a configuration the
  # builders refuse leaves no record.
  run_record.check(output_dir, record)
  training_loop.check_checkpoints(output_dir)
  model_fn = models.build_tff_model_fn(config.model.model_config, vocabulary.tokens)
  tensor_names, _ = model_io.tensor_names(model_fn().keras_model)
  process = _process(config, model_fn, vocabulary, noise.noise_multiplier, tensor_names,
                     process_cache)
  state = process.initialize()
  ledger = dataclasses.replace(
      ledger, noise_multiplier=privacy_ledger.applied_noise_multiplier(state.aggregator))
  run_record.check_or_write(output_dir, record)
  if initial_weights is None:
    initial_weights = _initial_weights(model_fn, config.run.seed_or_zero)
  state = process.set_model_weights(state, initial_weights)
  client_keys = None
  if config.data.client_store_dir:
    # Written once (kept while current); the workers then build each client's batches there.
    store_ids = client_store.write_client_store(train_data, config.data.client_store_dir)
    client_keys = {client: index for index, client in enumerate(store_ids)}
    process = algorithms.with_dataset_computation(process, train_data.store_dataset_computation(
        config.data.client_store_dir, config.client.batches_per_round()))
  rl = None
  if config.dga.rl:
    # Made after the process (building it invalidates Keras models made before).
    validation_model = model_fn()
    rl = dga_rl.DGARL(
        process, config.run.cohort_size,
        lambda weights: evaluation.evaluate(validation_model, validation_data,
                                            weights).overall.cer,
        theta=config.dga.dga_rl_theta, exploration=config.dga.dga_rl_exploration,
        seed=config.run.seed_or_zero)
  inputs = {name: data.read_report.as_dict() for name, data in (
      ('train', train_data), ('eval', eval_data), ('central', central_data),
      ('validation', validation_data)) if data is not None}
  return FederatedRun(config, train_data, output_dir, model_fn, process,
                      config.server.schedule(), noise, ledger,
                      state, central, rl, eval_data, evaluated_clients, client_keys, inputs)


def _process(config, model_fn, vocabulary, noise_multiplier, tensor_names, cache):
  """`config.process`, through `cache` for federated averaging (`build_run`)."""

  def build():
    return config.process(model_fn, noise_multiplier, tensor_names)

  if cache is None or config.mixed.enabled or config.dga.enabled:
    return build()
  return process_cache_lib.learning_process(
      cache, config.process_recipe(vocabulary.tokens, noise_multiplier, tensor_names), build)


def train(config: config_lib.FederatedConfig,
          train_data: pipeline.SpeechClientData,
          vocabulary: text_lib.Vocabulary,
          output_dir: str,
          *,
          eval_data: Optional[pipeline.SpeechClientData] = None,
          initial_weights: Optional[tff.learning.models.ModelWeights] = None,
          central_data: Optional[pipeline.SpeechClientData] = None,
          validation_data: Optional[pipeline.SpeechClientData] = None,
          process_cache: Optional[compile_cache.CompileCache] = None,
          show_progress: bool = True,
          log=print) -> FederatedResult:
  """Runs (or resumes) the federated training of `config`; see the module docstring.

  Args:
    config: the run.
    train_data: the clients (one per speaker).
    vocabulary: the token set of the model's outputs.
    output_dir: where the run keeps its files; a run found there is resumed.
    eval_data: held-out speakers scored every `eval_every` rounds; None skips evaluation. In
      a run with noise it must not hold a training client unless `release_client_evaluation`
      (`check_eval_data`).
    initial_weights: the seed model (`model_io.load_weights`); None starts from a seeded random
      initialisation (`seed`, or 0).
    central_data: the server's data (`config.central`) of a mixed FL run, or of DGA's
      rehearsal; its speakers must not be training clients.
    validation_data: DGA-RL's validation data (the server's, without SpecAugment).
    process_cache: as in `build_run`.
    show_progress: draw a progress bar on stderr.
    log: where the per-evaluation lines go (held back like the metrics).

  Returns:
    The final weights and evaluation, the ledger and the disclosures. `output_dir` then holds
    `config.json` and `checkpoints/` (`run_record`, `training_loop`), `metrics.csv`,
    `tensorboard/`, `model.npz` (`model_io`), `summary.json` (owner-only), with evaluation data
    `eval_per_speaker.csv` (owner-only), and the feature cache `feature_cache/` (owner-only) when
    the data was loaded with `data_config.DataConfig.with_default_feature_cache`.

  Raises:
    ValueError: as `build_run`, before anything is trained; or if the latest checkpoint in
      `output_dir` cannot be read.
  """
  run = build_run(config, train_data, vocabulary, output_dir, eval_data=eval_data,
                  initial_weights=initial_weights, central_data=central_data,
                  validation_data=validation_data, process_cache=process_cache)
  return run.train(show_progress=show_progress, log=log)


class _SpeechRounds(training_loop.Task):
  """The rounds of a built speech run, as `training_loop` drives them (module docstring)."""
  shown_metrics = evaluation.SHOWN_METRICS

  def __init__(self, run: FederatedRun):
    config = run.config
    self.run, self.config, self.ledger = run, config, run.ledger
    self.rounds = config.run.rounds
    self.eval_every = config.run.eval_every
    self.checkpoint_every = config.run.checkpoint_every
    self.max_batches = config.client.batches_per_round()
    # Made after the process: building it constructs models in graph mode, which invalidates
    # Keras models made eagerly before it.
    self.eval_model = run.model_fn()
    self.state = run.initial_state
    self.weights = run.process.get_model_weights(self.state)
    # The run secret: the user's seed (public, and the statement says so) or OS entropy, kept
    # only in the checkpoints.
    self.secret = cohorts.new_run_secret() if config.run.seed is None else config.run.seed
    self.evaluations = {}   # round -> EvaluationResult, so the final one is not computed twice
    self.final_evaluation = None

  def program_state(self):
    """The process state, the run secret and DGA-RL's learner."""
    saved = (self.state, cohorts.secret_to_words(self.secret))
    return saved if self.run.rl is None else saved + (self.run.rl.state(),)

  def restore(self, saved) -> None:
    if self.run.rl is not None:
      self.run.rl.set_state(saved[2])
    self.state, self.secret = saved[0], cohorts.secret_from_words(saved[1])
    self.weights = self.run.process.get_model_weights(self.state)

  def opening_lines(self) -> List[str]:
    lines = []
    if self.config.dp.adds_noise and self.config.client_diagnostics:
      lines.append('Releasing client statistics OUTSIDE the DP guarantee '
                   '(--release_client_diagnostics): '
                   + '; '.join(released_metrics.client_statistic_columns(self.config)))
    if self.config.dp.adds_noise and self.run.evaluated_clients:
      lines.append('Releasing client statistics OUTSIDE the DP guarantee '
                   '(--release_client_evaluation): '
                   + '; '.join(released_metrics.evaluation_column(self.run.evaluated_clients)))
    return lines

  def run_round(self, round_num: int) -> Dict[str, Any]:
    run, config = self.run, self.config
    started = time.perf_counter()
    if run.client_keys is None:
      # Only the batches the round uses, drawn from the client's seed (`pipeline`).
      def client_data(client, seed):
        return run.train_data.create_tf_dataset_for_client(client, seed=seed,
                                                           max_batches=self.max_batches)
    else:
      # Where each client's batches are built (`client_store`): its index and seed.
      def client_data(client, seed):
        return np.int32(run.client_keys[client]), np.int64(seed)
    _, output = round_step.run_round(
        lambda state, datasets: run.next(state, datasets, self.secret, round_num), self.state,
        run.train_data.client_ids, cohort_size=config.run.cohort_size, secret=self.secret,
        round_num=round_num, sampling=config.effective_sampling, client_data=client_data,
        ledger=self.ledger)
    self.state = output.state
    new_weights = run.process.get_model_weights(self.state)
    values = released_metrics.round_metrics(config, output, run.schedule(round_num - 1),
                            training_loop.update_norm(self.weights, new_weights),
                            time.perf_counter() - started)
    self.weights = new_weights
    return values

  def evaluate(self, round_num: int, values) -> Tuple[Dict[str, Any], str]:
    del values   # The line shows the evaluation and the privacy spent only.
    evaluated = {}
    if self.run.eval_data is not None:
      result = evaluation.evaluate(self.eval_model, self.run.eval_data, self.weights)
      self.evaluations[round_num] = result
      evaluated['eval'] = result.metrics()
    if self.config.dp.adds_noise:
      evaluated['privacy'] = self.ledger.metrics(round_num)
    parts = [f'round {round_num}/{self.rounds}']
    if 'eval' in evaluated:
      parts.append(f'WER {100 * evaluated["eval"]["wer"]:.1f}% '
                   f'CER {100 * evaluated["eval"]["cer"]:.1f}%')
    parts.append(self.ledger.summary_line(round_num) if self.config.dp.adds_noise
                 else 'no DP noise')
    return evaluated, ' | '.join(parts)

  def final_weights(self):
    return model_io.tensor_names(self.eval_model.keras_model), self.weights

  def model_metadata(self):
    return data_config.model_metadata(self.run.train_data.feature_normalization)

  def summary(self) -> Dict[str, Any]:
    config, run, rounds = self.config, self.run, self.rounds
    if run.eval_data is not None:
      self.final_evaluation = (self.evaluations.get(rounds)
                               or evaluation.evaluate(self.eval_model, run.eval_data,
                                                      self.weights))
      evaluation.write_per_speaker_csv(self.final_evaluation,
                                       os.path.join(run.output_dir, 'eval_per_speaker.csv'))
    disclosures = released_metrics.disclosures(config, run.evaluated_clients)
    return {
        'rounds': rounds,
        'eval': self.final_evaluation.metrics() if self.final_evaluation else None,
        'privacy': self.ledger.metrics(rounds) if config.dp.adds_noise else None,
        'sigma_dp': run.noise.sigma_dp,
        'noise_multiplier': self.ledger.noise_multiplier,
        'sampling': config.effective_sampling,
        'client_statistics_released': list(disclosures.client_statistics) + list(
            released_metrics.evaluation_column(disclosures.evaluated_clients)),
        'privacy_statement': self.ledger.statement(rounds, disclosures),
        # What the readers made of the input files before training (public, as K is).
        'inputs': run.inputs,
    }
