"""One-run privacy audit of a federated process.

Steinke, Nasr and Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023,
arXiv:2305.08846: m canary clients, each in the population with probability 1/2, train through
the process under audit (`algorithms.compose_process` with the aggregator under audit and canary
client work, `canaries`) in the rounds every run trains (`program.round_step`), and the attacker
guesses from the released models which were in (`audit`).
"""

import collections
from typing import Optional
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import validation
from fedasr_tff.audit import bounds
from fedasr_tff.audit import canaries as canaries_lib
from fedasr_tff.audit import result as result_lib
from fedasr_tff.program import cohorts
from fedasr_tff.program import privacy_ledger
from fedasr_tff.program import round_step

SCORES = ('sum', 'difference')


def _initial_weights_fn(leaf_shapes):

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights(
        trainable=[tf.zeros(shape, tf.float32) for shape in leaf_shapes], non_trainable=[])

  return initial_model_weights_fn


def _projections_fn(leaf_shapes):
  """A TF function: ([releases], seeds [m, 2]) -> [m, releases, leaves] of <release_ℓ, u_ℓ>."""

  @tf.function
  def projections(releases, seeds):

    def one(seed):
      directions = canaries_lib.canary_directions(leaf_shapes, seed)
      return tf.stack([tf.stack([tf.reduce_sum(r[j] * u) for j, u in enumerate(directions)])
                       for r in releases])

    return tf.map_fn(one, seeds, fn_output_signature=tf.float32, parallel_iterations=16)

  return projections


def _filter(weights, release):
  """Per-leaf weights w_ℓ / v_ℓ of the matched filter, v_ℓ the mean square of the release's leaf.

  Under Gaussian noise of per-coordinate variance v_ℓ in leaf ℓ, Σ_ℓ (w_ℓ / v_ℓ) <r_ℓ, u_ℓ> is the
  most powerful linear test for the canary Σ_ℓ w_ℓ u_ℓ, and summing it over rounds weighs each
  round by its precision. v_ℓ is read off the release itself (its noise dominates it), so the
  score needs no knowledge of the noise: with isotropic noise the weights are the plain w_ℓ, and
  a leaf released with too little noise gets the weight its precision deserves.
  """
  mean_squares = np.array([np.mean(np.square(x, dtype=np.float64)) for x in release])
  return weights / np.maximum(mean_squares, np.finfo(np.float64).tiny)


def _released_clips(metrics):
  try:
    return metrics['aggregator']['dp_query_metrics']['per_group']
  except (KeyError, TypeError) as e:
    raise ValueError('The aggregator under audit releases no per-group clips '
                     '(`dp_query_metrics`): audit a DP aggregator such as '
                     '`aggregators.PerLayerDPFactory`.') from e


