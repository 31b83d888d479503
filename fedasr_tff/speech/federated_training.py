"""The DP federated training run: rounds, evaluation, privacy, checkpoints and metrics.

One round (the DP-FL-for-ASR paper's Algorithm 1, after McMahan et al. 2018, "Learning
Differentially Private Recurrent Language Models", ICLR): draw the cohort
(`cohorts.sample_cohort` from the run secret and the round: Poisson sampling by default for runs
with noise), build each client's dataset (with `local_steps`, only the batches the round uses, a
sample of the client's utterances; all of the client's randomness seeded from the run secret, the
round and the client), run the TFF learning process
(`algorithms.build_fed_avg_process`: local SGD with local clipping, global or per-layer clipping
of the deltas with `aggregators.PerLayerDPFactory`, Gaussian noise, the server optimizer).
With `--mixed` (`config.MixedConfig`) the process is mixed federated learning
(`algorithms.build_mixed_fl_process`): the server also trains on its own central data inside
every round (`central_batches` draws the round's batches from the run secret and the round).
With `config.DGAConfig` (`--aggregation`, `--rehearsal_steps`) it is dynamic gradient aggregation
(`algorithms.build_dga_process`): client deltas weighted by their training loss (with DP noise
through `aggregators.BoundedWeightDPFactory`), DGA-RL's learned weights orchestrated here
(`algorithms.dga_rl`, its learner saved in the checkpoints), and server rehearsal on the
server's data.
Every `eval_every` rounds the global model is scored on held-out speakers and the privacy spent
so far is accounted (`privacy_ledger`).

Privacy. A client is a speaker, and each contributes one delta per round, clipped to total L2
norm C (per-layer bounds C_h with sum_h C_h^2 = C^2, enforced for any finite input), so adding
or removing a speaker changes the sum of deltas by at most C. The aggregator adds Gaussian noise
of std z·C to that sum and divides by the expected cohort S, i.e. σ_DP·C on the average. The
noise is resolved once, before the process exists (`config.FederatedConfig.noise_level`): the
given σ_DP, z or target ε becomes σ_DP, the run's z = σ_DP·S (given to the aggregator) and the
declared z' = σ_DP·S'. The ledger accounts the z the aggregator's state reports
(`privacy_ledger.applied_noise_multiplier`, checked every round) at q = S/K for this run
(`epsilon_run_*`), and z' at q' = S'/K' for the declared population (`epsilon_declared_*`, an
extrapolation). With adaptive clipping the same z is split between the value noise and the
noised clipped counts, so the account is unchanged. What the run releases is kept inside that
guarantee (the rules in full, with the threat model and the opt-ins: docs/privacy.md):

* Sampling: with "poisson" (the default with noise) the mechanism that runs is the one accounted;
  "fixed" cohorts are also accounted without replacement (`privacy_ledger`). The run secret
  behind the cohorts and client seeds is drawn from OS entropy and kept only in the checkpoints
  (owner-only); a `seed` fixed by the user makes it public, and the statement says so.
* Released metrics: in a run with noise only held-out evaluation, privacy figures, server
  quantities computed from the noised aggregate (learning rate, update norm, noise std, clips,
  per-layer norms of the noised average update and the noise's expected share of them;
  mixed FL's `mixed/*`: central loss on server data, norms of the central and federated deltas
  and of the augmenting gradients) and round times (a labelled side channel). Mixed FL's
  central data is the server's: no guarantee covers it, and the statement says so.
  Un-noised client statistics (training loss, delta norms, per-layer norms, clipped fractions,
  how many clients took part) are computed and released only with
  `release_client_diagnostics`, under the `client/` prefix, and named in the
  statement as outside the guarantee. Evaluation data that shares speakers with the clients is
  refused unless `release_client_evaluation`, which names its scores in the statement as
  outside the guarantee (`check_eval_data`). Runs without noise release them all.
* Files: the checkpoints hold the secrets and the fingerprint of the training clients (a hash
  of their IDs, which would tell who is in the training set, so not in `config.json`); every
  file in them, and `eval_per_speaker.csv`, is owner-only.
* Replays: a round's outputs are held back until a checkpoint at or after it is durably saved
  (`release_journal`), and every draw of a round is a function of (run secret, round, client),
  so a round recomputed after a resume is bit-identical and released exactly once.
* Client noise placement assumes secure aggregation and exactly S clients, so it is allowed only
  with fixed-size cohorts, fixed clips and no client statistics.

Run management with `tff.program`:
* `tff.program.FileProgramStateManager` saves the process state and the run secret every
  `checkpoint_every` rounds (and at round 0 and the end). Started again with the same
  configuration, a run resumes from its latest checkpoint and ends in the same state as an
  uninterrupted one; a damaged latest checkpoint is refused, not skipped
  (`release_journal.load_latest`).
* Metrics go to `tff.program` release managers: CSV (`metrics.csv`), TensorBoard
  (`tensorboard/`) and a progress bar (which shows computed rounds at once, metrics when
  released).

Output directory: `config.json` (the configuration, grouped as in `config.FederatedConfig`),
`checkpoints/` (private, with `clients.json`, the clients' fingerprint), `feature_cache/`
(private; the binaries' default feature cache,
`config.DataConfig.feature_cache_dir`), `metrics.csv`, `tensorboard/`, `model.npz` (final
weights, `model_io`), `eval_per_speaker.csv`, `summary.json`.
"""

