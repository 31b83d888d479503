"""Mixed FL processes against a NumPy transcription of Augenstein et al. 2022, Algorithm 1."""

import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import algorithms
from fedasr_tff import optimizers
from fedasr_tff import runtime
from fedasr_tff.algorithms import mixed_fl
from fedasr_tff.program import privacy_ledger

_FEATURES = 3
_INPUT_SPEC = (tf.TensorSpec([None, _FEATURES], tf.float32), tf.TensorSpec([None, 1],
                                                                           tf.float32))


def _model_fn():
  # Linear regression with the mean squared error: a quadratic loss NumPy differentiates.
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(_FEATURES,)),
                               tf.keras.layers.Dense(1)])
  return tff.learning.models.from_keras_model(model, loss=tf.keras.losses.MeanSquaredError(),
                                              input_spec=_INPUT_SPEC)


def _batches(rng, count, size, shift=0.0):
  return [(rng.normal(size=(size, _FEATURES)).astype(np.float32) + shift,
           rng.normal(size=(size, 1)).astype(np.float32) + shift) for _ in range(count)]


def _dataset(batches):
  x = np.concatenate([b[0] for b in batches])
  y = np.concatenate([b[1] for b in batches])
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(len(batches[0][0]))


def _sgd(learning_rate):
  return optimizers.build('sgd', learning_rate)


def _grad(params, batch, weight):
  """∇ weight·MSE of the linear model (kernel [F, 1], bias [1]) on one batch."""
  kernel, bias = params
  x, y = batch
  residual = x @ kernel + bias - y
  return [weight * 2.0 * x.T @ residual / len(x), weight * 2.0 * residual.sum(0) / len(x)]


def _clip(grads, clip):
  if clip is None:
    return grads
  norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
  return [g * min(1.0, clip / norm) for g in grads]


def _numpy_round(algorithm, x, aug_c, aug_f, client_batches, central_batches, *, w_c, eta,
                 eta_s, eta_c, eta_m, local_clip=None):
  """One round of Algorithm 1 in the paper's sign (Δ = new − old), in float64, every data
  gradient (clients' and server's) clipped at `local_clip`.

  Returns (x_new, g̃_c_new, g̃_f_new); the 2-w GT update of g̃ uses App. A.2's formulas.
  """
  w_f = 1.0 - w_c
  steps = len(client_batches[0])
  if algorithm == 'one_way':
    grads = [_clip(_grad(x, b, w_c), local_clip) for b in central_batches]
    aug = [np.mean([g[i] for g in grads], 0) for i in range(2)]
  elif algorithm == 'two_way':
    aug = aug_c
  else:
    aug = [np.zeros_like(p) for p in x]
  deltas = []
  for batches in client_batches:
    y = [p.copy() for p in x]
    for batch in batches:
      g = _clip(_grad(y, batch, w_f), local_clip)
      y = [p - eta * (gi + ai) for p, gi, ai in zip(y, g, aug, strict=True)]
    deltas.append([yi - xi for yi, xi in zip(y, x, strict=True)])
  mean_delta = [np.mean([d[i] for d in deltas], 0) for i in range(2)]
  x_f = [p + eta_s * d for p, d in zip(x, mean_delta, strict=True)]
  if algorithm == 'one_way':
    return x_f, None, None
  x_c = [p.copy() for p in x]
  central_steps = len(central_batches)
  for batch in central_batches:
    g = _clip(_grad(x_c, batch, w_c), local_clip)
    if algorithm == 'two_way':
      g = [gi + fi for gi, fi in zip(g, aug_f, strict=True)]
    x_c = [p - eta_c * gi for p, gi in zip(x_c, g, strict=True)]
  d_c = [c - p for c, p in zip(x_c, x, strict=True)]
  d_f = [f - p for f, p in zip(x_f, x, strict=True)]
  x_new = [p + eta_m * (c + f) for p, c, f in zip(x, d_c, d_f, strict=True)]
  if algorithm != 'two_way':
    return x_new, None, None
  new_c = [-c / (eta_c * central_steps) - f for c, f in zip(d_c, aug_f, strict=True)]
  total = [np.sum([d[i] for d in deltas], 0) for i in range(2)]
  new_f = [-t / (eta * steps * len(deltas)) - c for t, c in zip(total, aug_c, strict=True)]
  return x_new, new_c, new_f


