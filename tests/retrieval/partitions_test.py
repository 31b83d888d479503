"""Splits of a labelled corpus over clients (`fedasr_tff.retrieval.partitions`)."""

from absl.testing import absltest
import numpy as np

from fedasr_tff import retrieval


def _data(labels, class_names=('a', 'b', 'c'), clients=None):
  return retrieval.LabelledTexts(tuple(f'text {i}' for i in range(len(labels))),
                                 np.array(labels), tuple(class_names),
                                 None if clients is None else tuple(clients))


class SplitEvenlyTest(absltest.TestCase):

  def test_sizes_disjoint_cover_and_seeded(self):
    data = _data(np.arange(23) % 3)
    parts = retrieval.split_evenly(data, 5, seed=7)
    self.assertEqual(sorted(len(p) for p in parts), [4, 4, 5, 5, 5])
    everything = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(everything), np.arange(23))  # disjoint, cover all
    for part in parts:
      self.assertEqual(part.dtype, np.int64)
      np.testing.assert_array_equal(part, np.sort(part))
    again = retrieval.split_evenly(data, 5, seed=7)
    self.assertTrue(all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True)))
    other = retrieval.split_evenly(data, 5, seed=8)
    self.assertFalse(all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True)))
    self.assertLen(retrieval.split_evenly(data, 23, seed=0), 23)
    np.testing.assert_array_equal(retrieval.split_evenly(data, 1, seed=0)[0], np.arange(23))

  def test_argument_errors_name_the_argument(self):
    data = _data([0, 1, 2])
    for args, message in (((data, 4, 0), r'`num_clients` \(4\) must be at most the number of '
                                         r'examples \(3\)'),
                          ((data, 0, 0), '`num_clients`'),
                          ((data, 2, -1), '`seed`'),
                          (([0, 1], 1, 0), '`data` must be a LabelledTexts')):
      with self.assertRaisesRegex(ValueError, message):
        retrieval.split_evenly(*args)


class SplitDirichletTest(absltest.TestCase):

  _LABELS = np.repeat(np.arange(10), 100)

  def _max_class_share(self, alpha, seed):
    # Mean over clients of the share of a client's examples that its largest class holds.
    data = _data(self._LABELS, class_names=tuple('abcdefghij'))
    parts = retrieval.split_dirichlet(data, 10, alpha, seed)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(data)))
    self.assertTrue(all(len(part) for part in parts))
    return np.mean([np.bincount(self._LABELS[part]).max() / len(part) for part in parts])

  def test_skew_follows_alpha(self):
    shares = {alpha: [self._max_class_share(alpha, seed) for seed in range(3)]
              for alpha in (0.05, 0.5, 1000.0)}
    # alpha -> infinity: every client near the corpus's mix (a tenth each); small alpha: clients
    # dominated by one or two classes.
    self.assertLess(max(shares[1000.0]), 0.15)
    self.assertGreater(min(shares[0.05]), 0.5)
    self.assertGreater(np.mean(shares[0.05]), np.mean(shares[0.5]))
    self.assertGreater(np.mean(shares[0.5]), np.mean(shares[1000.0]))

  def test_seeded(self):
    data = _data(self._LABELS, class_names=tuple('abcdefghij'))
    first, again, other = (retrieval.split_dirichlet(data, 4, 0.5, seed) for seed in (3, 3, 4))
    for a, b in zip(first, again, strict=True):
      np.testing.assert_array_equal(a, b)
    self.assertFalse(all(np.array_equal(a, b) for a, b in zip(first, other, strict=True)))

  def test_argument_errors_name_the_argument(self):
    data = _data([0, 0, 1, 1, 2, 2])
    for args, name in (((3, 0.0, 0), 'alpha'), ((0, 1.0, 0), 'num_clients'),
                       ((7, 1.0, 0), 'num_clients'), ((3, 1.0, -1), 'seed')):
      with self.assertRaisesRegex(ValueError, name):
        retrieval.split_dirichlet(data, *args)
    # Six examples over six clients at a tiny alpha: some client always ends up empty.
    with self.assertRaisesRegex(ValueError, 'left a client without examples in each of 100 '
                                'draws over 6 clients and 6 examples'):
      retrieval.split_dirichlet(data, 6, 1e-3, 0)


class SplitByClientTest(absltest.TestCase):

  def test_groups_by_sorted_client_id(self):
    data = _data([0, 1, 2, 0, 1], clients=['bob', 'al', 'bob', 'cy', 'al'])
    ids, parts = retrieval.split_by_client(data)
    self.assertEqual(ids, ['al', 'bob', 'cy'])
    self.assertEqual([p.tolist() for p in parts], [[1, 4], [0, 2], [3]])
    self.assertEqual(data.subset(parts[1]).clients, ('bob', 'bob'))

  def test_without_clients_is_an_error(self):
    with self.assertRaisesRegex(ValueError, '`data.clients` is None'):
      retrieval.split_by_client(_data([0, 1]))


class TrainTestSplitTest(absltest.TestCase):

  def test_stratified_disjoint_and_seeded(self):
    labels = np.array([0] * 50 + [1] * 9 + [2] * 2 + [3] * 1)
    data = _data(labels, class_names=('a', 'b', 'c', 'd'))
    train, test = retrieval.train_test_split(data, 0.2, seed=3)
    self.assertEqual(train.dtype, np.int64)
    self.assertEqual(test.dtype, np.int64)
    np.testing.assert_array_equal(train, np.sort(train))
    np.testing.assert_array_equal(test, np.sort(test))
    self.assertEmpty(np.intersect1d(train, test))
    np.testing.assert_array_equal(np.union1d(train, test), np.arange(len(labels)))
    # round(0.2 n_c) of each class: 10 of 50, 2 of 9 (1.8), at least one of 2, none of 1.
    np.testing.assert_array_equal(np.bincount(labels[test], minlength=4), [10, 2, 1, 0])
    np.testing.assert_array_equal(np.bincount(labels[train], minlength=4), [40, 7, 1, 1])
    train_again, test_again = retrieval.train_test_split(data, 0.2, seed=3)
    np.testing.assert_array_equal(train_again, train)
    np.testing.assert_array_equal(test_again, test)
    _, test_other = retrieval.train_test_split(data, 0.2, seed=4)
    self.assertFalse(np.array_equal(test_other, test))

  def test_every_class_keeps_a_training_example(self):
    labels = np.array([0, 0, 1, 1, 1])
    train, test = retrieval.train_test_split(_data(labels, ('a', 'b')), 0.9, seed=0)
    np.testing.assert_array_equal(np.bincount(labels[test]), [1, 2])
    np.testing.assert_array_equal(np.bincount(labels[train]), [1, 1])

  def test_argument_errors_name_the_argument(self):
    data = _data([0, 1, 2])
    for fraction in (0, 1, 1.5, -0.1):
      with self.assertRaisesRegex(ValueError, '`test_fraction`'):
        retrieval.train_test_split(data, fraction, seed=0)
    with self.assertRaisesRegex(ValueError, '`seed`'):
      retrieval.train_test_split(data, 0.5, seed=1.0)


if __name__ == '__main__':
  absltest.main()
