"""The query's clipping for any finite input, and its Gaussian noise as a sum of TF draws."""

import itertools
import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import stats
import tensorflow as tf

from fedasr_tff import aggregators
from fedasr_tff.aggregators import per_layer_query

_SHAPES = [(50,), (10000,), (20, 5), (300,)]
_SIZES = [int(np.prod(s)) for s in _SHAPES]
_ALLOCATIONS = ('global', 'uniform', 'dim', 'weighted')
_WEIGHTS = [1.0, 0.5, 3.0, 2.0, 0.25]
_MODES = {False: 'clip', True: 'normalize'}
_FLOAT32_TINY = np.finfo(np.float32).tiny
# sqrt(-2 ln 1e-7): the radius at which TF's Box-Muller clamps its uniform draw.
_SINGLE_DRAW_BOUND = math.sqrt(-2 * math.log(1e-7))


def _extreme_delta(case, rng):
  """Group 1 (10000 entries) or group 0 (50 entries) extreme, the other groups ordinary."""
  delta = [0.1 * rng.normal(size=s) for s in _SHAPES]
  signs = rng.choice([-1.0, 1.0], size=_SIZES[1])
  if case == 'subnormal':
    delta[1] = 1e-40 * signs
  elif case == 'underflowing':
    delta[1] = 1e-25 * signs                  # Every square underflows.
  elif case == 'partly_underflowing':
    delta[1] = 3e-20 * signs                  # These squares underflow;
    delta[1][:3] = 1e-18                      # these do not (a quarter of the squared norm).
  elif case == 'few_small_many_tiny':
    delta[1] = 1e-25 * signs
    delta[1][:5] = 1e-10
  elif case == 'huge':
    delta[0] = 1e38 * rng.choice([-1.0, 1.0], size=_SIZES[0])   # Every square overflows.
  elif case == 'huge_tiny_and_subnormal':
    delta[0] = 1e38 * rng.choice([-1.0, 1.0], size=_SIZES[0])
    delta[1] = 1e-25 * signs
    delta[3] = 1e-41 * rng.choice([-1.0, 1.0], size=_SIZES[3])
  else:
    raise ValueError(case)
  return [x.astype(np.float32) for x in delta]


def _query(allocation, normalize, noise_placement='server', clip=0.01, shapes=None):
  shapes = _SHAPES if shapes is None else shapes
  sizes = [int(np.prod(s)) for s in shapes]
  weights = _WEIGHTS[:len(shapes)] if allocation == 'weighted' else None
  clips = aggregators.group_clips(clip, sizes, allocation, weights)
  group_ids = [0] * len(shapes) if allocation == 'global' else list(range(len(shapes)))
  return aggregators.PerLayerClipGaussianSumQuery(
      group_ids, clips, 0.0, 1, normalize=normalize, noise_placement=noise_placement,
      noise_seed=1), group_ids, clips


def _preprocess(query, delta):
  params = query.derive_sample_params(query.initial_global_state())
  value, below, diagnostics = query.preprocess_record(params, [tf.constant(x) for x in delta])
  return [x.numpy() for x in value], below, diagnostics


def _oracle(delta, group_ids, clips, normalize):
  """The clipped record in float64, with subnormal inputs as zeros (TensorFlow flushes them)."""
  values = [np.where(np.abs(x) < _FLOAT32_TINY, 0.0, x.astype(np.float64)) for x in delta]
  sq_norms = np.zeros(len(clips))
  for group, x in zip(group_ids, values, strict=True):
    sq_norms[group] += np.sum(np.square(x))
  norms = np.sqrt(sq_norms)
  to_bound = np.divide(clips, norms, out=np.zeros_like(norms), where=norms > 0)
  if normalize:
    factors = to_bound if np.linalg.norm(norms) >= np.linalg.norm(clips) else np.ones_like(norms)
  else:
    factors = np.where(norms > clips, to_bound, 1.0)
  return [x * factors[group] for group, x in zip(group_ids, values, strict=True)]


def _norm(values):
  return math.sqrt(sum(np.sum(np.square(x.astype(np.float64))) for x in values))


