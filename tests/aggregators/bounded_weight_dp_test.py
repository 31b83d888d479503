"""The bounded-weight DP weighted mean: its exact result, sensitivity, noise and DP event."""

import collections
import math

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import privacy
from fedasr_tff import runtime
from fedasr_tff.aggregators import bounded_weight_dp
from fedasr_tff.program import privacy_ledger

_SHAPES = [(4, 3), (3,), (10,)]
_VALUE_TYPE = tff.types.to_type([tff.TensorType(np.float32, s) for s in _SHAPES])
_WEIGHT_TYPE = tff.TensorType(np.float32)
_EXTRACT_EVENT = tff.aggregators.differential_privacy.extract_dp_event_from_state


def _delta(rng, scale=1.0):
  return [(scale * rng.normal(size=s)).astype(np.float32) for s in _SHAPES]


def _norm(value):
  return math.sqrt(sum(float(np.sum(np.square(np.asarray(x, np.float64)))) for x in value))


def _fixed(z=0.0, cohort=3, clip=1.0, min_weight=0.1, **kwargs):
  return aggregators.BoundedWeightDPFactory.gaussian_fixed(z, cohort, clip, min_weight,
                                                           **kwargs)


class WeightedMeanTest(parameterized.TestCase):

  def test_without_noise_is_the_weighted_mean_of_the_clipped_deltas(self):
    rng = np.random.default_rng(0)
    deltas = [_delta(rng, 0.1) for _ in range(3)]
    weights = [1.0, 0.4, 0.2]
    process = _fixed(clip=100.0, allocation='global', diagnostics=True).create(_VALUE_TYPE,
                                                                               _WEIGHT_TYPE)
    output = process.next(process.initialize(), deltas, weights)
    for h, got in enumerate(output.result):
      want = sum(w * d[h] for w, d in zip(weights, deltas, strict=True)) / sum(weights)
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    metrics = output.measurements['dp_query_metrics']
    self.assertAlmostEqual(metrics['weight_sum'], 1.6, places=5)
    self.assertAlmostEqual(metrics['client_statistics']['weight_sum'], 1.6, places=5)

  def test_default_reports_no_client_statistics(self):
    # The exact weight sum and the per-layer client norms only with `diagnostics=True`.
    rng = np.random.default_rng(0)
    process = _fixed(clip=100.0, allocation='global').create(_VALUE_TYPE, _WEIGHT_TYPE)
    output = process.next(process.initialize(), [_delta(rng, 0.1) for _ in range(3)],
                          [1.0, 0.4, 0.2])
    self.assertNotIn('client_statistics', output.measurements['dp_query_metrics'])

  def test_weights_are_clipped_to_the_bounds_and_nonfinite_ones_to_the_minimum(self):
    rng = np.random.default_rng(1)
    deltas = [_delta(rng, 0.1) for _ in range(4)]
    given = [5.0, -3.0, float('nan'), float('inf')]
    bounded = [1.0, 0.1, 0.1, 0.1]
    process = _fixed(cohort=4, clip=100.0, allocation='global').create(_VALUE_TYPE,
                                                                       _WEIGHT_TYPE)
    output = process.next(process.initialize(), deltas, given)
    for h, got in enumerate(output.result):
      want = sum(w * d[h] for w, d in zip(bounded, deltas, strict=True)) / sum(bounded)
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)

  def test_weight_multiplies_after_the_clip(self):
    # Both deltas are far above the clip: a clipped w·Δ would drop the weights.
    rng = np.random.default_rng(2)
    a, b = _delta(rng, 100.0), _delta(rng, 100.0)
    clip = 1.0
    process = _fixed(cohort=2, clip=clip, allocation='global').create(_VALUE_TYPE,
                                                                      _WEIGHT_TYPE)
    output = process.next(process.initialize(), [a, b], [1.0, 0.25])
    unit_a = [x * clip / _norm(a) for x in a]
    unit_b = [x * clip / _norm(b) for x in b]
    for h, got in enumerate(output.result):
      np.testing.assert_allclose(got, (unit_a[h] + 0.25 * unit_b[h]) / 1.25, rtol=1e-4,
                                 atol=1e-6)


