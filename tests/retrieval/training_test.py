"""The retriever training run end to end on a tiny BERT checkpoint and a tiny fortunes corpus:
learning sanity, determinism, resume, what is released, errors."""

import csv
import json
import os
import stat
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from fedasr_tff import runtime
from fedasr_tff.retrieval import data as data_lib
from fedasr_tff.retrieval import retriever_config
from fedasr_tff.retrieval import tff_model
from fedasr_tff.retrieval import training
from tests.program import damage
from tests.text_models import tiny_bert

_SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
# Three categories, each with words of its own (plus shared ones): separable classes.
_WORDS = {
    'astronomy': ['star', 'moon', 'orbit', 'comet', 'planet', 'galaxy'],
    'cooking': ['bread', 'salt', 'oven', 'butter', 'soup', 'pepper'],
    'sailing': ['boat', 'wind', 'sail', 'harbor', 'wave', 'anchor'],
}
_SHARED = ['the', 'a', 'and', 'of', 'is', 'very']
_MAX_LENGTH = 10


def _write_corpus(directory, per_class=24, seed=0):
  """A fortunes-layout folder: one file per category, entries separated by '%' lines."""
  rng = np.random.default_rng(seed)
  os.makedirs(directory)
  for category, words in _WORDS.items():
    entries = []
    for _ in range(per_class):
      tokens = list(rng.choice(words, 4)) + list(rng.choice(_SHARED, 2))
      rng.shuffle(tokens)
      entries.append(' '.join(tokens))
    with open(os.path.join(directory, category), 'w') as f:
      f.write('\n%\n'.join(entries) + '\n%\n')
    with open(os.path.join(directory, category + '.dat'), 'wb') as f:
      f.write(b'\0' * 8)   # The index file the reader must skip.


def _write_model(directory):
  vocab = _SPECIAL + sorted({w for ws in _WORDS.values() for w in ws} | set(_SHARED))
  tiny_bert.write_tiny_bert(directory, seed=1, vocab_size=len(vocab),
                            max_position_embeddings=_MAX_LENGTH)
  with open(os.path.join(directory, 'vocab.txt'), 'w') as f:
    f.write('\n'.join(vocab) + '\n')


class TrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.corpus = os.path.join(cls.root, 'fortunes')
    cls.model = os.path.join(cls.root, 'model')
    _write_corpus(cls.corpus)
    _write_model(cls.model)

  def config(self, name, **overrides):
    values = dict(corpus_path=self.corpus, checkpoint_dir=self.model, max_length=_MAX_LENGTH,
                  min_class_examples=5, num_clients=3, rounds=4, local_epochs=2,
                  client_learning_rate=0.5, test_fraction=0.25,
                  output_dir=os.path.join(self.root, name),
                  feature_cache_dir=os.path.join(self.root, 'features'))
    values.update(overrides)
    return retriever_config.RetrieverConfig(**values)

  def test_fl_learns_like_centralized_and_local_dp_costs(self):
    # Property 15: FL within 2 points of centralized at the same total epochs; local DP
    # (z = 0.1, adaptive) no better than without, within noise.
    # The pretrained MiniLM: the tiny random BERT's pooled states barely separate the classes.
    minilm = dict(checkpoint_dir=None, max_length=16)
    fl = training.train(self.config('fl', **minilm), show_progress=False, log=lambda _: None)
    central = training.train(self.config('central', num_clients=1, **minilm),
                             show_progress=False, log=lambda _: None)
    dp = training.train(self.config('dp', local_dp='adaptive', noise_multiplier=0.1, **minilm),
                        show_progress=False, log=lambda _: None)
    self.assertGreaterEqual(central.metrics['eval']['top1'], 0.9)
    self.assertLessEqual(abs(fl.metrics['eval']['top1'] - central.metrics['eval']['top1']), 0.02)
    self.assertLessEqual(dp.metrics['eval']['top1'], fl.metrics['eval']['top1'] + 0.02)
    self.assertGreater(dp.metrics['privacy']['local_epsilon_max'], 10)   # Vacuous, and said so.
    self.assertIn('vacuous', dp.privacy_statement)
    self.assertIn('Adaptive clip not covered', dp.privacy_statement)

  def test_same_seeds_same_run_and_resume_replays(self):
    first = training.train(self.config('a', local_dp='fixed', noise_seed=7),
                           show_progress=False, log=lambda _: None)
    second = training.train(self.config('b', local_dp='fixed', noise_seed=7),
                            show_progress=False, log=lambda _: None)
    for x, y in zip(first.weights.trainable, second.weights.trainable, strict=True):
      np.testing.assert_array_equal(x, y)
    self.assertEqual(first.metrics['eval'], second.metrics['eval'])
    # Stopped after 2 rounds, then resumed to 4: the same final model.
    resumed_config = self.config('c', local_dp='fixed', noise_seed=7)
    training.train(self.config('c', local_dp='fixed', noise_seed=7, rounds=2),
                   show_progress=False, log=lambda _: None)
    resumed = training.train(resumed_config, show_progress=False, log=lambda _: None)
    for x, y in zip(first.weights.trainable, resumed.weights.trainable, strict=True):
      np.testing.assert_array_equal(x, y)
    with open(os.path.join(resumed_config.output_dir, 'metrics.csv')) as f:
      rounds = [int(row['key']) for row in csv.DictReader(f)]
    self.assertEqual(rounds, [0, 1, 2, 3, 4])   # Each round released once.

  def test_dp_runs_release_no_client_statistic_unless_opted_in(self):
    config = self.config('released', local_dp='fixed', rounds=1)
    training.train(config, show_progress=False, log=lambda _: None)
    with open(os.path.join(config.output_dir, 'metrics.csv')) as f:
      columns = next(csv.reader(f))
    self.assertFalse([c for c in columns if c.startswith('client/')], columns)
    self.assertIn('privacy/local_epsilon_max', columns)
    opted = self.config('opted', local_dp='fixed', rounds=1, release_client_diagnostics=True)
    result = training.train(opted, show_progress=False, log=lambda _: None)
    with open(os.path.join(opted.output_dir, 'metrics.csv')) as f:
      columns = next(csv.reader(f))
    self.assertIn('client/delta_norm', columns)
    self.assertIn('Outside the guarantee', result.privacy_statement)

  def test_adapter_mode_trains_through_the_carried_backbone(self):
    result = training.train(self.config('adapter', mode='adapter_classifier', rounds=2),
                            show_progress=False, log=lambda _: None)
    d = 16
    adapter = result.weights.trainable[0]
    self.assertEqual(adapter.shape, (d, d))
    self.assertGreater(np.abs(adapter - np.eye(d)).max(), 0)
    with open(os.path.join(self.root, 'adapter', 'summary.json')) as f:
      self.assertEqual(json.load(f)['rounds'], 2)
    # model.npz holds W_a and the head under names of their own (Keras calls both `kernel`).
    with np.load(os.path.join(self.root, 'adapter', 'model.npz')) as saved:
      np.testing.assert_array_equal(saved['adapter/kernel'], adapter)
      self.assertEqual(saved['head/classifier/kernel'].shape, (d, 3))

  def test_central_dp_reports_the_ledger(self):
    result = training.train(
        self.config('central_dp', central_dp='fixed', weighting='uniform',
                    central_noise_multiplier=1.0, rounds=1, declared_population=10**6,
                    declared_cohort_size=1000), show_progress=False, log=lambda _: None)
    self.assertIn('epsilon_run_rdp', result.metrics['privacy'])
    self.assertIn('Central DP', result.privacy_statement)
    self.assertLess(result.metrics['privacy']['epsilon_declared_rdp'],
                    result.metrics['privacy']['epsilon_run_rdp'])

  def test_dp_prototypes_start_the_head_and_are_accounted_as_a_round(self):
    config = self.config('prototypes', central_dp='fixed', weighting='uniform',
                         central_noise_multiplier=0.5, rounds=1, dp_prototypes=True,
                         noise_seed=3)
    lines = []
    result = training.train(config, show_progress=False, log=lines.append)
    # The head of round 0 (its checkpoint) is s·F_c/||F_c||: unit columns times the scale.
    with open(os.path.join(config.output_dir, 'metrics.csv')) as f:
      rows = list(csv.DictReader(f))
    self.assertEqual([int(r['key']) for r in rows], [0, 1])
    # Two releases of the mechanism accounted: the prototypes and round 1.
    ledger_one_round = training.train(
        self.config('no_prototypes', central_dp='fixed', weighting='uniform',
                    central_noise_multiplier=0.5, rounds=2, noise_seed=3),
        show_progress=False, log=lambda _: None).metrics['privacy']
    self.assertAlmostEqual(result.metrics['privacy']['epsilon_run_rdp'],
                           ledger_one_round['epsilon_run_rdp'])
    self.assertIn('class prototypes', result.privacy_statement)
    self.assertIn('one of the 2 rounds accounted', result.privacy_statement)

  def test_the_prototype_head_is_the_noised_class_sums_direction(self):
    # Without noise (no --central_dp) the release is the plain mean, so the round-0 head is the
    # direction of each class's sum of unit features, scaled by LOGIT_SCALE; no training round
    # runs (a resume from round 0's checkpoint would not release again).
    config = self.config('prototypes_plain', rounds=1, dp_prototypes=True,
                         client_learning_rate=1e-9)
    result = training.train(config, show_progress=False, log=lambda _: None)
    kernel = result.weights.trainable[0]
    np.testing.assert_allclose(np.linalg.norm(kernel, axis=0), 5.0, rtol=1e-3)
    self.assertGreaterEqual(result.metrics['eval']['top1'], 0.5)

  def test_a_swamping_configuration_is_warned_at_start_up(self):
    lines = []
    swamped = self.config('swamped', local_dp='fixed', noise_multiplier=5.0, rounds=1)
    result = training.train(swamped, show_progress=False, log=lines.append)
    self.assertTrue([line for line in lines if line.startswith('Warning: The DP noise will '
                                                               'likely swamp')], lines)
    self.assertGreater(result.metrics['noise_to_gap_ratio'], 0.25)
    lines = []
    quiet = self.config('quiet', local_dp='fixed', noise_multiplier=0.01, rounds=1)
    result = training.train(quiet, show_progress=False, log=lines.append)
    self.assertFalse([line for line in lines if 'swamp' in line], lines)
    self.assertTrue([line for line in lines if line.startswith('DP noise check: ρ = 0.0')],
                    lines)
    self.assertLess(result.metrics['noise_to_gap_ratio'], 0.25)

  def test_a_different_configuration_is_not_resumed(self):
    training.train(self.config('fingerprint', rounds=1), show_progress=False,
                   log=lambda _: None)
    with self.assertRaisesRegex(ValueError, '--head'):
      training.train(self.config('fingerprint', rounds=1, head='pre_classifier'),
                     show_progress=False, log=lambda _: None)

  def test_a_damaged_latest_checkpoint_is_refused_and_the_output_kept(self):
    config = self.config('damaged', rounds=2)
    training.train(config, show_progress=False, log=lambda _: None)
    folder = damage.damage_latest_checkpoint(os.path.join(config.output_dir, 'checkpoints'))
    before = damage.files(config.output_dir)
    # Refused before the model and process are built.
    with self.assertRaisesRegex(ValueError, f'{folder} \\(round 2\\) cannot be read.*round 1'), \
         mock.patch.object(tff_model, 'build_model_fn', side_effect=AssertionError('built')):
      training.train(config, show_progress=False, log=lambda _: None)
    self.assertEqual(damage.files(config.output_dir), before)

  def test_the_clients_fingerprint_and_per_client_files_are_owner_only(self):
    # The hash of every client's texts is kept in the owner-only
    # checkpoints, every checkpoint file is owner-only, and so is the summary that lists the
    # clients.
    config = self.config('private_files', local_dp='fixed', rounds=1)
    training.train(config, show_progress=False, log=lambda _: None)
    with open(os.path.join(config.output_dir, 'config.json')) as f:
      self.assertNotIn('clients_sha256', json.load(f))
    checkpoints = os.path.join(config.output_dir, 'checkpoints')
    self.assertTrue(os.path.exists(os.path.join(checkpoints, 'clients.json')))
    for directory, _, files in os.walk(checkpoints):
      self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700, directory)
      for name in files:
        path = os.path.join(directory, name)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)
    summary = os.path.join(config.output_dir, 'summary.json')
    self.assertEqual(stat.S_IMODE(os.stat(summary).st_mode), 0o600)
    with self.assertRaisesRegex(ValueError, 'the clients\' data'):
      training.train(self.config('private_files', local_dp='fixed', rounds=1, data_seed=1),
                     show_progress=False, log=lambda _: None)

  def test_adapter_mode_refuses_a_backbone_over_2_gib_before_reading_it(self):
    # TinyLlama-1.1B's config.json alone (no weights): 4.4 GB of float32 weights.
    directory = os.path.join(self.root, 'tinyllama')
    os.makedirs(directory)
    with open(os.path.join(directory, 'config.json'), 'w') as f:
      json.dump({'model_type': 'llama', 'vocab_size': 32000, 'hidden_size': 2048,
                 'intermediate_size': 5632, 'num_hidden_layers': 22, 'num_attention_heads': 32,
                 'num_key_value_heads': 4, 'max_position_embeddings': 2048,
                 'rms_norm_eps': 1e-5, 'hidden_act': 'silu', 'rope_theta': 10000.0,
                 'tie_word_embeddings': False}, f)
    with self.assertRaisesRegex(ValueError, r'4,\d{3},\d{3},\d{3} bytes.*2 GiB.*classifier_only'):
      data_lib.load_backbone(self.config('big', checkpoint_dir=directory,
                                         mode='adapter_classifier'))

  def test_impossible_flag_combinations_name_the_flags(self):
    for overrides, message in (
        (dict(local_dp='fixed', central_dp='fixed', weighting='uniform'), '--local_dp'),
        (dict(central_dp='fixed'), '--weighting'),
        (dict(client_split='column'), '--client_split'),
        (dict(warmup_rounds=2), '--warmup_rounds'),
        (dict(cohort_size=5), '--cohort_size'),
        (dict(local_dp='adaptive', num_clients=1), 'noise_multiplier'),
        (dict(mode='adapter'), '--mode'),
        (dict(dp_prototypes=True, local_dp='fixed'), '--dp_prototypes'),
        (dict(dp_prototypes=True, head='pre_classifier'), '--head=linear'),
        (dict(prototype_clip=0.0), 'prototype_clip'),
        (dict(output_dir=''), 'output_dir'),
    ):
      with self.assertRaisesRegex(ValueError, message, msg=str(overrides)):
        self.config('errors', **overrides)


if __name__ == '__main__':
  runtime.set_local_cpp_execution_context()
  absltest.main()