def audit(aggregator: tff.aggregators.UnweightedAggregationFactory,
          leaf_shapes: Sequence[Sequence[int]],
          leaf_names: Sequence[str],
          *,
          canaries: int,
          rounds: int,
          cohort_size: int,
          canary_norm: float,
          normalize: bool = False,
          sampling: str = 'poisson',
          absent_as_zero_update: bool = False,
          delta: float = 1e-9,
          guesses: Optional[int] = None,
          confidence: float = 0.95,
          audit_seed: int = 0,
          sampling_secret: Optional[int] = None) -> result_lib.AuditResult:
  """Runs the one-run audit on the process built around `aggregator`.

  1. m canary clients; each is in the population independently with probability 1/2 (the secret
     the attack must guess). The population is the m canary slots: every round the runner's
     sampler (`cohorts.sample_cohort`, from a sampling secret the attack never sees) draws the
     cohort from the slots, and a slot whose canary is out either leaves the cohort (an absent
     client, the add/remove neighbour) or, where the mechanism needs exactly S reporting clients
     (client-side noise), reports a zero update (a neighbour at the same distance C).
  2. In round t every cohort member returns its canary: a fresh random direction u_{i,t} (known
     to the attacker) of norm far above the clip, so the clip makes it exactly the clipped
     canary c_{i,t} = Σ_ℓ w_ℓ u_{i,t,ℓ} (`canaries.clipped_canary_weights`, with the round's
     released clips).
  3. After T rounds the attacker reads what the run releases: the model after every round. With
     the server at SGD with learning rate 1 the released aggregate is r_t = x_t - x_{t+1} (the
     server step is post-processing; any other server optimizer only hides it). Each canary gets
     two scores, each a sum over rounds of a matched filter for its clipped canary, every leaf ℓ
     weighted by w_ℓ / v_ℓ with v_ℓ the mean square of that leaf of the release (`_filter`):

         sum:         Σ_t       Σ_ℓ (w_ℓ / v_ℓ(r_t)) <r_t,ℓ, u_{i,t,ℓ}>
         difference:  Σ_{t>=1}  Σ_ℓ (w_ℓ / v_ℓ(d_t)) <d_t,ℓ, u_{i,t,ℓ}>,   d_t = r_t - r_{t-1}

     "sum" is the natural test; "difference" cancels any noise repeated from one round to the
     next (a replayed noise seed), which "sum" cannot see because a repeated draw looks fresh in
     a fresh direction. Canaries are redrawn every round so that differencing keeps their signal.
  4. For each score, the k highest-scoring canaries are guessed "in" and the k lowest "out"; the
     number right gives a lower bound on ε (`bounds.one_run_epsilon_lower_bound`, Theorem 5.2 of
     the paper) at confidence 1 - β/2 for each of the two scores, so the larger of the two holds
     at 1 - β (union bound).

  The claim tested is the ledger's ε for the run: the noise multiplier the aggregator reports in
  its DP event, the cohort S out of the population of K = m slots, T rounds, δ
  (`result.run_ledger`). The canary bits are independent of the sampling, so the run is
  (ε, δ)-DP in each bit if it is (ε, δ)-DP in each client; the theorem needs nothing else.

  Args:
    aggregator: the DP aggregation factory under audit (`program.dp_config.DPConfig.aggregator`, or
      a mechanism of your own reporting a `GaussianDpEvent`), with diagnostics off.
    leaf_shapes: the shapes of the model's trainable tensors, in flatten order.
    leaf_names: their names.
    canaries: m, the canary clients (the population).
    rounds: T.
    cohort_size: S, the (expected) cohort; S = m trains every present canary every round.
    canary_norm: λ, every leaf's norm in a canary; at least the total clip (far above it with
      adaptive clipping, whose clips grow while every client is clipped).
    normalize: the aggregator rescales to C_h (`PerLayerDPFactory`'s normalize), for the
      attacker's expected clipped canary.
    sampling: the runner's sampling (`cohorts.SAMPLINGS`); "fixed" only with S = m, where
      fixed-size cohorts are the whole population and the claim is exact.
    absent_as_zero_update: a canary that is out reports a zero update instead of leaving the
      cohort (for client-side noise, calibrated to exactly S reporting clients).
    delta: δ of the claim.
    guesses: k, guesses "in" and "out" each (2k in all); default m // 10.
    confidence: 1 - β of the lower bound.
    audit_seed: seed of the canary bits and directions (the attacker's own randomness).
    sampling_secret: the runner's sampling secret; default from OS entropy.

  Returns:
    The `AuditResult` of `one_run`: the larger of the two scores' lower bounds, with the
    guesses and correct guesses of each in `details`.

  Raises:
    ValueError: for an argument out of range, more guesses than canaries, fixed-size or
      zero-update cohorts smaller than the population, or an aggregator that releases no clips.
  """
  validation.check_positive_integer('canaries', canaries)
  validation.check_positive_integer('rounds', rounds)
  validation.check_positive('canary_norm', canary_norm)
  guesses = canaries // 10 if guesses is None else guesses
  validation.check_positive_integer('guesses', guesses)
  if 2 * guesses > canaries:
    raise ValueError(f'`guesses` ({guesses}) "in" and as many "out" exceed the {canaries} '
                     'canaries.')
  if sampling == 'fixed' and cohort_size != canaries:
    raise ValueError(f'sampling="fixed" is audited only with `cohort_size` = `canaries` '
                     f'({canaries}), got {cohort_size}: for smaller fixed cohorts the ledger\'s '
                     'add/remove ε is an approximation, not a guarantee to test.')
  if absent_as_zero_update and cohort_size != canaries:
    raise ValueError('`absent_as_zero_update` needs `cohort_size` = `canaries`: the zero '
                     'updates keep the cohort at exactly S.')
  leaf_shapes = [tuple(shape) for shape in leaf_shapes]
  initial_weights_fn = _initial_weights_fn(leaf_shapes)
  client_work = canaries_lib.build_canary_client_work(initial_weights_fn.type_signature.result)
  process = algorithms.compose_process(initial_weights_fn, client_work,
                                       server_optimizer=optimizers.build('sgd', 1.0),
                                       model_aggregator=aggregator)
  state = process.initialize()
  noise_multiplier = privacy_ledger.applied_noise_multiplier(state.aggregator)
  ledger = result_lib.run_ledger(noise_multiplier, cohort_size, canaries, rounds, delta, sampling)
  claimed = result_lib.claimed_epsilons(ledger)

  rng = np.random.default_rng([audit_seed, 0])
  present = rng.random(canaries) < 0.5
  slots = [f'canary_{i:06d}' for i in range(canaries)]
  slot_index = {slot: i for i, slot in enumerate(slots)}
  secret = cohorts.new_run_secret() if sampling_secret is None else sampling_secret
  seeds = np.stack([[canaries_lib.canary_seed(audit_seed, i, t) for i in range(canaries)]
                    for t in range(rounds)])
  projections = _projections_fn(leaf_shapes)

  weights = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  previous_release = None
  scores = collections.OrderedDict((name, np.zeros(canaries)) for name in SCORES)
  trained = 0
  for t in range(rounds):
    # The runner's round (`round_step`): a canary that is out leaves the cohort, or reports a
    # zero update; its data is its round's canary, whatever seed the runner gives it.
    cohort, output = round_step.run_round(
        process.next, state, slots, cohort_size=cohort_size, secret=secret, round_num=t,
        sampling=sampling, ledger=ledger,
        client_data=lambda slot, _, t=t: canaries_lib.canary_dataset(
            seeds[t, slot_index[slot]], canary_norm if present[slot_index[slot]] else 0.0),
        takes_part=None if absent_as_zero_update else lambda slot: present[slot_index[slot]])
    trained += sum(int(present[slot_index[slot]]) for slot in cohort)
    state = output.state
    new_weights = [np.asarray(w) for w in process.get_model_weights(state).trainable]
    release = [a - b for a, b in zip(weights, new_weights, strict=True)]
    weights = new_weights

    groups, clips = canaries_lib.leaf_groups_and_clips(_released_clips(output.metrics),
                                                       leaf_names)
    w = canaries_lib.clipped_canary_weights(groups, clips, canary_norm, normalize)
    releases = [release] if previous_release is None else [release, previous_release]
    proj = projections([[tf.constant(x) for x in r] for r in releases],
                       tf.constant(seeds[t])).numpy()  # [m, releases, leaves]
    scores['sum'] += proj[:, 0] @ _filter(w, release)
    if previous_release is not None:
      difference = [a - b for a, b in zip(release, previous_release, strict=True)]
      scores['difference'] += (proj[:, 0] - proj[:, 1]) @ _filter(w, difference)
    previous_release = release

  details = collections.OrderedDict(canaries=canaries, present=int(present.sum()),
                                    rounds=rounds, cohort_size=cohort_size, sampling=sampling,
                                    canary_trainings=trained, guesses=2 * guesses,
                                    noise_multiplier=noise_multiplier)
  used = [name for name in SCORES if name == 'sum' or rounds > 1]
  lower_bound = max(_guess_and_bound(scores[name], present, guesses, delta,
                                     1 - (1 - confidence) / len(used), name, details)
                    for name in used)
  return result_lib.AuditResult('one_run', claimed, delta, lower_bound, confidence, details)


def _guess_and_bound(scores, present, guesses, delta, confidence, name, details) -> float:
  """Guesses the top `guesses` canaries "in" and the bottom ones "out"; the ε refuted at
  `confidence` by the number right (recorded in `details` under the score's `name`)."""
  order = np.argsort(scores, kind='stable')
  correct = int(np.sum(present[order[-guesses:]]) + np.sum(~present[order[:guesses]]))
  bound = bounds.one_run_epsilon_lower_bound(len(present), 2 * guesses, correct, delta,
                                             confidence)
  details[f'correct_{name}'] = correct
  details[f'lower_bound_{name}'] = bound
  return bound