import asyncio
import dataclasses
import hashlib
import json
import math
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

from fedasr_tff import models
from fedasr_tff import private_files
from fedasr_tff.algorithms import dga_rl
from fedasr_tff.data import pipeline
from fedasr_tff.data import text as text_lib
from fedasr_tff.program import cohorts
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import progress as progress_lib
from fedasr_tff.program import release_journal
from fedasr_tff.speech import central_batches
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation


@dataclasses.dataclass(frozen=True)
class FederatedResult:
  weights: tff.learning.models.ModelWeights
  rounds: int
  evaluation: Optional[evaluation.EvaluationResult]
  ledger: privacy_ledger.PrivacyLedger
  disclosures: privacy_ledger.Disclosures

  def privacy_statement(self) -> str:
    return self.ledger.statement(self.rounds, self.disclosures)


# Client statistics go under this prefix, so every sink shows which columns they are.
CLIENT_PREFIX = 'client'


def _round_metrics(config: config_lib.FederatedConfig, output, learning_rate, update_norm,
                   seconds) -> Dict[str, Any]:
  """The released metrics of one round (names as in `program.report`; module docstring).

  The aggregator's measurements (`aggregators.PerLayerDPFactory`) are keyed by clipping group;
  its client statistics are there only when `config.client_diagnostics` holds.
  """
  values = {
      'server': {'learning_rate': float(learning_rate), 'update_norm': float(update_norm)},
      'time': {'round_seconds': float(seconds)},
  }
  # Public: server data and quantities derived from the noised aggregate (`mixed_fl`, DGA's
  # rehearsal); DGA-RL's choice runs only without noise (`config.FederatedConfig`).
  for group in ('mixed', 'rehearsal', 'dga_rl'):
    if group in output.metrics:
      values[group] = {k: float(v) for k, v in output.metrics[group].items()}
  client = {}
  if config.client_diagnostics:
    client_work = output.metrics['client_work']
    client['train'] = {k: float(v) for k, v in client_work['train'].items()}
    for group in ('gradient_dissimilarity', 'weights'):
      if group in client_work:
        client[group] = {k: float(v) for k, v in client_work[group].items()}
  dp = output.metrics['aggregator'].get('dp_query_metrics')
  if dp is not None:
    # Public: the clips of this round are constants or the noised adaptive state, and the
    # noise std on the averaged update follows from them.
    values['dp'] = {'noise_stddev': float(dp['noise_stddev']), 'clip': float(dp['clip'])}
    for name in ('weight_sum', 'weight_denominator'):
      if name in dp:  # DGA weights: the noised weight sum (`aggregators.bounded_weight_dp`).
        values['dp'][name] = float(dp[name])
    if len(dp['per_group']) > 1:
      # Public too: norms of the released (noised) average update per layer, the noise's
      # expected share of them, and the adaptive clips.
      keys = ['released_norm'] + ['noise_norm'] * config.dp.adds_noise + (
          ['clip'] * config.dp.adaptive_clipping)
      values['per_layer'] = {name: {key: float(group[key]) for key in keys}
                             for name, group in dp['per_group'].items()}
    if config.client_diagnostics:
      statistics = dp['client_statistics']
      client['dp'] = {'clipped_fraction': float(statistics['clipped_fraction']),
                      'nonfinite_clients': float(statistics['nonfinite_clients'])}
      if 'weight_sum' in statistics:
        client['dp']['weight_sum'] = float(statistics['weight_sum'])
      client['per_layer'] = {name: {k: float(v) for k, v in group.items()}
                             for name, group in statistics['per_group'].items()}
  if client:
    values[CLIENT_PREFIX] = client
  return values


