"""The classifier-only mode's feature cache: keyed by backbone weights, tokens and pooling;
owner-only; a damaged entry computed again."""

import dataclasses
import os
import stat
import tempfile

from absl.testing import absltest
import numpy as np

from fedasr_tff.retrieval import data as data_lib
from fedasr_tff.retrieval import feature_cache
from fedasr_tff.retrieval import retriever_config
from tests.retrieval import backbones


class FeatureCacheTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.backbone = backbones.tiny_backbone('bert')
    cls.tokens = backbones.inputs()

  def setUp(self):
    super().setUp()
    self.dir = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'cache')
    self.computed = 0

  def features(self, tokens=None, pooling='mean', backbone=None):
    tokens = self.tokens if tokens is None else tokens
    backbone = self.backbone if backbone is None else backbone

    def compute():
      self.computed += 1
      return data_lib.compute_features(backbone, tokens, pooling)

    return feature_cache.cached_features(self.dir, backbone, tokens, pooling, compute)

  def test_a_second_run_reads_the_same_features(self):
    first, hit = self.features()
    self.assertFalse(hit)
    again, hit = self.features()
    self.assertTrue(hit)
    self.assertEqual(self.computed, 1)
    np.testing.assert_array_equal(first, again)
    self.assertEqual(again.shape, (2, 16))
    # Owner-only: a created folder 0700, every file 0600.
    self.assertEqual(stat.S_IMODE(os.stat(self.dir).st_mode), 0o700)
    (name,) = os.listdir(self.dir)
    self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.dir, name)).st_mode), 0o600)

  def test_tokens_pooling_and_weights_are_in_the_key(self):
    self.features()
    other_tokens = backbones.inputs(ids=backbones.IDS[::-1], mask=backbones.MASK[::-1])
    other_weights = backbones.tiny_backbone('bert', seed=1)
    for kwargs in ({'tokens': other_tokens}, {'pooling': 'last'}, {'backbone': other_weights}):
      _, hit = self.features(**kwargs)
      self.assertFalse(hit, kwargs)
    self.assertEqual(self.computed, 4)
    self.assertLen(os.listdir(self.dir), 4)

  def test_a_damaged_entry_is_computed_again(self):
    first, _ = self.features()
    (name,) = os.listdir(self.dir)
    for damage in (b'not an array', np.zeros([3, 16], np.float32)):
      with open(os.path.join(self.dir, name), 'wb') as f:
        if isinstance(damage, bytes):
          f.write(damage)
        else:
          np.save(f, damage)
      with self.assertLogs(level='WARNING'):
        again, hit = self.features()
      self.assertFalse(hit)
      np.testing.assert_array_equal(first, again)
    self.assertTrue(self.features()[1])

  def test_no_cache_dir_computes(self):
    features, hit = feature_cache.cached_features(None, self.backbone, self.tokens, 'mean',
                                                  lambda: np.ones([2, 16], np.float32))
    self.assertFalse(hit)
    self.assertEqual(features.shape, (2, 16))

  def test_the_configuration_chooses_the_folder(self):
    with absltest.mock.patch.dict(os.environ, {'XDG_CACHE_HOME': '/somewhere'}):
      self.assertEqual(feature_cache.default_dir(), '/somewhere/fedasr_tff/retriever_features')
      config = retriever_config.RetrieverConfig(output_dir=self.dir)
      self.assertEqual(config.feature_cache, '/somewhere/fedasr_tff/retriever_features')
    self.assertEqual(dataclasses.replace(config, feature_cache_dir='/x').feature_cache, '/x')
    self.assertIsNone(dataclasses.replace(config, feature_cache_dir='').feature_cache)


if __name__ == '__main__':
  absltest.main()
