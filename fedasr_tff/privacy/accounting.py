"""User-level privacy accounting for DP federated training.

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 2,
Theorem 1, and Sec. 4.3 (its tables use the moments accountant of Abadi et al. 2016 through
opacus, App. H.1). A round of DP federated averaging is the Poisson-sampled Gaussian mechanism
(`dp_event` states why), accounted with dp-accounting's Rényi-DP or privacy-loss-distribution
accountant (`compute_epsilon`); fixed-size cohorts are accounted as sampling without replacement
(`compute_epsilon_without_replacement`). Usage: `docs/accounting.md`.
"""

import functools
import math
from typing import Optional
from typing import Sequence
from typing import Tuple

import dp_accounting
import numpy as np

from fedasr_tff import validation

ACCOUNTANTS = ('rdp', 'pld')

# The coarse grid the paper's accountant used (its tables report orders from this set).
PUBLISHED_RDP_ORDERS = (1.1, 1.3, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0,
                        20.0, 25.0)

# The fine default grid: a superset of the published grid, dense where optima fall. Fractional
# orders near 1 are the costly ones in dp-accounting, so their spacing keeps one call short
# (docs/benchmarks.md, "Measurements behind the code").
DEFAULT_RDP_ORDERS = tuple(
    np.round(
        np.concatenate([
            [1.01, 1.02, 1.03, 1.05, 1.07],
            np.arange(1.1, 2.0, 0.05),
            np.arange(2.0, 3.0, 0.1),
            np.arange(3.0, 10.0, 0.25),
            np.arange(10, 65),
            [80, 96, 128, 192, 256, 512, 1024],
        ]),
        decimals=2).tolist())

# PLD discretization. A coarser interval is still a valid (pessimistic) bound; see `_pld_epsilon`.
_PLD_VALUE_DISCRETIZATION_INTERVAL = 1e-4

# Search range of `noise_multiplier_for_epsilon`, and its relative tolerance.
_MIN_NOISE_MULTIPLIER = 1e-4
_MAX_NOISE_MULTIPLIER = 1e6
_NOISE_MULTIPLIER_RTOL = 1e-4


def _check_mechanism(noise_multiplier, sampling_rate, steps) -> None:
  validation.check_positive('noise_multiplier', noise_multiplier)
  validation.check_sampling_rate('sampling_rate', sampling_rate)
  validation.check_non_negative_integer('steps', steps)


def _check_accountant(accountant: str) -> None:
  if accountant not in ACCOUNTANTS:
    raise ValueError(f'`accountant` must be one of {ACCOUNTANTS}, got {accountant!r}.')


def _check_orders(orders) -> Tuple[float, ...]:
  if orders is None:
    return DEFAULT_RDP_ORDERS
  orders = tuple(orders)
  if not orders:
    raise ValueError('`orders` must be a non-empty list of Rényi orders > 1, got [].')
  for order in orders:
    if isinstance(order, bool) or not isinstance(order, (int, float, np.number)) or not order > 1:
      raise ValueError(f'`orders` must hold Rényi orders > 1, got {order!r}.')
  return orders


def dp_event(noise_multiplier: float, sampling_rate: float,
             steps: int = 1) -> dp_accounting.DpEvent:
  """The `DpEvent` of `steps` rounds of the Poisson-sampled Gaussian mechanism.

  Every round samples each of the K users independently with probability q = S/K (Poisson
  sampling, the standard assumption even though simulations may draw a fixed cohort of S), sums
  the sampled users' deltas clipped to L2 norm C, and adds Gaussian noise of std z·C to the sum.
  Adding or removing one user changes the sum by at most C, so one round is the sampled Gaussian
  mechanism with noise multiplier z, and T rounds are its T-fold self-composition:

      event = SelfComposed(PoissonSampled(q, Gaussian(z)), T)

  Args:
    noise_multiplier: z > 0.
    sampling_rate: q in (0, 1]; q = 1 is no sampling (the event then has no sampling).
    steps: T >= 0.

  Returns:
    The `SelfComposedDpEvent`.
  """
  _check_mechanism(noise_multiplier, sampling_rate, steps)
  event = dp_accounting.GaussianDpEvent(noise_multiplier)
  if sampling_rate < 1:
    event = dp_accounting.PoissonSampledDpEvent(sampling_rate, event)
  return dp_accounting.SelfComposedDpEvent(event, steps)


