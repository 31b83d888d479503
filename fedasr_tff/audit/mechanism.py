"""Auditing the DP mechanism a run configures, whatever it trains (`audit_mechanism`).

A task gives its DP configuration (`program.dp_config.DPConfig`), its rounds, cohort and sampling,
and its model's trainable tensors; the audits of this package attack the aggregator the runner
builds from them.
"""

import dataclasses
import math
from typing import Callable
from typing import List
from typing import Optional
from typing import Sequence
from typing import Union

import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import validation
from fedasr_tff.audit import clipping_check
from fedasr_tff.audit import distinguishing
from fedasr_tff.audit import noise_check
from fedasr_tff.audit import one_run
from fedasr_tff.audit import result as result_lib
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib

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


def canary_norm(dp: dp_config.DPConfig, rounds: int) -> float:
  """The canaries' leaf norm λ.

  Args:
    dp: the run's DP configuration (its clip and adaptive clipping).
    rounds: the run's rounds.

  Returns:
    The total clip times 1,000, times the most adaptive clips can grow in the run (capped at
    e^20).
  """
  growth = 1.0
  if dp.adaptive_clipping:
    # C_h <- C_h exp(-η (u - γ)) with u >= 0 grows by at most exp(η γ) a round.
    growth = math.exp(min(dp.clip_learning_rate * dp.target_quantile * rounds, 20.0))
  return _CANARY_CLIPS * dp.clip * growth


def audit_mechanism(dp: dp_config.DPConfig,
                    noise_multiplier: float,
                    audit: AuditConfig,
                    leaf_shapes: Sequence[Sequence[int]],
                    leaf_names: Sequence[str],
                    *,
                    rounds: int,
                    cohort_size: int,
                    sampling: str,
                    weighted_leaf: Optional[Callable[[str], bool]] = None,
                    sampling_secret: Optional[int] = None) -> List[Result]:
  """Audits the DP mechanism a run configures.

  Builds exactly what the runner builds from `dp` and the run's cohort, rounds and sampling: the
  aggregator (`DPConfig.aggregator`, diagnostics off as in a DP run), the process
  (`algorithms.compose_process`) and the cohorts (`program.round_step`, from a fresh secret). The
  clients are m canaries (`AuditConfig.canaries`, the population K of the audited claim); the
  canaries live in the model's own tensors, so per-layer clips are the run's. It then runs the
  one-run audit through the process, the many-run distinguishing audit on the aggregator's query
  (`audit.trials` > 0), and the direct checks of the query's structure (`noise_check`,
  `clipping_check`; `audit.check_rounds` > 0), which no ε lower bound replaces.

  What the audit is not: it does not train, so it cannot see a leak through local training, the
  data pipeline or released client statistics; the claims it tests are the ledger's for the
  audited population (K = m), not an extrapolated one.

  Args:
    dp: the run's DP configuration.
    noise_multiplier: the run's z on a population of `audit.canaries` clients (its
      `DPConfig.noise_level`).
    audit: the attack.
    leaf_shapes: the shapes of the model's trainable tensors, in flatten order.
    leaf_names: their names.
    rounds: the run's rounds T.
    cohort_size: its expected cohort S.
    sampling: its sampling (`cohorts.SAMPLINGS`).
    weighted_leaf: which tensors are the model's MLP tensors (`DPConfig.aggregator`; needed
      with `clipping`="weighted").
    sampling_secret: the cohorts' secret; default from OS entropy, as the runner draws it.

  Returns:
    The one-run audit's result, the distinguishing audit's and the direct checks', in that
    order.

  Raises:
    ValueError: if the configuration adds no noise, or places noise on clients with a cohort
      other than the canaries.
  """
  if not dp.adds_noise:
    raise ValueError('The configuration adds no noise (`sigma_dp`, `noise_multiplier` or '
                     '`target_epsilon`): its ε is infinite and there is nothing to audit.')
  client_noise = dp.noise_placement == 'client'
  if client_noise and cohort_size != audit.canaries:
    raise ValueError(f'With `noise_placement`=client the audit trains every canary slot every '
                     f'round: give `cohort_size` = `canaries` (got {cohort_size} and '
                     f'{audit.canaries}).')
  aggregator = dp.aggregator(noise_multiplier, cohort_size, leaf_names, diagnostics=False,
                             weighted_leaf=weighted_leaf)
  norm = canary_norm(dp, rounds)
  results = [one_run.audit(
      aggregator, leaf_shapes, leaf_names, canaries=audit.canaries, rounds=rounds,
      cohort_size=cohort_size, canary_norm=norm, normalize=dp.normalize, sampling=sampling,
      absent_as_zero_update=client_noise, delta=dp.delta, guesses=audit.guesses,
      confidence=audit.confidence, audit_seed=audit.audit_seed, sampling_secret=sampling_secret)]
  value_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(shape, tf.float32) for shape in leaf_shapes])
  query = aggregator.build_query(value_type)
  if audit.trials:
    results.append(distinguishing.audit(
        query, leaf_shapes, trials=audit.trials, canary_norm=norm, cohort_size=cohort_size,
        zero_updates=client_noise, delta=dp.delta, confidence=audit.confidence,
        audit_seed=audit.audit_seed))
  if audit.check_rounds:
    # The query's release is the cohort's sum divided by S = --cohort_size.
    checks = dict(clients_per_round=cohort_size, zero_updates=client_noise)
    results.append(noise_check.audit(query, leaf_shapes, leaf_names,
                                     releases=audit.check_rounds, **checks))
    results.extend(clipping_check.audit(query, leaf_shapes, leaf_names,
                                        rounds=audit.check_rounds, normalize=dp.normalize,
                                        audit_seed=audit.audit_seed, **checks))
  return results
