"""Saving and loading model weights (`fedasr_tff.program.model_io`)."""

import os
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff import models
from fedasr_tff.program import model_io


class ModelIoTest(absltest.TestCase):

  def test_round_trip_and_mismatch(self):
    path = os.path.join(tempfile.mkdtemp(), 'model.npz')
    tiny = models.build_ctc_transformer('tiny', 29)
    weights = model_io.model_weights(tiny)
    model_io.save_weights(path, tiny, weights)
    loaded = model_io.load_weights(path, models.build_ctc_transformer('tiny', 29))
    for a, b in zip(weights.trainable, loaded.trainable, strict=True):
      np.testing.assert_array_equal(a, b)
    mismatch = r'--seed_model .*conv/conv/kernel.*shape \(7, 80, 192\)'
    with self.assertRaisesRegex(ValueError, mismatch):
      model_io.load_weights(path, models.build_ctc_transformer('small', 29), '--seed_model')
    with self.assertRaisesRegex(ValueError, 'does not exist'):
      model_io.load_weights(path + '.missing', tiny)


if __name__ == '__main__':
  absltest.main()
