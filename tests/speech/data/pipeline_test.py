import collections
import io
import os
import shutil
import stat
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from fedasr_tff.speech import data
from fedasr_tff.speech.data import pipeline
from fedasr_tff.speech.data import synthetic


class SpeechClientDataTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=4, seed=5)
    cls.utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def test_speakers_are_clients_with_dynamic_batches(self):
    vocab = data.Vocabulary('en')
    client_data = data.SpeechClientData(self.utterances, vocab, max_batch_seconds=3.0)
    self.assertEqual(client_data.client_ids, sorted({u.speaker for u in self.utterances}))
    client = client_data.client_ids[0]
    texts = []
    for batch in client_data.create_tf_dataset_for_client(client):
      lengths = batch['feature_lengths'].numpy()
      self.assertEqual(batch['features'].shape[0], len(lengths))
      self.assertEqual(batch['features'].shape[2], 80)
      self.assertEqual(batch['features'].shape[1], lengths.max())
      # At most 3 s (300 frames) of audio per batch, unless one utterance is longer.
      self.assertTrue(lengths.sum() <= 300 or len(lengths) == 1)
      for ids, n in zip(batch['labels'].numpy(), batch['label_lengths'].numpy(), strict=True):
        texts.append(vocab.decode(ids[:n]))
    want = [data.normalize_transcript(u.transcript) for u in self.utterances
            if u.speaker == client]
    self.assertEqual(texts, want)
    self.assertEmpty(client_data.report.problems)

  def test_bad_audio_is_skipped_and_counted_or_fatal(self):
    root = self.enterContext(tempfile.TemporaryDirectory())
    broken = os.path.join(root, 'broken.flac')
    with open(self.utterances[0].path, 'rb') as f, open(broken, 'wb') as out:
      out.write(f.read()[:1500])
    speaker = self.utterances[0].speaker
    utterances = list(self.utterances) + [data.Utterance(broken, 'ONE TWO', speaker),
                                          data.Utterance(self.utterances[1].path, '123 !',
                                                         speaker)]
    client_data = data.SpeechClientData(utterances, data.Vocabulary('en'))
    examples = sum(int(b['features'].shape[0])
                   for b in client_data.create_tf_dataset_for_client(speaker))
    self.assertEqual(examples, sum(u.speaker == speaker for u in self.utterances))
    problems = dict(client_data.report.problems)
    self.assertIn(broken, problems)
    self.assertIn('unreadable audio', problems[broken])
    self.assertEqual(client_data.unknown_characters, {'1': 1, '2': 1, '3': 1})
    strict = data.SpeechClientData(utterances, data.Vocabulary('en'), strict=True)
    with self.assertRaisesRegex(Exception, 'broken.flac'):
      list(strict.create_tf_dataset_for_client(speaker))

  def test_spec_augment_draws_new_masks_for_each_dataset(self):
    client = self.utterances[0].speaker
    plain = data.SpeechClientData(self.utterances, data.Vocabulary('en'))
    augmented = data.SpeechClientData(self.utterances, data.Vocabulary('en'), spec_augment=True)
    (reference,) = list(plain.create_tf_dataset_for_client(client).take(1))
    tf.keras.utils.set_random_seed(0)  # TF's global seed must not freeze the masks.
    first, second = (
        next(iter(augmented.create_tf_dataset_for_client(client)))['features'].numpy()
        for _ in range(2))
    self.assertEqual(first.shape, tuple(reference['features'].shape))
    self.assertFalse(np.array_equal(first, second))
    changed = first != reference['features'].numpy()
    self.assertTrue(np.all(first[changed] == 0))
    self.assertGreater(changed.sum(), 0)

  def test_seed_replays_the_masks(self):
    client = self.utterances[0].speaker
    augmented = data.SpeechClientData(self.utterances, data.Vocabulary('en'), spec_augment=True)

    def features(seed):
      dataset = augmented.create_tf_dataset_for_client(client, seed=seed)
      return next(iter(dataset))['features'].numpy()

    np.testing.assert_array_equal(features(5), features(5))
    self.assertFalse(np.array_equal(features(5), features(6)))
    with self.assertRaisesRegex(ValueError, '`seed`'):
      features(-1)

  def test_every_batch_carries_its_seed(self):
    client = self.utterances[0].speaker
    for spec_augment in (False, True):
      client_data = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                          max_batch_seconds=1.0, spec_augment=spec_augment)
      dataset = client_data.create_tf_dataset_for_client(client, seed=2**64 + 3)
      self.assertEqual(dataset.element_spec['seed'], tf.TensorSpec([2], tf.int64))
      self.assertEqual(client_data.element_type_structure['seed'],
                       tf.TensorSpec([2], tf.int64))
      seeds = [b['seed'].numpy().tolist() for b in dataset]
      self.assertGreater(len(seeds), 1)
      self.assertEqual(seeds, [[3, i] for i in range(len(seeds))])  # seed mod 2**63, batch.
    drawn = [next(iter(client_data.create_tf_dataset_for_client(client)))['seed'].numpy()
             for _ in range(2)]
    self.assertNotEqual(drawn[0][0], drawn[1][0])  # From OS entropy without a seed.

  def test_dataset_of_no_usable_utterance_has_the_element_spec(self):
    speaker = self.utterances[0].speaker
    client_data = data.SpeechClientData([data.Utterance(self.utterances[0].path, '123', speaker)],
                                        data.Vocabulary('en'), spec_augment=True)
    dataset = client_data.create_tf_dataset_for_client(speaker, seed=1)
    self.assertEmpty(list(dataset))
    self.assertEqual(set(dataset.element_spec), set(client_data.element_type_structure))
    self.assertEqual(dataset.element_spec['seed'], tf.TensorSpec([2], tf.int64))

  def test_feature_cache_is_used_on_the_second_pass(self):
    cache = self.enterContext(tempfile.TemporaryDirectory())
    client = self.utterances[0].speaker
    first = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                  feature_cache_dir=cache)
    want = [b['features'].numpy() for b in first.create_tf_dataset_for_client(client)]
    cached = [os.path.join(root, f) for root, _, files in os.walk(cache) for f in files]
    self.assertLen(cached, sum(u.speaker == client for u in self.utterances))
    # Features derived from raw client audio are as private as the audio: owner-only.
    for root, _, _ in os.walk(cache):
      self.assertEqual(stat.S_IMODE(os.stat(root).st_mode), 0o700, root)
    for path in cached:
      self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)
    second = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                   feature_cache_dir=cache)
    with mock.patch.object(pipeline.audio_lib, 'load_audio', side_effect=AssertionError):
      got = [b['features'].numpy() for b in second.create_tf_dataset_for_client(client)]
    for a, b in zip(got, want, strict=True):
      np.testing.assert_array_equal(a, b)

  def _largest_client(self):
    counts = collections.Counter(u.speaker for u in self.utterances)
    client, count = counts.most_common(1)[0]
    self.assertGreaterEqual(count, 4)
    return client, [u for u in self.utterances if u.speaker == client]

  def _texts(self, dataset, vocab):
    return [vocab.decode(ids[:n]) for b in dataset
            for ids, n in zip(b['labels'].numpy(), b['label_lengths'].numpy(), strict=True)]

  def test_max_batches_reads_and_ships_only_a_seeded_sample(self):
    vocab = data.Vocabulary('en')
    client, utterances = self._largest_client()
    # Every utterance is longer than 0.1 s, so each is a batch of its own.
    client_data = data.SpeechClientData(self.utterances, vocab, max_batch_seconds=0.1)
    everything = sorted(data.normalize_transcript(u.transcript) for u in utterances)
    loads = mock.Mock(wraps=pipeline.audio_lib.load_audio)
    with mock.patch.object(pipeline.audio_lib, 'load_audio', loads):
      dataset = client_data.create_tf_dataset_for_client(client, seed=7, max_batches=2)
    self.assertEqual(loads.call_count, 3)  # The two batches and the one that would start next.
    batches = list(dataset)
    self.assertLen(batches, 2)
    self.assertEqual([b['seed'].numpy().tolist() for b in batches], [[7, 0], [7, 1]])
    sample = self._texts(dataset, vocab)
    self.assertEqual(sample, self._texts(
        client_data.create_tf_dataset_for_client(client, seed=7, max_batches=2), vocab))
    # Over rounds (seeds), the samples differ and cover the client's data.
    samples = [self._texts(client_data.create_tf_dataset_for_client(client, seed=seed,
                                                                    max_batches=2), vocab)
               for seed in range(40)]
    self.assertGreater(len({tuple(t) for t in samples}), 1)
    self.assertEqual(sorted({t for texts in samples for t in texts}), sorted(set(everything)))
    # More batches than the client has: all of its data, in a seeded order.
    whole = self._texts(client_data.create_tf_dataset_for_client(client, seed=3,
                                                                 max_batches=100), vocab)
    self.assertEqual(sorted(whole), everything)
    with self.assertRaisesRegex(ValueError, '`max_batches`'):
      client_data.create_tf_dataset_for_client(client, seed=3, max_batches=0)

  def test_max_batches_keeps_dynamic_batching(self):
    vocab = data.Vocabulary('en')
    client, utterances = self._largest_client()
    client_data = data.SpeechClientData(self.utterances, vocab, max_batch_seconds=4.0)
    full = client_data.create_tf_dataset_for_client(client, seed=1, max_batches=len(utterances))
    sizes = [int(b['features'].shape[0]) for b in full]
    self.assertEqual(sum(sizes), len(utterances))
    self.assertGreater(max(sizes), 1)  # Batches of several utterances, not one each.
    first = client_data.create_tf_dataset_for_client(client, seed=1, max_batches=1)
    (batch,) = list(first)
    (want, *_) = list(full)
    for key in ('features', 'labels', 'feature_lengths', 'label_lengths', 'seed'):
      np.testing.assert_array_equal(batch[key].numpy(), want[key].numpy())

  def test_feature_cache_recomputes_a_damaged_entry(self):
    cache = self.enterContext(tempfile.TemporaryDirectory())
    client = self.utterances[0].speaker
    client_data = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                        feature_cache_dir=cache)
    want = [b['features'].numpy() for b in client_data.create_tf_dataset_for_client(client)]
    cached = sorted(os.path.join(root, f) for root, _, files in os.walk(cache) for f in files)
    some_zip = io.BytesIO()
    np.savez(some_zip, features=np.zeros((2, 80)))
    # A truncated .npy; then what np.load raised EOFError on (empty), BadZipFile on (a damaged
    # zip), or returned an NpzFile for (a zip).
    for contents in (b'\x93NUMPY truncated', b'', b'PK\x03\x04truncated', some_zip.getvalue()):
      with open(cached[0], 'wb') as f:
        f.write(contents)
      got = [b['features'].numpy() for b in client_data.create_tf_dataset_for_client(client)]
      for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
      self.assertEqual(np.load(cached[0]).shape[1], 80)  # Replaced by a good entry.
      self.assertEqual(stat.S_IMODE(os.stat(cached[0]).st_mode), 0o600)
    self.assertEmpty(client_data.report.problems)

  def test_feature_cache_shared_across_settings(self):
    cache = self.enterContext(tempfile.TemporaryDirectory())
    client = self.utterances[0].speaker
    count = sum(u.speaker == client for u in self.utterances)
    lenient = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                    feature_cache_dir=cache)
    list(lenient.create_tf_dataset_for_client(client))
    # A run with a shorter utterance limit sharing the cache still skips the long ones.
    strict_length = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                          feature_cache_dir=cache, max_utterance_seconds=0.05)
    self.assertEmpty(list(strict_length.create_tf_dataset_for_client(client)))
    self.assertLen(strict_length.report.problems, count)
    # Features made with other parameters are other entries, never read back as these.
    with mock.patch.object(pipeline, '_FEATURE_VERSION', 'another feature version'):
      loads = mock.Mock(wraps=pipeline.audio_lib.load_audio)
      with mock.patch.object(pipeline.audio_lib, 'load_audio', loads):
        list(data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                   feature_cache_dir=cache).create_tf_dataset_for_client(client))
      self.assertEqual(loads.call_count, count)

  def test_feature_normalisations_are_separate_cache_entries(self):
    cache = self.enterContext(tempfile.TemporaryDirectory())
    client = self.utterances[0].speaker
    features = {}
    for normalization in ('utterance', 'cmn', 'utterance'):
      clients = data.SpeechClientData(self.utterances, data.Vocabulary('en'),
                                      feature_cache_dir=cache,
                                      feature_normalization=normalization)
      self.assertEqual(clients.feature_normalization, normalization)
      batch = next(iter(clients.create_tf_dataset_for_client(client)))
      features.setdefault(normalization, []).append(batch['features'].numpy())
    # Read back from the cache, each normalisation its own entry: never the other's features.
    np.testing.assert_array_equal(features['utterance'][0], features['utterance'][1])
    self.assertGreater(np.abs(features['utterance'][0] - features['cmn'][0]).max(), 0.1)
    path = self.utterances[0].path
    waveform = pipeline.audio_lib.load_audio(path)
    first = features['cmn'][0][0]
    np.testing.assert_allclose(first[:len(data.log_mel_features(waveform, 'cmn'))],
                               data.log_mel_features(waveform, 'cmn'), atol=1e-5)
    with self.assertRaisesRegex(ValueError, "feature_normalization must be one of .*'cmvn'"):
      data.SpeechClientData(self.utterances, data.Vocabulary('en'), feature_normalization='cmvn')

  def test_all_clients_and_unknown_id(self):
    client_data = data.SpeechClientData(self.utterances, data.Vocabulary('en'))
    total = sum(int(b['features'].shape[0])
                for b in client_data.create_tf_dataset_from_all_clients(seed=1))
    self.assertEqual(total, len(self.utterances))

    def seeds(seed):
      return [b['seed'].numpy().tolist()
              for b in client_data.create_tf_dataset_from_all_clients(seed=seed)]

    self.assertEqual(seeds(1), seeds(1))
    self.assertNotEqual(seeds(1), seeds(2))
    with self.assertRaisesRegex(ValueError, 'nobody'):
      client_data.create_tf_dataset_for_client('nobody')


