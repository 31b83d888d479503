"""The configuration of a speech run, grouped by what each part configures.

A federated run is a `FederatedConfig` of sub-configurations: data and model (`data_config`,
which needs no TFF), client work, server optimisation, DP (`program.dp_config`), the run, and the
server's data and algorithms (mixed FL, DGA). Every field is the command-line flag of the same
name (`program.fields`), and it reaches a library builder's keyword arguments in exactly one
place, a method of its sub-configuration, which re-raises the builder's `ValueError` naming the
field. The configuration checks only what no builder owns: choices between builders and
combinations of fields. Defaults are the paper's settings (Pelikan et al., "Enabling
Differentially Private Federated Learning for Speech Recognition: Benchmarks, Adaptive
Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098), which flag help cites; the
binaries' flag defaults are a preset (`speech.presets`).
"""

import dataclasses
from typing import Any
from typing import Dict
from typing import Optional
from typing import Sequence
from typing import Tuple

from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import validation
from fedasr_tff.aggregators import bounded_weight_dp
from fedasr_tff.algorithms import dga
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.program import cohorts
from fedasr_tff.program import dp_config
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program.fields import check_choice
from fedasr_tff.program.fields import field
from fedasr_tff.program.fields import naming_fields
from fedasr_tff.speech import corpus_clients
from fedasr_tff.speech import data
from fedasr_tff.speech import data_config
from fedasr_tff.speech import models


@dataclasses.dataclass(frozen=True)
class ClientConfig:
  """The work of a client in a round: local SGD with local gradient clipping.

  Each field is the flag of the same name, documented by its help.
  """
  local_steps: Optional[int] = field(
      None, 'Local SGD steps per client, cycling its batches (default 10 unless '
      '--local_epochs).')
  local_epochs: Optional[int] = field(None, 'Local epochs per client instead of '
                                       '--local_steps.')
  client_lr: float = field(
      0.2, 'Local SGD learning rate (Pelikan et al. 2025, Figs. 3-4 captions: 0.4 from scratch, '
      '0.2 from a seed model).')
  local_clip: float = field(
      1.0, 'Global L2 clip of every local gradient (Pelikan et al. 2025, Sec. 4 "Federated '
      'Training": 1); 0 disables.')
  fedprox_mu: float = field(0.0, 'FedProx mu of (mu/2)||w - w_global||^2.')

  DEFAULT_LOCAL_STEPS = 10

  def local_work(self) -> Tuple[Optional[int], Optional[int]]:
    """(local_steps, local_epochs): as given, or DEFAULT_LOCAL_STEPS steps when neither is."""
    if self.local_steps is None and self.local_epochs is None:
      return self.DEFAULT_LOCAL_STEPS, None
    return self.local_steps, self.local_epochs

  def max_delta_norm(self) -> float:
    """The largest L2 norm local training can give a client's delta: client_lr x local_clip x
    local steps, each local SGD step's gradient being clipped at `local_clip` (FedProx's term is
    inside the clip). A public constant of public fields, so a clip C set to it leaves the DP
    sensitivity argument unchanged (the delta is still clipped to C).

    Returns:
      The bound.

    Raises:
      ValueError: naming the fields, with `local_epochs` (no fixed number of steps), without
        a local clip (no bound), or for a `client_lr` that is not positive.
    """
    local_steps, local_epochs = self.local_work()
    if local_epochs is not None:
      raise ValueError('`local_epochs` gives no fixed number of local steps to derive the clip '
                       'from (client_lr x local_clip x local_steps): give `clip`.')
    if not self.local_clip:
      raise ValueError('Without `local_clip` local training does not bound the delta to derive '
                       'the clip from (client_lr x local_clip x local_steps): give `clip`.')
    validation.check_positive('client_lr', self.client_lr)
    return self.client_lr * self.local_clip * local_steps

  def batches_per_round(self) -> Optional[int]:
    """The batches a client uses in a round: its local steps (the data is cycled when it has
    fewer), or None (all of them) with local epochs."""
    return self.local_work()[0]

  def fed_avg_process(self, model_fn, **server_kwargs):
    """`algorithms.build_fed_avg_process` with this client work.

    Args:
      model_fn: builds the TFF model.
      **server_kwargs: the process's `server_optimizer`, `server_lr_schedule`,
        `model_aggregator` and `diagnostics`.

    Returns:
      The federated averaging `tff.learning.templates.LearningProcess`.

    Raises:
      ValueError: from the builder, naming the fields (`client_lr`, `local_clip`).
    """
    local_steps, local_epochs = self.local_work()
    with naming_fields({'client_learning_rate': 'client_lr', 'local_clip_norm': 'local_clip'}):
      return algorithms.build_fed_avg_process(
          model_fn, client_learning_rate=self.client_lr, local_steps=local_steps,
          local_epochs=local_epochs, local_clip_norm=self.local_clip or None,
          fedprox_mu=self.fedprox_mu, **server_kwargs)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
  """Server optimisation: the optimizer and its learning-rate schedule.

  Each field is the flag of the same name, documented by its help.
  """
  server_optimizer: str = field('lamb', 'Server optimizer.', optimizers.OPTIMIZERS)
  server_lr: float = field(0.002, 'Server learning rate.')
  server_lr_schedule: str = field(
      'constant', 'Server LR schedule: exponential is lr * rate^((t - start) / transition) '
      'after start (Pelikan et al. 2025, Figs. 3-4 captions); step multiplies by rate every '
      'transition rounds after start.', optimizers.schedules.NAMES)
  server_lr_decay_rate: float = field(0.6, 'Decay rate rho.')
  server_lr_transition_rounds: int = field(750, 'Decay period tau, in rounds.')
  server_lr_start_round: int = field(750, 'Round t0 the decay starts at.')

  def optimizer(self):
    """The server's `tff.learning.optimizers.Optimizer` (`optimizers.build`)."""
    with naming_fields({'learning_rate': 'server_lr'}):
      return optimizers.build(self.server_optimizer, self.server_lr)

  def schedule(self) -> optimizers.schedules.Schedule:
    """The server learning rate by round, from 0 (`optimizers.schedules.by_name`)."""
    with naming_fields({'name': 'server_lr_schedule', 'learning_rate': 'server_lr',
                        'decay_rate': 'server_lr_decay_rate',
                         'period': 'server_lr_transition_rounds',
                         'start_round': 'server_lr_start_round'}):
      return optimizers.schedules.by_name(
          self.server_lr_schedule, self.server_lr, self.server_lr_decay_rate,
          self.server_lr_transition_rounds, self.server_lr_start_round)


