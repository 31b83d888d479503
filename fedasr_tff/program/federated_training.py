"""The DP federated training run: rounds, evaluation, privacy, checkpoints and metrics.

One round (the DP-FL-for-ASR paper's Algorithm 1, after McMahan et al. 2018, "Learning
Differentially Private Recurrent Language Models", ICLR): draw the cohort
(`cohorts.sample_cohort` from the run secret and the round: Poisson sampling by default for runs
with noise), build each client's dataset (all of the client's randomness seeded from the run
secret, the round and the client), run the TFF learning process
(`algorithms.build_fed_avg_process`: local SGD with local clipping, global or per-layer clipping
of the deltas with `aggregators.PerLayerDPFactory`, Gaussian noise, the server optimizer).
Every `eval_every` rounds the global model is scored on held-out speakers and the privacy spent
so far is accounted (`privacy_ledger`).

Privacy. A client is a speaker, and each contributes one delta per round, clipped to total L2
norm C (per-layer bounds C_h with sum_h C_h^2 = C^2, enforced for any finite input), so adding
or removing a speaker changes the sum of deltas by at most C. The aggregator adds Gaussian noise
of std z·C to that sum with z = σ_DP·S (`ledger.noise_multiplier`, the value passed to
`build_aggregator`) and divides by the expected cohort S, i.e. σ_DP·C on the average. The ledger
accounts exactly that z at q = S/K for this run (`epsilon_run_*`), and z' = σ_DP·S' at
q' = S'/K' for the declared population (`epsilon_declared_*`, an extrapolation). With adaptive
clipping the same z is split between the value noise and the noised clipped counts, so the
account is unchanged. What the run releases is kept inside that guarantee:

* Sampling: with "poisson" (the default with noise) the mechanism that runs is the one accounted;
  "fixed" cohorts are also accounted without replacement (`privacy_ledger`). The run secret
  behind the cohorts and client seeds is drawn from OS entropy and kept only in the checkpoints
  (owner-only); a `seed` fixed by the user makes it public, and the statement says so.
* Released metrics: in a run with noise only held-out evaluation, privacy figures, server
  quantities computed from the noised aggregate (learning rate, update norm, noise std, clips)
  and round times (a labelled side channel). Un-noised client statistics (training loss, delta
  norms, per-layer norms, clipped fractions, how many clients took part) are computed and
  released only with `release_client_diagnostics`, under the `client/` prefix, and named in the
  statement as outside the guarantee. Runs without noise release them all.
* Replays: a round's outputs are held back until a checkpoint at or after it is durably saved
  (`release_journal`), and every draw of a round is a function of (run secret, round, client),
  so a round recomputed after a resume is bit-identical and released exactly once.
* Client noise placement assumes secure aggregation and exactly S clients, so it is allowed only
  with fixed-size cohorts, fixed clips and no client statistics.

Run management with `tff.program`:
* `tff.program.FileProgramStateManager` saves the process state and the run secret every
  `checkpoint_every` rounds (and at round 0 and the end). Started again with the same
  configuration, a run resumes from its latest checkpoint and ends in the same state as an
  uninterrupted one.
* Metrics go to `tff.program` release managers: CSV (`metrics.csv`), TensorBoard
  (`tensorboard/`) and a progress bar (which shows computed rounds at once, metrics when
  released).

Output directory: `config.json`, `checkpoints/` (private), `metrics.csv`, `tensorboard/`,
`model.npz` (final weights, `model_io`), `eval_per_speaker.csv`, `summary.json`.
"""

import asyncio
import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import models
from fedasr_tff import optimizers
from fedasr_tff import private_files
from fedasr_tff import validation
from fedasr_tff.data import pipeline
from fedasr_tff.data import text as text_lib
from fedasr_tff.program import cohorts
from fedasr_tff.program import evaluation
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import progress as progress_lib
from fedasr_tff.program import release_journal