class IidAndSplitsTest(absltest.TestCase):

  def _utterances(self):
    return [data.Utterance(f'/a/{i}.flac', 'x', f's{i % 7}') for i in range(100)]

  def test_iid_keeps_utterances_and_speaker_set(self):
    utterances = self._utterances()
    iid = data.make_iid(utterances, seed=0)
    self.assertEqual([u.path for u in iid], [u.path for u in utterances])
    self.assertEqual({u.speaker for u in iid}, {u.speaker for u in utterances})
    self.assertNotEqual([u.speaker for u in iid], [u.speaker for u in utterances])
    self.assertEqual(iid, data.make_iid(utterances, seed=0))

  def test_speaker_split_is_disjoint_and_seeded(self):
    speakers = [f's{i}' for i in range(50)]
    seed_part, fl_part = data.split_speakers(speakers, 0.1, seed=4)
    self.assertLen(seed_part, 5)
    self.assertEmpty(set(seed_part) & set(fl_part))
    self.assertEqual(sorted(seed_part + fl_part), sorted(speakers))
    self.assertEqual((seed_part, fl_part), data.split_speakers(speakers, 0.1, seed=4))
    self.assertNotEqual(seed_part, data.split_speakers(speakers, 0.1, seed=5)[0])
    with self.assertRaisesRegex(ValueError, 'fraction'):
      data.split_speakers(speakers, 1.5, seed=0)