class SensitivityTest(parameterized.TestCase):
  """||clipped record|| <= C for every finite input (`PerLayerClipGaussianSumQuery._clip`)."""

  @parameterized.named_parameters(
      (f'{allocation}_{_MODES[normalize]}_{case}', allocation, normalize, case)
      for allocation, normalize, case in itertools.product(_ALLOCATIONS, (False, True), (
          'subnormal', 'underflowing', 'partly_underflowing', 'few_small_many_tiny', 'huge',
          'huge_tiny_and_subnormal')))
  def test_extreme_groups_are_clipped_as_in_exact_arithmetic(self, allocation, normalize, case):
    rng = np.random.default_rng(11)
    query, group_ids, clips = _query(allocation, normalize)
    delta = _extreme_delta(case, rng)
    clipped, _, _ = _preprocess(query, delta)
    clip = np.linalg.norm(clips)
    self.assertTrue(all(np.all(np.isfinite(x)) for x in clipped))
    self.assertLessEqual(_norm(clipped), clip * (1 + 1e-5))
    for got, want in zip(clipped, _oracle(delta, group_ids, clips, normalize), strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9 * clip)

  @parameterized.named_parameters(
      (f'{allocation}_{_MODES[normalize]}_{placement}', allocation, normalize, placement)
      for allocation, normalize, placement in itertools.product(_ALLOCATIONS, (False, True),
                                                                ('server', 'client')))
  def test_random_magnitudes_from_1e_minus_45_to_1e38(self, allocation, normalize,
                                                      noise_placement):
    # Every group draws a magnitude 10^m (m uniform in [-45, 38]) and entries spread up to 30
    # decades below it; some groups are zero.
    shapes = [(40,), (300,), (7, 5), (1,), (120,)]
    rng = np.random.default_rng([20240601, _ALLOCATIONS.index(allocation), int(normalize),
                                 int(noise_placement == 'client')])
    query, group_ids, clips = _query(allocation, normalize, noise_placement, clip=0.01,
                                     shapes=shapes)
    clip = np.linalg.norm(clips)
    for trial in range(25):
      delta = []
      for shape in shapes:
        top = rng.uniform(-45, 38)
        exponents = top - rng.uniform(0, rng.uniform(0, 30), size=shape)
        group = rng.choice([-1.0, 1.0], size=shape) * 10.0**exponents
        delta.append((group * (rng.uniform() > 0.1)).astype(np.float32))
      clipped, _, _ = _preprocess(query, delta)
      msg = f'trial {trial}'
      self.assertLessEqual(_norm(clipped), clip * (1 + 1e-5), msg=msg)
      for got, want in zip(clipped, _oracle(delta, group_ids, clips, normalize), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9 * clip, err_msg=msg)

  def test_adaptive_indicators_and_diagnostics_use_exact_norms(self):
    # Group 0: norm 4e19 under a clip of 1e20, though its squares overflow float32. Group 1:
    # norm 1e-24, though its squares underflow. Group 2: norm 2 above its clip of 1.
    delta = [np.full(4, 2e19, np.float32), np.full(100, 1e-25, np.float32),
             np.full(4, 1.0, np.float32)]
    query = aggregators.PerLayerClipGaussianSumQuery(
        [0, 1, 2], [1e20, 1.0, 1.0], 0.0, 1, target_quantile=0.5, learning_rate=0.2,
        diagnostics=True)
    clipped, below, diagnostics = _preprocess(query, delta)
    np.testing.assert_array_equal(below, [0.5, 0.5, -0.5])
    np.testing.assert_allclose(diagnostics['norm_before_clip'], [4e19, 1e-24, 2.0], rtol=1e-5)
    np.testing.assert_allclose(diagnostics['norm_after_clip'], [4e19, 1e-24, 1.0], rtol=1e-5)
    np.testing.assert_array_equal(diagnostics['clipped'], [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(clipped[0], delta[0])
    np.testing.assert_allclose(clipped[1], delta[1], rtol=1e-6)
    np.testing.assert_allclose(clipped[2], 0.5, rtol=1e-6)


class GaussianNoiseTest(parameterized.TestCase):
  """`gaussian_noise`: N(0, σ^2) as a sum of NOISE_DRAWS TF draws (its docstring)."""

  @parameterized.parameters('stateless', 'stateful')
  def test_variance_is_sigma_squared(self, kind):
    sigma, n = 3.0, 10**6
    seed = tf.constant([5, 6], tf.int64) if kind == 'stateless' else None
    if seed is None:
      tf.random.set_seed(5)
    x = per_layer_query.gaussian_noise([n], sigma, tf.float32, seed).numpy().astype(np.float64)
    standard_error = sigma**2 * math.sqrt(2 / n)
    self.assertLess(abs(np.var(x) - sigma**2), 5 * standard_error)
    self.assertLess(abs(np.mean(x)), 5 * sigma / math.sqrt(n))

  def test_quantiles_match_the_gaussian_out_to_a_1e_minus_5_tail(self):
    sigma, n = 0.5, 10**7
    x = per_layer_query.gaussian_noise([n], sigma, tf.float32, tf.constant([7, 8], tf.int64))
    x = np.sort(x.numpy().astype(np.float64) / sigma)
    for p in (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.3):
      for tail in (p, 1 - p):
        want = stats.norm.ppf(tail)
        got = x[int(tail * n)]
        # Standard error of an empirical quantile: sqrt(p (1 - p) / n) / φ(q).
        standard_error = math.sqrt(p * (1 - p) / n) / stats.norm.pdf(want)
        self.assertLess(abs(got - want), 5 * standard_error, msg=f'quantile {tail}')

  def test_single_draws_are_bounded_but_the_sum_reaches_further(self):
    seed = tf.constant([9, 0], tf.int64)
    single = tf.random.stateless_normal([10**7], seed)
    self.assertLessEqual(tf.reduce_max(tf.abs(single)).numpy(), _SINGLE_DRAW_BOUND * (1 + 1e-6))
    # Beyond 5.7σ a Gaussian has mass 1.2e-8, so a sample that shows it takes ~1e8 draws; this
    # seed (the first one found with a 250000-sample block that does) keeps the test fast.
    summed = per_layer_query.gaussian_noise([250_000], 1.0, tf.float32, seed)
    self.assertGreater(tf.reduce_max(tf.abs(summed)).numpy(), 5.7)
    # The sum's support: NOISE_DRAWS draws of std 1/sqrt(k), each at most 5.678 of them.
    self.assertGreater(_SINGLE_DRAW_BOUND * math.sqrt(per_layer_query.NOISE_DRAWS), 15.0)

  def test_stateless_noise_is_a_function_of_the_seed(self):
    def draw(seed):
      return per_layer_query.gaussian_noise([1000], 1.0, tf.float64,
                                            tf.constant(seed, tf.int64)).numpy()

    np.testing.assert_array_equal(draw([1, 2]), draw([1, 2]))
    for a, b in itertools.combinations([draw([1, 2]), draw([1, 3]), draw([2, 2])], 2):
      self.assertGreater(np.std(a - b), 0.5)
    self.assertEqual(draw([1, 2]).dtype, np.float64)


if __name__ == '__main__':
  absltest.main()
