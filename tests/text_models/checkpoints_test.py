"""Reading Hugging Face checkpoints: single-file and sharded round trips, the SHA-256 pin, and
errors that name the missing file or tensor."""

import hashlib
import json
import os
import tempfile

from absl.testing import absltest
import numpy as np
import safetensors

from fedasr_tff.text_models import checkpoints
from tests.text_models import tiny_bert


def _flip_last_byte(path):
  with open(path, 'r+b') as f:
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([last[0] ^ 0x01]))


class CheckpointsTest(absltest.TestCase):

  def assert_same_tensors(self, actual, expected):
    self.assertEqual(sorted(actual), sorted(expected))
    for name, value in expected.items():
      np.testing.assert_array_equal(actual[name], value, err_msg=name)
      self.assertEqual(actual[name].dtype, value.dtype, msg=name)

  def test_single_file_round_trip(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    config, tensors = tiny_bert.write_tiny_bert(directory)
    self.assertEqual(checkpoints.read_config(directory), config)
    self.assertEqual(checkpoints.weight_files(directory),
                     [os.path.join(directory, 'model.safetensors')])
    self.assert_same_tensors(checkpoints.load_tensors(directory), tensors)

  def test_sharded_round_trip(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    _, tensors = tiny_bert.write_tiny_bert(directory, num_shards=3)
    self.assertFalse(os.path.exists(os.path.join(directory, 'model.safetensors')))
    self.assertEqual([os.path.basename(p) for p in checkpoints.weight_files(directory)],
                     [f'model-0000{i}-of-00003.safetensors' for i in (1, 2, 3)])
    self.assert_same_tensors(checkpoints.load_tensors(directory), tensors)

  def test_sha256_pin_accepts_the_file_and_refuses_a_tampered_copy(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_tiny_bert(directory)
    path = os.path.join(directory, 'model.safetensors')
    with open(path, 'rb') as f:
      digest = hashlib.sha256(f.read()).hexdigest()
    self.assertEqual(checkpoints.sha256_of_file(path), digest)
    checkpoints.load_tensors(directory, {'model.safetensors': digest.upper()})
    _flip_last_byte(path)   # One bit of the last tensor's data: still a readable file.
    self.assertLen(checkpoints.load_tensors(directory), len(tiny_bert.random_bert_tensors(
        tiny_bert.TINY_CONFIG)))
    with self.assertRaisesRegex(ValueError, f'SHA-256 mismatch for {path}: expected {digest}'):
      checkpoints.load_tensors(directory, {'model.safetensors': digest})

  def test_sha256_pin_of_one_shard(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    tiny_bert.write_tiny_bert(directory, num_shards=2)
    shard = 'model-00002-of-00002.safetensors'
    digest = checkpoints.sha256_of_file(os.path.join(directory, shard))
    checkpoints.load_tensors(directory, {shard: digest})
    _flip_last_byte(os.path.join(directory, shard))
    with self.assertRaisesRegex(ValueError, f'SHA-256 mismatch for .*{shard}'):
      checkpoints.load_tensors(directory, {shard: digest})
    with self.assertRaisesRegex(FileNotFoundError, 'names model.safetensors'):
      checkpoints.load_tensors(directory, {'model.safetensors': digest})

  def test_bfloat16_tensors_are_widened_to_float32_exactly(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    # Exact in bfloat16: the upper 16 bits of their float32 are the whole value.
    values = np.array([[1.5, -2.25, 3.0], [0.0, -0.0, 2.0**-130], [np.inf, 2.0**127, -7.8125e-3]],
                      np.float32)
    others = np.arange(6, dtype=np.float16).reshape(2, 3)
    path = os.path.join(directory, 'model.safetensors')
    tiny_bert.save_file({'a.weight': values, 'c.weight': values[0]}, path, bfloat16=True)
    with safetensors.safe_open(path, framework='numpy') as f:
      self.assertEqual(f.get_slice('a.weight').get_dtype(), 'BF16')
    tiny_bert.write_checkpoint(directory, {}, {'a.weight': values, 'b.bias': others,
                                               'c.weight': values[0]}, bfloat16=True)
    tensors = checkpoints.load_tensors(directory)
    self.assertEqual(tensors['a.weight'].dtype, np.float32)
    np.testing.assert_array_equal(tensors['a.weight'], values)
    np.testing.assert_array_equal(tensors['c.weight'], values[0])
    np.testing.assert_array_equal(tensors['b.bias'], others)   # Only floats are rounded...
    self.assertEqual(tensors['b.bias'].dtype, np.float16)       # ...and only float32 ones.

  def test_missing_files_are_named(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    with self.assertRaisesRegex(FileNotFoundError, f'Model config not found: {directory}'):
      checkpoints.read_config(directory)
    with self.assertRaisesRegex(FileNotFoundError, 'neither model.safetensors nor '
                                'model.safetensors.index.json'):
      checkpoints.load_tensors(directory)
    tiny_bert.write_tiny_bert(directory, num_shards=2)
    os.remove(os.path.join(directory, 'model-00001-of-00002.safetensors'))
    with self.assertRaisesRegex(FileNotFoundError, 'model-00001-of-00002.safetensors'):
      checkpoints.load_tensors(directory)

  def test_bad_index(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    with open(os.path.join(directory, 'model.safetensors.index.json'), 'w') as f:
      json.dump({'metadata': {}}, f)
    with self.assertRaisesRegex(ValueError, 'no `weight_map`'):
      checkpoints.load_tensors(directory)

  def test_get_tensor_names_a_missing_or_misshaped_tensor(self):
    tensors = {'a.weight': np.zeros([2, 3], np.float16)}
    value = checkpoints.get_tensor(tensors, 'a.weight', (2, 3))
    self.assertEqual(value.dtype, np.float32)
    with self.assertRaisesRegex(KeyError, "'b.weight' is missing"):
      checkpoints.get_tensor(tensors, 'b.weight', (2, 3))
    with self.assertRaisesRegex(ValueError, r"'a.weight' has shape \(2, 3\), expected \(3, 2\)"):
      checkpoints.get_tensor(tensors, 'a.weight', (3, 2))


if __name__ == '__main__':
  absltest.main()
