"""The speakers' roles in a run on one corpus (`speech.corpus_clients.assign_speakers`), and reading
the speakers of a role by name."""

import os
import shutil
import tempfile

from absl.testing import absltest

from fedasr_tff.speech import corpus_clients
from fedasr_tff.speech import data
from fedasr_tff.speech.data import synthetic

_SPEAKERS = [f's{i}' for i in range(10)]


class AssignSpeakersTest(absltest.TestCase):

  def test_roles_are_disjoint_cover_every_speaker_and_follow_the_seed(self):
    roles = corpus_clients.assign_speakers(_SPEAKERS * 2, seed_fraction=0.25, split_seed=3,
                                           held_out_count=2)
    self.assertLen(roles.held_out, 2)
    self.assertLen(roles.seed, 2)   # 25% of the 8 left
    self.assertLen(roles.federated, 6)
    self.assertCountEqual(roles.seed + roles.federated + roles.held_out, _SPEAKERS)
    self.assertEqual(roles, corpus_clients.assign_speakers(_SPEAKERS, seed_fraction=0.25,
                                                           split_seed=3,
                                                           held_out_count=2))
    others = {corpus_clients.assign_speakers(_SPEAKERS, seed_fraction=0.25, split_seed=seed,
                                             held_out_count=2).held_out for seed in range(5)}
    self.assertGreater(len(others), 1)
    self.assertEqual(roles.as_dict(), {'seed': list(roles.seed),
                                       'federated': list(roles.federated),
                                       'held_out': list(roles.held_out)})

  def test_held_out_by_name_or_none(self):
    roles = corpus_clients.assign_speakers(_SPEAKERS, seed_fraction=0.1, split_seed=0,
                                           held_out=['s3', 's7'])
    self.assertEqual(roles.held_out, ('s3', 's7'))
    self.assertNotIn('s3', roles.seed + roles.federated)
    # No held-out speaker (the run evaluates on another split): the paper's seed split of all.
    roles = corpus_clients.assign_speakers(_SPEAKERS, seed_fraction=0.1, split_seed=0)
    self.assertEqual(roles.held_out, ())
    self.assertEqual((list(roles.seed), list(roles.federated)),
                     data.split_speakers(_SPEAKERS, 0.1, 0))

  def test_bad_roles_name_the_argument(self):
    for kwargs, message in (
        (dict(held_out=['nobody']), 'nobody'),
        (dict(held_out=['s1'], held_out_count=1), 'not both'),
        (dict(held_out_count=9), '`held_out_count`=9'),
        (dict(held_out=_SPEAKERS[1:]), r'1 speaker\(s\) left'),
        (dict(held_out_count=-1), 'held_out_count'),
    ):
      with self.subTest(kwargs=kwargs), self.assertRaisesRegex(ValueError, message):
        corpus_clients.assign_speakers(_SPEAKERS, seed_fraction=0.1, split_seed=0, **kwargs)


class DescribeSpeakersTest(absltest.TestCase):

  def test_names_a_few_and_counts_the_rest(self):
    self.assertEqual(corpus_clients.describe_speakers(['s3']), '1 speaker (s3)')
    self.assertEqual(corpus_clients.describe_speakers(['s1', 's4']), '2 speakers (s1, s4)')
    self.assertEqual(corpus_clients.describe_speakers(_SPEAKERS, shown=3),
                     '10 speakers (s0, s1, s2 and 7 more)')


class LoadSpeakersTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=3, mean_utterances=1, skew=0.0, seed=0,
                          words_per_utterance=(1, 1))
    cls.corpus_dir = os.path.join(cls.root, 'librispeech')
    cls.vocab = data.Vocabulary('en')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root)
    super().tearDownClass()

  def test_reads_the_named_speakers_only(self):
    everyone = corpus_clients.load_client_data(self.corpus_dir, 'librispeech', 'train', self.vocab)
    chosen = everyone.client_ids[1:]
    named = corpus_clients.load_client_data(self.corpus_dir, 'librispeech', 'train', self.vocab,
                                            speaker_ids=chosen)
    self.assertEqual(named.client_ids, chosen)
    with self.assertRaisesRegex(ValueError, 'no utterance of speaker'):
      corpus_clients.load_client_data(self.corpus_dir, 'librispeech', 'train', self.vocab,
                                      speaker_ids=['nobody'])
    with self.assertRaisesRegex(ValueError, '`speakers`="all"'):
      corpus_clients.load_client_data(self.corpus_dir, 'librispeech', 'train', self.vocab,
                                      speakers='seed', speaker_ids=chosen)


if __name__ == '__main__':
  absltest.main()
