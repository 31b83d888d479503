"""The retrieval process on small synthetic data: payload, the no-DP reduction, aggregation
weights, centralized equivalence, determinism, local and central DP wiring, argument errors, and
the adapter + classifier mode through TFF over a frozen tiny BERT (batches trimmed to their
longest sequence).

The processes are built once per configuration (`_process`) and shared by the tests.
"""

import collections
import functools
import math
from typing import NamedTuple
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import retrieval
from fedasr_tff import runtime
from fedasr_tff import text_models
from fedasr_tff.retrieval import process as process_lib
from fedasr_tff.text_models import backbone as backbone_lib
from tests.retrieval import backbones

_DIM, _CLASSES, _BATCH = 8, 3, 4
_LEARNING_RATE, _EPOCHS = 0.1, 2
# Head sizes |θ_c| on d = 8 features and 3 classes.
_HEAD_SIZES = {'linear': _DIM * _CLASSES + _CLASSES,
               'pre_classifier': _DIM * _DIM + _DIM + _DIM * _CLASSES + _CLASSES}
_ADAPTIVE = retrieval.LocalDPConfig.adaptive(0.1, retrieval.sigma_b(2))
_TINY_CLIP = 1e-3


def _client(size, seed):
  """`size` examples of separable features (class c's coordinate c raised by 3), as NumPy."""
  rng = np.random.default_rng(seed)
  labels = (np.arange(size) % _CLASSES).astype(np.int32)
  features = rng.normal(size=(size, _DIM)).astype(np.float32)
  features[np.arange(size), labels] += 3.0
  return features, labels


def _dataset(features, labels, seed):
  """Batches of `_BATCH` with a [2] int64 `seed` each: (`seed`, batch index)."""
  batches = tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(features=features, label=labels)).batch(_BATCH)
  return batches.enumerate().map(lambda i, batch: collections.OrderedDict(
      batch, seed=tf.stack([tf.constant(seed, tf.int64), i])))


def _datasets(sizes, data_seed=0, batch_seed=0):
  return [_dataset(*_client(size, data_seed + i), batch_seed + i) for i, size in enumerate(sizes)]


def _initial_weights(head):
  """Fixed initial model weights (a process's own initialisation is random)."""
  rng = np.random.default_rng(42)
  shapes = ([[_DIM, _CLASSES], [_CLASSES]] if head == 'linear' else
            [[_DIM, _DIM], [_DIM], [_DIM, _CLASSES], [_CLASSES]])
  return tff.learning.models.ModelWeights(
      trainable=[(0.3 * rng.normal(size=s)).astype(np.float32) for s in shapes],
      non_trainable=[])


@functools.lru_cache(maxsize=None)
def _process(head='linear', local_dp=None, dp_granularity='round', weighting='num_examples',
             model_aggregator=None, diagnostics=True):
  # These tests read the clients' statistics: the opt-in by default here.
  model_fn = retrieval.build_model_fn(retrieval.CLASSIFIER_ONLY, _CLASSES, head=head,
                                      feature_dim=_DIM)
  return retrieval.build_retrieval_process(
      model_fn, client_learning_rate=_LEARNING_RATE, local_epochs=_EPOCHS, local_dp=local_dp,
      dp_granularity=dp_granularity, weighting=weighting, model_aggregator=model_aggregator,
      diagnostics=diagnostics)


class _Round(NamedTuple):
  weights: list          # the state's trainable model weights after the round, NumPy
  dp_states: list        # each client's LocalDPState after the round
  metrics: dict


def _run(process, data, rounds, *, local_dp=None, head='linear', noise_seed=0, initial=None):
  """`rounds` rounds from `initial` (default `_initial_weights(head)`); the clients' noise seeds
  are (`noise_seed`, 10 r + i) in round r for client i."""
  initial = _initial_weights(head) if initial is None else initial
  state = process_lib.with_model_weights(process.initialize(), initial)
  dp_states = [retrieval.initial_client_dp_state(local_dp)] * len(data)
  history = []
  for r in range(rounds):
    seeds = [np.array([noise_seed, 10 * r + i], np.int64) for i in range(len(data))]
    state, dp_states, metrics = retrieval.run_round(process, state, data, dp_states, seeds)
    history.append(_Round([np.asarray(w) for w in state['model'].trainable], list(dp_states),
                          metrics))
  return history