def check_eval_data(config: config_lib.FederatedConfig,
                    eval_data: Optional[pipeline.SpeechClientData],
                    train_client_ids: List[str]) -> int:
  """Refuses evaluation data that shares speakers with the clients in a run with noise, unless
  `release_client_evaluation`; returns how many clients it holds (0 for the server's own data).

  Its scores would be un-noised statistics of those clients' data (the same rule as the
  server's central data, `central_batches.check_central_data`); with the opt-in they are
  released and labelled outside the guarantee. A run without noise evaluates on anything.
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


def _evaluation_column(evaluated_clients: int) -> Tuple[str, ...]:
  """The released evaluation, named as a client statistic when it scores clients."""
  if not evaluated_clients:
    return ()
  return (f'eval/* and eval_per_speaker.csv (scores of {evaluated_clients} federated clients\' '
          'own data)',)


def client_statistic_columns(config: config_lib.FederatedConfig) -> Tuple[str, ...]:
  """The released column groups computed from client data without noise (none unless
  `config.client_diagnostics`)."""
  if not config.client_diagnostics:
    return ()
  columns = [f'{CLIENT_PREFIX}/train/* (loss, examples, steps, clients, delta and gradient '
             'norms)']
  if config.dga.enabled:
    columns.append(f'{CLIENT_PREFIX}/weights/* (sum and effective number of the clients\' '
                   'aggregation weights)')
  if config.mixed.gradient_dissimilarity:
    columns.append(f'{CLIENT_PREFIX}/gradient_dissimilarity/* (G2, B2 from un-noised client '
                   'gradients)')
  if config.dp.clipping != 'none':
    columns += [f'{CLIENT_PREFIX}/dp/* (clipped fraction, non-finite clients)',
                f'{CLIENT_PREFIX}/per_layer/* (norms before and after clipping, clipped '
                'fractions)']
  return tuple(columns)


# config.json layout: 2 holds the grouped configuration (`config.FederatedConfig`).
_CONFIG_FORMAT = 2


def _fingerprint(config: config_lib.FederatedConfig, client_ids: List[str],
                 initial_weights: Optional[tff.learning.models.ModelWeights],
                 central_ids: Optional[List[str]] = None) -> Dict[str, Any]:
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
  return {'format': _CONFIG_FORMAT, 'config': dataclasses.asdict(config),
          CLIENTS_KEY: digest, 'seed_model_sha256': weights_digest}


# The fingerprint of the training clients: an unsalted hash of their IDs (or data), which
# anyone holding the corpus could test leave-one-out subsets against, so it is kept with the
# secrets, owner-only, and not in config.json.
CLIENTS_KEY, CLIENTS_FILE = 'clients_sha256', os.path.join('checkpoints', 'clients.json')


def write_clients_fingerprint(output_dir: str, digest: str) -> None:
  """Writes the clients' fingerprint `digest` to `CLIENTS_FILE`, owner-only."""
  private_files.make_private_directory(os.path.dirname(os.path.join(output_dir, CLIENTS_FILE)))
  with private_files.open_private(os.path.join(output_dir, CLIENTS_FILE)) as f:
    json.dump({CLIENTS_KEY: digest}, f)


def clients_differ(output_dir: str, digest: str, saved_config: Dict[str, Any]) -> bool:
  """Whether the run in `output_dir` (its `config.json` read as `saved_config`) trained on
  other clients than those of fingerprint `digest`.

  A run written before the fingerprint moved to `CLIENTS_FILE` has it in `config.json`: it is
  compared there and, if equal, moved (written to `CLIENTS_FILE`, removed from `config.json`).
  """
  path = os.path.join(output_dir, CLIENTS_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f).get(CLIENTS_KEY) != digest
  if CLIENTS_KEY not in saved_config:
    raise ValueError(f'{output_dir!r} holds a run without the fingerprint of its training '
                     f'clients ({CLIENTS_FILE}), so it cannot be checked for a resume. Use a new '
                     'output directory.')
  if saved_config[CLIENTS_KEY] != digest:
    return True
  write_clients_fingerprint(output_dir, digest)
  public = {k: v for k, v in saved_config.items() if k != CLIENTS_KEY}
  _write_config(output_dir, public)
  return False


