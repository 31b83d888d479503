"""Local DP: clipping, noise calibration, z_delta, the adaptive clip, warmup, replay, ε."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf

from fedasr_tff import retrieval
from fedasr_tff.privacy import accounting

_SEED = tf.constant([3, 7], tf.int64)


def _delta(scale, seed=0):
  """A nest like an adapter + head update, with global L2 norm `scale`."""
  rng = np.random.default_rng(seed)
  nest = {'adapter': rng.normal(size=[4, 4]), 'head': (rng.normal(size=[4, 3]),
                                                       rng.normal(size=[3]))}
  norm = math.sqrt(sum(float(np.sum(x**2)) for x in tf.nest.flatten(nest)))
  return tf.nest.map_structure(lambda x: tf.constant(x * scale / norm, tf.float32), nest)


def _flat(nest):
  return np.concatenate([np.ravel(np.asarray(x)) for x in tf.nest.flatten(nest)])


def _clipped(delta, config, state=None):
  """Δ_c: the release minus the release of Δ = 0 with the same seed (the same noise)."""
  state = retrieval.initial_state(config) if state is None else state
  zeros = tf.nest.map_structure(tf.zeros_like, delta)
  sent = retrieval.privatize(delta, state, config, _SEED)[0]
  noise = retrieval.privatize(zeros, state, config, _SEED)[0]
  return _flat(sent).astype(np.float64) - _flat(noise)


class ClippingTest(parameterized.TestCase):
  """Property 5."""

  @parameterized.parameters(0.5, 1.0, 3.0, 1e4)
  def test_clipped_norm_at_most_clip_and_parallel(self, scale):
    config = retrieval.LocalDPConfig.fixed(1e-6, clip=1.0)
    delta = _delta(scale)
    clipped = _clipped(delta, config)
    self.assertLessEqual(np.linalg.norm(clipped), 1.0 * (1 + 1e-6))
    raw = _flat(delta).astype(np.float64)
    cosine = clipped @ raw / (np.linalg.norm(clipped) * np.linalg.norm(raw))
    self.assertAlmostEqual(cosine, 1.0, places=6)
    if scale <= 1.0:
      # Up to float32 rounding of Δ_c + noise (the scale is exactly 1 here).
      np.testing.assert_allclose(clipped, raw, rtol=0, atol=1e-7)

  def test_unclipped_delta_not_reported_clipped(self):
    config = retrieval.LocalDPConfig.fixed(1e-6, clip=1.0)
    delta = _delta(0.5)
    _, _, measurements = retrieval.privatize(delta, retrieval.initial_state(config), config,
                                             _SEED)
    self.assertFalse(measurements['clipped'])

  def test_zero_delta_no_nan(self):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2))
    zeros = _delta(0.0)
    sent, state, measurements = retrieval.privatize(zeros, retrieval.initial_state(config),
                                                    config, _SEED)
    self.assertTrue(np.all(np.isfinite(_flat(sent))))
    self.assertTrue(np.isfinite(state.clip.numpy()))
    self.assertEqual(float(measurements['norm']), 0.0)

  @parameterized.parameters(np.nan, np.inf, -np.inf, 1e30)
  def test_nonfinite_delta_replaced_by_zeros(self, bad):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2), norm_ema_decay=None)
    delta = _delta(2.0)
    adapter = delta['adapter'].numpy()
    adapter[1, 2] = bad
    if bad == 1e30:  # finite entries whose float32 norm overflows
      adapter[:] = bad
    delta['adapter'] = tf.constant(adapter)
    state = retrieval.initial_state(config)
    sent, next_state, measurements = retrieval.privatize(delta, state, config, _SEED)
    noise = retrieval.privatize(_delta(0.0), state, config, _SEED)[0]
    self.assertTrue(np.all(np.isfinite(_flat(sent))))
    np.testing.assert_array_equal(_flat(sent), _flat(noise))  # Δ_c = 0
    self.assertTrue(measurements['nonfinite'])
    self.assertAlmostEqual(float(next_state.clip), (1 - 0.05) * 1.0, places=6)  # norm 0


class NoiseCalibrationTest(parameterized.TestCase):
  """Property 7: empirical std over 2^18 coordinates within 1% (relative standard error of a
  sample std is 1/sqrt(2N) = 0.14%, so 1% is 7 standard errors)."""

  def _empirical_std(self, config, scale, seed=(1, 2)):
    delta = {'w': tf.constant(np.random.default_rng(5).normal(size=[512, 512]), tf.float32)}
    delta['w'] = delta['w'] * scale / tf.norm(delta['w'])
    state = retrieval.initial_state(config)
    sent, _, measurements = retrieval.privatize(delta, state, config, tf.constant(seed))
    clip = float(state.clip)
    clipped = delta['w'].numpy() * min(1.0, clip / scale)
    return float(np.std(sent['w'].numpy() - clipped)), float(measurements['noise_std'])

  def test_fixed(self):
    config = retrieval.LocalDPConfig.fixed(0.5, clip=2.0)
    std, reported = self._empirical_std(config, scale=5.0)
    self.assertAlmostEqual(reported, 0.5 * 2.0, places=6)
    self.assertAlmostEqual(std / (0.5 * 2.0), 1.0, delta=0.01)

  @parameterized.parameters(2, 3)
  def test_adaptive_practical(self, num_clients):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(num_clients),
                                              initial_clip=3.0)
    expected = retrieval.noise_multiplier_delta(0.1, retrieval.sigma_b(num_clients)) * 3.0
    std, reported = self._empirical_std(config, scale=10.0)
    self.assertAlmostEqual(reported, expected, places=5)
    self.assertAlmostEqual(std / expected, 1.0, delta=0.01)

  def test_adaptive_paper_literal_depends_on_unclipped_norm(self):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2), initial_clip=3.0,
                                              beta=0.05, gamma=0.9, noise_mode='paper_literal')
    z_delta = retrieval.noise_multiplier_delta(0.1, retrieval.sigma_b(2))
    for scale in (1.0, 100.0):
      expected = math.sqrt(2 * z_delta**2 * 0.95**2 * 9.0 + 2 * z_delta**2 * 0.05**2 * 0.81 *
                           scale**2)
      std, reported = self._empirical_std(config, scale=scale)
      self.assertAlmostEqual(reported / expected, 1.0, places=5)
      self.assertAlmostEqual(std / expected, 1.0, delta=0.01)


class NoiseMultiplierDeltaTest(parameterized.TestCase):
  """Property 8."""

  def test_formula_and_limits(self):
    for z, sb in ((0.1, 0.1), (0.5, 1.0), (1.0, 3.0)):
      value = retrieval.noise_multiplier_delta(z, sb)
      self.assertAlmostEqual(value, (z**-2 - (2 * sb)**-2)**-0.5, places=12)
      self.assertGreater(value, z)
    self.assertAlmostEqual(retrieval.noise_multiplier_delta(0.1, 1e6), 0.1, places=9)

  def test_paper_values(self):
    self.assertAlmostEqual(retrieval.sigma_b(2), 0.1)
    self.assertAlmostEqual(retrieval.noise_multiplier_delta(0.1, retrieval.sigma_b(2)), 0.11547,
                           places=5)
    self.assertAlmostEqual(retrieval.noise_multiplier_delta(0.1, retrieval.sigma_b(3)), 0.10607,
                           places=5)

  @parameterized.parameters((0.1, 0.05), (0.2, 0.05), (0.0, 1.0), (0.1, 0.0), (-1.0, 1.0))
  def test_errors(self, z, sb):
    with self.assertRaisesRegex(ValueError, '`noise_multiplier`|`clipped_count_stddev`'):
      retrieval.noise_multiplier_delta(z, sb)

  def test_one_client_is_refused(self):
    with self.assertRaisesRegex(ValueError, '`noise_multiplier`.*`clipped_count_stddev`'):
      retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(1))


def _run_clips(config, norms):
  state = retrieval.initial_state(config)
  clips = [float(state.clip)]
  for t, norm in enumerate(norms):
    delta = _delta(norm, seed=t)
    _, state, _ = retrieval.privatize(delta, state, config, tf.constant([t, 0]))
    clips.append(float(state.clip))
  return np.array(clips)


class AdaptiveClipTest(parameterized.TestCase):
  """Property 9."""

  @parameterized.parameters(None, 0.9)
  def test_constant_norm_converges_geometrically(self, decay):
    beta, gamma, u, c0 = 0.2, 0.9, 3.0, 0.5
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2), initial_clip=c0,
                                              beta=beta, gamma=gamma, norm_ema_decay=decay)
    clips = _run_clips(config, [u] * 40)
    t = np.arange(len(clips))
    np.testing.assert_allclose(clips - gamma * u, (1 - beta)**t * (c0 - gamma * u), rtol=1e-4,
                               atol=1e-6)

  def test_beta_zero_keeps_clip(self):
    config = retrieval.LocalDPConfig.fixed(0.1, clip=1.5)
    np.testing.assert_array_equal(_run_clips(config, [0.1, 5.0, 100.0, 0.0]), 1.5)

  @parameterized.parameters(0, 1, 2)
  def test_lemma_c4_bound_on_random_runs(self, seed):
    rng = np.random.default_rng(seed)
    beta, gamma, c0 = rng.uniform(0.01, 0.5), rng.uniform(0.1, 2.0), rng.uniform(0.1, 10.0)
    norms = rng.exponential(rng.uniform(0.1, 5.0), size=30)
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2), initial_clip=c0,
                                              beta=beta, gamma=gamma, norm_ema_decay=None)
    clips = _run_clips(config, norms)
    for t in range(1, len(clips)):
      bound = (1 - beta)**t * c0 + gamma * norms[:t].max()
      self.assertLessEqual(clips[t], bound * (1 + 1e-5))


class WarmupTest(absltest.TestCase):
  """Property 10: raw Δ before `warmup_rounds`, clipped and noised from then on; C is tracked."""

  def test_warmup(self):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2), initial_clip=1.0,
                                              warmup_rounds=2)
    state = retrieval.initial_state(config)
    delta = _delta(5.0)
    clips = []
    for t in range(4):
      sent, state, measurements = retrieval.privatize(delta, state, config, tf.constant([t, 1]))
      clips.append(float(state.clip))
      if t < 2:
        np.testing.assert_array_equal(_flat(sent), _flat(delta))
        self.assertFalse(measurements['dp_active'])
        self.assertEqual(float(measurements['noise_std']), 0.0)
      else:
        self.assertTrue(measurements['dp_active'])
        self.assertGreater(float(measurements['noise_std']), 0.0)
        clipped = _flat(delta) * float(measurements['clip']) / 5.0
        self.assertGreater(np.abs(_flat(sent) - clipped).max(), 1e-3)  # noise is present
    self.assertGreater(clips[0], 1.0)  # C moved towards 0.9 * 5 during warmup
    self.assertGreater(clips[1], clips[0])


class ReplayTest(absltest.TestCase):

  def test_same_seed_identical_other_seed_differs(self):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(3), initial_clip=1.0)
    state = retrieval.initial_state(config)
    delta = _delta(2.0)
    first = retrieval.privatize(delta, state, config, tf.constant([9, 9]))
    again = retrieval.privatize(delta, state, config, tf.constant([9, 9]))
    other = retrieval.privatize(delta, state, config, tf.constant([9, 10]))
    np.testing.assert_array_equal(_flat(first[0]), _flat(again[0]))
    self.assertGreater(np.abs(_flat(first[0]) - _flat(other[0])).max(), 0.0)
    graph = tf.function(lambda d, s, seed: retrieval.privatize(d, s, config, seed))
    traced = _flat(graph(delta, state, tf.constant([9, 9]))[0])
    np.testing.assert_array_equal(_flat(graph(delta, state, tf.constant([9, 9]))[0]), traced)
    # Graph and eager may round differently (fused ops): equal to float32 precision only.
    np.testing.assert_allclose(traced, _flat(first[0]), rtol=1e-5, atol=1e-7)


class LocalEpsilonTest(parameterized.TestCase):

  @parameterized.parameters((1.0, 5.0, 10), (0.1, 1.0, 25))
  def test_rdp_equals_dp_accounting_directly(self, z, clipped_count_stddev, rounds):
    config = retrieval.LocalDPConfig.adaptive(z, clipped_count_stddev)
    rdp = dp_accounting.rdp.RdpAccountant(orders=list(accounting.DEFAULT_RDP_ORDERS))
    rdp.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(config.release_noise_multiplier), rounds))
    epsilon = retrieval.local_epsilon(config, rounds, 1e-5, replace_one=False)
    self.assertAlmostEqual(epsilon, rdp.get_epsilon(1e-5), places=9)
    self.assertTrue(math.isfinite(epsilon))
    self.assertGreater(epsilon, 0.0)

  def test_fixed_uses_z_and_replace_one_by_default_halves_it(self):
    config = retrieval.LocalDPConfig.fixed(2.0, clip=1.0)
    self.assertAlmostEqual(retrieval.local_epsilon(config, 10, 1e-5),
                           accounting.compute_epsilon(1.0, 1.0, 10, 1e-5), places=12)
    self.assertAlmostEqual(retrieval.local_epsilon(config, 10, 1e-5, replace_one=False),
                           accounting.compute_epsilon(2.0, 1.0, 10, 1e-5), places=12)

  def test_pld_close_to_dp_accounting(self):
    config = retrieval.LocalDPConfig.fixed(2.0, clip=1.0)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 10))
    self.assertAlmostEqual(retrieval.local_epsilon(config, 10, 1e-5, accountant='pld',
                                                   replace_one=False),
                           pld.get_epsilon(1e-5), delta=1e-2)

  def test_warmup_is_infinite_and_zero_rounds_is_zero(self):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(3), warmup_rounds=3)
    self.assertEqual(retrieval.local_epsilon(config, 25, 1e-5), math.inf)
    self.assertEqual(retrieval.local_epsilon(config, 0, 1e-5), 0.0)

  def test_paper_literal_adaptive_is_refused(self):
    config = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(3),
                                              noise_mode='paper_literal')
    with self.assertRaisesRegex(ValueError, '`noise_mode`'):
      retrieval.local_epsilon(config, 5, 1e-5)


class ArgumentErrorTest(parameterized.TestCase):

  @parameterized.parameters(
      (dict(noise_multiplier=-0.1, initial_clip=1.0), '`noise_multiplier`'),
      (dict(noise_multiplier=0.0, initial_clip=1.0, beta=0.1, clipped_count_stddev=1.0),
       '`noise_multiplier`'),
      (dict(noise_multiplier=0.1, initial_clip=-1.0), '`initial_clip`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, beta=1.0), '`beta`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, beta=0.1, clipped_count_stddev=1.0,
            gamma=0.0), '`gamma`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, norm_ema_decay=1.0), '`norm_ema_decay`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, warmup_rounds=1.5), '`warmup_rounds`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, noise_mode='exact'), '`noise_mode`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, beta=0.1), '`clipped_count_stddev`'),
      (dict(noise_multiplier=0.1, initial_clip=1.0, clipped_count_stddev=1.0),
       '`clipped_count_stddev`'),
  )
  def test_config(self, kwargs, name):
    with self.assertRaisesRegex(ValueError, name):
      retrieval.LocalDPConfig(**kwargs)

  def test_constructors_and_functions(self):
    with self.assertRaisesRegex(ValueError, '`beta`'):
      retrieval.LocalDPConfig.adaptive(0.1, 1.0, beta=0.0)
    with self.assertRaisesRegex(ValueError, '`num_clients`'):
      retrieval.sigma_b(0)
    config = retrieval.LocalDPConfig.fixed(1.0, clip=1.0)
    with self.assertRaisesRegex(ValueError, '`rounds`'):
      retrieval.local_epsilon(config, -1, 1e-5)
    with self.assertRaisesRegex(ValueError, '`delta`'):
      retrieval.local_epsilon(config, 3, 1.5)
    with self.assertRaisesRegex(ValueError, '`accountant`'):
      retrieval.local_epsilon(config, 3, 1e-5, accountant='gdp')


if __name__ == '__main__':
  absltest.main()