def _assert_weights_equal(actual, expected, msg=''):
  for i, (a, b) in enumerate(zip(actual, expected, strict=True)):
    np.testing.assert_array_equal(a, b, err_msg=f'{msg} tensor {i}')


def _assert_weights_close(actual, expected, atol):
  for i, (a, b) in enumerate(zip(actual, expected, strict=True)):
    np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=f'tensor {i}')


def _max_difference(a, b):
  return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _flat(weights):
  return np.concatenate([np.ravel(w) for w in weights]).astype(np.float64)


def _tensor_types(type_spec, path=()):
  """(path, TensorType) of every tensor in a TFF type; sequences (client data) are skipped."""
  if isinstance(type_spec, tff.TensorType):
    yield path, type_spec
  elif isinstance(type_spec, tff.FederatedType):
    yield from _tensor_types(type_spec.member, path)
  elif isinstance(type_spec, tff.FunctionType):
    yield from _tensor_types(type_spec.parameter, path + ('parameter',))
    yield from _tensor_types(type_spec.result, path + ('result',))
  elif isinstance(type_spec, tff.StructType):
    for i, (name, member) in enumerate(tff.structure.iter_elements(type_spec)):
      yield from _tensor_types(member, path + (name or i,))


def _size(tensor_type):
  return int(np.prod(tensor_type.shape))


class PayloadTest(parameterized.TestCase):
  """Property 3: the model weights of the state, which the clients' deltas must match (the
  aggregator is created on `model_weights_type.trainable`, so TFF type-checks every client's
  update against them), are exactly the trainable tensors."""

  def _check_signatures(self, process, shapes):
    state_type = process.initialize.type_signature.result.member
    self.assertEqual([tuple(t.shape) for _, t in _tensor_types(state_type.model.trainable)],
                     shapes)
    self.assertEmpty(state_type.model.non_trainable)
    # Every other tensor in `next` (DP states, seeds, metrics, optimizer and aggregator state)
    # is a scalar or a seed, except the frozen backbone's weights (an input from the server,
    # broadcast, never in the state, the clients' results or anything returned) and the DP
    # states returned, a scalar per client.
    payload = 0
    for path, tensor_type in _tensor_types(process.next.type_signature):
      if path[1:4] == ('state', 'model', 'trainable'):
        payload += _size(tensor_type)
      elif path[:2] == ('parameter', 'backbone_weights'):
        self.assertEqual(process.next.type_signature.parameter.backbone_weights.placement,
                         tff.SERVER)
      elif path[:2] == ('result', 'client_dp_states'):
        # The cohort's next DP states, a scalar field per client (`run_round` unstacks them).
        self.assertEqual(tuple(tensor_type.shape), (None,), msg=str(path))
      else:
        self.assertLessEqual(_size(tensor_type), 2, msg=str(path))
    return payload // 2   # the state is both in the parameter and in the result

  @parameterized.parameters('linear', 'pre_classifier')
  def test_classifier_only_carries_the_head_alone(self, head):
    shapes = ([(_DIM, _CLASSES), (_CLASSES,)] if head == 'linear' else
              [(_DIM, _DIM), (_DIM,), (_DIM, _CLASSES), (_CLASSES,)])
    self.assertEqual(self._check_signatures(_process(head), shapes), _HEAD_SIZES[head])

  def test_adapter_classifier_carries_adapter_and_head(self):
    d = 16
    process = AdapterClassifierProcessTest.process()
    payload = self._check_signatures(process, [(d, d), (d, _CLASSES), (_CLASSES,)])
    self.assertEqual(payload, d**2 + d * _CLASSES + _CLASSES)
    backbone_type = process.next.type_signature.parameter.backbone_weights.member
    frozen = AdapterClassifierProcessTest._built()[3]
    self.assertEqual([(name, tuple(t.shape)) for name, t in _tensor_types(backbone_type)],
                     [((key,), spec.shape) for key, spec in frozen.weights_spec.items()])


