r"""DP federated training of the CTC transformer, with speakers as clients (spec §1-§3, §6).

  python -m experiments.train_federated --corpus_dir=/tmp/corpus/librispeech --split=train \
      --eval_split=dev --output_dir=/tmp/run --model_config=tiny --seed_model=/tmp/seed/model.npz \
      --cohort_size=8 --rounds=100 --local_steps=10 --client_lr=0.2 --server_optimizer=lamb \
      --server_lr=0.002 --clipping=dim --clip=0.01 --sigma_dp=1e-4 --population=1000000 \
      --population_cohort_size=10000 --delta=1e-9

Started again with the same flags and --output_dir, a run resumes from its latest checkpoint
(see `fedasr_tff/program/federated_training.py`). Noise is given one way: --sigma_dp (std on
the averaged update in units of --clip), --noise_multiplier (z of this run's cohort) or
--target_epsilon (for --population and --population_cohort_size at --rounds, solved with the
RDP accountant). At every evaluation the run prints the epsilon spent and projected, for this
run's own population (epsilon_run) and for the declared one (epsilon_declared).
"""

from absl import app
from absl import flags
import tensorflow_federated as tff

from experiments import common
from fedasr_tff import models
from fedasr_tff import optimizers
from fedasr_tff.program import cohorts
from fedasr_tff.program import federated_training
from fedasr_tff.program import model_io
from fedasr_tff.program import privacy_ledger

_DEFAULTS = federated_training.FederatedConfig(rounds=1, cohort_size=1)

_SEED_MODEL = flags.DEFINE_string('seed_model', None, 'Weights to start from (model.npz of '
                                  'train_central or train_federated); default random init.')
_COHORT_SIZE = flags.DEFINE_integer('cohort_size', 8, 'Clients per round, S.', lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 100, 'Rounds (central steps), T.', lower_bound=1)
_LOCAL_STEPS = flags.DEFINE_integer('local_steps', None, 'Local SGD steps per client, cycling '
                                    'its batches (default 10 unless --local_epochs).',
                                    lower_bound=1)
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', None, 'Local epochs per client instead of '
                                     '--local_steps.', lower_bound=1)
_CLIENT_LR = flags.DEFINE_float('client_lr', _DEFAULTS.client_lr, 'Local SGD learning rate '
                                '(spec §3.3: 0.4 from scratch, 0.2 from a seed).',
                                lower_bound=0.0)
_LOCAL_CLIP = flags.DEFINE_float('local_clip', _DEFAULTS.local_clip, 'Global L2 clip of every '
                                 'local gradient (spec: 1); 0 disables.', lower_bound=0.0)
_FEDPROX_MU = flags.DEFINE_float('fedprox_mu', 0.0, 'FedProx mu of (mu/2)||w - w_global||^2.',
                                 lower_bound=0.0)
_SERVER_OPTIMIZER = flags.DEFINE_enum('server_optimizer', _DEFAULTS.server_optimizer,
                                      sorted(optimizers.OPTIMIZERS), 'Server optimizer.')
_SERVER_LR = flags.DEFINE_float('server_lr', _DEFAULTS.server_lr, 'Server learning rate.',
                                lower_bound=0.0)
_SERVER_LR_SCHEDULE = flags.DEFINE_enum(
    'server_lr_schedule', 'constant', list(optimizers.schedules.NAMES),
    'Server LR schedule: exponential is lr * rate^((t - start) / transition) after start '
    '(spec §3.4); step multiplies by rate every transition rounds after start.')
_SERVER_LR_DECAY_RATE = flags.DEFINE_float('server_lr_decay_rate', 0.6, 'Decay rate rho.',
                                           lower_bound=0.0)
_SERVER_LR_TRANSITION_ROUNDS = flags.DEFINE_integer('server_lr_transition_rounds', 750,
                                                    'Decay period tau, in rounds.',
                                                    lower_bound=1)
_SERVER_LR_START_ROUND = flags.DEFINE_integer('server_lr_start_round', 750,
                                              'Round t0 the decay starts at.', lower_bound=0)
_CLIPPING = flags.DEFINE_enum(
    'clipping', 'dim', list(federated_training.CLIPPINGS),
    'Client-delta clipping (spec §2): global, or per layer with C_h uniform, proportional to '
    'sqrt(dim), or weighted (MLP weights x --mlp_weight); none: plain mean, no DP.')
_CLIP = flags.DEFINE_float('clip', _DEFAULTS.clip, 'Total clip C of a client delta.',
                           lower_bound=0.0)
_MLP_WEIGHT = flags.DEFINE_float('mlp_weight', 10.0, 'alpha of the MLP weights (w1, w2) for '
                                 '--clipping=weighted.', lower_bound=0.0)
_NORMALIZE = flags.DEFINE_bool('normalize', False, 'Rescale every layer to exactly C_h once '
                               'the delta norm reaches C (the paper\'s released code).')
_ADAPTIVE_CLIPPING = flags.DEFINE_bool('adaptive_clipping', False, 'Per-layer adaptive clips '
                                       'tracking --target_quantile (--clip is the initial C).')
