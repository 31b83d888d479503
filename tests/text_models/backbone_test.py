"""`trim_padding`: a batch cut after the last column that holds a token."""

from absl.testing import absltest
import numpy as np

from fedasr_tff import text_models


def _trimmed(mask, **extras):
  mask = np.asarray(mask, np.int32)
  inputs = dict(token_ids=np.arange(mask.size, dtype=np.int32).reshape(mask.shape), mask=mask,
                **extras)
  return {key: value.numpy() for key, value in text_models.trim_padding(inputs).items()}


class TrimPaddingTest(absltest.TestCase):

  def test_cuts_right_padding_to_the_longest_sequence(self):
    trimmed = _trimmed([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0]],
                       token_type_ids=np.ones([2, 5], np.int32))
    np.testing.assert_array_equal(trimmed['mask'], [[1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(trimmed['token_ids'], [[0, 1, 2], [5, 6, 7]])
    np.testing.assert_array_equal(trimmed['token_type_ids'], np.ones([2, 3]))

  def test_keeps_left_padding_and_full_batches(self):
    # Dropping leading columns would shift positions: they stay.
    for mask in ([[0, 0, 1, 1], [0, 1, 1, 1]], [[1, 1, 1, 1], [1, 0, 0, 0]]):
      np.testing.assert_array_equal(_trimmed(mask)['mask'], mask)

  def test_a_batch_without_tokens_keeps_one_column(self):
    np.testing.assert_array_equal(_trimmed([[0, 0, 0], [0, 0, 0]])['mask'], [[0], [0]])


if __name__ == '__main__':
  absltest.main()
