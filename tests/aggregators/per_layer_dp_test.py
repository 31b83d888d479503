
import dataclasses
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import privacy
from fedasr_tff import runtime
from tests.runtime import dp_mlp

_SHAPES = [(7, 5), (5,), (3, 3, 4), (1,), (32,), (8, 8), (2,), (16, 3), (4,), (50,), (6, 2)]
_VALUE_TYPE = tff.types.to_type([tff.TensorType(np.float32, s) for s in _SHAPES])
_SIZES = np.array([int(np.prod(s)) for s in _SHAPES])
_EXTRACT_EVENT = tff.aggregators.differential_privacy.extract_dp_event_from_state
# Tensor names as a model's, with slashes.
_LEAF_NAMES = [f'block_{h:02d}/w{h % 2 + 1}/kernel' for h in range(len(_SHAPES) - 1)] + ['output']


def _random_delta(rng, scales=None):
  scales = np.ones(len(_SHAPES)) if scales is None else scales
  return [(s * rng.normal(size=shape)).astype(np.float32) for s, shape in zip(
      scales, _SHAPES, strict=True)]


def _preprocess(factory, delta):
  """Runs the factory's own query on one client delta: (clipped delta, C_h)."""
  query = factory.build_query(_VALUE_TYPE)
  params = query.derive_sample_params(query.initial_global_state())
  value, _, _ = query.preprocess_record(params, [tf.constant(x) for x in delta])
  return [x.numpy() for x in value], params.numpy()


def _group_norms(delta):
  return np.array([np.linalg.norm(x) for x in delta])


def _per_group(per_group, key):
  """The measurement `key` of every group, in group order."""
  return np.array([values[key] for values in per_group.values()])


class ClippingTest(parameterized.TestCase):

  @parameterized.parameters('global', 'uniform', 'dim', 'weighted')
  def test_group_and_total_norms_are_bounded(self, allocation):
    rng = np.random.default_rng(1)
    weights = list(rng.uniform(0.5, 3, len(_SHAPES))) if allocation == 'weighted' else None
    clip = 0.5
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(
        0.0, 10, clip, allocation=allocation, layer_weights=weights)
    for trial in range(20):
      # Unbalanced groups, as in the paper: some groups far above, some below their bound.
      delta = _random_delta(rng, scales=10.0**rng.uniform(-3, 1, len(_SHAPES)))
      clipped, clips = _preprocess(factory, delta)
      norms = _group_norms(clipped)
      self.assertLessEqual(np.linalg.norm(norms), clip * (1 + 1e-5), msg=f'trial {trial}')
      if allocation != 'global':
        self.assertLen(clips, len(_SHAPES))
        np.testing.assert_array_less(norms, clips * (1 + 1e-5))
        # A group already within its bound is untouched (Def. 3 of Pelikan et al., NeurIPS 2025,
        # arXiv:2310.00098: clip(v, C) = v · C / max(C, ||v||)).
        inside = _group_norms(delta) <= clips
        for h in np.flatnonzero(inside):
          np.testing.assert_allclose(clipped[h], delta[h], rtol=1e-6)

  @parameterized.parameters('global', 'uniform', 'dim')
  def test_normalize_sets_every_group_to_its_bound(self, allocation):
    rng = np.random.default_rng(2)
    clip = 0.01
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(
        0.0, 10, clip, allocation=allocation, normalize=True)
    delta = _random_delta(rng, scales=10.0**rng.uniform(-3, 0, len(_SHAPES)))
    self.assertGreater(np.linalg.norm(_group_norms(delta)), clip)
    clipped, clips = _preprocess(factory, delta)
    if allocation == 'global':
      self.assertAlmostEqual(np.linalg.norm(_group_norms(clipped)), clip, delta=1e-6 * clip)
    else:
      np.testing.assert_allclose(_group_norms(clipped), clips, rtol=1e-5)
    # Below C the delta is left alone.
    small = [x * (0.5 * clip / np.linalg.norm(_group_norms(delta))) for x in delta]
    unchanged, _ = _preprocess(factory, small)
    for got, want in zip(unchanged, small, strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-6)