def _write_config(output_dir: str, values: Dict[str, Any]) -> None:
  """Writes config.json (atomically: a crash leaves the old or the new one)."""
  path = os.path.join(output_dir, 'config.json')
  with open(path + '.partial', 'w') as f:
    json.dump(values, f, indent=2, sort_keys=True)
  os.replace(path + '.partial', path)


def _resume_relevant(grouped: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
  """The fields a resumed run must share, by flag name, from a saved grouped configuration."""
  fields = fields_lib.config_fields(config_lib.FederatedConfig)
  flat = {name: value for group in grouped.values() for name, value in group.items()}
  # A field added after the run was saved has its default there.
  return {name: flat.get(name, f.default) for name, f in fields.items()
          if f.metadata.get(fields_lib.FINGERPRINT, True)}


def _check_or_write_fingerprint(output_dir, fingerprint) -> None:
  """A resumed run must be the same run: refuse an output dir holding a different one."""
  path = os.path.join(output_dir, 'config.json')
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if saved.get('format') != _CONFIG_FORMAT:
      raise ValueError(f'{output_dir!r} holds a run written by an older fedasr-tff (its '
                       'config.json has no grouped configuration), which this version cannot '
                       'resume. Use a new output directory.')
    # Compared as JSON, as saved (tuples become lists).
    wanted = _resume_relevant(json.loads(json.dumps(fingerprint['config'])))
    have = _resume_relevant(saved['config'])
    changed = [f'--{name}' for name in wanted if have.get(name) != wanted[name]]
    if clients_differ(output_dir, fingerprint[CLIENTS_KEY], saved):
      changed.append('the training clients (corpus, split or speaker split)')
    if saved.get('seed_model_sha256') != fingerprint['seed_model_sha256']:
      changed.append('the seed model')
    if changed:
      raise ValueError(f'{output_dir!r} holds a run with a different configuration ('
                       f'{", ".join(changed)} differ). Use a new output directory, or the '
                       'same settings to resume.')
    return
  os.makedirs(output_dir, exist_ok=True)
  # The clients' fingerprint first: a config.json always has its fingerprint beside it.
  write_clients_fingerprint(output_dir, fingerprint[CLIENTS_KEY])
  _write_config(output_dir, {k: v for k, v in fingerprint.items() if k != CLIENTS_KEY})


def _initial_weights(model_fn, seed) -> tff.learning.models.ModelWeights:
  """Seeded random initialisation, done eagerly so it does not depend on TFF's tracing."""
  tf.keras.utils.set_random_seed(seed)
  return model_io.model_weights(model_fn().keras_model)


def update_norm(before, after) -> float:
  """||after − before||_2 over the trainable weights of two `ModelWeights` (the server update
  a round applied)."""
  return math.sqrt(sum(float(np.sum(np.square(np.asarray(b) - np.asarray(a))))
                       for a, b in zip(before.trainable, after.trainable, strict=True)))


def _disclosures(config: config_lib.FederatedConfig,
                 evaluated_clients: int = 0) -> privacy_ledger.Disclosures:
  return privacy_ledger.Disclosures(
      evaluated_clients=evaluated_clients if config.dp.adds_noise else 0,
      sampling=config.effective_sampling, sampling_seed_known=config.run.seed is not None,
      noise_seed_known=config.dp.noise_seed is not None,
      noise_placement=config.dp.noise_placement,
      client_statistics=client_statistic_columns(config), pseudo_clients=config.data.iid,
      adaptive_clipping=config.dp.adaptive_clipping,
      central_data=_central_data_description(config), weighting=_weighting_description(config))


def _central_data_description(config: config_lib.FederatedConfig) -> str:
  if not config.uses_central_data:
    return ''
  central = config.central
  source = central.central_corpus_dir or config.data.corpus_dir
  data_text = (f'split {central.central_split!r} ({central.central_speakers} speakers) of '
               f'{source!r}')
  if config.mixed.enabled:
    return (f'Mixed federated learning on {data_text}, --mixed={config.mixed.mixed}, '
            f'w_c = {config.mixed.central_weight:g}')
  uses = []
  if config.dga.rehearses:
    uses.append(f'server rehearsal (--rehearsal_steps={config.dga.rehearsal_steps})')
  if config.dga.rl:
    uses.append('the validation CER of DGA-RL')
  return f'{" and ".join(uses)} on {data_text}'


def _weighting_description(config: config_lib.FederatedConfig) -> str:
  weighting = config.dga.weighting()
  if weighting is None:
    return ''
  text = (f'--aggregation={config.dga.aggregation}: each client\'s delta weighs '
          f'exp(-{weighting.beta:g} (L - {weighting.loss_floor:g})) of its own training loss L '
          f'clipped to [{weighting.loss_floor:g}, {weighting.loss_clip:g}], a weight in '
          f'[{weighting.min_weight:.3g}, 1].')
  if config.dp.adds_noise:
    text += (' The weighted clipped deltas and the sum of the weights are both noised and '
             'accounted as one Gaussian mechanism at the z above '
             f'({100 * config.dga.dga_weight_budget:g}% of its budget on the weight sum); the '
             'update is their ratio with a public floor on the denominator (post-processing).')
  return text


@dataclasses.dataclass
class FederatedRun:
  """A built run, ready to train (`build_run`); every argument has been checked."""
  config: config_lib.FederatedConfig
  train_data: pipeline.SpeechClientData
  output_dir: str
  model_fn: Callable[[], tff.learning.models.VariableModel]
  process: tff.templates.IterativeProcess
  schedule: Callable[[int], float]
  noise: config_lib.NoiseLevel
  ledger: privacy_ledger.PrivacyLedger
  initial_state: Any
  central: Optional[central_batches.CentralBatches] = None
  rl: Optional[dga_rl.DGARL] = None
  eval_data: Optional[pipeline.SpeechClientData] = None
  evaluated_clients: int = 0   # Federated clients among the evaluation's speakers.

  def next(self, state, client_datasets, secret: int, round_num: int):
    """One round of the process; a mixed FL or rehearsing round also takes the server's
    batches, and a DGA-RL round is orchestrated by `rl`."""
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

  def program_state(self, state, secret: int):
    """What a checkpoint holds: the process state, the run secret and DGA-RL's learner."""
    saved = (state, cohorts.secret_to_words(secret))
    return saved if self.rl is None else saved + (self.rl.state(),)

  def restore(self, saved) -> Tuple[Any, int]:
    """(process state, secret) from a checkpoint, restoring DGA-RL's learner too."""
    if self.rl is not None:
      self.rl.set_state(saved[2])
    return saved[0], cohorts.secret_from_words(saved[1])

  def train(self, *, show_progress: bool = True, log=print) -> FederatedResult:
    """Runs (or resumes) the training; see the module docstring and `train`."""
    return _train(self, show_progress, log)


def distributed_refusal(config: config_lib.FederatedConfig) -> Optional[str]:
  """Why a run of `config` cannot use TFF's distributed runtime (`runtime.distributed`,
  `--workers`), or None. Each algorithm was run on two workers against the local worker
  (docs/distributed.md): FedAvg with DP (fixed or adaptive, per-layer or global clips, server or
  client noise), DGA softmax, rehearsal and DGA-RL ended bit-identical; mixed FL did not."""
  if config.mixed.enabled:
    return ('--mixed runs on one machine: under TFF\'s mergeable form its server-side central '
            'step runs, but the model moves off the local run\'s (by 0.023 in a weight of the '
            'tiny model after 2 rounds of --mixed=two_way).')
  return None


def build_run(config: config_lib.FederatedConfig,
              train_data: pipeline.SpeechClientData,
              vocabulary: text_lib.Vocabulary,
              output_dir: str,
              *,
              eval_data: Optional[pipeline.SpeechClientData] = None,
              initial_weights: Optional[tff.learning.models.ModelWeights] = None,
              central_data: Optional[pipeline.SpeechClientData] = None,
              validation_data: Optional[pipeline.SpeechClientData] = None
              ) -> FederatedRun:
  """Builds the run of `config` on `train_data`: every library builder checks its arguments
  here (a `ValueError` names the configuration field), before anything is trained or written
  except `config.json`. Arguments as in `train`."""
  client_ids = train_data.client_ids
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
  ledger = privacy_ledger.PrivacyLedger(
      noise_multiplier=noise.noise_multiplier, cohort_size=config.run.cohort_size,
      population=len(client_ids), declared_noise_multiplier=noise.declared_noise_multiplier,
      declared_cohort_size=config.declared_cohort_size,
      declared_population=config.declared_population(len(client_ids)),
      planned_rounds=config.run.rounds, delta=config.dp.delta,
      sampling=config.effective_sampling)
  model_fn = models.build_tff_model_fn(config.model.model_config, vocabulary.tokens)
  tensor_names, _ = model_io.tensor_names(model_fn().keras_model)
  schedule = config.server.schedule()
  weighting = config.dga.weighting()
  aggregator = config.dp.aggregator(
      noise.noise_multiplier, config.run.cohort_size, tensor_names, config.client_diagnostics,
      min_weight=None if weighting is None else weighting.min_weight,
      weight_budget=config.dga.dga_weight_budget)
  if config.mixed.enabled:
    process = config.mixed.process(
        config.client, model_fn, server_optimizer=config.server.optimizer(),
        server_lr_schedule=schedule, model_aggregator=aggregator,
        gradient_dissimilarity=config.mixed.gradient_dissimilarity,
        diagnostics=config.client_diagnostics)
  elif config.dga.enabled:
    process = config.dga.process(config.client, model_fn,
                                 server_optimizer=config.server.optimizer(),
                                 server_lr_schedule=schedule, model_aggregator=aggregator,
                                 diagnostics=config.client_diagnostics)
  else:
    # Client statistics are measured only where `_round_metrics` releases them, labelled.
    process = config.client.fed_avg_process(
        model_fn, server_optimizer=config.server.optimizer(), server_lr_schedule=schedule,
        model_aggregator=aggregator, diagnostics=config.client_diagnostics)
  state = process.initialize()
  ledger = dataclasses.replace(
      ledger, noise_multiplier=privacy_ledger.applied_noise_multiplier(state.aggregator))
  _check_or_write_fingerprint(output_dir, _fingerprint(
      config, client_ids, initial_weights,
      central_data.client_ids if central_data is not None else None))
  if initial_weights is None:
    initial_weights = _initial_weights(model_fn, config.run.seed_or_zero)
  state = process.set_model_weights(state, initial_weights)
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
  return FederatedRun(config, train_data, output_dir, model_fn, process, schedule, noise, ledger,
                      state, central, rl, eval_data, evaluated_clients)


def train(config: config_lib.FederatedConfig,
          train_data: pipeline.SpeechClientData,
          vocabulary: text_lib.Vocabulary,
          output_dir: str,
          *,
          eval_data: Optional[pipeline.SpeechClientData] = None,
          initial_weights: Optional[tff.learning.models.ModelWeights] = None,
          central_data: Optional[pipeline.SpeechClientData] = None,
          validation_data: Optional[pipeline.SpeechClientData] = None,
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
    show_progress: draw a progress bar on stderr.
    log: where the per-evaluation lines go (held back like the metrics).
  """
  run = build_run(config, train_data, vocabulary, output_dir, eval_data=eval_data,
                  initial_weights=initial_weights, central_data=central_data,
                  validation_data=validation_data)
  return run.train(show_progress=show_progress, log=log)


def _train(run: FederatedRun, show_progress, log) -> FederatedResult:
  config, process, ledger, output_dir = run.config, run.process, run.ledger, run.output_dir
  eval_data = run.eval_data
  client_ids = run.train_data.client_ids
  rounds = config.run.rounds
  adds_noise = config.dp.adds_noise
  max_batches = config.client.batches_per_round()
  # Made after the process: building it constructs models in graph mode, which invalidates
  # Keras models made eagerly before it.
  eval_model = run.model_fn()
  state = run.initial_state
  # The run secret: the user's seed (public, and the statement says so) or OS entropy, kept
  # only in the checkpoints.
  secret = cohorts.new_run_secret() if config.run.seed is None else config.run.seed
  # Every file in it owner-only, those of a run written before this was done too.
  checkpoint_dir = private_files.make_private_tree(private_files.make_private_directory(
      os.path.join(output_dir, 'checkpoints')))
  state_manager = tff.program.FileProgramStateManager(checkpoint_dir, keep_total=3,
                                                      keep_first=True)
  journal = release_journal.ReleaseJournal(os.path.join(checkpoint_dir, 'held_releases.json'))
  restored, start_round = release_journal.load_latest(
      state_manager, run.program_state(state, secret), checkpoint_dir)

  csv_manager = tff.program.CSVFileReleaseManager(os.path.join(output_dir, 'metrics.csv'))
  managers = [csv_manager,
              tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard'))]
  progress = progress_lib.ProgressBarReleaseManager(rounds, start_round,
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
    asyncio.run(state_manager.save(run.program_state(state, secret), round_num))
    # TFF writes 0644 files: owner-only before anything is released.
    saved = private_files.make_private_tree(
        os.path.join(checkpoint_dir, f'program_state_{round_num}'))
    private_files.fsync_tree(saved)
    release_held(journal.held)
    journal.clear()

  if restored is not None:
    state, secret = run.restore(restored)
    progress.write(f'Resuming from the checkpoint of round {start_round} in {output_dir}.', log)
    # A run killed between a checkpoint and its release: release those (identical) values.
    release_held(journal.pending(start_round))
    journal.clear()

  if adds_noise and config.client_diagnostics:
    progress.write('Releasing client statistics OUTSIDE the DP guarantee '
                   '(--release_client_diagnostics): ' + '; '.join(client_statistic_columns(config)),
                   log)
  if adds_noise and run.evaluated_clients:
    progress.write('Releasing client statistics OUTSIDE the DP guarantee '
                   '(--release_client_evaluation): '
                   + '; '.join(_evaluation_column(run.evaluated_clients)), log)

  evaluations = {}  # round -> EvaluationResult, so the final one is not computed twice

  def evaluate_and_account(round_num, weights) -> Tuple[Dict[str, Any], str]:
    values = {}
    if eval_data is not None:
      result = evaluation.evaluate(eval_model, eval_data, weights)
      evaluations[round_num] = result
      values['eval'] = result.metrics()
    if adds_noise:
      values['privacy'] = ledger.metrics(round_num)
    parts = [f'round {round_num}/{rounds}']
    if 'eval' in values:
      parts.append(f'WER {100 * values["eval"]["wer"]:.1f}% CER {100 * values["eval"]["cer"]:.1f}%')
    parts.append(ledger.summary_line(round_num) if adds_noise else 'no DP noise')
    return values, ' | '.join(parts)

  weights = process.get_model_weights(state)
  try:
    if restored is None:
      values, line = evaluate_and_account(0, weights)
      journal.hold(0, values, (line,))
      checkpoint_and_release(0)
    for round_num in range(start_round + 1, rounds + 1):
      started = time.perf_counter()
      cohort = cohorts.sample_cohort(client_ids, config.run.cohort_size, secret, round_num,
                                     config.effective_sampling)
      # Only the batches the round uses, drawn from the client's seed (`pipeline`).
      datasets = [
          run.train_data.create_tf_dataset_for_client(
              c, seed=cohorts.client_seed(secret, round_num, c), max_batches=max_batches)
          for c in cohort
      ]
      output = run.next(state, datasets, secret, round_num)
      state = output.state
      ledger.check_round(state.aggregator)
      new_weights = process.get_model_weights(state)
      values = _round_metrics(config, output, run.schedule(round_num - 1),
                              update_norm(weights, new_weights), time.perf_counter() - started)
      weights = new_weights
      lines = ()
      if round_num % config.run.eval_every == 0 or round_num == rounds:
        eval_values, line = evaluate_and_account(round_num, weights)
        values.update(eval_values)
        lines = (line,)
      journal.hold(round_num, values, lines)
      progress.advance(round_num)
      if round_num % config.run.checkpoint_every == 0 or round_num == rounds:
        checkpoint_and_release(round_num)
  finally:
    progress.close()

  model_io.save_weights(os.path.join(output_dir, 'model.npz'), eval_model.keras_model, weights)
  final_eval = None
  if eval_data is not None:
    final_eval = evaluations.get(rounds) or evaluation.evaluate(eval_model, eval_data,
                                                                       weights)
    evaluation.write_per_speaker_csv(final_eval, os.path.join(output_dir,
                                                              'eval_per_speaker.csv'))
  disclosures = _disclosures(config, run.evaluated_clients)
  summary = {
      'rounds': rounds,
      'eval': final_eval.metrics() if final_eval else None,
      'privacy': ledger.metrics(rounds) if adds_noise else None,
      'sigma_dp': run.noise.sigma_dp,
      'noise_multiplier': ledger.noise_multiplier,
      'sampling': config.effective_sampling,
      'client_statistics_released': list(disclosures.client_statistics) + list(
          _evaluation_column(disclosures.evaluated_clients)),
      'privacy_statement': ledger.statement(rounds, disclosures),
  }
  with open(os.path.join(output_dir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  return FederatedResult(weights, rounds, final_eval, ledger, disclosures)