class NoDPReductionTest(parameterized.TestCase):
  """Property 6: no noise and no clip (z = 0, C = inf) is FedAvg bit for bit."""

  @parameterized.parameters('round', 'step')
  def test_zero_noise_infinite_clip_equals_no_dp(self, dp_granularity):
    data = _datasets([8, 12])
    local_dp = retrieval.LocalDPConfig.fixed(0.0, math.inf)
    plain = _run(_process(), data, 3)
    reduced = _run(_process(local_dp=local_dp, dp_granularity=dp_granularity), data, 3,
                   local_dp=local_dp)
    for r, (a, b) in enumerate(zip(reduced, plain, strict=True)):
      _assert_weights_equal(a.weights, b.weights, f'round {r}')
      for name in ('loss', 'examples', 'steps', 'delta_norm'):
        self.assertEqual(a.metrics['client_work'][name], b.metrics['client_work'][name],
                         msg=f'round {r} {name}')
      self.assertEqual(a.metrics['client_work']['clipped'], 0)
      self.assertEqual(a.metrics['client_work']['mean_noise_std'], 0.0)
    self.assertGreater(_max_difference(plain[-1].weights, _initial_weights('linear').trainable),
                       0.01)


class AggregationTest(parameterized.TestCase):
  """Property 11."""

  def test_measurements_hold_client_statistics_only_when_asked(self):
    # The library default is the private one: no un-noised client statistic in `client_work`.
    local = retrieval.LocalDPConfig.fixed(0.1, 1.0)
    data = _datasets([8, 8])
    private = _run(_process(local_dp=local, diagnostics=False), data, 1, local_dp=local)[0]
    self.assertEmpty(private.metrics['client_work'])
    asked = _run(_process(local_dp=local), data, 1, local_dp=local)[0]
    self.assertEqual(asked.metrics['client_work']['clients'], 2)

  def test_even_split_num_examples_equals_uniform_bitwise(self):
    # With n_i = 8 for every client, w_i Δ_i = 8 Δ_i is exact and Σ 8 Δ_i = 8 Σ Δ_i exactly
    # (float rounding commutes with a power-of-two scale), so Σ w_i Δ_i / Σ w_i = Σ Δ_i / 2
    # bit for bit; a weight that is not a power of two could differ in the last bit (~1e-7).
    data = _datasets([8, 8])
    weighted = _run(_process(), data, 2)
    uniform = _run(_process(weighting='uniform'), data, 2)
    for a, b in zip(weighted, uniform, strict=True):
      _assert_weights_equal(a.weights, b.weights)

  def test_identical_clients_aggregate_to_that_client(self):
    # (8 Δ + 8 Δ) / 16 and (Δ + Δ) / 2 are Δ exactly; with three clients 3 Δ / 3 may round.
    one = _datasets([12], data_seed=5)
    for weighting in process_lib.WEIGHTINGS:
      single = _run(_process(weighting=weighting), one, 1)[0]
      twice = _run(_process(weighting=weighting), one * 2, 1)[0]
      _assert_weights_equal(twice.weights, single.weights, weighting)
      thrice = _run(_process(weighting=weighting), one * 3, 1)[0]
      _assert_weights_close(thrice.weights, single.weights, atol=1e-7)

  def test_uneven_sizes_num_examples_is_the_size_weighted_average(self):
    sizes = [4, 8, 20]
    data = _datasets(sizes, data_seed=10)
    singles = [_run(_process(), [d], 1)[0].weights for d in data]
    weighted = _run(_process(), data, 1)[0].weights
    uniform = _run(_process(weighting='uniform'), data, 1)[0].weights
    n = np.array(sizes, np.float64)
    for h in range(2):
      tensors = np.stack([s[h].astype(np.float64) for s in singles])
      np.testing.assert_allclose(weighted[h], np.tensordot(n / n.sum(), tensors, 1), rtol=0,
                                 atol=1e-6)
      np.testing.assert_allclose(uniform[h], tensors.mean(axis=0), rtol=0, atol=1e-6)
    self.assertGreater(_max_difference(weighted, uniform), 1e-3)