CLIPPINGS = ('none', 'global', 'uniform', 'dim', 'weighted')
# Parameter groups of the MLP, which the "weighted" allocation favours (spec §2, α-weighted).
MLP_GROUPS = ('w1', 'w2')


@dataclasses.dataclass(frozen=True)
class FederatedConfig:
  """Everything that determines a federated run's result (saved as `config.json`).

  Attributes mirror the `train_federated` flags of the same names; see their help.
  """
  rounds: int
  cohort_size: int
  model_config: str = 'tiny'
  local_steps: Optional[int] = 10
  local_epochs: Optional[int] = None
  client_lr: float = 0.2
  local_clip: Optional[float] = 1.0
  fedprox_mu: float = 0.0
  server_optimizer: str = 'lamb'
  server_lr: float = 0.002
  server_lr_schedule: str = 'constant'
  server_lr_decay_rate: float = 0.6
  server_lr_transition_rounds: int = 750
  server_lr_start_round: int = 750
  clipping: str = 'dim'
  clip: float = 0.01
  mlp_weight: float = 10.0
  normalize: bool = False
  adaptive_clipping: bool = False
  target_quantile: float = 0.5
  clip_learning_rate: float = 0.2
  noise_placement: str = 'server'
  sigma_dp: float = 0.0
  delta: float = 1e-9
  population: Optional[int] = None
  population_cohort_size: Optional[int] = None
  sampling: Optional[str] = None
  release_client_diagnostics: bool = False
  iid: bool = False
  seed: Optional[int] = None
  noise_seed: Optional[int] = None
  eval_every: int = 10
  checkpoint_every: int = 10

  def __post_init__(self):
    for name in ('rounds', 'cohort_size', 'eval_every', 'checkpoint_every'):
      validation.check_positive_integer(name, getattr(self, name))
    algorithms.local_training.check_local_work(self.local_steps, self.local_epochs)
    validation.check_positive('client_lr', self.client_lr)
    if self.local_clip is not None:
      validation.check_positive('local_clip', self.local_clip)
    validation.check_non_negative('fedprox_mu', self.fedprox_mu)
    if self.server_optimizer not in optimizers.OPTIMIZERS:
      raise ValueError(f'`server_optimizer` must be one of {sorted(optimizers.OPTIMIZERS)}, got '
                       f'{self.server_optimizer!r}.')
    validation.check_positive('server_lr', self.server_lr)
    if self.server_lr_schedule not in optimizers.schedules.NAMES:
      raise ValueError(f'`server_lr_schedule` must be one of {optimizers.schedules.NAMES}, got '
                       f'{self.server_lr_schedule!r}.')
    if self.clipping not in CLIPPINGS:
      raise ValueError(f'`clipping` must be one of {CLIPPINGS}, got {self.clipping!r}.')
    validation.check_positive('clip', self.clip)
    validation.check_non_negative('sigma_dp', self.sigma_dp)
    if self.clipping == 'none' and (self.sigma_dp > 0 or self.adaptive_clipping):
      raise ValueError('`clipping="none"` cannot be combined with noise or adaptive clipping: '
                       'DP noise is calibrated to the clip.')
    validation.check_open_unit_interval('delta', self.delta)
    if self.sampling is not None and self.sampling not in cohorts.SAMPLINGS:
      raise ValueError(f'`sampling` must be one of {cohorts.SAMPLINGS}, got {self.sampling!r}.')
    if self.noise_placement == 'client' and self.sigma_dp > 0:
      conflicts = [name for name, bad in (
          ('--sampling=poisson', self.effective_sampling != 'fixed'),
          ('--adaptive_clipping', self.adaptive_clipping),
          ('--release_client_diagnostics', self.release_client_diagnostics)) if bad]
      if conflicts:
        raise ValueError(
            f'--noise_placement=client cannot be combined with {", ".join(conflicts)}: client '
            'noise is calibrated for exactly S clients (give --sampling=fixed), adaptive clips '
            'and client statistics would leave the clients un-noised.')
    if self.seed is not None:
      validation.check_non_negative_integer('seed', self.seed)
    if self.noise_seed is not None:
      validation.check_non_negative_integer('noise_seed', self.noise_seed)
    models.get_config(self.model_config)

  @property
  def declared_cohort_size(self) -> int:
    return self.population_cohort_size or self.cohort_size

  @property
  def effective_sampling(self) -> str:
    """`sampling`, or by default "poisson" for runs with noise and "fixed" without."""
    return self.sampling or ('poisson' if self.sigma_dp > 0 else 'fixed')

  @property
  def client_diagnostics(self) -> bool:
    """Whether un-noised client statistics are computed and released (module docstring)."""
    return self.sigma_dp == 0 or self.release_client_diagnostics