@dataclasses.dataclass(frozen=True)
class CentralDataConfig:
  """Data the server holds: mixed FL's central data and DGA's rehearsal data.

  Read like the training data (any `layout`), by default from the same corpus; it must not
  share a speaker with the clients (`speech.central_batches`). Each field is the flag of the
  same name, documented by its help.
  """
  central_corpus_dir: Optional[str] = field(
      None, "Corpus of the server's central data (default: --corpus_dir).", fingerprint=False)
  central_layout: Optional[str] = field(None, 'Layout of --central_corpus_dir (default: '
                                         '--layout).', corpus_clients.LAYOUTS)
  central_split: Optional[str] = field(
      None, "Split of the server's data: required with --mixed, rehearsal and dga_rl (for "
      'example the training split with --central_speakers=seed: the server keeps training on '
      'its seed speakers).')
  central_speakers: str = field(
      'all', 'Speakers of --central_split the server trains on (seed / federated part of the '
      "seeded speaker split, or all); never the federated clients' own.",
      corpus_clients.SPEAKER_PARTS)
  central_batch_seconds: Optional[float] = field(
      None, 'Audio per central batch, in seconds (default: --max_batch_seconds).')

  def __post_init__(self):
    if self.central_batch_seconds is not None:
      validation.check_positive('central_batch_seconds', self.central_batch_seconds)

  @property
  def given(self) -> bool:
    """Whether the server's data is configured (`central_split`)."""
    return bool(self.central_split)

  def load(self, data_config: data_config.DataConfig, vocabulary: data.Vocabulary, *,
           training: bool = True) -> data.SpeechClientData:
    """The server's data (SpecAugment as the clients' training data, unless not `training`).

    Args:
      data_config: the run's data configuration, for the defaults of the corpus, layout and
        batch length, the speaker split, SpecAugment and the feature cache.
      vocabulary: the token set of the transcripts.
      training: the server trains on it: SpecAugment if `data_config.spec_augment` (not
        for DGA-RL's validation data).

    Returns:
      The server's speakers as clients.

    Raises:
      ValueError: from the corpus reader, naming this configuration's fields.
    """
    with naming_fields({'corpus_dir': 'central_corpus_dir', 'layout': 'central_layout',
                        'speakers': 'central_speakers',
                        'max_batch_seconds': 'central_batch_seconds'}):
      return corpus_clients.load_client_data(
          self.central_corpus_dir or data_config.corpus_dir,
          self.central_layout or data_config.layout, self.central_split, vocabulary,
          speakers=self.central_speakers, seed_fraction=data_config.seed_fraction,
          split_seed=data_config.split_seed,
          spec_augment=training and data_config.spec_augment,
          max_batch_seconds=self.central_batch_seconds or data_config.max_batch_seconds,
          feature_cache_dir=data_config.feature_cache(),
          feature_normalization=data_config.feature_normalization)


