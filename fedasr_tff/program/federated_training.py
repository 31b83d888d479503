"""The DP federated training run: rounds, evaluation, privacy, checkpoints and metrics.

One round (spec §1, Algorithm 1): draw the cohort (`cohorts.sample_cohort`, seeded by the run
seed and the round), build each client's dataset (SpecAugment seeded the same way), run the
TFF learning process (`algorithms.build_fed_avg_process`: local SGD with local clipping,
global or per-layer clipping of the deltas with `aggregators.PerLayerDPFactory`, Gaussian noise,
the server optimizer). Every `eval_every` rounds the global model is scored on held-out speakers
and the privacy spent so far is accounted (`privacy_ledger`).

Privacy (spec §1.2, §6): a client is a speaker, and each contributes one delta per round, clipped
to total L2 norm C (per-layer bounds C_h with sum_h C_h^2 = C^2), so adding or removing a
speaker changes the sum of deltas by at most C. The aggregator adds Gaussian noise of std z·C
to that sum with z = σ_DP·S (`ledger.noise_multiplier`, the value passed to
`build_aggregator`), i.e. σ_DP·C on the average of the S deltas. The ledger accounts exactly that
z at sampling rate q = S/K for this run, and z' = σ_DP·S' at q' = S'/K' for the declared
population. With adaptive clipping the same z is split between the value noise and the noised
clipped counts (`aggregators.PerLayerDPFactory.gaussian_adaptive`), so the account is unchanged.

Run management with `tff.program`:
* `tff.program.FileProgramStateManager` saves the whole process state every `checkpoint_every`
  rounds (and at round 0 and the end). Started again with the same configuration, a run resumes
  from its latest checkpoint. The state holds the model, the optimizer and the DP noise seed, and
  every draw of a round is a function of (seed, round), so the resumed run ends in the same state
  as an uninterrupted one (for models without dropout: Keras dropout inside TFF's client
  computations draws from TF's unseeded RNG).
* Metrics go to `tff.program` release managers: CSV (`metrics.csv`), TensorBoard
  (`tensorboard/`) and a progress bar. A resumed run re-releases the rounds after its checkpoint;
  the CSV manager drops the stale rows.

Output directory: `config.json`, `checkpoints/`, `metrics.csv`, `tensorboard/`, `model.npz`
(final weights, `model_io`), `eval_per_speaker.csv`, `summary.json`.
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

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import models
from fedasr_tff import optimizers
from fedasr_tff import validation
from fedasr_tff.data import pipeline
from fedasr_tff.data import text as text_lib
from fedasr_tff.program import cohorts
from fedasr_tff.program import evaluation
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import progress as progress_lib

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
  seed: int = 0
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
    validation.check_non_negative_integer('seed', self.seed)
    if self.noise_seed is not None:
      validation.check_non_negative_integer('noise_seed', self.noise_seed)
    models.get_config(self.model_config)

  @property
  def declared_cohort_size(self) -> int:
    return self.population_cohort_size or self.cohort_size


@dataclasses.dataclass(frozen=True)
class FederatedResult:
  weights: tff.learning.models.ModelWeights
  rounds: int
  evaluation: Optional[evaluation.EvaluationResult]
  ledger: privacy_ledger.PrivacyLedger


def _server_lr_schedule(config: FederatedConfig):
  return optimizers.schedules.by_name(
      config.server_lr_schedule, config.server_lr, config.server_lr_decay_rate,
      config.server_lr_transition_rounds, config.server_lr_start_round)


def _group_names(config: FederatedConfig, tensor_names: List[str]) -> List[str]:
  return ['all'] if config.clipping == 'global' else list(tensor_names)


def build_aggregator(config: FederatedConfig, tensor_names: List[str],
                     noise_multiplier: float):
  """The delta aggregator of `config`: a plain mean, or `PerLayerDPFactory`."""
  if config.clipping == 'none':
    return None
  layer_weights = None
  if config.clipping == 'weighted':
    layer_weights = [config.mlp_weight if name.split('/')[-2:-1] and
                     name.split('/')[-2] in MLP_GROUPS else 1.0 for name in tensor_names]
  common = dict(allocation=config.clipping, layer_weights=layer_weights,
                noise_placement=config.noise_placement, noise_seed=config.noise_seed)
  if config.adaptive_clipping:
    return aggregators.PerLayerDPFactory.gaussian_adaptive(
        noise_multiplier, config.cohort_size, config.clip,
        target_quantile=config.target_quantile, learning_rate=config.clip_learning_rate,
        **common)
  return aggregators.PerLayerDPFactory.gaussian_fixed(
      noise_multiplier, config.cohort_size, config.clip, normalize=config.normalize, **common)


def _round_metrics(output, group_names, learning_rate, update_norm, seconds) -> Dict[str, Any]:
  """The released metrics of one round (names as in `program.report`)."""
  train = output.metrics['client_work']['train']
  values = {
      'train': {k: float(train[k]) for k in ('loss', 'examples', 'delta_norm',
                                             'max_grad_norm')},
      'server': {'learning_rate': float(learning_rate), 'update_norm': float(update_norm)},
      'time': {'round_seconds': float(seconds)},
  }
  dp = output.metrics['aggregator'].get('dp_query_metrics')
  if dp is not None:
    dp = dp.get('inner_query_metrics', dp)   # Under NormalizedQuery, if nested.
    values['dp'] = {
        'noise_stddev': float(np.asarray(dp['mean_noise_stddev'])[0]),
        'clip': float(np.linalg.norm(dp['round_clip'])),
        'clipped_fraction': float(np.mean(dp['clipped_fraction'])),
        'nonfinite_clients': float(dp['nonfinite_clients']),
    }
    values['per_layer'] = {
        name: {'norm_before_clip': float(dp['mean_norm_before_clip'][h]),
               'norm_after_clip': float(dp['mean_norm_after_clip'][h]),
               'clipped_fraction': float(dp['clipped_fraction'][h])}
        for h, name in enumerate(group_names)
    }
  return values


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
      initialisation.
    show_progress: draw a progress bar on stderr.
    log: where the per-evaluation lines go.
  """
  client_ids = train_data.client_ids
  population = config.population or len(client_ids)
  # The ledger refuses a cohort larger than the training clients (its `population`).
  ledger = privacy_ledger.PrivacyLedger(
      sigma_dp=config.sigma_dp, cohort_size=config.cohort_size, population=len(client_ids),
      declared_cohort_size=config.declared_cohort_size, declared_population=population,
      planned_rounds=config.rounds, delta=config.delta)
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
    initial_weights = _initial_weights(model_fn, config.seed)
  state = process.set_model_weights(state, initial_weights)
  state_manager = tff.program.FileProgramStateManager(
      os.path.join(output_dir, 'checkpoints'), keep_total=3, keep_first=True)
  restored, start_round = asyncio.run(state_manager.load_latest(state))
  if restored is None:
    asyncio.run(state_manager.save(state, 0))
  else:
    state = restored
    log(f'Resuming from the checkpoint of round {start_round} in {output_dir}.')

  csv_manager = tff.program.CSVFileReleaseManager(os.path.join(output_dir, 'metrics.csv'))
  managers = [csv_manager,
              tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard'))]
  progress = progress_lib.ProgressBarReleaseManager(config.rounds, start_round,
                                                    disable=not show_progress)
  release = tff.program.GroupingReleaseManager(managers + [progress])

  evaluations = {}  # round -> EvaluationResult, so the final one is not computed twice

  def evaluate_and_account(round_num, weights) -> Dict[str, Any]:
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
    if 'privacy' in values:
      p = values['privacy']
      parts.append(f'epsilon spent (declared K={ledger.declared_population}, '
                   f'S={ledger.declared_cohort_size}, delta={config.delta:g}): '
                   f'RDP {p["epsilon_rdp"]:.3g} / PLD {p["epsilon_pld"]:.3g}; projected at '
                   f'{config.rounds} rounds: RDP {p["projected_epsilon_rdp"]:.3g} / PLD '
                   f'{p["projected_epsilon_pld"]:.3g}; this run (K={ledger.population}, '
                   f'S={ledger.cohort_size}): RDP {p["run_epsilon_rdp"]:.3g}')
    else:
      parts.append('no DP noise')
    progress.write(' | '.join(parts), log)
    return values

  weights = process.get_model_weights(state)
  try:
    if start_round == 0:
      first = evaluate_and_account(0, weights)
      if first:
        asyncio.run(release.release(first, 0))
    for round_num in range(start_round + 1, config.rounds + 1):
      started = time.perf_counter()
      cohort = cohorts.sample_cohort(client_ids, config.cohort_size, config.seed, round_num)
      datasets = [
          train_data.create_tf_dataset_for_client(
              c, seed=cohorts.client_seed(config.seed, round_num, c))
          for c in cohort
      ]
      output = process.next(state, datasets)
      state = output.state
      new_weights = process.get_model_weights(state)
      values = _round_metrics(output, group_names, schedule(round_num - 1),
                              _update_norm(weights, new_weights),
                              time.perf_counter() - started)
      weights = new_weights
      if round_num % config.eval_every == 0 or round_num == config.rounds:
        values.update(evaluate_and_account(round_num, weights))
      asyncio.run(release.release(values, round_num))
      if round_num % config.checkpoint_every == 0 or round_num == config.rounds:
        asyncio.run(state_manager.save(state, round_num))
  finally:
    progress.close()

  model_io.save_weights(os.path.join(output_dir, 'model.npz'), eval_model.keras_model, weights)
  final_eval = None
  if eval_data is not None:
    final_eval = evaluations.get(config.rounds) or evaluation.evaluate(eval_model, eval_data,
                                                                       weights)
    evaluation.write_per_speaker_csv(final_eval, os.path.join(output_dir,
                                                              'eval_per_speaker.csv'))
  summary = {
      'rounds': config.rounds,
      'eval': final_eval.metrics() if final_eval else None,
      'privacy': ledger.metrics(config.rounds) if config.sigma_dp > 0 else None,
      'sigma_dp': config.sigma_dp,
      'noise_multiplier': ledger.noise_multiplier,
      'privacy_statement': ledger.statement(config.rounds),
  }
  with open(os.path.join(output_dir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  return FederatedResult(weights, config.rounds, final_eval, ledger)