def compute_epsilon_and_order(noise_multiplier: float, sampling_rate: float, steps: int,
                              delta: float,
                              orders: Optional[Sequence[float]] = None) -> Tuple[float, float]:
  """RDP ε after `steps` rounds and the Rényi order α at which the minimum is reached.

  dp-accounting's Rényi-DP accountant of the sampled Gaussian, converted to (ε, δ) with the
  improved conversion of Balle et al. 2020 ("Hypothesis Testing Interpretations and Renyi
  Differential Privacy", AISTATS 2020),
  ε = min_α RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1), which is what reproduces the paper's
  tables.

  Args:
    noise_multiplier: z, noise std on the cohort sum in units of the clip (z = σ_DP·S, the
      paper's Theorem 1).
    sampling_rate: q = S/K, the per-round probability that a user takes part.
    steps: T, the number of rounds.
    delta: target δ.
    orders: Rényi orders to minimise over; None for `DEFAULT_RDP_ORDERS`.

  Returns:
    (ε, α). With `steps == 0` nothing was released: (0.0, nan).
  """
  _check_mechanism(noise_multiplier, sampling_rate, steps)
  validation.check_open_unit_interval('delta', delta)
  orders = _check_orders(orders)
  if steps == 0:
    return 0.0, math.nan
  rdp = dp_accounting.rdp.RdpAccountant(orders=list(orders))
  rdp.compose(dp_event(noise_multiplier, sampling_rate, steps))
  epsilon, order = rdp.get_epsilon_and_optimal_order(delta)
  return float(epsilon), float(order)


def compute_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                    accountant: str = 'rdp',
                    orders: Optional[Sequence[float]] = None) -> float:
  """User-level ε after `steps` rounds of the sampled Gaussian mechanism (`dp_event`).

  The PLD accountant is tighter than RDP (`_pld_epsilon` on its discretization).

  Args:
    noise_multiplier: z, noise std on the cohort sum in units of the clip (z = σ_DP·S, the
      paper's Theorem 1).
    sampling_rate: q = S/K, the per-round probability that a user takes part.
    steps: T, the number of rounds (0 gives ε = 0).
    delta: target δ.
    accountant: "rdp" (Rényi DP) or "pld" (privacy loss distribution), both from dp-accounting.
    orders: Rényi orders for "rdp"; None for `DEFAULT_RDP_ORDERS`. Not allowed with "pld".

  Returns:
    ε (inf when no finite ε holds).

  Raises:
    ValueError: for an argument out of range, or `orders` with "pld".
  """
  _check_mechanism(noise_multiplier, sampling_rate, steps)
  validation.check_open_unit_interval('delta', delta)
  _check_accountant(accountant)
  if accountant == 'rdp':
    return compute_epsilon_and_order(noise_multiplier, sampling_rate, steps, delta, orders)[0]
  if orders is not None:
    raise ValueError('`orders` applies to accountant="rdp" only; got orders with "pld".')
  if steps == 0:
    return 0.0
  return _pld_epsilon(noise_multiplier, sampling_rate, steps, delta)