def _centralized(features, labels, initial, epochs):
  """SGD on the same Keras model, eagerly: θ -= α ∇ mean CE over each batch, in order."""
  model = retrieval.FeatureClassifier(_DIM, _CLASSES, head='linear')
  for variable, value in zip(model.trainable_variables, initial, strict=True):
    variable.assign(value)
  for _ in range(epochs):
    for start in range(0, len(labels), _BATCH):
      batch = slice(start, start + _BATCH)
      with tf.GradientTape() as tape:
        logits = model(features[batch], training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels[batch], logits=logits))
      gradients = tape.gradient(loss, model.trainable_variables)
      for variable, gradient in zip(model.trainable_variables, gradients, strict=True):
        variable.assign_sub(_LEARNING_RATE * gradient)
  return [v.numpy() for v in model.trainable_variables]


class CentralizedEquivalenceTest(absltest.TestCase):
  """Property 12."""

  def test_one_client_without_dp_is_centralized_training(self):
    features, labels = _client(14, seed=3)   # a last batch of 2
    federated = _run(_process(), [_dataset(features, labels, 0)], 1)[0]
    initial = _initial_weights('linear').trainable
    expected = _centralized(features, labels, initial, _EPOCHS)
    _assert_weights_close(federated.weights, expected, atol=1e-6)
    self.assertGreater(_max_difference(expected, initial), 0.05)
    # Not only the first epoch.
    self.assertGreater(_max_difference(expected, _centralized(features, labels, initial, 1)),
                       0.01)
    self.assertEqual(federated.metrics['client_work']['steps'], 8)
    self.assertEqual(federated.metrics['client_work']['examples'], 28)


class DeterminismTest(absltest.TestCase):
  """Property 16, with seeded head dropout and adaptive local DP."""

  def _run(self, **kwargs):
    data = kwargs.pop('data', None) or _datasets([8, 12])
    return _run(_process('pre_classifier', _ADAPTIVE), data, 2, local_dp=_ADAPTIVE,
                head='pre_classifier', **kwargs)

  def test_same_seeds_same_run(self):
    first, second = self._run(), self._run()
    for a, b in zip(first, second, strict=True):
      _assert_weights_equal(a.weights, b.weights)
      self.assertEqual(a.dp_states, b.dp_states)
      tf.nest.map_structure(self.assertEqual, a.metrics, b.metrics)

  def test_different_noise_seeds_different_weights(self):
    reference = self._run()[-1]
    renoised = self._run(noise_seed=1)[-1]
    # The noise std is z_Δ C ~ 0.1 per coordinate and round.
    self.assertGreater(_max_difference(reference.weights, renoised.weights), 0.05)
    # Same data, same dropout: the clients' own training loss of round 1 is unchanged.
    first_reference, first_renoised = self._run()[0], self._run(noise_seed=1)[0]
    self.assertEqual(first_reference.metrics['client_work']['loss'],
                     first_renoised.metrics['client_work']['loss'])

  def test_batch_seeds_drive_dropout(self):
    reference = self._run()[0]
    redrawn = self._run(data=_datasets([8, 12], batch_seed=7))[0]
    self.assertNotEqual(reference.metrics['client_work']['loss'],
                        redrawn.metrics['client_work']['loss'])