# One group of 10000 entries, where the squares of tiny entries underflow in bulk.
_EXTREME_SHAPES = [(50,), (10000,), (20, 5), (300,)]
_EXTREME_VALUE_TYPE = tff.types.to_type(
    [tff.TensorType(np.float32, s) for s in _EXTREME_SHAPES])


def _extreme_deltas(rng):
  """Deltas with groups whose float32 squares underflow or overflow, next to ordinary groups."""
  def delta(**groups):
    values = [0.1 * rng.normal(size=s) for s in _EXTREME_SHAPES]
    for h, value in groups.items():
      values[int(h[1:])] = value
    return [np.asarray(x, np.float32) for x in values]

  signs = rng.choice([-1.0, 1.0], size=10000)
  partly = 3e-20 * signs
  partly[:3] = 1e-18
  return {
      'underflowing': delta(g1=1e-25 * signs),
      'partly_underflowing': delta(g1=partly),
      'subnormal': delta(g1=1e-40 * signs),
      'huge_and_subnormal': delta(g0=np.full(50, 1e38), g3=np.full(300, -1e-40)),
      'huge_and_underflowing': delta(g0=np.full(50, -1e38), g1=1e-25 * signs),
  }


class SensitivityTest(parameterized.TestCase):
  """||clipped record|| <= C for every finite delta, seen in a real aggregation round."""

  @parameterized.named_parameters(
      (f'{allocation}_{"normalize" if normalize else "clip"}_{placement}', allocation,
       normalize, placement)
      for allocation, normalize, placement in itertools.product(
          ('global', 'uniform', 'dim', 'weighted'), (False, True), ('server', 'client')))
  def test_round_result_stays_within_the_clip_for_extreme_deltas(self, allocation, normalize,
                                                                 placement):
    clip = 0.01
    weights = [1.0, 0.5, 3.0, 2.0] if allocation == 'weighted' else None
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(
        0.0, 1, clip, allocation, layer_weights=weights, normalize=normalize,
        noise_placement=placement)
    clips = aggregators.group_clips(clip, [np.prod(s) for s in _EXTREME_SHAPES], allocation,
                                    weights)
    process = factory.create(_EXTREME_VALUE_TYPE)
    state = process.initialize()
    for name, delta in _extreme_deltas(np.random.default_rng(12)).items():
      result = process.next(state, [delta]).result
      self.assertTrue(all(np.all(np.isfinite(x)) for x in result), msg=name)
      norm = np.sqrt(sum(np.sum(np.square(x.astype(np.float64))) for x in result))
      self.assertLessEqual(norm, clip * (1 + 1e-5), msg=name)
      if name.startswith('huge'):
        # The 1e38 group is clipped to its bound (C_1, or C itself with one group), not dropped.
        self.assertAlmostEqual(np.linalg.norm(result[0].astype(np.float64)), clips[0],
                               delta=1e-5 * clips[0], msg=name)


def _run_round(factory, deltas, value_type=_VALUE_TYPE):
  process = factory.create(value_type)
  return process.next(process.initialize(), deltas)


