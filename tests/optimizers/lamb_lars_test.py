"""LAMB and LARS against NumPy transcriptions of optax's `lamb` and `lars`.

LAMB is the server optimizer of [1] (App. E.4); LARS is compared with it in [1], App. G.4.

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
"""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from fedasr_tff import optimizers

_SHAPES = [(3, 4), (5,), (2, 3, 2), (7,)]


def _np_trust_ratio(w, u, coefficient=1.0, eps=0.0):
  wn, un = np.linalg.norm(w), np.linalg.norm(u)
  if wn == 0 or un == 0:
    return 1.0
  return coefficient * wn / (un + eps)


def _np_lamb(weights, grads_per_step, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.0):
  # optax.lamb = scale_by_adam, add_decayed_weights, scale_by_trust_ratio, scale_by_lr.
  w = [x.astype(np.float64) for x in weights]
  m = [np.zeros_like(x) for x in w]
  v = [np.zeros_like(x) for x in w]
  history = []
  for t, grads in enumerate(grads_per_step, start=1):
    for h, g in enumerate(grads):
      m[h] = b1 * m[h] + (1 - b1) * g
      v[h] = b2 * v[h] + (1 - b2) * g**2
      u = (m[h] / (1 - b1**t)) / (np.sqrt(v[h] / (1 - b2**t)) + eps) + wd * w[h]
      w[h] = w[h] - lr * _np_trust_ratio(w[h], u) * u
    history.append([x.copy() for x in w])
  return history


def _np_lars(weights, grads_per_step, lr, momentum=0.9, tc=0.001, eps=0.0, wd=0.0,
             nesterov=False):
  # optax.lars = add_decayed_weights, scale_by_trust_ratio, scale_by_lr, trace.
  w = [x.astype(np.float64) for x in weights]
  trace = [np.zeros_like(x) for x in w]
  history = []
  for grads in grads_per_step:
    for h, g in enumerate(grads):
      u = g + wd * w[h]
      step = -lr * _np_trust_ratio(w[h], u, tc, eps) * u
      trace[h] = step + momentum * trace[h]
      w[h] = w[h] + (step + momentum * trace[h] if nesterov else trace[h])
    history.append([x.copy() for x in w])
  return history


def _inputs(seed):
  rng = np.random.default_rng(seed)
  weights = [rng.normal(size=s).astype(np.float32) for s in _SHAPES]
  weights[1][:] = 0.0  # A zero-norm tensor (trust ratio 1).
  grads = []
  for step in range(5):
    g = [(rng.normal(size=s) * 10.0**rng.uniform(-3, 0)).astype(np.float32) for s in _SHAPES]
    if step == 2:
      g[3][:] = 0.0  # A zero update (trust ratio 1).
    grads.append(g)
  return weights, grads


def _run(optimizer, weights, grads_per_step):
  specs = [tf.TensorSpec(s, tf.float32) for s in _SHAPES]
  state = optimizer.initialize(specs)
  w = [tf.constant(x) for x in weights]
  history = []
  for grads in grads_per_step:
    state, w = optimizer.next(state, w, [tf.constant(g) for g in grads])
    history.append([x.numpy() for x in w])
  return history


class LambLarsTest(parameterized.TestCase):

  @parameterized.parameters(
      dict(lr=0.01, wd=0.0, beta_1=0.9),
      dict(lr=0.003, wd=0.01, beta_1=0.9),
      dict(lr=0.1, wd=0.0, beta_1=0.0),
  )
  def test_lamb_matches_optax_reference(self, lr, wd, beta_1):
    weights, grads = _inputs(0)
    ours = _run(optimizers.build_lamb(lr, beta_1=beta_1, weight_decay=wd), weights, grads)
    want = _np_lamb(weights, grads, lr, b1=beta_1, wd=wd)
    for step, (got_w, want_w) in enumerate(zip(ours, want, strict=True)):
      for got, expected in zip(got_w, want_w, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7, err_msg=f'step {step}')

  @parameterized.parameters(
      dict(lr=0.5, wd=0.0, nesterov=False, eps=0.0),
      dict(lr=1.2, wd=1e-4, nesterov=False, eps=1e-6),
      dict(lr=0.7, wd=0.0, nesterov=True, eps=0.0),
  )
  def test_lars_matches_optax_reference(self, lr, wd, nesterov, eps):
    weights, grads = _inputs(1)
    ours = _run(optimizers.build_lars(lr, weight_decay=wd, nesterov=nesterov, epsilon=eps),
                weights, grads)
    want = _np_lars(weights, grads, lr, wd=wd, nesterov=nesterov, eps=eps)
    for step, (got_w, want_w) in enumerate(zip(ours, want, strict=True)):
      for got, expected in zip(got_w, want_w, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7, err_msg=f'step {step}')

  def test_lamb_step_norm_is_lr_times_weight_norm(self):
    # [1], Eq. (E.7) with φ the identity: with λ = 0 and nonzero norms, each tensor moves by
    # exactly η ||θ_h||, and scaling every pseudo-gradient by c > 0 leaves the updates (nearly)
    # unchanged (why [1], Sec. 4.3 and App. H.3, sees no effect of the clip C).
    weights, grads = _inputs(2)
    weights[1][:] = 1.0
    grads = [[g + 0.1 for g in step] for step in grads]
    lr = 0.01
    first = _run(optimizers.build_lamb(lr), weights, grads[:1])[0]
    for w0, w1 in zip(weights, first, strict=True):
      self.assertAlmostEqual(np.linalg.norm(w1 - w0), lr * np.linalg.norm(w0), places=5)
    scaled = _run(optimizers.build_lamb(lr), weights, [[100 * g for g in grads[0]]])[0]
    for a, b in zip(first, scaled, strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

  def test_hparams_round_trip(self):
    for optimizer in (optimizers.build_lamb(0.01), optimizers.build_lars(0.5)):
      state = optimizer.initialize([tf.TensorSpec([2], tf.float32)])
      hparams = optimizer.get_hparams(state)
      self.assertEqual(hparams['learning_rate'], state['learning_rate'])
      hparams = collections.OrderedDict(hparams, learning_rate=0.123)
      self.assertEqual(optimizer.get_hparams(optimizer.set_hparams(state, hparams))
                       ['learning_rate'], 0.123)

  @parameterized.named_parameters(
      ('lamb_lr', lambda: optimizers.build_lamb(0.0), 'learning_rate'),
      ('lamb_beta1', lambda: optimizers.build_lamb(0.1, beta_1=1.0), 'beta_1'),
      ('lamb_beta2', lambda: optimizers.build_lamb(0.1, beta_2=-0.1), 'beta_2'),
      ('lamb_eps', lambda: optimizers.build_lamb(0.1, epsilon=-1.0), 'epsilon'),
      ('lars_lr', lambda: optimizers.build_lars(-1.0), 'learning_rate'),
      ('lars_momentum', lambda: optimizers.build_lars(0.1, momentum=1.5), 'momentum'),
      ('lars_decay', lambda: optimizers.build_lars(0.1, weight_decay=-1.0), 'weight_decay'),
  )
  def test_bad_hparams(self, build, name):
    with self.assertRaisesRegex(ValueError, name):
      build()


if __name__ == '__main__':
  absltest.main()