MIXED_NONE = 'none'
MIXED_ALGORITHMS = (MIXED_NONE,) + mixed_fl.ALGORITHMS


@dataclasses.dataclass(frozen=True)
class MixedConfig:
  """Mixed federated learning: the server trains on its own data inside every round.

  Augenstein et al., "Mixed Federated Learning: Joint Decentralized and Centralized Learning",
  arXiv:2205.13655 (`algorithms.mixed_fl`). The central data is `CentralDataConfig`'s. Each
  field is the flag of the same name, documented by its help.
  """
  mixed: str = field(
      MIXED_NONE, 'Mixed FL algorithm (Augenstein et al. 2022, Algorithm 1): parallel training, '
      'one_way or two_way gradient transfer; none: plain federated training.', MIXED_ALGORITHMS)
  central_weight: float = field(
      0.5, 'w_c of the mixed loss w_f*f_fed + w_c*f_central, w_f = 1 - w_c (clients train on '
      'w_f*loss, the server on w_c*loss).')
  central_steps: Optional[int] = field(
      None, "Central batches per round (default: the clients' local steps, the paper's "
      'choice): parallel and two_way take one central step per batch; one_way averages its '
      "one central gradient over them (the paper's K times larger central batch).")
  central_optimizer: str = field('sgd', 'CentralOpt of parallel and two_way.',
                                 optimizers.OPTIMIZERS)
  central_lr: Optional[float] = field(
      None, "CentralOpt learning rate (default: --client_lr, the paper's eta_c = eta * eta_s "
      'at eta_s = 1).')
  merge_optimizer: str = field('sgd', 'MergeOpt of parallel and two_way, applied to the sum of '
                               'the central and federated deltas.', optimizers.OPTIMIZERS)
  merge_lr: float = field(1.0, 'MergeOpt learning rate (the paper\'s eta_m = 1).')
  gradient_dissimilarity: bool = field(
      False, 'Measure G~^2 and B~^2 (Augenstein et al. 2022, eq. 7) every round: one extra '
      'gradient per client, an un-noised client statistic (released under client/; with DP '
      'noise only with --release_client_diagnostics).')

  def __post_init__(self):
    check_choice('mixed', self.mixed, MIXED_ALGORITHMS)
    if self.mixed == MIXED_NONE:
      given = [f'`{f.name}`' for f in dataclasses.fields(self)
               if f.name not in ('mixed',) and getattr(self, f.name) != f.default]
      if given:
        raise ValueError(f'{", ".join(given)} configure mixed FL: give `mixed` too.')
      return
    if self.mixed == mixed_fl.ONE_WAY:
      changed = [f'`{name}`' for name in ('central_optimizer', 'central_lr', 'merge_optimizer',
                                          'merge_lr')
                 if getattr(self, name) != MixedConfig.__dataclass_fields__[name].default]
      if changed:
        raise ValueError(f'`mixed`=one_way has no central or merge optimizer: drop '
                         f'{", ".join(changed)}.')

  @property
  def enabled(self) -> bool:
    """Whether the run is mixed FL."""
    return self.mixed != MIXED_NONE

  def central_batch_count(self, client: 'ClientConfig') -> int:
    """Central batches a round: `central_steps`, or the clients' local steps.

    Args:
      client: the clients' work.

    Returns:
      The number of central batches a round.

    Raises:
      ValueError: if neither is given (the clients train for `local_epochs`).
    """
    if self.central_steps is not None:
      return self.central_steps
    local_steps = client.batches_per_round()
    if local_steps is None:
      raise ValueError('Give `central_steps` when clients train for `local_epochs`.')
    return local_steps

  def process(self, client: 'ClientConfig', model_fn, *, server_optimizer, server_lr_schedule,
              model_aggregator, gradient_dissimilarity: bool, diagnostics: bool = False):
    """`algorithms.build_mixed_fl_process` of this configuration and `client`'s work.

    Args:
      client: the clients' work.
      model_fn: builds the TFF model.
      server_optimizer: the server optimizer (`ServerConfig.optimizer`).
      server_lr_schedule: its learning rate by round (`ServerConfig.schedule`).
      model_aggregator: the aggregation factory of the client deltas (`DPConfig.aggregator`).
      gradient_dissimilarity: measure G~^2 and B~^2, an un-noised client statistic (needs
        `diagnostics`).
      diagnostics: measure the clients' un-noised statistics.

    Returns:
      The mixed FL process (`central_work.ServerDataProcess`).

    Raises:
      ValueError: from the builders, naming the fields.
    """
    local_steps, local_epochs = client.local_work()
    central = {}
    if self.mixed != mixed_fl.ONE_WAY:
      with naming_fields({'learning_rate': 'central_lr'}):
        central_optimizer = optimizers.build(self.central_optimizer,
                                             self.central_lr or client.client_lr)
      with naming_fields({'learning_rate': 'merge_lr'}):
        merge_optimizer = optimizers.build(self.merge_optimizer, self.merge_lr)
      central = dict(central_optimizer=central_optimizer, merge_optimizer=merge_optimizer,
                     central_steps=self.central_batch_count(client))
    with naming_fields({'client_learning_rate': 'client_lr', 'local_clip_norm': 'local_clip',
                        'algorithm': 'mixed'}):
      return algorithms.build_mixed_fl_process(
          model_fn, algorithm=self.mixed, central_weight=self.central_weight,
          client_learning_rate=client.client_lr, local_steps=local_steps,
          local_epochs=local_epochs, local_clip_norm=client.local_clip or None,
          fedprox_mu=client.fedprox_mu, server_optimizer=server_optimizer,
          server_lr_schedule=server_lr_schedule, model_aggregator=model_aggregator,
          gradient_dissimilarity=gradient_dissimilarity, diagnostics=diagnostics, **central)


