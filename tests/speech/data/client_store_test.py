"""The client store: a client's batches built in TF ops from its file equal the batches the
driver builds (`SpeechClientData.create_tf_dataset_for_client`) bit for bit, skipped utterances
included, inside a TFF computation too; the store is owner-only and rewritten only when stale."""

import collections
import os
import shutil
import stat
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import runtime
from fedasr_tff.speech import data
from fedasr_tff.speech.data import client_store
from fedasr_tff.speech.data import synthetic


def _arrays(dataset):
  return [collections.OrderedDict((k, v.numpy()) for k, v in batch.items())
          for batch in dataset]


class ClientStoreTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=5, seed=5)
    utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    # Two utterances the pipeline skips: unreadable audio, no in-vocabulary letters.
    broken = os.path.join(cls.root, 'broken.flac')
    with open(utterances[0].path, 'rb') as f, open(broken, 'wb') as out:
      out.write(f.read()[:1500])
    speaker = utterances[0].speaker
    cls.utterances = list(utterances) + [data.Utterance(broken, 'ONE TWO', speaker),
                                         data.Utterance(utterances[1].path, '123 !', speaker)]
    cls.store = os.path.join(cls.root, 'store')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def _client_data(self, spec_augment=False):
    return data.SpeechClientData(self.utterances, data.Vocabulary('en'), max_batch_seconds=2.0,
                                 spec_augment=spec_augment,
                                 feature_cache_dir=os.path.join(self.root, 'cache'))

  def _written(self):
    client_data = self._client_data()
    ids = client_store.write_client_store(client_data, self.store)
    return client_data, ids

  @parameterized.parameters((None, False), (2, False), (2, True), (100, True))
  def test_batches_equal_the_drivers_bit_for_bit(self, max_batches, spec_augment):
    _, ids = self._written()
    driver = self._client_data(spec_augment)
    self.assertEqual(ids, driver.client_ids)
    frames = driver._max_batch_frames   # noqa: SLF001  (the batching parameter both use)
    for index, client_id in enumerate(ids):
      for seed in (0, 12345, 2**62 + 7):
        want = _arrays(driver.create_tf_dataset_for_client(client_id, seed=seed,
                                                           max_batches=max_batches))
        got = _arrays(client_store.client_dataset(
            self.store, np.int32(index), np.int64(seed), max_batch_frames=frames,
            max_batches=max_batches, spec_augment=spec_augment))
        self.assertLen(got, len(want), msg=(client_id, seed))
        self.assertNotEmpty(got)
        for a, b in zip(want, got, strict=True):
          self.assertEqual(list(a), list(b))
          for key in a:
            self.assertEqual(a[key].dtype, b[key].dtype, msg=key)
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)

  def test_skipped_utterances_are_kept_as_unusable_records(self):
    client_data, ids = self._written()
    speaker = self.utterances[0].speaker
    with open(client_store.client_file(self.store, ids.index(speaker)), 'rb') as f:
      client = client_store.parse_client(f.read())
    usable = client['usable'].numpy().tolist()
    self.assertLen(usable, len(client_data.utterances(speaker)))
    self.assertEqual(usable[-2:], [0, 0])
    self.assertTrue(all(u == 1 for u in usable[:-2]))
    self.assertEqual(client['frames'].numpy()[-2:].tolist(), [0, 0])
    self.assertEqual(client['features'].shape, [client['frames'].numpy().sum(), 80])

  def test_store_is_owner_only_and_kept_while_current(self):
    self._written()
    for name in os.listdir(self.store):
      mode = stat.S_IMODE(os.stat(os.path.join(self.store, name)).st_mode)
      self.assertEqual(mode & 0o077, 0, msg=name)
    self.assertEqual(stat.S_IMODE(os.stat(self.store).st_mode) & 0o077, 0)
    marker = client_store.client_file(self.store, 0)
    before = os.stat(marker).st_mtime_ns
    self._written()
    self.assertEqual(os.stat(marker).st_mtime_ns, before)
    self.assertEqual(client_store.read_client_ids(self.store), self._client_data().client_ids)
    with self.assertRaisesRegex(ValueError, 'holds no readable client store'):
      client_store.read_client_ids(os.path.join(self.root, 'nothing'))

  def test_batches_are_built_inside_a_tff_computation(self):
    _, ids = self._written()
    driver = self._client_data()
    frames = driver._max_batch_frames   # noqa: SLF001
    store = self.store

    @tff.tensorflow.computation(np.int32, np.int64)
    def dataset_computation(index, seed):
      return client_store.client_dataset(store, index, seed, max_batch_frames=frames,
                                         max_batches=2)

    @tff.tensorflow.computation(dataset_computation.type_signature.result)
    def total_frames(dataset):
      return dataset.reduce(tf.constant(0), lambda total, b: total + tf.reduce_sum(
          b['feature_lengths']))

    computed = tff.tensorflow.computation(
        lambda index, seed: total_frames(dataset_computation(index, seed)),
        np.int32, np.int64)
    for index, client_id in enumerate(ids):
      want = sum(int(b['feature_lengths'].sum()) for b in _arrays(
          driver.create_tf_dataset_for_client(client_id, seed=9, max_batches=2)))
      self.assertEqual(computed(np.int32(index), np.int64(9)), want)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
