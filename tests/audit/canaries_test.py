"""Canary clients: the TFF client work returns the direction the attacker recomputes, and the
attacker's expected clipped canary is what the production clipping makes of it."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import aggregators
from fedasr_tff import runtime
from fedasr_tff.aggregators import per_layer_query
from fedasr_tff.audit import canaries

_SHAPES = [(3, 4), (5,), (2, 2, 2)]


class CanariesTest(parameterized.TestCase):

  def test_client_work_returns_the_canary_the_attacker_recomputes(self):

    @tff.tensorflow.computation
    def initial_weights():
      return tff.learning.models.ModelWeights(
          trainable=[tf.zeros(s) for s in _SHAPES], non_trainable=[])

    weights_type = initial_weights.type_signature.result
    work = canaries.build_canary_client_work(weights_type)
    seeds = [canaries.canary_seed(7, i, 2) for i in range(3)]
    data = [canaries.canary_dataset(seeds[0], 5.0), canaries.canary_dataset(seeds[1], 0.0),
            canaries.canary_dataset(seeds[2], 2.0)]
    weights = [initial_weights()] * 3
    output = work.next(work.initialize(), weights, data)
    for result, seed, norm in zip(output.result, seeds, (5.0, 0.0, 2.0), strict=True):
      self.assertEqual(result.update_weight, 1.0)
      want = canaries.canary_directions(_SHAPES, seed)
      for got, unit in zip(result.update, want, strict=True):
        np.testing.assert_allclose(got, norm * unit.numpy(), rtol=1e-5, atol=1e-7)
        self.assertAlmostEqual(float(np.linalg.norm(got)), norm, places=4)
    # Fresh directions for other canaries and other rounds.
    self.assertFalse(np.array_equal(canaries.canary_seed(7, 0, 2), canaries.canary_seed(7, 0, 3)))
    self.assertFalse(np.array_equal(canaries.canary_seed(7, 0, 2), canaries.canary_seed(7, 1, 2)))

  @parameterized.product(allocation=('global', 'uniform', 'dim'), normalize=(False, True),
                         norm=(0.05, 1e3, (0.3, 0.0, 2.0), (0.01, 0.02, 0.03)))
  def test_expected_clipped_canary_is_what_the_query_makes(self, allocation, normalize, norm):
    sizes = [int(np.prod(s)) for s in _SHAPES]
    clips = aggregators.group_clips(1.0, sizes, allocation)
    groups = [0] * 3 if allocation == 'global' else [0, 1, 2]
    query = per_layer_query.PerLayerClipGaussianSumQuery(groups, clips, 0.0, 1,
                                                          normalize=normalize, diagnostics=False)
    units = canaries.canary_directions(_SHAPES, canaries.canary_seed(1, 2, 3))
    # Equal leaf norms, or one each (unequal, a zero leaf, all below the clip).
    norms = np.broadcast_to(norm, [len(_SHAPES)])
    record = [float(n) * u for n, u in zip(norms, units, strict=True)]
    clipped, _, _ = query.preprocess_record(tf.constant(clips, tf.float32), record)
    want = canaries.clipped_canary_weights(groups, clips, norm, normalize)
    for leaf, unit, weight in zip(clipped, units, want, strict=True):
      np.testing.assert_allclose(leaf.numpy(), weight * unit.numpy(), rtol=1e-4, atol=1e-7)

  def test_groups_from_released_clips(self):
    names = ['a', 'b', 'c']
    per_leaf = {n: {'clip': c} for n, c in zip(names, (0.1, 0.2, 0.3), strict=True)}
    self.assertEqual(canaries.leaf_groups_and_clips(per_leaf, names),
                     ([0, 1, 2], [0.1, 0.2, 0.3]))
    self.assertEqual(canaries.leaf_groups_and_clips({'all': {'clip': 1.0}}, names),
                     ([0, 0, 0], [1.0]))
    with self.assertRaisesRegex(ValueError, 'neither one group nor one per leaf'):
      canaries.leaf_groups_and_clips({'a': {'clip': 1.0}, 'x': {'clip': 1.0}}, names)


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
