"""Saving and loading model weights (`fedasr_tff.program.model_io`)."""

import io
import os
import tempfile
import types

from absl.testing import absltest
import numpy as np

from fedasr_tff.program import model_io
from fedasr_tff.speech import models


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

  def test_metadata_round_trip_beside_the_tensors(self):
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'model.npz')
    tiny = models.build_ctc_transformer('tiny', 29)
    weights = model_io.model_weights(tiny)
    model_io.save_weights(path, tiny, weights, {'feature_normalization': 'cmn', 'note': 'é'})
    self.assertEqual(model_io.read_metadata(path),
                     {'feature_normalization': 'cmn', 'note': 'é'})
    # The metadata is no tensor: the weights load as before.
    loaded = model_io.load_weights(path, models.build_ctc_transformer('tiny', 29))
    np.testing.assert_array_equal(loaded.trainable[0], weights.trainable[0])
    model_io.save_weights(path, tiny, weights)
    self.assertEqual(model_io.read_metadata(path), {})
    with self.assertRaisesRegex(ValueError, "metadata 'steps' must be a string"):
      model_io.save_weights(path, tiny, weights, {'steps': 3})
    with self.assertRaisesRegex(ValueError, "--model .*does not exist"):
      model_io.read_metadata(path + '.missing', '--model')
    with np.load(path) as stored:
      arrays = {k: stored[k] for k in stored.files}
    np.savez(path, **arrays, **{'metadata:feature_normalization': np.zeros(2)})
    with self.assertRaisesRegex(ValueError, "'metadata:feature_normalization' is not a string"):
      model_io.read_metadata(path)

  def test_two_tensors_of_one_name_are_refused(self):
    # (The retriever's adapter and linear head both had a Keras weight named `kernel`.)
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'model.npz')
    weights = types.SimpleNamespace(trainable=[np.eye(2), np.ones([2, 3])], non_trainable=[])
    with self.assertRaisesRegex(ValueError, "Two tensors are named 'kernel'"):
      model_io.save_named_weights(path, (['kernel', 'kernel'], []), weights)
    self.assertFalse(os.path.exists(path))

  def _saved_tiny(self):
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'model.npz')
    tiny = models.build_ctc_transformer('tiny', 29)
    model_io.save_weights(path, tiny, model_io.model_weights(tiny))
    return path, tiny

  def test_non_finite_tensor_is_refused_naming_file_and_tensor(self):
    path, tiny = self._saved_tiny()
    with np.load(path) as stored:
      arrays = {k: stored[k] for k in stored.files}
    name = model_io.tensor_names(tiny)[0][3]
    for value in (np.nan, np.inf, -np.inf):
      arrays[name].flat[1] = value
      np.savez(path, **arrays)
      with self.assertRaisesRegex(
          ValueError, f"--seed_model '{path}': tensor '{name}' has 1 non-finite values"):
        model_io.load_weights(path, tiny, '--seed_model')

  def test_a_damaged_file_is_refused_naming_it(self):
    path, tiny = self._saved_tiny()
    with open(path, 'rb') as f:
      whole = f.read()
    flipped = bytearray(whole)
    flipped[len(whole) // 3] ^= 0xff   # Inside a tensor's bytes: a CRC error.
    bare = io.BytesIO()
    np.save(bare, np.zeros(3))
    damaged = {'truncated': whole[:len(whole) // 2], 'empty': b'', 'flipped': bytes(flipped),
               'pickle': b'not numpy at all', 'one bare array': bare.getvalue()}
    for what, contents in damaged.items():
      with open(path, 'wb') as f:
        f.write(contents)
      with self.assertRaisesRegex(ValueError, f"--seed_model '{path}' is damaged", msg=what):
        model_io.load_weights(path, tiny, '--seed_model')


if __name__ == '__main__':
  absltest.main()