@dataclasses.dataclass(frozen=True)
class FederatedResult:
  weights: tff.learning.models.ModelWeights
  rounds: int
  evaluation: Optional[evaluation.EvaluationResult]
  ledger: privacy_ledger.PrivacyLedger
  disclosures: privacy_ledger.Disclosures

  def privacy_statement(self) -> str:
    return self.ledger.statement(self.rounds, self.disclosures)


def _server_lr_schedule(config: FederatedConfig):
  return optimizers.schedules.by_name(
      config.server_lr_schedule, config.server_lr, config.server_lr_decay_rate,
      config.server_lr_transition_rounds, config.server_lr_start_round)


def _group_names(config: FederatedConfig, tensor_names: List[str]) -> List[str]:
  return ['all'] if config.clipping == 'global' else list(tensor_names)


def build_aggregator(config: FederatedConfig, tensor_names: List[str],
                     noise_multiplier: float):
  """The delta aggregator of `config`: a plain mean, or `PerLayerDPFactory`.

  Its exact client statistics are computed only when `config.client_diagnostics` holds.
  """
  if config.clipping == 'none':
    return None
  layer_weights = None
  if config.clipping == 'weighted':
    layer_weights = [config.mlp_weight if name.split('/')[-2:-1] and
                     name.split('/')[-2] in MLP_GROUPS else 1.0 for name in tensor_names]
  common = dict(allocation=config.clipping, layer_weights=layer_weights,
                noise_placement=config.noise_placement, noise_seed=config.noise_seed,
                diagnostics=config.client_diagnostics)
  if config.adaptive_clipping:
    return aggregators.PerLayerDPFactory.gaussian_adaptive(
        noise_multiplier, config.cohort_size, config.clip,
        target_quantile=config.target_quantile, learning_rate=config.clip_learning_rate,
        **common)
  return aggregators.PerLayerDPFactory.gaussian_fixed(
      noise_multiplier, config.cohort_size, config.clip, normalize=config.normalize, **common)


# Client statistics go under this prefix, so every sink shows which columns they are.
CLIENT_PREFIX = 'client'


def _round_metrics(config: FederatedConfig, output, group_names, learning_rate, update_norm,
                   seconds) -> Dict[str, Any]:
  """The released metrics of one round (names as in `program.report`; module docstring)."""
  values = {
      'server': {'learning_rate': float(learning_rate), 'update_norm': float(update_norm)},
      'time': {'round_seconds': float(seconds)},
  }
  client = {}
  if config.client_diagnostics:
    train = output.metrics['client_work']['train']
    client['train'] = {k: float(v) for k, v in train.items()}
  dp = output.metrics['aggregator'].get('dp_query_metrics')
  if dp is not None:
    dp = dp.get('inner_query_metrics', dp)   # Under NormalizedQuery, if nested.
    # Public: the clips of this round are constants or the noised adaptive state, and the
    # noise std on the averaged update follows from them.
    clips = np.asarray(dp['round_clip'])
    values['dp'] = {'noise_stddev': float(dp['noise_stddev']),
                    'clip': float(np.linalg.norm(clips))}
    if config.adaptive_clipping and len(group_names) > 1:
      values['per_layer'] = {name: {'clip': float(clips[h])}
                             for h, name in enumerate(group_names)}
    if config.client_diagnostics:
      client['dp'] = {'clipped_fraction': float(np.mean(dp['clipped_fraction'])),
                      'nonfinite_clients': float(dp['nonfinite_clients'])}
      client['per_layer'] = {
          name: {'norm_before_clip': float(dp['mean_norm_before_clip'][h]),
                 'norm_after_clip': float(dp['mean_norm_after_clip'][h]),
                 'clipped_fraction': float(dp['clipped_fraction'][h])}
          for h, name in enumerate(group_names)
      }
  if client:
    values[CLIENT_PREFIX] = client
  return values