AGGREGATIONS = ('uniform', 'dga_softmax', 'dga_rl')


@dataclasses.dataclass(frozen=True)
class DGAConfig:
  """Dynamic gradient aggregation and server rehearsal.

  Dimitriadis et al., "Federated Transfer Learning with Dynamic Gradient Aggregation",
  arXiv:2008.02452 (`algorithms.dga`, `algorithms.dga_rl`). Rehearsal and DGA-RL's validation
  use the server's data (`CentralDataConfig`). Each field is the flag of the same name,
  documented by its help.
  """
  aggregation: str = field(
      'uniform', 'Weights of the client deltas: uniform; dga_softmax, softmax(-beta * loss) of '
      "each client's training loss (Dimitriadis et al. 2020, eq. 6; with DP noise through "
      'bounded weights and a noised weight sum); dga_rl, learned by a small network from '
      'validation rewards (ibid. Algorithm 2; not with DP noise).', AGGREGATIONS)
  dga_beta: float = field(1.0, 'beta of the DGA softmax (an inverse temperature).')
  dga_loss_clip: Optional[float] = field(
      None, 'Upper end L_max of the public loss range of the DGA weights (required with dga_*):'
      ' losses are clipped to [--dga_loss_floor, L_max], weights lie in [exp(-beta (L_max - '
      'floor)), 1]. The CTC loss is per utterance: set it a little above the clients\' typical '
      'training loss.')
  dga_loss_floor: float = field(
      0.0, 'Lower end of the public loss range (weight 1 at or below). With DP noise, set it '
      'near the loss of a well-fitted client (for example the model\'s loss on the server\'s '
      'data): the noise is sized for weight 1, so weights far below 1 drown in it.')
  dga_weight_budget: float = field(
      bounded_weight_dp.DEFAULT_WEIGHT_BUDGET, 'With DP noise and dga_softmax: the fraction '
      'of the round\'s privacy budget (in 1/z^2) spent on the noised sum of the weights.')
  dga_rl_theta: float = field(0.001, 'theta of the DGA-RL reward: CER differences within it '
                              'count as equal.')
  dga_rl_exploration: float = field(0.1, 'Initial exploration std of the DGA-RL policy.')
  rehearsal_steps: int = field(
      0, 'Server rehearsal SGD steps after every server step, on the server\'s data '
      '(--central_split; Dimitriadis et al. 2020, eq. 5); 0 disables.')
  rehearsal_lr: Optional[float] = field(
      None, 'Learning rate of the rehearsal SGD (default: --client_lr); 0 disables.')

  def __post_init__(self):
    check_choice('aggregation', self.aggregation, AGGREGATIONS)
    validation.check_non_negative_integer('rehearsal_steps', self.rehearsal_steps)
    if self.rehearsal_lr is not None:
      validation.check_non_negative('rehearsal_lr', self.rehearsal_lr)
    if self.aggregation == 'uniform':
      given = [f'`{f.name}`' for f in dataclasses.fields(self)
               if f.name.startswith('dga_') and getattr(self, f.name) != f.default]
      if given:
        raise ValueError(f'{", ".join(given)} configure DGA weights: give `aggregation`.')
    else:
      self.weighting()

  @property
  def weighted(self) -> bool:
    """Whether the client deltas are weighted (`aggregation` is not uniform)."""
    return self.aggregation != 'uniform'

  @property
  def rl(self) -> bool:
    """Whether the weights are DGA-RL's."""
    return self.aggregation == 'dga_rl'

  @property
  def rehearses(self) -> bool:
    """Whether the server rehearses (steps > 0 at a learning rate that is not 0)."""
    return self.rehearsal_steps > 0 and self.rehearsal_lr != 0

  @property
  def enabled(self) -> bool:
    """Whether the run is a DGA process rather than FedAvg."""
    return self.weighted or self.rehearses

  def weighting(self) -> Optional[dga.SoftmaxWeighting]:
    """The softmax weighting (also DGA-RL's reference weights), or None for uniform."""
    if not self.weighted:
      return None
    if self.dga_loss_clip is None:
      raise ValueError(f'`aggregation`={self.aggregation} needs the public loss range of its '
                       'weights: give `dga_loss_clip`.')
    with naming_fields({'beta': 'dga_beta', 'loss_clip': 'dga_loss_clip',
                        'loss_floor': 'dga_loss_floor'}):
      return dga.SoftmaxWeighting(self.dga_beta, self.dga_loss_clip, self.dga_loss_floor)

  def process(self, client: 'ClientConfig', model_fn, *, server_optimizer, server_lr_schedule,
              model_aggregator, with_client_round: bool = False, diagnostics: bool = False):
    """`algorithms.build_dga_process` of this configuration and `client`'s work.

    Args:
      client: the clients' work; its `client_lr` is also the rehearsal's default rate.
      model_fn: builds the TFF model.
      server_optimizer: the server optimizer (`ServerConfig.optimizer`).
      server_lr_schedule: its learning rate by round (`ServerConfig.schedule`).
      model_aggregator: the aggregation factory of the client deltas (`DPConfig.aggregator`).
      with_client_round: build the `client_round` stage even without DGA-RL (DGA-RL always
        has it).
      diagnostics: measure the clients' un-noised statistics.

    Returns:
      The `algorithms.dga.DGAProcess`.

    Raises:
      ValueError: from the builder or the weighting, naming the fields.
    """
    local_steps, local_epochs = client.local_work()
    rehearsal = {}
    if self.rehearses:
      rehearsal = dict(rehearsal_steps=self.rehearsal_steps,
                       rehearsal_learning_rate=self.rehearsal_lr or client.client_lr)
    with naming_fields({'client_learning_rate': 'client_lr', 'local_clip_norm': 'local_clip',
                        'rehearsal_learning_rate': 'rehearsal_lr'}):
      return algorithms.build_dga_process(
          model_fn, weighting=self.weighting(), client_learning_rate=client.client_lr,
          local_steps=local_steps, local_epochs=local_epochs,
          local_clip_norm=client.local_clip or None, fedprox_mu=client.fedprox_mu,
          server_optimizer=server_optimizer, server_lr_schedule=server_lr_schedule,
          model_aggregator=model_aggregator, with_client_round=with_client_round or self.rl,
          diagnostics=diagnostics, **rehearsal)


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Rounds, how cohorts are drawn, seeds, evaluation and checkpoints.

  Each field is the flag of the same name, documented by its help.
  """
  rounds: int = field(100, 'Rounds (central steps), T.')
  cohort_size: int = field(8, 'Clients per round, S.')
  sampling: Optional[str] = field(
      None, 'How cohorts are drawn: poisson (every client joins a round with probability '
      '--cohort_size / K, the mechanism the accountant analyses) or fixed (exactly '
      '--cohort_size clients without replacement, the paper\'s code). Default: poisson with '
      'noise, fixed without.', cohorts.SAMPLINGS)
  seed: Optional[int] = field(
      None, 'Random seed of the run: its initialisation, IID control and, for federated '
      'training, the cohorts and every client\'s random draws. Default: 0 for initialisation '
      'and IID control, and a secret from OS entropy (kept only in the checkpoints) for cohorts '
      'and client draws. A fixed seed makes a DP run reproducible but its cohorts public, '
      'which voids the amplification by sampling its epsilon assumes (the privacy statement '
      'says so).')
  eval_every: int = field(10, 'Rounds between evaluations.')
  checkpoint_every: int = field(10, 'Rounds between checkpoints.')

  def __post_init__(self):
    # The round loop owns these: no library builder sees them.
    for name in ('rounds', 'cohort_size', 'eval_every', 'checkpoint_every'):
      validation.check_positive_integer(name, getattr(self, name))
    if self.seed is not None:
      validation.check_non_negative_integer('seed', self.seed)

  @property
  def seed_or_zero(self) -> int:
    """`seed` where a number is needed for public randomness (initialisation, IID control)."""
    return self.seed or 0


@dataclasses.dataclass(frozen=True)
class FederatedConfig:
  """Everything that determines a federated run's result (saved in `config.json`).

  Attributes:
    data: the corpus, speakers and batches.
    model: the transformer and its seed model.
    client: the clients' local work.
    server: the server optimizer and schedule.
    dp: clipping, noise and accounting.
    run: rounds, cohorts, seeds, evaluation and checkpoints.
    central: the server's own data (mixed FL, DGA rehearsal and DGA-RL validation).
    mixed: mixed federated learning.
    dga: dynamic gradient aggregation and rehearsal.

  Raises:
    ValueError: on construction, for a combination of fields that no builder checks (the
      server-side algorithms and their data; sampling, DGA, client noise and client statistics
      against DP noise).
  """
  data: data_config.DataConfig = dataclasses.field(default_factory=data_config.DataConfig)
  model: data_config.ModelConfig = dataclasses.field(default_factory=data_config.ModelConfig)
  client: ClientConfig = dataclasses.field(default_factory=ClientConfig)
  server: ServerConfig = dataclasses.field(default_factory=ServerConfig)
  dp: dp_config.DPConfig = dataclasses.field(default_factory=dp_config.DPConfig)
  run: RunConfig = dataclasses.field(default_factory=RunConfig)
  central: CentralDataConfig = dataclasses.field(default_factory=CentralDataConfig)
  mixed: MixedConfig = dataclasses.field(default_factory=MixedConfig)
  dga: DGAConfig = dataclasses.field(default_factory=DGAConfig)

  def __post_init__(self):
    self._check_server_data()
    self._check_dga()
    if self.mixed.gradient_dissimilarity and not self.client_diagnostics:
      raise ValueError('`gradient_dissimilarity` is an un-noised client statistic: in a run with '
                       'DP noise it needs `release_client_diagnostics`.')
    if self.dp.noise_placement == 'client' and self.dp.adds_noise:
      conflicts = [name for name, bad in (
          ('--sampling=poisson', self.effective_sampling != 'fixed'),
          ('--adaptive_clipping', self.dp.adaptive_clipping),
          ('--release_client_diagnostics', self.dp.release_client_diagnostics)) if bad]
      if conflicts:
        raise ValueError(
            f'--noise_placement=client cannot be combined with {", ".join(conflicts)}: client '
            'noise is calibrated for exactly S clients (give --sampling=fixed), adaptive clips '
            'and client statistics would leave the clients un-noised.')

  @property
  def uses_central_data(self) -> bool:
    """Whether the server reads data of its own (`central`)."""
    return self.mixed.enabled or self.dga.rehearses or self.dga.rl

  def _check_server_data(self) -> None:
    if self.mixed.enabled and self.dga.enabled:
      raise ValueError('`mixed` cannot be combined with DGA (`aggregation`, '
                       '`rehearsal_steps`): choose one server-side algorithm.')
    uses = [name for name, used in (('`mixed`', self.mixed.enabled),
                                    ('`rehearsal_steps`', self.dga.rehearses),
                                    ('`aggregation`=dga_rl', self.dga.rl)) if used]
    if uses and not self.central.given:
      raise ValueError(f'{", ".join(uses)} need(s) the server\'s data: give `central_split` '
                       '(with `central_corpus_dir` for another corpus than `corpus_dir`).')
    if not uses:
      given = [f'`{f.name}`' for f in dataclasses.fields(self.central)
               if getattr(self.central, f.name) != f.default]
      if given:
        raise ValueError(f'{", ".join(given)} configure the server\'s data, which only '
                         '`mixed`, `rehearsal_steps` and `aggregation`=dga_rl use.')

  def _check_dga(self) -> None:
    dga_config = self.dga
    if self.effective_sampling == cohorts.WITH_REPLACEMENT and self.dp.adds_noise:
      raise ValueError('`sampling`=with_replacement cannot be combined with DP noise '
                       '(`sigma_dp`, `noise_multiplier` or `target_epsilon`): a user drawn m '
                       'times contributes m times the clip, and no accountant covers it.')
    if dga_config.rl:
      if self.dp.adds_noise:
        raise ValueError('`aggregation`=dga_rl cannot be combined with DP noise: its features '
                         'are un-noised client statistics and it picks models by validation '
                         'error. Use `aggregation`=dga_softmax for DP runs.')
      if self.effective_sampling == cohorts.POISSON:
        raise ValueError('`aggregation`=dga_rl needs the same number of clients every round '
                         '(its network has fixed slots): give `sampling`=fixed or '
                         'with_replacement.')
    if dga_config.weighted and self.dp.adds_noise and self.dp.noise_placement == 'client':
      raise ValueError('DGA weights (`aggregation`) need `noise_placement`=server: client noise '
                       'would be scaled by the weight.')

  @property
  def declared_cohort_size(self) -> int:
    """S' of the declared population: `population_cohort_size`, or the run's cohort."""
    return self.dp.population_cohort_size or self.run.cohort_size

  @property
  def effective_sampling(self) -> str:
    """`sampling`, or by default "poisson" for runs with noise and "fixed" without."""
    return self.run.sampling or ('poisson' if self.dp.adds_noise else 'fixed')

  @property
  def client_diagnostics(self) -> bool:
    """Whether un-noised client statistics are computed and released."""
    return not self.dp.adds_noise or self.dp.release_client_diagnostics

  def declared_population(self, num_clients: int) -> int:
    """K' the privacy is accounted for.

    Args:
      num_clients: the run's training clients K.

    Returns:
      `population`, or `num_clients` when it is not given.
    """
    return self.dp.population or num_clients

  def noise_level(self, num_clients: int) -> dp_config.NoiseLevel:
    """σ_DP and the noise multipliers of this run on `num_clients` clients.

    Args:
      num_clients: the run's training clients K.

    Returns:
      The run's `NoiseLevel` (`dp_config.DPConfig.noise_level`).
    """
    return self.dp.noise_level(self.run.cohort_size, self.declared_cohort_size,
                               self.declared_population(num_clients), self.run.rounds)

  def ledger(self, noise: dp_config.NoiseLevel,
             num_clients: int) -> privacy_ledger.PrivacyLedger:
    """The run's privacy ledger at `noise` on `num_clients` clients (`DPConfig.ledger`).

    Args:
      noise: the run's `noise_level`.
      num_clients: the run's training clients K.

    Returns:
      The `PrivacyLedger`, its z the one resolved from the noise setting.

    Raises:
      ValueError: from `PrivacyLedger`'s checks, for example a cohort larger than its
        population, or K' < K.
    """
    return self.dp.ledger(noise, cohort_size=self.run.cohort_size, population=num_clients,
                          declared_cohort_size=self.declared_cohort_size,
                          declared_population=self.declared_population(num_clients),
                          rounds=self.run.rounds, sampling=self.effective_sampling)

  def process(self, model_fn, noise_multiplier: float, tensor_names: Sequence[str]):
    """The run's learning process: federated averaging, mixed FL or DGA, with the DP
    aggregator of `dp` at the run's z.

    Args:
      model_fn: builds the TFF model.
      noise_multiplier: the run's z (`noise_level`).
      tensor_names: the model's trainable tensor names (the clipping groups).

    Returns:
      A `tff.learning.templates.LearningProcess`.
    """
    weighting = self.dga.weighting()
    # Read by `process_recipe` too: a field used here must be in the recipe.
    aggregator = self.dp.aggregator(
        noise_multiplier, self.run.cohort_size, tensor_names, self.client_diagnostics,
        weighted_leaf=models.is_mlp_tensor,
        min_weight=None if weighting is None else weighting.min_weight,
        weight_budget=self.dga.dga_weight_budget)
    # Client statistics are measured only where the runner releases them, labelled.
    server = dict(server_optimizer=self.server.optimizer(),
                  server_lr_schedule=self.server.schedule(), model_aggregator=aggregator,
                  diagnostics=self.client_diagnostics)
    if self.mixed.enabled:
      return self.mixed.process(self.client, model_fn,
                                gradient_dissimilarity=self.mixed.gradient_dissimilarity,
                                **server)
    if self.dga.enabled:
      return self.dga.process(self.client, model_fn, **server)
    return self.client.fed_avg_process(model_fn, **server)

  def process_recipe(self, vocabulary_tokens: Sequence[str], noise_multiplier: float,
                     tensor_names: Sequence[str]) -> Dict[str, Any]:
    """Everything `process` and its `model_fn` read, as JSON-able values: the key of the process
    cache (`fedasr_tff.runtime.process_cache`). Every section `process` reads, whole (so a field
    added to one is in the key), and the model's configuration and vocabulary
    (`models.build_tff_model_fn`); not the data, central data or seed model, which reach the run
    through its datasets and `set_model_weights`.

    Args:
      vocabulary_tokens: the model's output tokens.
      noise_multiplier: as in `process`.
      tensor_names: as in `process`.

    Returns:
      A dict of JSON-able values.
    """
    return dict(
        {name: dataclasses.asdict(getattr(self, name))
         for name in ('client', 'server', 'dp', 'run', 'mixed', 'dga')},
        model_config=self.model.model_config, vocabulary=list(vocabulary_tokens),
        noise_multiplier=float(noise_multiplier), tensor_names=list(tensor_names))
