"""Mean and last-token pooling against hand-computed values, with right and left padding."""

from absl.testing import absltest
import numpy as np

from fedasr_tff import text_models

# [B=3, T=4, d=2]: right-padded, left-padded, and a sequence with no token.
_STATES = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
_MASK = np.array([[1, 1, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]], np.int32)


class PoolingTest(absltest.TestCase):

  def test_mean_over_tokens(self):
    np.testing.assert_allclose(text_models.pool(_STATES, _MASK, 'mean').numpy(),
                               [[2, 3], [13, 14], [0, 0]])

  def test_last_token(self):
    np.testing.assert_array_equal(text_models.pool(_STATES, _MASK, 'last').numpy(),
                                  [[4, 5], [14, 15], [16, 17]])

  def test_mean_is_invariant_to_extra_padding(self):
    padded = np.concatenate([_STATES, np.full([3, 5, 2], 99.0, np.float32)], axis=1)
    mask = np.pad(_MASK, [[0, 0], [0, 5]])
    for pooling in text_models.POOLINGS:
      np.testing.assert_array_equal(text_models.pool(padded, mask, pooling).numpy()[:2],
                                    text_models.pool(_STATES, _MASK, pooling).numpy()[:2])

  def test_unknown_pooling(self):
    with self.assertRaisesRegex(ValueError, '`pooling` must be one of'):
      text_models.pool(_STATES, _MASK, 'max')


if __name__ == '__main__':
  absltest.main()