_TARGET_QUANTILE = flags.DEFINE_float('target_quantile', 0.5, 'Adaptive clipping quantile.',
                                      lower_bound=0.0, upper_bound=1.0)
_CLIP_LEARNING_RATE = flags.DEFINE_float('clip_learning_rate', 0.2, 'Adaptive clipping '
                                         'learning rate.', lower_bound=0.0)
_NOISE_PLACEMENT = flags.DEFINE_enum('noise_placement', 'server', ['server', 'client'],
                                     'Add the noise to the sum, or on every client.')
_NOISE_MULTIPLIER = flags.DEFINE_float('noise_multiplier', None, 'Noise multiplier z of this '
                                       'run\'s cohort (sigma_dp = z / cohort_size).')
_SIGMA_DP = flags.DEFINE_float('sigma_dp', None, 'Noise std on the averaged update in units of '
                               '--clip (spec §1.2).')
_TARGET_EPSILON = flags.DEFINE_float('target_epsilon', None, 'Solve the noise for this epsilon '
                                     'at --delta, --rounds, --population and '
                                     '--population_cohort_size.')
_DELTA = flags.DEFINE_float('delta', 1e-9, 'delta of the (epsilon, delta) guarantee.')
_POPULATION = flags.DEFINE_integer('population', None, 'Population K the privacy is accounted '
                                   'for (spec §6); default: the number of training clients.',
                                   lower_bound=1)
_POPULATION_COHORT_SIZE = flags.DEFINE_integer(
    'population_cohort_size', None, 'Cohort S\' of the declared population (same sigma_dp, '
    'z\' = sigma_dp * S\'); default --cohort_size.', lower_bound=1)
_SAMPLING = flags.DEFINE_enum(
    'sampling', None, list(cohorts.SAMPLINGS),
    'How cohorts are drawn: poisson (every client joins a round with probability '
    '--cohort_size / K, the mechanism the accountant analyses) or fixed (exactly --cohort_size '
    'clients without replacement, the paper\'s code). Default: poisson with noise, fixed '
    'without.')
_RELEASE_CLIENT_DIAGNOSTICS = flags.DEFINE_bool(
    'release_client_diagnostics', False,
    'In a run with noise, also release un-noised client statistics (training loss, delta and '
    'per-layer norms, clipped fractions, client counts) under client/, and the report of '
    'unusable training files: OUTSIDE the DP guarantee, and the privacy statement says so. Runs '
    'without noise always release them.')
_NOISE_SEED = flags.DEFINE_integer('noise_seed', None, 'Seed of the server-side DP noise '
                                   '(default: OS entropy, kept in the checkpoints). Fix it only '
                                   'for reproducible simulations.', lower_bound=0)
_EVAL_EVERY = flags.DEFINE_integer('eval_every', 10, 'Rounds between evaluations.',
                                   lower_bound=1)
_CHECKPOINT_EVERY = flags.DEFINE_integer('checkpoint_every', 10, 'Rounds between checkpoints.',
                                         lower_bound=1)
_CLIENTS_IN_PARALLEL = flags.DEFINE_integer(
    'clients_in_parallel', None, 'Clients the TFF runtime trains concurrently (default: no '
    'limit). On GPUs, set it to the number of clients that fit in memory.', lower_bound=1)


@flags.multi_flags_validator(['noise_multiplier', 'sigma_dp', 'target_epsilon'],
                             message='Give the noise one way only: --noise_multiplier, '
                             '--sigma_dp or --target_epsilon.')
def _one_noise_specification(values):
  return sum(v is not None for v in values.values()) <= 1


@flags.multi_flags_validator(['noise_multiplier', 'sigma_dp'],
                             message='--noise_multiplier and --sigma_dp must be >= 0.')
def _non_negative_noise(values):
  return all(v is None or v >= 0 for v in values.values())


@flags.validator('target_epsilon', message='--target_epsilon must be > 0.')
def _positive_epsilon(value):
  return value is None or value > 0


@flags.validator('delta', message='--delta must lie in (0, 1).')
def _delta_in_unit_interval(value):
  return 0 < value < 1


@flags.multi_flags_validator(['cohort_size', 'population', 'population_cohort_size'],
                             message='The cohort (--cohort_size, or --population_cohort_size '
                             'when given) must not exceed --population.')
def _cohort_within_population(values):
  if values['population'] is None:
    return True
  cohort = values['population_cohort_size'] or values['cohort_size']
  return cohort <= values['population'] and values['cohort_size'] <= values['population']


@flags.multi_flags_validator(['local_steps', 'local_epochs'],
                             message='Give --local_steps or --local_epochs, not both.')
def _one_local_work(values):
  return values['local_steps'] is None or values['local_epochs'] is None


@flags.multi_flags_validator(['clipping', 'noise_multiplier', 'sigma_dp', 'target_epsilon',
                              'adaptive_clipping'],
                             message='--clipping=none cannot be combined with DP noise or '
                             '--adaptive_clipping: the noise is calibrated to the clip.')