def client_statistic_columns(config: FederatedConfig) -> Tuple[str, ...]:
  """The released column groups computed from client data without noise (none unless
  `config.client_diagnostics`)."""
  if not config.client_diagnostics:
    return ()
  columns = [f'{CLIENT_PREFIX}/train/* (loss, examples, steps, clients, delta and gradient '
             'norms)']
  if config.clipping != 'none':
    columns += [f'{CLIENT_PREFIX}/dp/* (clipped fraction, non-finite clients)',
                f'{CLIENT_PREFIX}/per_layer/* (norms before and after clipping, clipped '
                'fractions)']
  return tuple(columns)


def _fingerprint(config: FederatedConfig, client_ids: List[str],
                 initial_weights: Optional[tff.learning.models.ModelWeights]) -> Dict[str, Any]:
  digest = hashlib.sha256('\n'.join(client_ids).encode()).hexdigest()
  weights_digest = None
  if initial_weights is not None:
    h = hashlib.sha256()
    for array in initial_weights.trainable:
      h.update(np.ascontiguousarray(array).tobytes())
    weights_digest = h.hexdigest()
  return {'config': dataclasses.asdict(config), 'clients_sha256': digest,
          'seed_model_sha256': weights_digest}


def _check_or_write_fingerprint(output_dir, fingerprint) -> None:
  """A resumed run must be the same run: refuse an output dir holding a different one."""
  path = os.path.join(output_dir, 'config.json')
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if saved != fingerprint:
      changed = sorted(k for k in fingerprint['config']
                       if saved.get('config', {}).get(k) != fingerprint['config'][k])
      if saved.get('clients_sha256') != fingerprint['clients_sha256']:
        changed.append('the training clients (corpus, split or speaker split)')
      if saved.get('seed_model_sha256') != fingerprint['seed_model_sha256']:
        changed.append('the seed model')
      raise ValueError(f'{output_dir!r} holds a run with a different configuration ('
                       f'{", ".join(changed)} differ). Use a new output directory, or the '
                       'same settings to resume.')
    return
  os.makedirs(output_dir, exist_ok=True)
  with open(path, 'w') as f:
    json.dump(fingerprint, f, indent=2, sort_keys=True)


def _initial_weights(model_fn, seed) -> tff.learning.models.ModelWeights:
  """Seeded random initialisation, done eagerly so it does not depend on TFF's tracing."""
  tf.keras.utils.set_random_seed(seed)
  return model_io.model_weights(model_fn().keras_model)


def _update_norm(before, after) -> float:
  return math.sqrt(sum(float(np.sum(np.square(np.asarray(b) - np.asarray(a))))
                       for a, b in zip(before.trainable, after.trainable, strict=True)))


def _disclosures(config: FederatedConfig) -> privacy_ledger.Disclosures:
  return privacy_ledger.Disclosures(
      sampling=config.effective_sampling, sampling_seed_known=config.seed is not None,
      noise_seed_known=config.noise_seed is not None,
      noise_placement=config.noise_placement, client_statistics=client_statistic_columns(config),
      pseudo_clients=config.iid, adaptive_clipping=config.adaptive_clipping)