def compute_epsilon_without_replacement(noise_multiplier: float, population: int,
                                        cohort_size: int, steps: int, delta: float) -> float:
  """RDP ε of `steps` rounds of the Gaussian mechanism on fixed-size cohorts.

  Each round draws `cohort_size` distinct users of `population` uniformly without replacement,
  a different mechanism from `dp_event`'s, accounted exactly as run with
  `SampledWithoutReplacementDpEvent` and dp-accounting's RDP accountant (its only accountant for
  that event). That analysis (Wang, Balle and Kasiviswanathan, "Subsampled Rényi Differential
  Privacy and Analytical Moments Accountant", AISTATS 2019) holds for *replace-one* adjacency
  (the population size is public; neighbours swap one user's data for another's), so its ε is
  not comparable with `compute_epsilon`'s add/remove-one ε. Swapping one user's clipped delta
  (norm <= C) for another's moves the sum by up to 2C, so noise z·C is the Gaussian mechanism
  with multiplier z/2 in that relation, and that is what is accounted.

  Args:
    noise_multiplier: z > 0, the noise std on the sum in units of C.
    population: K, the users.
    cohort_size: S <= K, the users of every round.
    steps: T >= 0.
    delta: target δ.

  Returns:
    ε under replace-one adjacency.

  Raises:
    ValueError: for an argument out of range or S > K.
  """
  validation.check_positive('noise_multiplier', noise_multiplier)
  validation.check_cohort_within_population(cohort_size, population)
  validation.check_non_negative_integer('steps', steps)
  validation.check_open_unit_interval('delta', delta)
  if steps == 0:
    return 0.0
  # Replace-one sensitivity of the sum is 2C (docstring).
  event = dp_accounting.SampledWithoutReplacementDpEvent(
      population, cohort_size, dp_accounting.GaussianDpEvent(noise_multiplier / 2))
  accountant = dp_accounting.rdp.RdpAccountant(
      orders=list(DEFAULT_RDP_ORDERS),
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
  return float(accountant.get_epsilon(delta))


def _pld_epsilon(noise_multiplier: float, sampling_rate: float, steps: int,
                 delta: float) -> float:
  """PLD ε of the sampled Gaussian, with a discretization that scales with ε.

  dp-accounting rounds privacy losses *up* to a grid of width h (pessimistic estimates), so any h
  gives a valid upper bound, looser by at most steps·h. A fixed fine grid needs ~1/(h·z) buckets a
  round, hopeless (tens of GiB) for the tables' z ~ 1e-3 where ε ~ 1e9. So h is the coarser of
  1e-4 and 1e-3·ε_RDP/steps: the extra looseness stays below 0.1% of ε.

  For very weak noise the connect-the-dots construction of dp-accounting fails numerically; the
  privacy-buckets construction (also pessimistic, so also an upper bound) is used instead.
  """
  # The coarse grid is enough to size the grid, and far cheaper than the default one.
  rdp_epsilon = compute_epsilon_and_order(noise_multiplier, sampling_rate, steps, delta,
                                          PUBLISHED_RDP_ORDERS)[0]
  interval = _PLD_VALUE_DISCRETIZATION_INTERVAL
  if math.isfinite(rdp_epsilon):
    interval = max(interval, 1e-3 * rdp_epsilon / steps)
  try:
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
    pld.compose(dp_event(noise_multiplier, sampling_rate, steps))
    return float(pld.get_epsilon(delta))
  except (ValueError, OverflowError):
    pass
  pld = dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(
      noise_multiplier,
      sampling_prob=sampling_rate,
      value_discretization_interval=interval,
      use_connect_dots=False)
  return float(pld.self_compose(steps).get_epsilon_for_delta(delta))


class _PldAccountant(dp_accounting.PrivacyAccountant):
  """`_pld_epsilon` behind dp-accounting's `PrivacyAccountant` interface.

  dp-accounting's `PLDAccountant` fixes its discretization when it is built and always uses the
  connect-the-dots construction, while `_pld_epsilon` sizes the grid from the mechanism and falls
  back to privacy buckets. This adapter lets `calibrate_dp_mechanism` search on the very ε that
  `compute_epsilon` reports. It accounts one mechanism of the form `dp_event` builds.
  """

  def __init__(self):
    super().__init__(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    self._mechanism = None  # (noise_multiplier, sampling_rate, steps)

  def _maybe_compose(self, event: dp_accounting.DpEvent, count: int, do_compose: bool):
    steps = count
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
      event, steps = event.event, steps * event.count
    sampling_rate = 1.0
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
      event, sampling_rate = event.event, event.sampling_probability
    if self._mechanism is not None or not isinstance(event, dp_accounting.GaussianDpEvent):
      return self.CompositionErrorDetails(
          invalid_event=event, error_message='accounts one event of the form `dp_event` builds')
    if do_compose:
      self._mechanism = (event.noise_multiplier, sampling_rate, steps)
    return None

  def get_epsilon(self, target_delta: float) -> float:
    """ε of the composed mechanism (`_pld_epsilon`); 0 before any round."""
    if self._mechanism is None or self._mechanism[2] == 0:
      return 0.0
    return _pld_epsilon(*self._mechanism, target_delta)


def noise_multiplier_for_epsilon(target_epsilon: float, sampling_rate: float, steps: int,
                                 delta: float, accountant: str = 'rdp') -> float:
  """The smallest noise multiplier z whose ε after `steps` rounds is at most `target_epsilon`.

  dp-accounting's `calibrate_dp_mechanism` finds it on ε exactly as `compute_epsilon` computes
  it (ε falls as z grows): it widens a bracket upwards, doubling the step, then applies Brent's
  method to an absolute tolerance. It searches over x = log(e^z − 1), i.e. z = log(1 + e^x),
  because there the tolerance 1e-4 is at most 0.01% of z for every z (x ≈ log z for small z)
  and the bracket grows z geometrically (x ≈ z for large z), only as far as the target needs.
  (Over log z it would reach z ~ 1e8 at once, where dp-accounting's RDP of the sampled Gaussian
  comes out negative and raises.) The returned z meets the target and lies within 0.01% above
  the exact boundary. A target already met at z = 1e-4, the smallest z searched, gives 1e-4.

  Args:
    target_epsilon: ε > 0 to meet.
    sampling_rate: q in (0, 1].
    steps: T > 0.
    delta: target δ.
    accountant: "rdp" or "pld", as in `compute_epsilon`.

  Returns:
    z.

  Raises:
    ValueError: naming the argument that is out of range, or `target_epsilon` when it needs a z
      above 1e6.
  """
  validation.check_positive('target_epsilon', target_epsilon)
  validation.check_sampling_rate('sampling_rate', sampling_rate)
  validation.check_positive_integer('steps', steps)
  validation.check_open_unit_interval('delta', delta)
  _check_accountant(accountant)
  if compute_epsilon(_MIN_NOISE_MULTIPLIER, sampling_rate, steps, delta,
                     accountant) <= target_epsilon:
    return _MIN_NOISE_MULTIPLIER
  if accountant == 'rdp':
    make_accountant = functools.partial(dp_accounting.rdp.RdpAccountant,
                                        orders=list(DEFAULT_RDP_ORDERS))
  else:
    make_accountant = _PldAccountant

  def noise_multiplier(x: float) -> float:
    return float(np.logaddexp(0.0, x))

  def make_event(x: float) -> dp_accounting.DpEvent:
    # Only the bracket search, widening upwards, gets here; it lets the error through as is.
    if noise_multiplier(x) > _MAX_NOISE_MULTIPLIER:
      raise ValueError(
          f'`target_epsilon`={target_epsilon} needs a noise multiplier above '
          f'{_MAX_NOISE_MULTIPLIER:g} at sampling_rate={sampling_rate}, steps={steps}.')
    return dp_event(noise_multiplier(x), sampling_rate, steps)

  bracket = dp_accounting.LowerEndpointAndGuess(
      lower_endpoint=math.log(math.expm1(_MIN_NOISE_MULTIPLIER)),  # z = 1e-4
      initial_guess=math.log(math.expm1(1.0)))  # z = 1
  x = dp_accounting.calibrate_dp_mechanism(make_accountant, make_event, target_epsilon, delta,
                                           bracket, tol=_NOISE_MULTIPLIER_RTOL)
  return noise_multiplier(x)