class AggregationTest(parameterized.TestCase):

  def test_large_clip_and_no_noise_is_the_plain_mean(self):
    rng = np.random.default_rng(3)
    deltas = [_random_delta(rng) for _ in range(4)]
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(0.0, 4, 1e6, allocation='dim')
    output = _run_round(factory, deltas)
    for h, got in enumerate(output.result):
      np.testing.assert_allclose(got, np.mean([d[h] for d in deltas], axis=0), rtol=1e-5,
                                 atol=1e-6)

  def test_global_allocation_equals_tff_gaussian_fixed(self):
    rng = np.random.default_rng(4)
    deltas = [_random_delta(rng) for _ in range(5)]
    ours = _run_round(aggregators.PerLayerDPFactory.gaussian_fixed(0.0, 5, 2.0, 'global'),
                      deltas)
    tffs = _run_round(tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(0.0, 5.0, 2.0),
                      deltas)
    for a, b in zip(ours.result, tffs.result, strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)

  @parameterized.parameters('server', 'client')
  def test_noise_std_on_the_mean_is_sigma_dp_times_clip(self, placement):
    cohort, clip, sigma_dp = 5, 0.01, 0.3
    z = privacy.noise_multiplier_from_sigma_dp(sigma_dp, cohort)
    value_type = tff.types.to_type([tff.TensorType(np.float32, [4000])] * 5)
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(z, cohort, clip, 'dim',
                                                           noise_placement=placement)
    process = factory.create(value_type)
    state = process.initialize()
    zeros = [[np.zeros(4000, np.float32)] * 5] * cohort
    samples = []
    for _ in range(3):
      output = process.next(state, zeros)
      state = output.state
      samples.append(np.concatenate(output.result))
    std = np.std(np.concatenate(samples))
    self.assertAlmostEqual(std / (sigma_dp * clip), 1.0, delta=0.03)
    metrics = output.measurements['dp_query_metrics']
    np.testing.assert_allclose(metrics['noise_stddev'], sigma_dp * clip, rtol=1e-5)

  @parameterized.parameters('fixed', 'adaptive')
  def test_server_noise_stream_is_fresh_each_round_and_replays_from_state(self, kind):
    zeros = [[np.zeros(s, np.float32) for s in _SHAPES]] * 4

    def factory(noise_seed):
      if kind == 'fixed':
        return aggregators.PerLayerDPFactory.gaussian_fixed(2.0, 4, 1.0, noise_seed=noise_seed)
      return aggregators.PerLayerDPFactory.gaussian_adaptive(
          2.0, 4, 1.0, clipped_count_stddev=10.0, noise_seed=noise_seed)

    def build(noise_seed):
      return factory(noise_seed).create(_VALUE_TYPE)

    def rounds(process, state, count):
      results = []
      for _ in range(count):
        output = process.next(state, zeros)
        state = output.state
        results.append(np.concatenate([x.ravel() for x in output.result]))
      return results, state

    def from_start(noise_seed, count):
      process = build(noise_seed)
      return rounds(process, process.initialize(), count)[0]

    process = build(7)
    first, _ = rounds(process, process.initialize(), 3)
    self.assertGreater(np.std(first[0] - first[1]), 0.1)   # A new draw every round.
    # Another process with the same seed, after round 1, hands its state (as a checkpoint
    # would) to the first, which continues the same stream from it.
    other_process = build(7)
    _, state = rounds(other_process, other_process.initialize(), 1)
    resumed, _ = rounds(process, state, 2)
    np.testing.assert_array_equal(resumed[0], first[1])
    np.testing.assert_array_equal(resumed[1], first[2])
    other = from_start(8, 1)
    self.assertGreater(np.std(other[0] - first[0]), 0.1)
    # An unseeded factory draws its seed from OS entropy: two processes of one (shared noise
    # would cancel in differences) and a process of another all differ.
    unseeded = factory(None)
    a_process, b_process = unseeded.create(_VALUE_TYPE), unseeded.create(_VALUE_TYPE)
    a, _ = rounds(a_process, a_process.initialize(), 1)
    b, _ = rounds(b_process, b_process.initialize(), 1)
    c = from_start(None, 1)
    self.assertGreater(np.std(a[0] - b[0]), 0.1)
    self.assertGreater(np.std(a[0] - c[0]), 0.1)

  def test_nonfinite_delta_is_zeroed_and_counted(self):
    rng = np.random.default_rng(5)
    good = [_random_delta(rng) for _ in range(3)]
    bad = _random_delta(rng)
    bad[2][0, 0, 0] = np.nan
    bad[5][1, 1] = np.inf
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(0.0, 4, 1e6, 'dim', diagnostics=True)
    output = _run_round(factory, good + [bad])
    for h, got in enumerate(output.result):
      self.assertTrue(np.all(np.isfinite(got)))
      np.testing.assert_allclose(got, np.sum([d[h] for d in good], axis=0) / 4, rtol=1e-5,
                                 atol=1e-6)
    statistics = output.measurements['dp_query_metrics']['client_statistics']
    self.assertEqual(statistics['nonfinite_clients'], 1.0)

  def test_measurements_per_group(self):
    deltas = [[np.full(s, 1.0, np.float32) for s in _SHAPES] for _ in range(2)]
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(0.0, 2, 1.0, 'uniform',
                                                           diagnostics=True)
    metrics = _run_round(factory, deltas).measurements['dp_query_metrics']
    statistics = metrics['client_statistics']
    norms = np.sqrt(_SIZES)
    clips = np.full(len(_SHAPES), 1 / np.sqrt(len(_SHAPES)))
    np.testing.assert_allclose(_per_group(statistics['per_group'], 'norm_before_clip'), norms,
                               rtol=1e-5)
    np.testing.assert_allclose(_per_group(statistics['per_group'], 'norm_after_clip'),
                               np.minimum(norms, clips), rtol=1e-5)
    clipped = (norms > clips).astype(float)
    np.testing.assert_allclose(_per_group(statistics['per_group'], 'clipped_fraction'), clipped)
    np.testing.assert_allclose(statistics['clipped_fraction'], np.mean(clipped), rtol=1e-6)
    np.testing.assert_allclose(_per_group(metrics['per_group'], 'clip'), clips, rtol=1e-6)
    np.testing.assert_allclose(_per_group(metrics['per_group'], 'next_clip'), clips, rtol=1e-6)
    np.testing.assert_allclose(metrics['clip'], 1.0, rtol=1e-6)
    np.testing.assert_allclose(metrics['noise_stddev'], 0.0)
    self.assertEqual(statistics['clients'], 2.0)

  def test_dp_event_composes_to_compute_epsilon(self):
    z, cohort, population, rounds, delta = 1.1, 4, 400, 500, 1e-6
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(z, cohort, 0.1, 'dim')
    rng = np.random.default_rng(6)
    output = _run_round(factory, [_random_delta(rng) for _ in range(cohort)])
    event = _EXTRACT_EVENT(output.state)
    self.assertIsInstance(event, dp_accounting.GaussianDpEvent)
    self.assertAlmostEqual(event.noise_multiplier, z, places=6)  # TFF returns float32.
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(privacy.DEFAULT_RDP_ORDERS))
    accountant.compose(dp_accounting.PoissonSampledDpEvent(cohort / population, event), rounds)
    self.assertAlmostEqual(accountant.get_epsilon(delta),
                           privacy.compute_epsilon(z, cohort / population, rounds, delta),
                           places=5)

  def test_adaptive_event_costs_exactly_the_total_multiplier(self):
    z, cohort = 0.8, 100
    factory = aggregators.PerLayerDPFactory.gaussian_adaptive(z, cohort, 0.1, allocation='dim')
    rng = np.random.default_rng(7)
    output = _run_round(factory, [_random_delta(rng) for _ in range(cohort)])
    event = _EXTRACT_EVENT(output.state)
    self.assertIsInstance(event, dp_accounting.GaussianDpEvent)
    self.assertAlmostEqual(event.noise_multiplier, z, places=5)
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(privacy.DEFAULT_RDP_ORDERS))
    accountant.compose(dp_accounting.PoissonSampledDpEvent(0.01, event), 100)
    self.assertAlmostEqual(accountant.get_epsilon(1e-6),
                           privacy.compute_epsilon(z, 0.01, 100, 1e-6), places=4)

  def test_adaptive_noise_split(self):
    # H counts of sensitivity sqrt(H)/2 with std sigma_b, plus the value noise z_v, cost z.
    z, sigma_b, groups = 0.8, 5.0, 11
    z_v = aggregators.adaptive_value_noise_multiplier(z, sigma_b, groups)
    self.assertAlmostEqual(z_v**-2 + groups / (2 * sigma_b)**2, z**-2, places=12)
    # One group reproduces TFF's own split.
    tff_z_v, _ = tff.aggregators.differential_privacy.adaptive_clip_noise_params(z, 100.0, sigma_b)
    self.assertAlmostEqual(aggregators.adaptive_value_noise_multiplier(z, sigma_b, 1), tff_z_v)
    self.assertEqual(aggregators.adaptive_value_noise_multiplier(0.0, 0.0, groups), 0.0)