class LocalDPWiringTest(parameterized.TestCase):

  @parameterized.parameters('round', 'step')
  def test_released_delta_is_clipped(self, dp_granularity):
    # From θ_0 = 0, θ_1 = −Δ_c exactly (η_s = 1, one client): a θ_0 of order 1 would add
    # float32 rounding of order 1e-8 per coordinate to θ_1 − θ_0, above C · 1e-6.
    local_dp = retrieval.LocalDPConfig.fixed(0.0, _TINY_CLIP)
    process = _process(local_dp=local_dp, dp_granularity=dp_granularity)
    zeros = tf.nest.map_structure(np.zeros_like, _initial_weights('linear'))
    result = _run(process, _datasets([12]), 1, local_dp=local_dp, initial=zeros)[0]
    released = np.linalg.norm(_flat(result.weights))
    work = result.metrics['client_work']
    steps = work['steps']
    self.assertEqual(steps, 6)
    # Each release has norm C (z = 0, every raw update is larger): the round's delta, or
    # each of the `steps` step updates, whose sum has norm <= steps · C.
    releases = 1 if dp_granularity == 'round' else steps
    self.assertEqual(work['clipped'], releases)
    self.assertLessEqual(released, releases * _TINY_CLIP * (1 + 1e-6))
    if dp_granularity == 'round':
      self.assertAlmostEqual(released / _TINY_CLIP, 1.0, delta=1e-4)
      self.assertGreater(work['delta_norm'], 10 * _TINY_CLIP)   # the raw delta, before DP
    else:
      self.assertGreater(released, _TINY_CLIP)   # the steps add up
    self.assertEqual(result.dp_states[0].round, releases)
    self.assertEqual(result.dp_states[0].clip, np.float32(_TINY_CLIP))

  def test_warmup_rounds_send_the_raw_delta(self):
    local_dp = retrieval.LocalDPConfig.fixed(1.0, 0.01, warmup_rounds=2)
    data = _datasets([8, 12])
    plain = _run(_process(), data, 3)
    warm = _run(_process(local_dp=local_dp), data, 3, local_dp=local_dp)
    for r in range(2):
      _assert_weights_equal(warm[r].weights, plain[r].weights)
      self.assertEqual(warm[r].metrics['client_work']['mean_noise_std'], 0.0)
      self.assertEqual(warm[r].metrics['client_work']['clipped'], 0)
    self.assertGreater(_max_difference(warm[2].weights, plain[2].weights), 1e-3)
    self.assertAlmostEqual(warm[2].metrics['client_work']['mean_noise_std'], 0.01, places=7)
    self.assertEqual(warm[2].metrics['client_work']['clipped'], 2)

  @parameterized.parameters('round', 'step')
  def test_client_states_advance_and_adapt_per_client(self, dp_granularity):
    rounds, steps = 2, 2 * _EPOCHS   # 8 examples in batches of 4: 2 per epoch
    data = _datasets([8, 8], data_seed=20)
    history = _run(_process(local_dp=_ADAPTIVE, dp_granularity=dp_granularity), data, rounds,
                   local_dp=_ADAPTIVE)
    per_round = 1 if dp_granularity == 'round' else steps
    for r, result in enumerate(history):
      self.assertEqual([int(s.round) for s in result.dp_states], [(r + 1) * per_round] * 2)
      clips = [float(s.clip) for s in result.dp_states]
      self.assertNotIn(_ADAPTIVE.initial_clip, clips)
      self.assertNotEqual(clips[0], clips[1])   # each client's own clip
    # Practical noise: each client's last release has std z_Δ C_i, so the means over clients
    # are in that ratio.
    for result in history:
      work = result.metrics['client_work']
      self.assertAlmostEqual(work['mean_noise_std'] / work['mean_clip'],
                             _ADAPTIVE.release_noise_multiplier, places=5)
    if dp_granularity == 'round':
      # Round 1 releases at C_0 and round 2 at the clients' C_1.
      self.assertAlmostEqual(history[0].metrics['client_work']['mean_clip'],
                             _ADAPTIVE.initial_clip, places=6)
      self.assertAlmostEqual(history[1].metrics['client_work']['mean_clip'],
                             np.mean([float(s.clip) for s in history[0].dp_states]), places=6)

  def test_without_local_dp_states_count_rounds(self):
    history = _run(_process(), _datasets([8, 12]), 3)
    for r, result in enumerate(history):
      for state in result.dp_states:
        self.assertEqual(int(state.round), r + 1)
        self.assertEqual(float(state.clip), 0.0)
      self.assertNotIn('clipped', result.metrics['client_work'])


