from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from fedasr_tff import aggregators


class GroupClipsTest(parameterized.TestCase):

  @parameterized.parameters('uniform', 'dim', 'weighted')
  def test_budget_is_preserved(self, allocation):
    sizes = [10, 1000, 3, 4096, 64]
    weights = [1.0, 10.0, 1.0, 2.0, 0.5] if allocation == 'weighted' else None
    clips = aggregators.group_clips(0.01, sizes, allocation, weights)
    self.assertLen(clips, 5)
    self.assertAlmostEqual(np.sqrt(np.sum(clips**2)), 0.01, places=12)

  def test_formulas(self):
    sizes = np.array([1, 4, 11])
    np.testing.assert_allclose(aggregators.group_clips(2.0, sizes, 'uniform'), [2 / np.sqrt(3)] * 3)
    np.testing.assert_allclose(aggregators.group_clips(2.0, sizes, 'dim'), 2 * np.sqrt(sizes / 16))
    weights = np.array([3.0, 1.0, 1.0])
    np.testing.assert_allclose(aggregators.group_clips(2.0, sizes, 'weighted', weights),
                               2 * np.sqrt(weights * sizes / 18))
    np.testing.assert_allclose(aggregators.group_clips(2.0, sizes, 'global'), [2.0])

  @parameterized.named_parameters(
      ('unknown', dict(allocation='layerwise'), 'allocation'),
      ('weights_missing', dict(allocation='weighted'), 'layer_weights'),
      ('weights_wrong_length', dict(allocation='weighted', layer_weights=[1.0]), 'layer_weights'),
      ('weights_negative', dict(allocation='weighted', layer_weights=[1.0, -1.0]), 'layer_weights'),
      ('weights_without_weighted', dict(allocation='dim', layer_weights=[1.0, 1.0]),
       'layer_weights'),
  )
  def test_bad_input(self, kwargs, name):
    with self.assertRaisesRegex(ValueError, name):
      aggregators.group_clips(1.0, [2, 3], **kwargs)


if __name__ == '__main__':
  absltest.main()