class SensitivityTest(parameterized.TestCase):
  """One client moves the value sum by at most C and the weight sum by at most 1."""

  @parameterized.parameters('global', 'uniform', 'dim')
  def test_adversarial_records_stay_in_the_ball(self, allocation):
    clip = 0.5
    query = _fixed(2.0, clip=clip, allocation=allocation).build_query(_VALUE_TYPE)
    params = query.derive_sample_params(query.initial_global_state())
    rng = np.random.default_rng(3)
    deltas = {'huge': _delta(rng, 1e30), 'tiny': _delta(rng, 1e-30),
              'mixed': [np.full((4, 3), 3e38, np.float32), np.full(3, -1e-40, np.float32),
                        np.zeros(10, np.float32)],
              'nan': [np.full((4, 3), np.nan, np.float32), np.ones(3, np.float32),
                      np.ones(10, np.float32)]}
    for delta_name, delta in deltas.items():
      for weight in (1e30, 1.0, 0.7, 0.0, -1e30, float('nan'), float('-inf')):
        record = collections.OrderedDict(update=[tf.constant(x) for x in delta],
                                         weight=tf.constant(weight, tf.float32))
        (value, _, _), w = query.preprocess_record(params, record)
        w = float(w)
        self.assertTrue(0.1 <= w <= 1.0, msg=(delta_name, weight, w))
        self.assertLessEqual(_norm(value), clip * (1 + 1e-5), msg=(delta_name, weight))
        self.assertTrue(all(np.all(np.isfinite(x)) for x in value))

  def test_floor_bounds_the_update_when_the_noised_weight_sum_is_small(self):
    # One client of weight w_min under heavy noise: the denominator never drops below the
    # floor, so the released mean stays finite and bounded by ||noised sum|| / floor.
    rng = np.random.default_rng(4)
    factory = _fixed(z=5.0, cohort=1, clip=1.0, min_weight=0.1, weight_sum_floor=0.1,
                     noise_seed=3)
    process = factory.create(_VALUE_TYPE, _WEIGHT_TYPE)
    state = process.initialize()
    denominators = []
    for _ in range(20):
      output = process.next(state, [_delta(rng)], [0.1])
      state = output.state
      metrics = output.measurements['dp_query_metrics']
      denominators.append(metrics['weight_denominator'])
      self.assertGreaterEqual(metrics['weight_denominator'], 0.1)
      self.assertEqual(metrics['weight_denominator'],
                       max(metrics['weight_sum'], np.float32(0.1)))
      self.assertTrue(all(np.all(np.isfinite(x)) for x in output.result))
    # With std 5/sqrt(0.1) on a sum of 0.1, about half the rounds fall on the floor.
    self.assertGreater(sum(d == np.float32(0.1) for d in denominators), 3)


class NoiseTest(parameterized.TestCase):

  def test_budget_split(self):
    z, f = 1.3, 0.2
    z_value, z_weight = bounded_weight_dp.split_noise_multiplier(z, f)
    self.assertAlmostEqual(z_value**-2 + z_weight**-2, z**-2, places=12)
    self.assertAlmostEqual(z_weight**-2 / z**-2, f, places=12)
    self.assertEqual(bounded_weight_dp.split_noise_multiplier(0.0, f), (0.0, 0.0))

  def test_empirical_noise_std_of_values_and_weight_sum(self):
    z, cohort, clip, f = 2.0, 4, 0.5, 0.25
    z_value, z_weight = bounded_weight_dp.split_noise_multiplier(z, f)
    value_type = tff.types.to_type([tff.TensorType(np.float32, [5000])] * 2)
    factory = _fixed(z, cohort=cohort, clip=clip, min_weight=0.5, weight_budget=f,
                     weight_sum_floor=1e-3, allocation='dim')
    process = factory.create(value_type, _WEIGHT_TYPE)
    state = process.initialize()
    zeros = [[np.zeros(5000, np.float32)] * 2] * cohort
    weight_sums, values = [], []
    for _ in range(300):
      output = process.next(state, zeros, [1.0] * cohort)
      state = output.state
      metrics = output.measurements['dp_query_metrics']
      weight_sums.append(metrics['weight_sum'])
      if len(values) < 3:
        # Undo the division to see the noise on the value sum.
        values.append(np.concatenate(output.result) * metrics['weight_denominator'])
    self.assertAlmostEqual(np.std(weight_sums) / z_weight, 1.0, delta=0.15)
    self.assertAlmostEqual(np.mean(weight_sums), cohort, delta=4 * z_weight / np.sqrt(300))
    self.assertAlmostEqual(np.std(np.concatenate(values)) / (z_value * clip), 1.0, delta=0.03)

  def test_noise_stream_replays_from_the_state(self):
    rng = np.random.default_rng(5)
    deltas = [_delta(rng) for _ in range(3)]
    process = _fixed(1.0).create(_VALUE_TYPE, _WEIGHT_TYPE)
    state = process.initialize()
    first = process.next(state, deltas, [1.0, 0.5, 0.2])
    again = process.next(state, deltas, [1.0, 0.5, 0.2])
    second = process.next(first.state, deltas, [1.0, 0.5, 0.2])
    for a, b, c in zip(first.result, again.result, second.result, strict=True):
      np.testing.assert_array_equal(a, b)
      self.assertFalse(np.array_equal(a, c))