def train(config: FederatedConfig,
          train_data: pipeline.SpeechClientData,
          vocabulary: text_lib.Vocabulary,
          output_dir: str,
          *,
          eval_data: Optional[pipeline.SpeechClientData] = None,
          initial_weights: Optional[tff.learning.models.ModelWeights] = None,
          show_progress: bool = True,
          log=print) -> FederatedResult:
  """Runs (or resumes) the federated training of `config`; see the module docstring.

  Args:
    config: the run.
    train_data: the clients (one per speaker).
    vocabulary: the token set of the model's outputs.
    output_dir: where the run keeps its files; a run found there is resumed.
    eval_data: held-out speakers scored every `config.eval_every` rounds; None skips evaluation.
    initial_weights: the seed model (`model_io.load_weights`); None starts from a seeded random
      initialisation (`config.seed`, or 0).
    show_progress: draw a progress bar on stderr.
    log: where the per-evaluation lines go (held back like the metrics).
  """
  client_ids = train_data.client_ids
  population = config.population or len(client_ids)
  # The ledger refuses a cohort larger than the training clients (its `population`).
  ledger = privacy_ledger.PrivacyLedger(
      sigma_dp=config.sigma_dp, cohort_size=config.cohort_size, population=len(client_ids),
      declared_cohort_size=config.declared_cohort_size, declared_population=population,
      planned_rounds=config.rounds, delta=config.delta, sampling=config.effective_sampling)
  _check_or_write_fingerprint(output_dir, _fingerprint(config, client_ids, initial_weights))

  model_fn = models.build_tff_model_fn(config.model_config, vocabulary.tokens)
  tensor_names, _ = model_io.tensor_names(model_fn().keras_model)
  group_names = _group_names(config, tensor_names)
  schedule = _server_lr_schedule(config)
  process = algorithms.build_fed_avg_process(
      model_fn,
      client_learning_rate=config.client_lr,
      local_steps=config.local_steps,
      local_epochs=config.local_epochs,
      local_clip_norm=config.local_clip,
      fedprox_mu=config.fedprox_mu,
      server_optimizer=optimizers.build(config.server_optimizer, config.server_lr),
      server_lr_schedule=schedule,
      model_aggregator=build_aggregator(config, tensor_names, ledger.noise_multiplier))
  # Made after the process: building it constructs models in graph mode, which invalidates
  # Keras models made eagerly before it.
  eval_model = model_fn()

  state = process.initialize()
  if initial_weights is None:
    initial_weights = _initial_weights(model_fn, config.seed or 0)
  state = process.set_model_weights(state, initial_weights)
  # The run secret: the user's seed (public, and the statement says so) or OS entropy, kept
  # only in the checkpoints.
  secret = cohorts.new_run_secret() if config.seed is None else config.seed
  checkpoint_dir = private_files.make_private_directory(os.path.join(output_dir, 'checkpoints'))
  state_manager = tff.program.FileProgramStateManager(checkpoint_dir, keep_total=3,
                                                      keep_first=True)
  journal = release_journal.ReleaseJournal(os.path.join(checkpoint_dir, 'held_releases.json'))
  restored, start_round = asyncio.run(
      state_manager.load_latest((state, cohorts.secret_to_words(secret))))

  csv_manager = tff.program.CSVFileReleaseManager(os.path.join(output_dir, 'metrics.csv'))
  managers = [csv_manager,
              tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard'))]
  progress = progress_lib.ProgressBarReleaseManager(config.rounds, start_round,
                                                    disable=not show_progress)
  release = tff.program.GroupingReleaseManager(managers + [progress])

  def release_held(held) -> None:
    values, lines = held
    for round_num in sorted(values):
      asyncio.run(release.release(values[round_num], round_num))
    for line in lines:
      progress.write(line, log)

  def checkpoint_and_release(round_num) -> None:
    # Held outputs reach the disk first, then the state that covers them, then the sinks.
    journal.write(round_num)
    asyncio.run(state_manager.save((state, cohorts.secret_to_words(secret)), round_num))
    private_files.fsync_tree(os.path.join(checkpoint_dir, f'program_state_{round_num}'))
    release_held(journal.held)
    journal.clear()

  if restored is not None:
    state, secret_words = restored
    secret = cohorts.secret_from_words(secret_words)
    progress.write(f'Resuming from the checkpoint of round {start_round} in {output_dir}.', log)
    # A run killed between a checkpoint and its release: release those (identical) values.
    release_held(journal.pending(start_round))
    journal.clear()

  if config.sigma_dp > 0 and config.client_diagnostics:
    progress.write('Releasing client statistics OUTSIDE the DP guarantee '
                   '(--release_client_diagnostics): ' + '; '.join(client_statistic_columns(config)),
                   log)

  evaluations = {}  # round -> EvaluationResult, so the final one is not computed twice

  def evaluate_and_account(round_num, weights) -> Tuple[Dict[str, Any], str]:
    values = {}
    if eval_data is not None:
      result = evaluation.evaluate(eval_model, eval_data, weights)
      evaluations[round_num] = result
      values['eval'] = result.metrics()
    if config.sigma_dp > 0:
      values['privacy'] = ledger.metrics(round_num)
    parts = [f'round {round_num}/{config.rounds}']
    if 'eval' in values:
      parts.append(f'WER {100 * values["eval"]["wer"]:.1f}% CER {100 * values["eval"]["cer"]:.1f}%')
    parts.append(ledger.summary_line(round_num) if config.sigma_dp > 0 else 'no DP noise')
    return values, ' | '.join(parts)

  weights = process.get_model_weights(state)
  try:
    if restored is None:
      values, line = evaluate_and_account(0, weights)
      journal.hold(0, values, (line,))
      checkpoint_and_release(0)
    for round_num in range(start_round + 1, config.rounds + 1):
      started = time.perf_counter()
      cohort = cohorts.sample_cohort(client_ids, config.cohort_size, secret, round_num,
                                     config.effective_sampling)
      datasets = [
          train_data.create_tf_dataset_for_client(
              c, seed=cohorts.client_seed(secret, round_num, c))
          for c in cohort
      ]
      output = process.next(state, datasets)
      state = output.state
      new_weights = process.get_model_weights(state)
      values = _round_metrics(config, output, group_names, schedule(round_num - 1),
                              _update_norm(weights, new_weights),
                              time.perf_counter() - started)
      weights = new_weights
      lines = ()
      if round_num % config.eval_every == 0 or round_num == config.rounds:
        eval_values, line = evaluate_and_account(round_num, weights)
        values.update(eval_values)
        lines = (line,)
      journal.hold(round_num, values, lines)
      progress.advance(round_num)
      if round_num % config.checkpoint_every == 0 or round_num == config.rounds:
        checkpoint_and_release(round_num)
  finally:
    progress.close()

  model_io.save_weights(os.path.join(output_dir, 'model.npz'), eval_model.keras_model, weights)
  final_eval = None
  if eval_data is not None:
    final_eval = evaluations.get(config.rounds) or evaluation.evaluate(eval_model, eval_data,
                                                                       weights)
    evaluation.write_per_speaker_csv(final_eval, os.path.join(output_dir,
                                                              'eval_per_speaker.csv'))
  disclosures = _disclosures(config)
  summary = {
      'rounds': config.rounds,
      'eval': final_eval.metrics() if final_eval else None,
      'privacy': ledger.metrics(config.rounds) if config.sigma_dp > 0 else None,
      'sigma_dp': config.sigma_dp,
      'noise_multiplier': ledger.noise_multiplier,
      'sampling': config.effective_sampling,
      'client_statistics_released': list(disclosures.client_statistics),
      'privacy_statement': ledger.statement(config.rounds, disclosures),
  }
  with open(os.path.join(output_dir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  return FederatedResult(weights, config.rounds, final_eval, ledger, disclosures)