def _noise_needs_clipping(values):
  if values['clipping'] != 'none':
    return True
  noise = [values[k] for k in ('noise_multiplier', 'sigma_dp', 'target_epsilon')]
  return not values['adaptive_clipping'] and all(v in (None, 0) for v in noise)


@flags.validator('clip', message='--clip must be > 0.')
def _positive_clip(value):
  return value > 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary()
  common.require(common.CORPUS_DIR, common.OUTPUT_DIR)
  tff.backends.native.set_sync_local_cpp_execution_context(
      max_concurrent_computation_calls=_CLIENTS_IN_PARALLEL.value or -1)

  vocab = common.vocabulary()
  train_data = common.client_data(common.SPLIT.value, common.SPEAKERS.value or 'federated', vocab,
                                  spec_augment=True, seed=common.seed_or_zero())
  num_clients = len(train_data.client_ids)
  if _COHORT_SIZE.value > num_clients:
    raise app.UsageError(f'--cohort_size={_COHORT_SIZE.value} exceeds the {num_clients} '
                         'training clients.')
  if _POPULATION.value is not None and _POPULATION.value < num_clients:
    raise app.UsageError(f'--population={_POPULATION.value} is smaller than the {num_clients} '
                         'training clients.')
  population = _POPULATION.value or num_clients
  declared_cohort = _POPULATION_COHORT_SIZE.value or _COHORT_SIZE.value
  sigma_dp = privacy_ledger.resolve_sigma_dp(
      sigma_dp=_SIGMA_DP.value, noise_multiplier=_NOISE_MULTIPLIER.value,
      target_epsilon=_TARGET_EPSILON.value, cohort_size=_COHORT_SIZE.value,
      declared_cohort_size=declared_cohort, declared_population=population,
      planned_rounds=_ROUNDS.value, delta=_DELTA.value)

  initial_weights = None
  if _SEED_MODEL.value:
    model = models.build_ctc_transformer(common.MODEL_CONFIG.value, vocab.size)
    try:
      initial_weights = model_io.load_weights(_SEED_MODEL.value, model, source='--seed_model')
    except ValueError as e:
      raise app.UsageError(f'{e} (--model_config={common.MODEL_CONFIG.value})') from e

  local_steps = _LOCAL_STEPS.value
  if local_steps is None and _LOCAL_EPOCHS.value is None:
    local_steps = 10
  try:
    config = _config(sigma_dp, population, declared_cohort, local_steps)
  except ValueError as e:   # The configuration's messages name the flags.
    raise app.UsageError(str(e)) from e
  result = federated_training.train(
      config, train_data, vocab, common.OUTPUT_DIR.value, eval_data=common.eval_data(vocab),
      initial_weights=initial_weights, show_progress=common.PROGRESS.value)
  # Which files of the sampled clients were unusable is itself a client statistic.
  if train_data.report.problems and config.client_diagnostics:
    outside = ' (outside the DP guarantee)' if config.sigma_dp > 0 else ''
    print(f'Skipped training utterances{outside}: {train_data.report}')
  if result.evaluation is not None:
    print(f'final WER {100 * result.evaluation.overall.wer:.2f}% CER '
          f'{100 * result.evaluation.overall.cer:.2f}% on {common.EVAL_SPLIT.value}')
  print(result.privacy_statement())


def _config(sigma_dp, population, declared_cohort, local_steps):
  return federated_training.FederatedConfig(
      rounds=_ROUNDS.value, cohort_size=_COHORT_SIZE.value, model_config=common.MODEL_CONFIG.value,
      local_steps=local_steps, local_epochs=_LOCAL_EPOCHS.value, client_lr=_CLIENT_LR.value,
      local_clip=_LOCAL_CLIP.value or None, fedprox_mu=_FEDPROX_MU.value,
      server_optimizer=_SERVER_OPTIMIZER.value, server_lr=_SERVER_LR.value,
      server_lr_schedule=_SERVER_LR_SCHEDULE.value,
      server_lr_decay_rate=_SERVER_LR_DECAY_RATE.value,
      server_lr_transition_rounds=_SERVER_LR_TRANSITION_ROUNDS.value,
      server_lr_start_round=_SERVER_LR_START_ROUND.value, clipping=_CLIPPING.value,
      clip=_CLIP.value, mlp_weight=_MLP_WEIGHT.value, normalize=_NORMALIZE.value,
      adaptive_clipping=_ADAPTIVE_CLIPPING.value, target_quantile=_TARGET_QUANTILE.value,
      clip_learning_rate=_CLIP_LEARNING_RATE.value, noise_placement=_NOISE_PLACEMENT.value,
      sigma_dp=sigma_dp, delta=_DELTA.value, population=population,
      population_cohort_size=declared_cohort, sampling=_SAMPLING.value,
      release_client_diagnostics=_RELEASE_CLIENT_DIAGNOSTICS.value, iid=common.IID.value,
      seed=common.SEED.value, noise_seed=_NOISE_SEED.value, eval_every=_EVAL_EVERY.value,
      checkpoint_every=_CHECKPOINT_EVERY.value)


if __name__ == '__main__':
  app.run(main)