class DpEventTest(parameterized.TestCase):

  @parameterized.parameters('fixed', 'adaptive')
  def test_event_is_the_total_multiplier_and_the_ledger_accounts_it(self, kind):
    z, cohort, population, rounds, delta = 0.9, 20, 2000, 300, 1e-6
    if kind == 'fixed':
      factory = _fixed(z, cohort=cohort, clip=0.1, allocation='dim')
    else:
      factory = aggregators.BoundedWeightDPFactory.gaussian_adaptive(
          z, cohort, 0.1, min_weight=0.1, allocation='dim')
    process = factory.create(_VALUE_TYPE, _WEIGHT_TYPE)
    state = process.initialize()
    self.assertAlmostEqual(privacy_ledger.applied_noise_multiplier(state), z, places=5)
    rng = np.random.default_rng(6)
    output = process.next(state, [_delta(rng) for _ in range(cohort)],
                          list(rng.uniform(0.1, 1.0, size=cohort).astype(np.float32)))
    event = _EXTRACT_EVENT(output.state)
    self.assertIsInstance(event, dp_accounting.GaussianDpEvent)
    self.assertAlmostEqual(event.noise_multiplier, z, places=5)
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(privacy.DEFAULT_RDP_ORDERS))
    accountant.compose(dp_accounting.PoissonSampledDpEvent(cohort / population, event), rounds)
    applied = privacy_ledger.applied_noise_multiplier(output.state)
    ledger = privacy_ledger.PrivacyLedger(
        noise_multiplier=applied, cohort_size=cohort, population=population,
        declared_noise_multiplier=applied, declared_cohort_size=cohort,
        declared_population=population, planned_rounds=rounds, delta=delta)
    self.assertAlmostEqual(ledger.metrics(rounds)['epsilon_run_rdp'],
                           accountant.get_epsilon(delta), places=4)

  def test_without_noise_the_event_is_zero(self):
    process = _fixed(0.0).create(_VALUE_TYPE, _WEIGHT_TYPE)
    self.assertEqual(privacy_ledger.applied_noise_multiplier(process.initialize()), 0.0)


class ArgumentTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('min_weight_zero', dict(min_weight=0.0), 'min_weight'),
      ('min_weight_above_one', dict(min_weight=1.5), 'min_weight'),
      ('budget', dict(weight_budget=1.0), 'weight_budget'),
      ('floor', dict(weight_sum_floor=0.0), 'weight_sum_floor'),
      ('client_noise', dict(noise_placement='client'), 'noise_placement'),
  )
  def test_bad_arguments_name_the_argument(self, override, name):
    kwargs = dict(noise_multiplier=1.0, clients_per_round=3, clip=1.0, min_weight=0.1)
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      aggregators.BoundedWeightDPFactory.gaussian_fixed(**kwargs)

  def test_weight_type_must_be_a_float_scalar(self):
    with self.assertRaisesRegex(ValueError, 'weight_type'):
      _fixed().create(_VALUE_TYPE, tff.TensorType(np.float32, [2]))


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
