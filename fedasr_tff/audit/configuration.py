"""Auditing a run's configuration: the mechanism `experiments/train_federated.py` would run,
attacked with the audits of this package (`audit_configuration`).
"""

import dataclasses
import math
from typing import List
from typing import Optional
from typing import Union

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import models
from fedasr_tff import validation
from fedasr_tff.audit import clipping_check
from fedasr_tff.audit import distinguishing
from fedasr_tff.audit import noise_check
from fedasr_tff.audit import one_run
from fedasr_tff.audit import result as result_lib
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.speech import config as config_lib

# An ε audit's result, or a direct check's.
Result = Union[result_lib.AuditResult, result_lib.CheckResult]

# Canary leaves are this many total clips long: far beyond any clip (module `canaries`).
_CANARY_CLIPS = 1e3


@dataclasses.dataclass(frozen=True)
class AuditConfig:
  """The attack: canaries, guesses, trials and confidence.

  Each field's help text (`fields.field`) documents it, once: the fields are the flags of
  `experiments/audit.py`.
  """
  canaries: int = fields_lib.field(
      1000, 'Canary clients of the one-run audit, each in the population with probability 1/2 '
      '(the population K of the audited claim).')
  guesses: Optional[int] = fields_lib.field(
      None, 'Canaries guessed "in" and as many "out" (default --canaries / 10).')
  trials: int = fields_lib.field(
      2000, 'Rounds of the many-run distinguishing audit of one round (0: skip it).')
  confidence: float = fields_lib.field(0.95, 'Confidence of the measured lower bounds.')
  check_rounds: int = fields_lib.field(
      200, 'Rounds of the query for each direct check of its structure: the noise check and '
      'each of the clipping check\'s canaries (0: skip them).')
  audit_seed: int = fields_lib.field(0, 'Seed of the canaries and of which are in.')

  def __post_init__(self):
    validation.check_positive_integer('canaries', self.canaries)
    if self.guesses is not None:
      validation.check_positive_integer('guesses', self.guesses)
    validation.check_non_negative_integer('trials', self.trials)
    validation.check_non_negative_integer('check_rounds', self.check_rounds)
    if 0 < self.check_rounds < 10:
      raise ValueError(f'`check_rounds` must be 0 or >= 10, got {self.check_rounds}.')
    validation.check_open_unit_interval('confidence', self.confidence)
    validation.check_non_negative_integer('audit_seed', self.audit_seed)


def model_leaves(config: config_lib.FederatedConfig):
  """The trainable tensors of the run's model.

  Args:
    config: the run's configuration (its model and vocabulary).

  Returns:
    (shapes, names) of the trainable tensors, in flatten order.
  """
  model = models.build_ctc_transformer(config.model.model_config,
                                       config.data.vocabulary().size)
  names, _ = model_io.tensor_names(model)
  return [tuple(v.shape) for v in model.trainable_variables], names


def canary_norm(config: config_lib.FederatedConfig) -> float:
  """The canaries' leaf norm λ.

  Args:
    config: the run's configuration (its clip, adaptive clipping and rounds).

  Returns:
    The total clip times 1,000, times the most adaptive clips can grow in the run (capped at
    e^20).
  """
  dp = config.dp
  growth = 1.0
  if dp.adaptive_clipping:
    # C_h <- C_h exp(-η (u - γ)) with u >= 0 grows by at most exp(η γ) a round.
    growth = math.exp(min(dp.clip_learning_rate * dp.target_quantile * config.run.rounds, 20.0))
  return _CANARY_CLIPS * dp.clip * growth


def audit_configuration(config: config_lib.FederatedConfig,
                        audit: AuditConfig,
                        leaf_shapes,
                        leaf_names,
                        *,
                        sampling_secret: Optional[int] = None) -> List[Result]:
  """Audits the mechanism of a federated run's configuration.

  Builds exactly what the runner builds from `config` (its clipping, noise, cohort, rounds,
  sampling, δ and model): the aggregator (`DPConfig.aggregator`, diagnostics off as in a DP run),
  the process (`algorithms.compose_process`) and the cohorts (`cohorts.sample_cohort` from a
  fresh secret). The clients are m canaries instead of speakers (`AuditConfig.canaries`, the
  population K of the audited claim); the canaries live in the model's own tensors, so per-layer
  clips are the run's. It then runs the one-run audit through the process, the many-run
  distinguishing audit on the aggregator's query (`audit.trials` > 0), and the direct checks of
  the query's structure (`noise_check`, `clipping_check`; `audit.check_rounds` > 0), which no ε
  lower bound replaces.

  What the audit is not: it does not train, so it cannot see a leak through local training, the
  data pipeline or released client statistics; the claims it tests are the ledger's for the
  audited population (K = m), not an extrapolated one.

  Args:
    config: the run's `speech.config.FederatedConfig`; only the DP, run (rounds, cohort,
      sampling) and model settings matter.
    audit: the attack.
    leaf_shapes: the shapes of the model's trainable tensors (`model_leaves`).
    leaf_names: their names (`model_leaves`).
    sampling_secret: the cohorts' secret; default from OS entropy, as the runner draws it.

  Returns:
    The one-run audit's result, the distinguishing audit's and the direct checks', in that
    order.

  Raises:
    ValueError: if the configuration adds no noise, or places noise on clients with a cohort
      other than the canaries.
  """
  dp, run = config.dp, config.run
  if not dp.adds_noise:
    raise ValueError('The configuration adds no noise (`sigma_dp`, `noise_multiplier` or '
                     '`target_epsilon`): its ε is infinite and there is nothing to audit.')
  client_noise = dp.noise_placement == 'client'
  if client_noise and run.cohort_size != audit.canaries:
    raise ValueError(f'With `noise_placement`=client the audit trains every canary slot every '
                     f'round: give `cohort_size` = `canaries` (got {run.cohort_size} and '
                     f'{audit.canaries}).')
  noise = config.noise_level(audit.canaries)
  aggregator = dp.aggregator(noise.noise_multiplier, run.cohort_size, leaf_names,
                             diagnostics=False)
  norm = canary_norm(config)
  results = [one_run.audit(
      aggregator, leaf_shapes, leaf_names, canaries=audit.canaries, rounds=run.rounds,
      cohort_size=run.cohort_size, canary_norm=norm, normalize=dp.normalize,
      sampling=config.effective_sampling, absent_as_zero_update=client_noise, delta=dp.delta,
      guesses=audit.guesses, confidence=audit.confidence, audit_seed=audit.audit_seed,
      sampling_secret=sampling_secret)]
  value_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(shape, tf.float32) for shape in leaf_shapes])
  query = aggregator.build_query(value_type)
  if audit.trials:
    results.append(distinguishing.audit(
        query, leaf_shapes, trials=audit.trials, canary_norm=norm, cohort_size=run.cohort_size,
        zero_updates=client_noise, delta=dp.delta, confidence=audit.confidence,
        audit_seed=audit.audit_seed))
  if audit.check_rounds:
    # The query's release is the cohort's sum divided by S = --cohort_size.
    checks = dict(clients_per_round=run.cohort_size, zero_updates=client_noise)
    results.append(noise_check.audit(query, leaf_shapes, leaf_names,
                                     releases=audit.check_rounds, **checks))
    results.extend(clipping_check.audit(query, leaf_shapes, leaf_names,
                                        rounds=audit.check_rounds, normalize=dp.normalize,
                                        audit_seed=audit.audit_seed, **checks))
  return results