_PUBLIC_METRICS = {'noise_stddev', 'clip', 'per_group'}
_CLIENT_STATISTICS = {'clipped_fraction', 'nonfinite_clients', 'clients', 'per_group'}


class MeasurementsTest(parameterized.TestCase):

  def _round(self, kind, diagnostics):
    cohort, clip, z, count_stddev = 4, 0.5, 1.0, 10.0
    if kind == 'fixed':
      factory = aggregators.PerLayerDPFactory.gaussian_fixed(z, cohort, clip, 'dim',
                                                             diagnostics=diagnostics)
      value_z = z
    else:
      factory = aggregators.PerLayerDPFactory.gaussian_adaptive(
          z, cohort, clip, clipped_count_stddev=count_stddev, diagnostics=diagnostics)
      value_z = aggregators.adaptive_value_noise_multiplier(z, count_stddev, len(_SHAPES))
    rng = np.random.default_rng(13)
    output = _run_round(factory, [_random_delta(rng) for _ in range(cohort)])
    return output.measurements, value_z * clip / cohort, clip

  @parameterized.parameters('fixed', 'adaptive')
  def test_without_diagnostics_only_clips_and_noise_stddev_are_reported(self, kind):
    measurements, noise_stddev, clip = self._round(kind, diagnostics=False)
    self.assertEqual(set(measurements), {'dp_query_metrics', 'dp'})
    self.assertEmpty(measurements['dp'])   # The inner sum reports nothing.
    metrics = measurements['dp_query_metrics']
    self.assertEqual(set(metrics), _PUBLIC_METRICS)
    self.assertEqual(np.ndim(metrics['noise_stddev']), 0)
    np.testing.assert_allclose(metrics['noise_stddev'], noise_stddev, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(_per_group(metrics['per_group'], 'clip')), clip,
                               rtol=1e-5)
    self.assertEqual(np.ndim(metrics['clip']), 0)
    np.testing.assert_allclose(metrics['clip'], clip, rtol=1e-5)
    self.assertLen(metrics['per_group'], len(_SHAPES))
    for values in metrics['per_group'].values():
      self.assertEqual(set(values), {'clip', 'next_clip', 'released_norm', 'noise_norm'})

  @parameterized.parameters('fixed', 'adaptive')
  def test_released_norms_are_those_of_the_noised_average(self, kind):
    cohort, clip, z = 4, 0.5, 1.0
    if kind == 'fixed':
      factory = aggregators.PerLayerDPFactory.gaussian_fixed(z, cohort, clip, 'dim',
                                                             diagnostics=False)
    else:
      factory = aggregators.PerLayerDPFactory.gaussian_adaptive(
          z, cohort, clip, clipped_count_stddev=10.0, diagnostics=False)
    rng = np.random.default_rng(15)
    output = _run_round(factory, [_random_delta(rng) for _ in range(cohort)])
    metrics = output.measurements['dp_query_metrics']
    # Post-processing of the release: the norms of the aggregate the process hands on.
    np.testing.assert_allclose(_per_group(metrics['per_group'], 'released_norm'),
                               _group_norms(output.result), rtol=1e-5)
    np.testing.assert_allclose(_per_group(metrics['per_group'], 'noise_norm'),
                               np.sqrt(_SIZES) * metrics['noise_stddev'], rtol=1e-5)

  @parameterized.parameters('fixed', 'adaptive')
  def test_default_reports_no_client_statistics(self, kind):
    # The private choice is the default: a factory dropped into any pipeline releases no
    # un-noised client statistic unless `diagnostics=True` asks for them.
    if kind == 'fixed':
      factory = aggregators.PerLayerDPFactory.gaussian_fixed(1.0, 4, 0.5)
    else:
      factory = aggregators.PerLayerDPFactory.gaussian_adaptive(1.0, 4, 0.5,
                                                                clipped_count_stddev=10.0)
    self.assertFalse(factory.diagnostics)
    rng = np.random.default_rng(13)
    metrics = _run_round(factory, [_random_delta(rng) for _ in range(4)]).measurements[
        'dp_query_metrics']
    self.assertEqual(set(metrics), _PUBLIC_METRICS)

  @parameterized.parameters('fixed', 'adaptive')
  def test_diagnostics_add_the_client_statistics(self, kind):
    measurements, noise_stddev, _ = self._round(kind, diagnostics=True)
    metrics = measurements['dp_query_metrics']
    self.assertEqual(set(metrics), _PUBLIC_METRICS | {'client_statistics'})
    statistics = metrics['client_statistics']
    self.assertEqual(set(statistics), _CLIENT_STATISTICS)
    self.assertEqual(np.ndim(metrics['noise_stddev']), 0)
    np.testing.assert_allclose(metrics['noise_stddev'], noise_stddev, rtol=1e-5)
    self.assertEqual(statistics['clients'], 4.0)
    self.assertEqual(list(statistics['per_group']), list(metrics['per_group']))
    for values in statistics['per_group'].values():
      self.assertEqual(set(values), {'norm_before_clip', 'norm_after_clip', 'clipped_fraction'})

  @parameterized.named_parameters(
      ('leaf_names', 'fixed', dict(allocation='dim'), _LEAF_NAMES),
      ('leaf_names_adaptive', 'adaptive', dict(allocation='uniform'), _LEAF_NAMES),
      ('global', 'fixed', dict(allocation='global'), ['all']),
      ('global_adaptive', 'adaptive', dict(allocation='global'), ['all']),
      ('custom_grouping', 'fixed', dict(grouping=[0, 0, 1] + [2] * 8), ['group_0', 'group_1',
                                                                       'group_2']),
  )
  def test_groups_are_keyed_by_name(self, kind, kwargs, names):
    if kind == 'fixed':
      factory = aggregators.PerLayerDPFactory.gaussian_fixed(0.0, 2, 1.0, leaf_names=_LEAF_NAMES,
                                                             diagnostics=True, **kwargs)
    else:
      factory = aggregators.PerLayerDPFactory.gaussian_adaptive(
          0.0, 2, 1.0, leaf_names=_LEAF_NAMES, diagnostics=True, **kwargs)
    rng = np.random.default_rng(14)
    metrics = _run_round(factory, [_random_delta(rng) for _ in range(2)]).measurements[
        'dp_query_metrics']
    self.assertEqual(list(metrics['per_group']), names)
    self.assertEqual(list(metrics['client_statistics']['per_group']), names)
    np.testing.assert_allclose(np.linalg.norm(_per_group(metrics['per_group'], 'clip')), 1.0,
                               rtol=1e-5)

  def test_groups_without_leaf_names_are_numbered(self):
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(0.0, 1, 1.0, diagnostics=False)
    metrics = _run_round(factory, [_random_delta(np.random.default_rng(15))]).measurements[
        'dp_query_metrics']
    self.assertEqual(list(metrics['per_group']), [f'group_{h}' for h in range(len(_SHAPES))])