def _trainable(state):
  return [np.asarray(w, np.float64) for w in state.global_model_weights.trainable]


class _ConstantAggregator(tff.aggregators.UnweightedAggregationFactory):
  """Releases a fixed value whatever the clients send: the only way client data could still
  reach the server's derived quantities is a path around the aggregator."""

  def __init__(self, value):
    self._value = value

  def create(self, value_type):
    @tff.federated_computation
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    constant = tff.tensorflow.computation(
        lambda: tf.nest.map_structure(tf.constant, self._value))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      del value
      return tff.templates.MeasuredProcessOutput(
          state, tff.federated_eval(constant, tff.SERVER), tff.federated_value((), tff.SERVER))

    return tff.templates.AggregationProcess(init_fn, next_fn)


class MixedFLTest(parameterized.TestCase):

  def _data(self, seed=0, clients=3, steps=2, central_steps=2, shift=1.5):
    rng = np.random.default_rng(seed)
    client_batches = [_batches(rng, steps, 4) for _ in range(clients)]
    central_batches = _batches(rng, central_steps, 5, shift=shift)
    return client_batches, central_batches

  @parameterized.parameters(
      ('parallel', 0.5, 1.0, 1.0, 0.1, None),
      ('parallel', 0.3, 0.7, 1.5, 0.05, None),
      ('one_way', 0.5, 1.0, 1.0, 0.1, None),
      ('one_way', 0.7, 0.5, 1.0, 0.1, 0.2),
      ('two_way', 0.5, 1.0, 1.0, 0.1, None),
      ('two_way', 0.4, 0.8, 2.0, 0.07, 0.5),
  )
  def test_three_rounds_match_the_paper_pseudocode(self, algorithm, w_c, eta_s, eta_m, eta_c,
                                                   local_clip):
    eta, steps = 0.1, 2
    central = {} if algorithm == 'one_way' else dict(
        central_optimizer=_sgd(eta_c), merge_optimizer=_sgd(eta_m), central_steps=steps)
    process = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm=algorithm, central_weight=w_c, client_learning_rate=eta,
        local_steps=steps, local_clip_norm=local_clip, server_optimizer=_sgd(eta_s), **central)
    state = process.initialize()
    x = _trainable(state)
    aug_c = aug_f = [np.zeros_like(p) for p in x]
    for round_num in range(3):
      client_batches, central_batches = self._data(round_num, steps=steps, central_steps=steps)
      state = process.next(state, [_dataset(b) for b in client_batches],
                           _dataset(central_batches)).state
      x, new_c, new_f = _numpy_round(algorithm, x, aug_c, aug_f, client_batches,
                                     central_batches, w_c=w_c, eta=eta, eta_s=eta_s,
                                     eta_c=eta_c, eta_m=eta_m, local_clip=local_clip)
      for got, want in zip(_trainable(state), x, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
      if algorithm == 'two_way':
        aug_c, aug_f = new_c, new_f
        # Gradient recovery (App. A.2): g̃_c is the mean central gradient, g̃_f the mean
        # client data gradient.
        for got, want in zip(state.central['central_gradient'], aug_c, strict=True):
          np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        for got, want in zip(state.central['federated_gradient'], aug_f, strict=True):
          np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

  @parameterized.parameters(*mixed_fl.ALGORITHMS)
  def test_no_central_weight_is_fed_avg_bit_for_bit(self, algorithm):
    fed_avg = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.1, local_steps=2, local_clip_norm=0.5,
        server_optimizer=optimizers.build('lamb', 0.01))
    mixed = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm=algorithm, central_weight=0.0, client_learning_rate=0.1,
        local_steps=2, local_clip_norm=0.5, server_optimizer=optimizers.build('lamb', 0.01))
    fed_state, mixed_state = fed_avg.initialize(), mixed.initialize()
    for round_num in range(2):
      client_batches, central_batches = self._data(round_num)
      clients = [_dataset(b) for b in client_batches]
      fed_state = fed_avg.next(fed_state, clients).state
      mixed_state = mixed.next(mixed_state, clients, _dataset(central_batches)).state
    for a, b in zip(fed_state.global_model_weights.trainable,
                    mixed_state.global_model_weights.trainable, strict=True):
      np.testing.assert_array_equal(a, b)
    self.assertEqual(mixed_state.central, collections.OrderedDict())

  def test_one_step_parallel_training_equals_one_way_transfer(self):
    # Paper App. A.3: at K = 1 with SGD, η_s = η_m = 1 and η_c = η, the same batches.
    eta = 0.1
    client_batches, central_batches = self._data(3, steps=1, central_steps=1)
    clients = [_dataset(b) for b in client_batches]
    results = {}
    for algorithm in ('parallel', 'one_way'):
      process = mixed_fl.build_mixed_fl_process(
          _model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=eta,
          local_steps=1, local_clip_norm=None, server_optimizer=_sgd(1.0))
      results[algorithm] = _trainable(process.next(process.initialize(), clients,
                                                   _dataset(central_batches)).state)
    for a, b in zip(results['parallel'], results['one_way'], strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

  def test_first_two_way_round_is_parallel_training(self):
    client_batches, central_batches = self._data(4)
    clients, central = [_dataset(b) for b in client_batches], _dataset(central_batches)
    states = {}
    for algorithm in ('parallel', 'two_way'):
      process = mixed_fl.build_mixed_fl_process(
          _model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.1,
          local_steps=2, server_optimizer=_sgd(1.0))
      states[algorithm] = process.next(process.initialize(), clients, central).state
    # Equal up to rounding: 2-w GT sums the clients' private parts as it goes.
    for a, b in zip(_trainable(states['parallel']), _trainable(states['two_way']), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

  def test_two_way_step_is_about_twice_parallel_trainings(self):
    # Far from the optimum at K = 1 with steps too small to change the gradient much, once the
    # augmenting gradients are set (round 1), each 2-w GT branch moves along the whole gradient
    # of f and the merge sums them.
    steps = {}
    for algorithm in ('parallel', 'two_way'):
      process = mixed_fl.build_mixed_fl_process(
          _model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=1e-3,
          local_steps=1, local_clip_norm=None, server_optimizer=_sgd(1.0))
      state = process.initialize()
      for _ in range(2):
        client_batches, central_batches = self._data(20, steps=1, central_steps=1, shift=4.0)
        before = _trainable(state)
        state = process.next(state, [_dataset(b) for b in client_batches],
                             _dataset(central_batches)).state
      steps[algorithm] = np.sqrt(sum(np.sum((a - b) ** 2)
                                     for a, b in zip(_trainable(state), before, strict=True)))
    self.assertBetween(steps['two_way'] / steps['parallel'], 1.7, 2.1)

  def test_central_batch_rubric(self):
    self.assertEqual(mixed_fl.central_batch_size('parallel', 100, 5, 2), 500)
    self.assertEqual(mixed_fl.central_batch_size('two_way', 100, 5, 2), 500)
    self.assertEqual(mixed_fl.central_batch_size('one_way', 100, 5, 2), 1000)
    with self.assertRaisesRegex(ValueError, 'cohort_size'):
      mixed_fl.central_batch_size('parallel', 0, 5, 2)

  def test_central_weight_one_is_central_training(self):
    # w_f = 0: the clients' deltas vanish and PT is K CentralOpt steps from x.
    client_batches, central_batches = self._data(5)
    process = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm='parallel', central_weight=1.0, client_learning_rate=0.1,
        local_steps=2, local_clip_norm=None, server_optimizer=_sgd(1.0),
        central_optimizer=_sgd(0.2))
    state = process.initialize()
    x = _trainable(state)
    state = process.next(state, [_dataset(b) for b in client_batches],
                         _dataset(central_batches)).state
    for batch in central_batches:
      x = [p - 0.2 * g for p, g in zip(x, _grad(x, batch, 1.0), strict=True)]
    for got, want in zip(_trainable(state), x, strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

  def test_augmenting_gradient_is_outside_the_local_clip(self):
    # The server's data is the client's: both gradients point the same way and both exceed the
    # clip, so a client step is η(clip(∇ w_f f) + g̃_c) of norm 2ηC. Inside the clip it would be
    # ηC.
    clip, eta = 1e-3, 0.1
    client_batches, _ = self._data(6, clients=1, steps=1)
    process = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm='one_way', central_weight=0.5, client_learning_rate=eta,
        local_steps=1, local_clip_norm=clip, server_optimizer=_sgd(1.0), diagnostics=True)
    state = process.initialize()
    x = _trainable(state)
    output = process.next(state, [_dataset(client_batches[0])], _dataset(client_batches[0]))
    step = np.sqrt(sum(np.sum((a - b) ** 2)
                       for a, b in zip(_trainable(output.state), x, strict=True)))
    self.assertAlmostEqual(output.metrics['mixed']['central_gradient_norm'], clip, delta=1e-7)
    self.assertAlmostEqual(step, 2 * eta * clip, delta=1e-3 * eta * clip)
    # The client's update (the private part) is the clipped step alone.
    self.assertAlmostEqual(output.metrics['client_work']['train']['delta_norm'], eta * clip,
                           delta=1e-3 * eta * clip)

  def test_federated_gradient_reads_only_the_released_aggregate(self):
    # The aggregator releases a constant: g̃_f must be that constant / (η K) whatever the
    # clients hold, and the model must not depend on the clients either.
    eta, steps = 0.1, 2
    released = [np.full([_FEATURES, 1], 0.3, np.float32), np.array([-0.2], np.float32)]
    process = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm='two_way', central_weight=0.5, client_learning_rate=eta,
        local_steps=steps, server_optimizer=_sgd(1.0),
        model_aggregator=_ConstantAggregator(released))
    _, central_batches = self._data(7)
    states = []
    for seed in (8, 9):
      client_batches, _ = self._data(seed, shift=seed)
      states.append(process.next(process.initialize(), [_dataset(b) for b in client_batches],
                                 _dataset(central_batches)).state)
    for got, want in zip(states[0].central['federated_gradient'], released, strict=True):
      np.testing.assert_allclose(got, want / (eta * steps), rtol=1e-6)
    for a, b in zip(_trainable(states[0]), _trainable(states[1]), strict=True):
      np.testing.assert_array_equal(a, b)

  @parameterized.parameters(*mixed_fl.ALGORITHMS)
  def test_dp_without_clip_or_noise_is_the_plain_mean(self, algorithm):
    client_batches, central_batches = self._data(10)
    clients, central = [_dataset(b) for b in client_batches], _dataset(central_batches)
    results = []
    for aggregator in (None, aggregators.PerLayerDPFactory.gaussian_fixed(
        noise_multiplier=0.0, clients_per_round=len(clients), clip=1e6, allocation='dim')):
      process = mixed_fl.build_mixed_fl_process(
          _model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.1,
          local_steps=2, server_optimizer=_sgd(1.0), model_aggregator=aggregator)
      results.append(_trainable(process.next(process.initialize(), clients, central).state))
    for a, b in zip(*results, strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

  def test_dp_mechanism_is_fed_avgs(self):
    # The ledger reads z from the aggregator's state: the same for FedAvg and mixed FL, so the
    # same ε at the same (q, z, T); and a noised 2-w GT round runs. (The runner's ledgers are
    # compared in tests/speech/mixed_training_test.py.)
    algorithm = 'two_way'
    def aggregator():
      return aggregators.PerLayerDPFactory.gaussian_fixed(
          noise_multiplier=1.3, clients_per_round=3, clip=0.1, allocation='dim', noise_seed=1)
    fed_avg = algorithms.build_fed_avg_process(
        _model_fn, client_learning_rate=0.1, local_steps=2, server_optimizer=_sgd(1.0),
        model_aggregator=aggregator())
    mixed = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.1,
        local_steps=2, server_optimizer=_sgd(1.0), model_aggregator=aggregator())
    client_batches, central_batches = self._data(11)
    state = mixed.next(mixed.initialize(), [_dataset(b) for b in client_batches],
                       _dataset(central_batches)).state
    self.assertEqual(privacy_ledger.applied_noise_multiplier(state.aggregator),
                     privacy_ledger.applied_noise_multiplier(fed_avg.initialize().aggregator))
    self.assertAlmostEqual(privacy_ledger.applied_noise_multiplier(state.aggregator), 1.3,
                           places=6)

  def test_state_holds_what_each_algorithm_needs(self):
    expected = {'parallel': ['optimizer', 'merge'], 'one_way': [],
                'two_way': ['optimizer', 'merge', 'central_gradient', 'federated_gradient']}
    for algorithm, keys in expected.items():
      process = mixed_fl.build_mixed_fl_process(
          _model_fn, algorithm=algorithm, central_weight=0.5, client_learning_rate=0.1,
          local_steps=2, server_optimizer=_sgd(1.0))
      state = process.initialize()
      self.assertEqual(list(state.central), keys, algorithm)
      if algorithm == 'two_way':
        for name in ('central_gradient', 'federated_gradient'):
          shapes = [np.shape(t) for t in state.central[name]]
          self.assertEqual(shapes, [(_FEATURES, 1), (1,)])
          self.assertTrue(all(not np.any(t) for t in state.central[name]))

  def test_data_free_central_loss(self):
    # f_c = ||w||² on the server (no data): PT's central branch is K SGD steps on it.
    lam, eta, steps = 1.0, 0.1, 2

    def regulariser(model, batch):
      assert batch is None
      return lam * tf.add_n([tf.reduce_sum(tf.square(w)) for w in model.trainable_variables])

    process = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm='parallel', central_weight=0.5, client_learning_rate=eta,
        local_steps=steps, local_clip_norm=None, server_optimizer=_sgd(1.0),
        central_loss_fn=regulariser, central_data_free=True)
    self.assertIsNone(process.central_data_type)
    client_batches, _ = self._data(12)
    state = process.initialize()
    x = _trainable(state)
    state = process.next(state, [_dataset(b) for b in client_batches]).state
    x_c = [p.copy() for p in x]
    for _ in range(steps):
      x_c = [p - eta * 0.5 * 2 * lam * p for p in x_c]
    # The federated branch alone (no central batches), the clients' loss weighted by 1 − w_c.
    fed_avg_x, _, _ = _numpy_round('parallel', x, None, None, client_batches, [], w_c=0.5,
                                   eta=eta, eta_s=1.0, eta_c=eta, eta_m=1.0)
    for got, p, c, f in zip(_trainable(state), x, x_c, fed_avg_x, strict=True):
      np.testing.assert_allclose(got, f + (c - p), rtol=1e-5, atol=1e-6)

  def test_gradient_dissimilarity_matches_its_definition(self):
    client_batches, central_batches = self._data(13)
    w_c = 0.4
    process = mixed_fl.build_mixed_fl_process(
        _model_fn, algorithm='parallel', central_weight=w_c, client_learning_rate=0.1,
        local_steps=2, server_optimizer=_sgd(1.0), gradient_dissimilarity=True,
        diagnostics=True)
    state = process.initialize()
    x = _trainable(state)
    metrics = process.next(state, [_dataset(b) for b in client_batches],
                           _dataset(central_batches)).metrics
    got = metrics['client_work']['gradient_dissimilarity']
    a = [np.mean([_grad(x, b[0], 1 - w_c)[i] for b in client_batches], 0) for i in range(2)]
    b = [np.mean([_grad(x, c, w_c)[i] for c in central_batches], 0) for i in range(2)]
    a2, b2 = (sum(np.sum(t ** 2) for t in v) for v in (a, b))
    s2 = sum(np.sum((p + q) ** 2) for p, q in zip(a, b, strict=True))
    self.assertAlmostEqual(got['G2'], a2 / (1 - w_c) + b2 / w_c - s2, places=4)
    self.assertAlmostEqual(got['B2'], (a2 / (1 - w_c) + b2 / w_c) / s2, places=4)

  def test_measurements_hold_client_statistics_only_when_asked(self):
    client_batches, central_batches = self._data(15)
    kwargs = dict(algorithm='parallel', central_weight=0.4, client_learning_rate=0.1,
                  local_steps=2, server_optimizer=_sgd(1.0))
    for extra, want in (({}, set()), ({'diagnostics': True}, {'train'})):
      process = mixed_fl.build_mixed_fl_process(_model_fn, **extra, **kwargs)
      metrics = process.next(process.initialize(), [_dataset(b) for b in client_batches],
                             _dataset(central_batches)).metrics
      self.assertEqual(set(metrics['client_work']), want)

  def test_gradient_dissimilarity_invariants(self):
    rng = np.random.default_rng(14)
    a = [rng.normal(size=(4,)).astype(np.float32)]
    same = mixed_fl.gradient_dissimilarity(a, a, 0.5, 0.5)
    self.assertAlmostEqual(float(same['G2']), 0.0, places=5)
    self.assertAlmostEqual(float(same['B2']), 1.0, places=5)
    u, v = np.array([[3.0, 0.0]], np.float32), np.array([[0.0, 3.0]], np.float32)
    orthogonal = mixed_fl.gradient_dissimilarity([u], [v], 0.5, 0.5)
    self.assertAlmostEqual(float(orthogonal['G2']), 2 * 9.0, places=4)
    self.assertAlmostEqual(float(orthogonal['B2']), 2.0, places=5)
    for _ in range(20):
      w_c = float(rng.uniform(0.05, 0.95))
      p, q = [rng.normal(size=(5,)).astype(np.float32)], [rng.normal(size=(5,)).astype(
          np.float32)]
      result = mixed_fl.gradient_dissimilarity(p, q, 1 - w_c, w_c)
      self.assertGreaterEqual(float(result['G2']), -1e-4)
      self.assertGreaterEqual(float(result['B2']), 1 - 1e-5)

  @parameterized.named_parameters(
      ('algorithm', dict(algorithm='fedavg'), 'algorithm'),
      ('weight_negative', dict(central_weight=-0.1), 'central_weight'),
      ('weight_above_one', dict(central_weight=1.5), 'central_weight'),
      ('weight_bool', dict(central_weight=True), 'central_weight'),
      ('one_way_optimizer', dict(algorithm='one_way', central_optimizer=_sgd(0.1)),
       'central_optimizer'),
      ('one_way_steps', dict(algorithm='one_way', central_steps=3), 'central_steps'),
      ('transfer_epochs', dict(algorithm='two_way', local_steps=None, local_epochs=1),
       'local_steps'),
      ('dissimilarity_without_central', dict(central_weight=0.0, gradient_dissimilarity=True),
       'gradient_dissimilarity'),
      ('central_steps', dict(central_steps=0), 'central_steps'),
      ('dissimilarity_without_diagnostics', dict(gradient_dissimilarity=True), 'diagnostics'),
  )
  def test_bad_input(self, override, name):
    kwargs = dict(algorithm='parallel', central_weight=0.5, client_learning_rate=0.1,
                  local_steps=2, server_optimizer=_sgd(1.0))
    kwargs.update(override)
    with self.assertRaisesRegex(ValueError, name):
      mixed_fl.build_mixed_fl_process(_model_fn, **kwargs)


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