class CentralDPTest(absltest.TestCase):

  def test_per_layer_dp_aggregator_adds_noise(self):
    # A clip well above the deltas' norms: the difference from the plain uniform mean is the
    # noise, of std z C / S per coordinate.
    z, clip, clients = 0.2, 5.0, 2
    aggregator = aggregators.PerLayerDPFactory.gaussian_fixed(
        noise_multiplier=z, clients_per_round=clients, clip=clip, noise_seed=3)
    data = _datasets([8, 12])
    private = _run(_process(weighting='uniform', model_aggregator=aggregator), data, 1)[0]
    plain = _run(_process(weighting='uniform'), data, 1)[0]
    self.assertLess(plain.metrics['client_work']['delta_norm'], clip / 4)
    difference = _flat(private.weights) - _flat(plain.weights)
    self.assertAlmostEqual(np.std(difference) / (z * clip / clients), 1.0, delta=0.4)
    self.assertIn('dp_query_metrics', private.metrics['aggregator'])

  def test_unweighted_aggregator_refuses_num_examples(self):
    aggregator = aggregators.PerLayerDPFactory.gaussian_fixed(
        noise_multiplier=0.2, clients_per_round=2, clip=5.0, noise_seed=3)
    model_fn = retrieval.build_model_fn(retrieval.CLASSIFIER_ONLY, _CLASSES, feature_dim=_DIM)
    with self.assertRaisesRegex(ValueError, '`weighting`'):
      retrieval.build_retrieval_process(model_fn, client_learning_rate=0.1,
                                        model_aggregator=aggregator)


class ArgumentErrorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('zero_learning_rate', dict(client_learning_rate=0.0), '`client_learning_rate`'),
      ('infinite_learning_rate', dict(client_learning_rate=math.inf), '`client_learning_rate`'),
      ('zero_epochs', dict(local_epochs=0), '`local_epochs`'),
      ('float_epochs', dict(local_epochs=2.0), '`local_epochs`'),
      ('weighting', dict(weighting='examples'), '`weighting`'),
      ('dp_granularity', dict(dp_granularity='epoch'), '`dp_granularity`'),
      ('local_dp', dict(local_dp=dict(noise_multiplier=0.1)), '`local_dp`'),
      ('server_learning_rate', dict(server_learning_rate=-1.0), '`server_learning_rate`'),
      ('model_aggregator', dict(model_aggregator='mean'), '`model_aggregator`'),
  )
  def test_error_names_the_argument(self, kwargs, name):
    model_fn = retrieval.build_model_fn(retrieval.CLASSIFIER_ONLY, _CLASSES, feature_dim=_DIM)
    kwargs = dict(dict(client_learning_rate=0.1), **kwargs)
    with self.assertRaisesRegex(ValueError, name):
      retrieval.build_retrieval_process(model_fn, **kwargs)


# Separable token data for the tiny BERT (vocabulary 40): class c's sequences repeat token
# 10 (c + 1); the rest is random.
_LENGTH = 6


def _token_dataset(size, seed, extra_padding=0):
  """Batches of 3 of `_LENGTH` tokens or one fewer, then `extra_padding` padding columns."""
  rng = np.random.default_rng(seed)
  labels = (np.arange(size) % _CLASSES).astype(np.int32)
  ids = rng.integers(4, 40, size=(size, _LENGTH)).astype(np.int32)
  ids[:, 0] = 2
  ids[:, 1:5] = 10 * (labels[:, None] + 1)
  mask = np.ones_like(ids)
  mask[::2, -1] = 0   # some padding
  ids, mask = (np.pad(a, [[0, 0], [0, extra_padding]]) for a in (ids, mask))
  batches = tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(token_ids=ids, mask=mask, label=labels)).batch(3)
  return batches.enumerate().map(lambda i, batch: collections.OrderedDict(
      batch, seed=tf.stack([tf.constant(seed, tf.int64), i])))