class AdaptiveClippingTest(absltest.TestCase):

  def test_each_group_tracks_its_own_quantile(self):
    # Stationary norms: group h of every client has norm exp(mu_h + 0.5 N(0,1)) (median
    # exp(mu_h)); no noise on the count estimate.
    rng = np.random.default_rng(8)
    mu = np.linspace(-6, 0, len(_SHAPES))
    target = 0.5
    factory = aggregators.PerLayerDPFactory.gaussian_adaptive(
        0.0, 40, initial_clip=1.0, target_quantile=target, learning_rate=0.2,
        allocation='uniform')
    process = factory.create(_VALUE_TYPE)
    state = process.initialize()
    for _ in range(100):
      deltas = []
      for _ in range(40):
        norms = np.exp(mu + 0.5 * rng.normal(size=len(_SHAPES)))
        directions = _random_delta(rng)
        deltas.append([(d / np.linalg.norm(d) * n).astype(np.float32)
                       for d, n in zip(directions, norms, strict=True)])
      state = process.next(state, deltas).state
    final_clips = state.query_state.numerator_state.group_clips
    np.testing.assert_allclose(final_clips, np.exp(mu), rtol=0.10)

  def test_global_allocation_follows_tff_gaussian_adaptive(self):
    # With one group and no noise, the clip trajectory is tensorflow-privacy's geometric update.
    rng = np.random.default_rng(10)
    ours = aggregators.PerLayerDPFactory.gaussian_adaptive(
        0.0, 8, 0.5, allocation='global').create(_VALUE_TYPE)
    theirs = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        0.0, 8.0, initial_l2_norm_clip=0.5).create(_VALUE_TYPE)
    our_state, their_state = ours.initialize(), theirs.initialize()
    for _ in range(5):
      deltas = [_random_delta(rng, scales=np.full(len(_SHAPES), rng.uniform(0.01, 0.3)))
                for _ in range(8)]
      our_out, their_out = ours.next(our_state, deltas), theirs.next(their_state, deltas)
      our_state, their_state = our_out.state, their_out.state
      our_clips = our_out.measurements['dp_query_metrics']['per_group']
      self.assertEqual(list(our_clips), ['all'])
      self.assertAlmostEqual(our_clips['all']['next_clip'],
                             their_out.measurements['dp_query_metrics']['clip'], places=5)
      for a, b in zip(our_out.result, their_out.result, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


class LearningProcessTest(absltest.TestCase):

  def test_drops_into_build_unweighted_fed_avg(self):
    datasets = dp_mlp.datasets(count=3)
    names = dp_mlp.LEAF_NAMES
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        dp_mlp.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=aggregators.PerLayerDPFactory.gaussian_fixed(0.5, 3, 0.1, 'dim',
                                                                      leaf_names=names,
                                                                      diagnostics=True))
    state = process.initialize()
    for _ in range(3):
      output = process.next(state, datasets)
      state = output.state
    metrics = output.metrics['aggregator']['dp_query_metrics']
    self.assertLen(metrics['per_group'], 4)  # Two kernels and two biases.
    # Names with slashes pass through TFF's types as structure keys.
    self.assertEqual(list(metrics['per_group']), names)
    self.assertEqual(metrics['client_statistics']['clients'], 3.0)
    self.assertAlmostEqual(_EXTRACT_EVENT(state.aggregator).noise_multiplier, 0.5)


class BadInputTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('zero_clip', dict(clip=0.0), 'clip'),
      ('negative_noise', dict(noise_multiplier=-1.0), 'noise_multiplier'),
      ('no_clients', dict(clients_per_round=0), 'clients_per_round'),
      ('unknown_allocation', dict(allocation='layer'), 'allocation'),
      ('weights_wrong_length', dict(allocation='weighted', layer_weights=[1.0, 2.0]),
       'layer_weights'),
      ('weights_non_positive', dict(allocation='weighted', layer_weights=[0.0] * 11),
       'layer_weights'),
      ('unknown_placement', dict(noise_placement='anywhere'), 'noise_placement'),
      ('leaf_names_wrong_length', dict(leaf_names=_LEAF_NAMES[:-1]), 'leaf_names'),
      ('leaf_names_duplicate', dict(leaf_names=_LEAF_NAMES[:-1] + _LEAF_NAMES[:1]),
       'leaf_names.*block_00/w1/kernel'),
      ('leaf_names_not_strings', dict(leaf_names=list(range(len(_SHAPES)))), 'leaf_names'),
      ('leaf_names_one_string', dict(leaf_names='abcdefghijk'), 'leaf_names'),
      ('leaf_names_global', dict(allocation='global', leaf_names=['a'] * len(_SHAPES)),
       'leaf_names'),
  )
  def test_fixed(self, override, name):
    kwargs = dict(noise_multiplier=1.0, clients_per_round=10, clip=1.0)
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      aggregators.PerLayerDPFactory.gaussian_fixed(**kwargs).create(_VALUE_TYPE)

  @parameterized.named_parameters(
      ('quantile_zero', dict(target_quantile=0.0), 'target_quantile'),
      ('quantile_one', dict(target_quantile=1.0), 'target_quantile'),
      ('zero_clip', dict(initial_clip=0.0), 'initial_clip'),
      ('negative_rate', dict(learning_rate=-0.1), 'learning_rate'),
      ('count_noise_too_small', dict(noise_multiplier=5.0), 'clipped_count_stddev'),
      ('leaf_names_wrong_length', dict(leaf_names=_LEAF_NAMES + ['extra']), 'leaf_names'),
      ('leaf_names_duplicate', dict(leaf_names=['w'] * len(_SHAPES)), 'leaf_names'),
  )
  def test_adaptive(self, override, name):
    kwargs = dict(noise_multiplier=1.0, clients_per_round=100, initial_clip=1.0)
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      aggregators.PerLayerDPFactory.gaussian_adaptive(**kwargs).create(_VALUE_TYPE)

  def test_named_constructors_check_once_into_a_frozen_record(self):
    factory = aggregators.PerLayerDPFactory.gaussian_adaptive(
        2.0, 8, 0.5, allocation='uniform', grouping=[0, 1] * 5 + [0], noise_seed=3)
    params = factory.params
    self.assertEqual((params.noise_multiplier, params.clients_per_round, params.clip),
                     (2.0, 8.0, 0.5))
    self.assertEqual(params.grouping, (0, 1) * 5 + (0,))
    self.assertAlmostEqual(params.clipped_count_stddev, 0.4)  # TFF's default, 0.05 S.
    self.assertEqual(aggregators.PerLayerDPFactory.gaussian_fixed(
        0.0, 8, 1.0).params.clipped_count_stddev, 0.0)
    with self.assertRaises(dataclasses.FrozenInstanceError):
      params.clip = 1.0
    # `__init__` takes only the record the named constructors check.
    with self.assertRaisesRegex(TypeError, 'PerLayerDPParams'):
      aggregators.PerLayerDPFactory(2.0)
    self.assertIs(aggregators.PerLayerDPFactory(params).params, params)

  def test_query_refuses_unnoised_counts_with_noised_values(self):
    with self.assertRaisesRegex(ValueError, 'clipped_count_stddev'):
      aggregators.PerLayerClipGaussianSumQuery(
          [0], [1.0], value_noise_multiplier=1.0, clients_per_round=10, target_quantile=0.5,
          clipped_count_stddev=0.0)

  def test_query_refuses_bad_group_names(self):
    for names in (['a'], ['a', 'a'], ['a', 3]):
      with self.assertRaisesRegex(ValueError, 'group_names'):
        aggregators.PerLayerClipGaussianSumQuery([0, 1], [1.0, 1.0], 0.0, 1, group_names=names)

  def test_integer_value_type(self):
    factory = aggregators.PerLayerDPFactory.gaussian_fixed(1.0, 10, 1.0)
    with self.assertRaisesRegex(ValueError, 'value_type.*floating'):
      factory.create(tff.types.to_type([tff.TensorType(np.int32, [3])]))


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