class SyntheticCorpusTest(absltest.TestCase):

  def test_deterministic_skewed_and_multilingual(self):
    a, b = (self.enterContext(tempfile.TemporaryDirectory()) for _ in range(2))
    synthetic.make_corpus(a, num_speakers=4, mean_utterances=2, seed=9, skew=1.0)
    synthetic.make_corpus(b, num_speakers=4, mean_utterances=2, seed=9, skew=1.0)
    ua = data.read_librispeech(os.path.join(a, 'librispeech'), 'train')
    ub = data.read_librispeech(os.path.join(b, 'librispeech'), 'train')
    self.assertEqual([(os.path.basename(u.path), u.transcript) for u in ua],
                     [(os.path.basename(u.path), u.transcript) for u in ub])
    counts = np.bincount([int(u.speaker) - 1000 for u in ua])
    self.assertGreater(counts.max(), counts.min())  # Clients are heterogeneous.
    for language in ('fr', 'de'):
      root = self.enterContext(tempfile.TemporaryDirectory())
      synthetic.make_corpus(root, num_speakers=1, mean_utterances=2, seed=1, language=language,
                            skew=0.0)
      utterances = data.read_librispeech(os.path.join(root, 'librispeech'), 'train')
      vocab = data.Vocabulary(language)
      for u in utterances:
        _, unknown = vocab.encode(data.normalize_transcript(u.transcript, language))
        self.assertEmpty(unknown)
        self.assertGreater(len(data.load_audio(u.path)), 1600)

  def test_bad_arguments(self):
    root = self.enterContext(tempfile.TemporaryDirectory())
    with self.assertRaisesRegex(ValueError, 'layouts'):
      synthetic.make_corpus(root, layouts=('kaldi',))
    with self.assertRaisesRegex(ValueError, 'language'):
      synthetic.make_corpus(root, language='es')
    with self.assertRaisesRegex(ValueError, 'num_speakers'):
      synthetic.make_corpus(root, num_speakers=0)


if __name__ == '__main__':
  absltest.main()