class AdapterClassifierProcessTest(absltest.TestCase):
  """Mode B through TFF and eagerly; property 1 (the backbone stays bit-identical)."""

  @classmethod
  @functools.cache
  def _built(cls):
    backbone = backbones.tiny_backbone('bert', seed=1)
    frozen = text_models.FrozenBackbone(backbone)
    model_fn = retrieval.build_model_fn(retrieval.ADAPTER_CLASSIFIER, _CLASSES,
                                        frozen_backbone=frozen)
    process = retrieval.build_retrieval_process(model_fn, client_learning_rate=0.5,
                                                local_epochs=2, frozen_backbone=frozen,
                                                diagnostics=True)
    return backbone, model_fn, process, frozen

  @classmethod
  def process(cls):
    return cls._built()[2]

  @classmethod
  @functools.cache
  def _untrimmed_process(cls):
    """The process of `_built` over batches kept at their padded length (no `trim_padding`)."""
    _, model_fn, _, frozen = cls._built()
    with mock.patch.object(backbone_lib, 'trim_padding', lambda inputs: inputs):
      return retrieval.build_retrieval_process(model_fn, client_learning_rate=0.5,
                                               local_epochs=2, frozen_backbone=frozen,
                                               diagnostics=True)

  def test_a_round_on_trimmed_batches_equals_the_untrimmed_round(self):
    _, _, process, frozen = self._built()
    untrimmed = self._untrimmed_process()
    # 6 columns of padding after every batch's longest sequence.
    data = [_token_dataset(6, seed, extra_padding=6) for seed in (0, 1)]
    dp_states = [retrieval.initial_client_dp_state(None)] * 2
    seeds = [np.array([0, i], np.int64) for i in range(2)]
    state = process.initialize()
    # The rounds run the computations built above: no client, batch or length traces them again.
    with mock.patch.object(backbone_lib, 'trim_padding',
                           wraps=backbone_lib.trim_padding) as traced:
      trimmed = retrieval.run_round(process, state, data, dp_states, seeds, frozen.weights)
      full = retrieval.run_round(untrimmed, state, data, dp_states, seeds, frozen.weights)
    self.assertEqual(traced.call_count, 0)
    _assert_weights_close([np.asarray(w) for w in trimmed.state['model'].trainable],
                          [np.asarray(w) for w in full.state['model'].trainable], atol=1e-5)
    self.assertGreater(_max_difference(trimmed.state['model'].trainable,
                                       state['model'].trainable), 1e-3)
    np.testing.assert_allclose(trimmed.metrics['client_work']['loss'],
                               full.metrics['client_work']['loss'], rtol=1e-5)

  def test_the_backbone_weights_are_an_argument_not_part_of_the_computation(self):
    _, _, process, frozen = self._built()
    self.assertLen(process.next.type_signature.parameter, 6)
    serialised = tff.framework.ConcreteComputation.get_proto(process.next).SerializeToString()
    serialised += tff.framework.ConcreteComputation.get_proto(
        process.initialize).SerializeToString()
    # Positive control: a graph that holds the weights as constants holds their bytes.
    graph = tf.Graph()
    with graph.as_default():
      frozen.build()
    baked = graph.as_graph_def().SerializeToString()
    for key, value in frozen.weights.items():
      if value.size >= 16:   # Short byte strings could match by chance.
        self.assertIn(value.tobytes(), baked, msg=key)
        self.assertNotIn(value.tobytes(), serialised, msg=key)

  def test_rounds_depend_on_the_backbone_weights_given(self):
    _, _, process, frozen = self._built()
    data = [_token_dataset(6, seed) for seed in (0, 1)]
    state = process.initialize()
    dp_states = [retrieval.initial_client_dp_state(None)] * 2
    seeds = [np.array([0, i], np.int64) for i in range(2)]
    weights = frozen.weights
    runs = [retrieval.run_round(process, state, data, dp_states, seeds, weights)
            for _ in range(2)]
    scaled = collections.OrderedDict((key, 0.5 * value) for key, value in weights.items())
    other = retrieval.run_round(process, state, data, dp_states, seeds, scaled)
    trained = [[np.asarray(w) for w in run.state['model'].trainable] for run in runs]
    for a, b in zip(*trained, strict=True):
      np.testing.assert_array_equal(a, b)
    self.assertGreater(_max_difference(
        trained[0], [np.asarray(w) for w in other.state['model'].trainable]), 1e-4)

  def test_rounds_train_adapter_and_head_and_leave_the_backbone(self):
    backbone, _, process, frozen = self._built()
    loaded = [w.numpy().copy() for w in backbone.weights]
    data = [_token_dataset(6, seed) for seed in (0, 1)]
    state = process.initialize()
    np.testing.assert_array_equal(state['model'].trainable[0], np.eye(16, dtype=np.float32))
    # W_a = I and a fixed head (Keras's initialisation differs from run to run).
    rng = np.random.default_rng(0)
    initial = [np.eye(16, dtype=np.float32),
               (0.3 * rng.normal(size=[16, _CLASSES])).astype(np.float32),
               np.zeros([_CLASSES], np.float32)]
    state = process_lib.with_model_weights(
        state, tff.learning.models.ModelWeights(trainable=initial, non_trainable=[]))
    dp_states = [retrieval.initial_client_dp_state(None)] * 2
    losses = []
    for r in range(4):
      seeds = [np.array([r, i], np.int64) for i in range(2)]
      state, dp_states, metrics = retrieval.run_round(process, state, data, dp_states, seeds,
                                                      frozen.weights)
      losses.append(metrics['client_work']['loss'])
    trained = [np.asarray(w) for w in state['model'].trainable]
    self.assertGreater(np.abs(trained[0] - np.eye(16)).max(), 1e-4)
    self.assertGreater(_max_difference(trained[1:], initial[1:]), 1e-2)
    self.assertTrue(np.all(np.diff(losses) < 0), msg=losses)
    self.assertLess(losses[-1], 0.75 * losses[0], msg=losses)
    for before, variable in zip(loaded, backbone.weights, strict=True):
      np.testing.assert_array_equal(variable.numpy(), before, err_msg=variable.name)

  def test_eager_client_training_leaves_the_rebuilt_backbone(self):
    backbone, model_fn, _, _ = self._built()
    model = model_fn()
    rebuilt = model.keras_model.backbone
    self.assertIsNot(rebuilt, backbone)
    self.assertEmpty(rebuilt.trainable_variables)
    frozen = [w.numpy().copy() for w in rebuilt.weights]
    for loaded, value in zip(backbone.weights, frozen, strict=True):
      np.testing.assert_array_equal(value, loaded.numpy(), err_msg=loaded.name)
    trainable = [v.numpy().copy() for v in model.trainable_variables]
    self.assertLen(trainable, 3)   # W_a, kernel and bias of the linear head
    for batch in _token_dataset(6, seed=2).repeat(2):
      with tf.GradientTape() as tape:
        loss = model.forward_pass(batch, training=True).loss
      gradients = tape.gradient(loss, model.trainable_variables)
      for variable, gradient in zip(model.trainable_variables, gradients, strict=True):
        variable.assign_sub(0.5 * gradient)
    for before, variable in zip(frozen, rebuilt.weights, strict=True):
      np.testing.assert_array_equal(variable.numpy(), before, err_msg=variable.name)
    for before, variable in zip(trainable, model.trainable_variables, strict=True):
      self.assertGreater(np.abs(variable.numpy() - before).max(), 1e-5, msg=variable.name)


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
