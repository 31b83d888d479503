"""The federated run's releases (`fedasr_tff.speech.federated_training`): what a DP run writes,
when it writes it, and what it keeps private."""

import csv
import dataclasses
import json
import os
import shutil
import stat
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import runtime
from fedasr_tff.program import cohorts
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import npz_state
from fedasr_tff.program import run_record
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data
from fedasr_tff.speech import federated_training
from fedasr_tff.speech import models
from fedasr_tff.speech.data import synthetic
from tests.program import damage


def _csv(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def _tensorboard_tags(log_dir):
  tags = set()
  for root, _, files in os.walk(log_dir):
    for name in files:
      for event in tf.compat.v1.train.summary_iterator(os.path.join(root, name)):
        tags.update(value.tag for value in event.summary.value)
  return tags


class _Crash(Exception):
  pass


class FederatedTrainingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    synthetic.make_corpus(cls.root, num_speakers=4, mean_utterances=2, seed=5, skew=0.0,
                          words_per_utterance=(1, 2))
    cls.vocab = data.Vocabulary('en')
    utterances = data.read_librispeech(os.path.join(cls.root, 'librispeech'), 'train')
    held_out = {utterances[0].speaker}
    cls.train_data = data.SpeechClientData(
        [u for u in utterances if u.speaker not in held_out], cls.vocab, spec_augment=True,
        strict=True)
    cls.eval_data = data.SpeechClientData(
        [u for u in utterances if u.speaker in held_out], cls.vocab, strict=True)
    cls.default_run = None

  def _config(self, **overrides):
    return fields_lib.from_flat(config_lib.FederatedConfig, {
        'rounds': 3, 'cohort_size': 2, 'local_steps': 1, 'clip': 1.0, 'sigma_dp': 0.05,
        'eval_every': 2, 'checkpoint_every': 2, 'population': 10**6,
        'population_cohort_size': 1000, **overrides})

  def _default_config(self):
    # Adaptive per-layer clipping with the aggregator's diagnostics off, 3 rounds, checkpoints
    # at rounds 0, 2 and 3.
    return self._config(adaptive_clipping=True, clipping='uniform', sigma_dp=0.005)

  def _default_run(self):
    """(result, output_dir, log lines, events) of the run of `_default_config`, trained once by
    the first test that reads it (building a process takes tens of seconds); a test that changes
    its folder changes a copy. The events, in order: ('save', round) and ('release', round) of
    checkpoints and metrics, ('cohort', client ids) of each round's sample and ('batches', client
    id, max_batches) of each client dataset made for training."""
    cls = type(self)
    if cls.default_run is None:
      events = []
      save = npz_state.NpzProgramStateManager.save
      release = tff.program.CSVFileReleaseManager.release
      sample = cohorts.sample_cohort
      make = self.train_data.create_tf_dataset_for_client

      def recording_sample(*args, **kwargs):
        cohort = sample(*args, **kwargs)
        events.append(('cohort', list(cohort)))
        return cohort

      def recording_make(client_id, **kwargs):
        events.append(('batches', client_id, kwargs.get('max_batches')))
        return make(client_id, **kwargs)

      async def recording_save(manager, state, version):
        await save(manager, state, version)
        events.append(('save', version))

      async def recording_release(manager, value, key):
        events.append(('release', key))
        await release(manager, value, key)

      with mock.patch.object(npz_state.NpzProgramStateManager, 'save', recording_save), \
           mock.patch.object(tff.program.CSVFileReleaseManager, 'release', recording_release), \
           mock.patch.object(cohorts, 'sample_cohort', recording_sample), \
           mock.patch.object(self.train_data, 'create_tf_dataset_for_client', recording_make):
        cls.default_run = self._train('default', self._default_config()) + (events,)
    return cls.default_run

  def _copy_of_default_run(self, name):
    output_dir = os.path.join(self.root, name)
    shutil.copytree(self._default_run()[1], output_dir)
    return output_dir

  def _train(self, name, config, **kwargs):
    output_dir = os.path.join(self.root, name)
    lines = []
    kwargs.setdefault('eval_data', self.eval_data)
    result = federated_training.train(config, self.train_data, self.vocab, output_dir,
                                      show_progress=False, log=lines.append, **kwargs)
    return result, output_dir, lines

  def _modes(self, root):
    """{path under `root`: permission bits} of every directory and file."""
    modes = {}
    for directory, _, files in os.walk(root):
      for path in [directory] + [os.path.join(directory, name) for name in files]:
        modes[os.path.relpath(path, root)] = stat.S_IMODE(os.stat(path).st_mode)
    return modes

  def test_evaluation_on_training_speakers_only_with_the_opt_in_and_labelled(self):
    # The clients' exact scores are client statistics, refused like the
    # server training on their data, before anything is written.
    clients = len(self.train_data.client_ids)
    with self.assertRaisesRegex(ValueError, f'shares {clients} speaker.*'
                                '`release_client_evaluation`'):
      self._train('eval_refused', self._config(rounds=1), eval_data=self.train_data)
    self.assertFalse(os.path.exists(os.path.join(self.root, 'eval_refused')))
    # Without noise nothing changes.
    self.assertEqual(federated_training.check_eval_data(
        self._config(sigma_dp=0.0), self.train_data, self.train_data.client_ids), clients)
    result, output_dir, lines = self._train(
        'eval_opt_in', self._config(rounds=1, release_client_evaluation=True),
        eval_data=self.train_data)
    statement = result.privacy_statement()
    self.assertIn('opt-in `--release_client_evaluation`', statement)
    self.assertIn(f'{clients} of the federated clients', statement)
    self.assertNotIn('No un-noised client statistic is released', statement)
    self.assertTrue([line for line in lines if 'OUTSIDE the DP guarantee' in line and
                     '--release_client_evaluation' in line])
    with open(os.path.join(output_dir, 'summary.json')) as f:
      self.assertTrue([c for c in json.load(f)['client_statistics_released']
                       if c.startswith('eval/*')])
    self.assertEqual(stat.S_IMODE(os.stat(os.path.join(output_dir, 'eval_per_speaker.csv'))
                                  .st_mode), 0o600)

  def test_dp_run_releases_no_client_statistic_by_default(self):
    # Also runs the aggregator with diagnostics off end to end, and adaptive clipping, whose
    # per-layer clips are the noised state and are released.
    result, output_dir, lines, _ = self._default_run()
    rows = _csv(os.path.join(output_dir, 'metrics.csv'))
    self.assertEqual([r['key'] for r in rows], ['0', '1', '2', '3'])
    columns = set(rows[0])
    self.assertFalse({c for c in columns if c.startswith(('client/', 'train/'))}, columns)
    for public in ('server/update_norm', 'server/learning_rate', 'dp/noise_stddev', 'dp/clip',
                   'eval/cer', 'privacy/epsilon_run_rdp', 'privacy/epsilon_declared_rdp',
                   'time/round_seconds'):
      self.assertIn(public, columns)
    self.assertTrue({c for c in columns if c.startswith('per_layer/') and c.endswith('/clip')})
    # Per-layer norms of the noised average update, and the noise's expected share of them.
    for released in ('/released_norm', '/noise_norm'):
      self.assertTrue({c for c in columns if c.startswith('per_layer/') and c.endswith(released)})
    for name in ('norm_before_clip', 'norm_after_clip', 'clipped_fraction', 'nonfinite',
                 'examples', 'loss', 'delta_norm', 'grad_norm', 'clients'):
      self.assertFalse([c for c in columns if name in c and not c.startswith('eval/')], name)
    tags = _tensorboard_tags(os.path.join(output_dir, 'tensorboard'))
    self.assertTrue(tags)
    self.assertFalse({t for t in tags if t.startswith(('client', 'train'))}, tags)
    with open(os.path.join(output_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual(summary['client_statistics_released'], [])
    self.assertEqual(summary['sampling'], 'poisson')
    self.assertIn('No un-noised client statistic is released', summary['privacy_statement'])
    self.assertFalse([line for line in lines if 'loss' in line or 'OUTSIDE' in line])
    self.assertTrue([line for line in lines if 'epsilon_run' in line])
    # The run secret is drawn from OS entropy and kept only in the (owner-only) checkpoints.
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertIsNone(json.load(f)['config']['run']['seed'])
    checkpoints = os.path.join(output_dir, 'checkpoints')
    self.assertEqual(stat.S_IMODE(os.stat(checkpoints).st_mode), 0o700)
    self.assertIn('secret drawn from OS entropy', result.privacy_statement())

  def test_client_statistics_only_with_the_opt_in_and_labelled(self):
    result, output_dir, lines = self._train(
        'opt_in', self._config(rounds=2, release_client_diagnostics=True, seed=3))
    columns = set(_csv(os.path.join(output_dir, 'metrics.csv'))[0])
    self.assertIn('client/train/loss', columns)
    self.assertIn('client/dp/clipped_fraction', columns)
    self.assertTrue([c for c in columns if c.startswith('client/per_layer/')])
    self.assertFalse([c for c in columns if c.startswith('train/')])
    # Without the prefix only the norms computed from the noised release.
    self.assertFalse([c for c in columns if c.startswith('per_layer/') and
                      not c.endswith(('/released_norm', '/noise_norm'))])
    statement = result.privacy_statement()
    self.assertIn('Outside the guarantee', statement)
    self.assertIn('`client/train/*', statement)
    self.assertIn('voids the amplification', statement)   # --seed was fixed.
    self.assertTrue([line for line in lines if 'OUTSIDE the DP guarantee' in line])

  def test_no_round_is_released_before_a_checkpoint_covers_it(self):
    *_, events = self._default_run()
    events = [event for event in events if event[0] in ('save', 'release')]
    saved = -1
    for kind, key in events:
      if kind == 'save':
        saved = key
      else:
        self.assertLessEqual(key, saved, f'round {key} released before its checkpoint: {events}')
    self.assertEqual([k for kind, k in events if kind == 'release'], [0, 1, 2, 3])
    self.assertEqual([k for kind, k in events if kind == 'save'], [0, 2, 3])

  def test_a_run_killed_between_checkpoint_and_release_releases_each_round_once(self):
    config = self._config(rounds=3, checkpoint_every=2, seed=11)
    release = tff.program.CSVFileReleaseManager.release

    async def crash_at_round_one(manager, value, key):
      if key == 1:
        raise _Crash()
      await release(manager, value, key)

    with mock.patch.object(tff.program.CSVFileReleaseManager, 'release', crash_at_round_one):
      with self.assertRaises(_Crash):
        self._train('crash', config)
    output_dir = os.path.join(self.root, 'crash')
    # Round 2's checkpoint is saved, rounds 1 and 2 are not released yet.
    self.assertTrue(os.path.isdir(os.path.join(output_dir, 'checkpoints', 'program_state_2')))
    self.assertEqual([r['key'] for r in _csv(os.path.join(output_dir, 'metrics.csv'))], ['0'])
    _, _, lines = self._train('crash', config)
    rows = _csv(os.path.join(output_dir, 'metrics.csv'))
    self.assertEqual([r['key'] for r in rows], ['0', '1', '2', '3'])
    self.assertTrue([line for line in lines if line.startswith('round 2/3')], lines)
    self.assertFalse(os.path.exists(os.path.join(output_dir, 'checkpoints',
                                                 'held_releases.json')))

  def test_a_damaged_latest_checkpoint_is_refused_and_the_output_kept(self):
    output_dir = self._copy_of_default_run('damaged')
    released = _csv(os.path.join(output_dir, 'metrics.csv'))
    folder = damage.damage_latest_checkpoint(
        os.path.join(output_dir, 'checkpoints'))
    before = damage.files(output_dir)
    # Refused before the model and process are built (tens of seconds).
    with self.assertRaisesRegex(ValueError, f'{folder} \\(round 3\\) cannot be read'), \
         mock.patch.object(models, 'build_tff_model_fn', side_effect=AssertionError('built')):
      self._train('damaged', self._default_config())
    self.assertEqual(damage.files(output_dir), before)
    # What the error says to do: move it aside to resume from round 2, here on the machine that
    # ran round 3, which recomputes it bit-identically (but for its timing): its secret, drawn
    # from OS entropy, and the noise seed come back from round 2's checkpoint.
    os.rename(folder, os.path.join(self.root, 'damaged_program_state_3'))
    self._train('damaged', self._default_config())
    again = _csv(os.path.join(output_dir, 'metrics.csv'))
    self.assertEqual([r['key'] for r in again], ['0', '1', '2', '3'])
    for old, new in zip(released, again, strict=True):
      self.assertEqual({k: v for k, v in old.items() if not k.startswith('time/')},
                       {k: v for k, v in new.items() if not k.startswith('time/')})

  def test_rounds_with_no_clients_release_finite_values(self):
    real = cohorts.sample_cohort

    def no_one_in_round_one(client_ids, cohort_size, secret, round_num, sampling):
      return [] if round_num == 1 else real(client_ids, cohort_size, secret, round_num, sampling)

    with mock.patch.object(cohorts, 'sample_cohort', no_one_in_round_one):
      _, output_dir, _ = self._train('empty', self._config(
          rounds=2, sigma_dp=0.0, checkpoint_every=1))
    rows = _csv(os.path.join(output_dir, 'metrics.csv'))
    self.assertEqual(float(rows[1]['client/train/clients']), 0.0)
    for column in ('client/train/loss', 'client/train/delta_norm', 'server/update_norm'):
      self.assertTrue(np.isfinite(float(rows[1][column])), column)

  def test_a_round_ships_each_client_only_the_batches_it_trains_on(self):
    # The default run trains 1 local step: a round makes the sampled speakers' datasets, no
    # other's, each cut to its first batch (`ClientConfig.batches_per_round`, None with local
    # epochs, config_test.py).
    *_, events = self._default_run()
    rounds = []
    for kind, *what in events:
      if kind == 'cohort':
        rounds.append((what[0], []))
      elif kind == 'batches':
        rounds[-1][1].append(tuple(what))
    self.assertLen(rounds, 3)
    for cohort, made in rounds:
      self.assertCountEqual([client for client, _ in made], cohort)
      self.assertTrue(all(max_batches == 1 for _, max_batches in made), made)
    # Poisson cohorts of rate 2/3 from 3 speakers: all 3 rounds empty has probability 3^-9.
    self.assertTrue(any(made for _, made in rounds), rounds)

  def test_the_clients_fingerprint_and_every_checkpoint_file_are_owner_only(self):
    # A hash of the client IDs in config.json tells, by hashing each
    # leave-one-out subset of the corpus, who was left out; and a copy or an archive of the
    # folder keeps each file's own mode.
    _, output_dir, _, _ = self._default_run()
    with open(os.path.join(output_dir, 'config.json')) as f:
      saved = json.load(f)
    self.assertNotIn('clients_sha256', saved)
    path = os.path.join(output_dir, 'checkpoints', 'clients.json')
    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
    modes = self._modes(os.path.join(output_dir, 'checkpoints'))
    self.assertGreater(len(modes), 3)
    wrong = {path: oct(mode) for path, mode in modes.items()
             if mode != (0o700 if os.path.isdir(os.path.join(output_dir, 'checkpoints', path))
                         else 0o600)}
    self.assertFalse(wrong)
    self.assertEqual(stat.S_IMODE(os.stat(os.path.join(output_dir, 'eval_per_speaker.csv'))
                                  .st_mode), 0o600)
    other = data.SpeechClientData(
        [u for s in self.train_data.client_ids[1:] for u in self.train_data.utterances(s)],
        self.vocab, strict=True)
    # Only the clients differ; refused before the process is built.
    only_clients = r'configuration \(the training clients \([^)]*\) differ\)'
    with self.assertRaisesRegex(ValueError, only_clients), \
         mock.patch.object(models, 'build_tff_model_fn', side_effect=AssertionError('built')):
      federated_training.build_run(self._default_config(), other, self.vocab, output_dir)
    # A run written with the hash in config.json resumes (the check a resume makes), and the
    # hash moves (in a copy of the run).
    output_dir = self._copy_of_default_run('fingerprint')
    path = os.path.join(output_dir, 'checkpoints', 'clients.json')
    with open(path) as f:
      digest = json.load(f)['clients_sha256']
    os.remove(path)
    saved['clients_sha256'] = digest
    with open(os.path.join(output_dir, 'config.json'), 'w') as f:
      json.dump(saved, f)
    self.assertFalse(run_record.clients_differ(output_dir, digest, saved))
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertNotIn('clients_sha256', json.load(f))
    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
    self.assertTrue(run_record.clients_differ(output_dir, 'another', saved))

  def test_an_output_directory_of_the_flat_configuration_is_refused(self):
    output_dir = os.path.join(self.root, 'flat')
    os.makedirs(output_dir)
    with open(os.path.join(output_dir, 'config.json'), 'w') as f:   # As written before grouping.
      json.dump({'config': {'rounds': 3, 'cohort_size': 2, 'sigma_dp': 0.05},
                 'clients_sha256': 'x', 'seed_model_sha256': None}, f)
    with self.assertRaisesRegex(ValueError, 'older fedasr-tff .* new output directory'):
      self._train('flat', self._config())
    self.assertFalse(os.path.exists(os.path.join(output_dir, 'checkpoints')))

  def test_a_run_saved_before_spec_augment_was_recorded_is_refused_naming_it(self):
    # train_federated always applied SpecAugment before --spec_augment existed, and
    # config.json (format 2) did not say so: no resume of it, on or off, by a guess. Refused
    # before the process is built.
    output_dir = os.path.join(self.root, 'format2')
    os.makedirs(output_dir)
    for spec_augment in (False, True):
      config = self._config(spec_augment=spec_augment)
      saved = dataclasses.asdict(config)
      del saved['data']['spec_augment']
      with open(os.path.join(output_dir, 'config.json'), 'w') as f:
        json.dump({'format': 2, 'config': saved, 'seed_model_sha256': None}, f)
      with self.assertRaisesRegex(ValueError, r'format 2.*--spec_augment.*new output directory'), \
           mock.patch.object(models, 'build_tff_model_fn', side_effect=AssertionError('built')):
        self._train('format2', config)
      self.assertFalse(os.path.exists(os.path.join(output_dir, 'checkpoints')))

  def test_a_run_saved_with_the_numpy_sampler_is_refused_naming_it(self):
    # Format 3 runs drew each client's utterance sample with NumPy; this version with
    # a TF op (which workers repeat from a client store). Resumed, they would train on other
    # samples: refused, before the process is built.
    output_dir = os.path.join(self.root, 'format3')
    os.makedirs(output_dir)
    config = self._config()
    with open(os.path.join(output_dir, 'config.json'), 'w') as f:
      json.dump({'format': 3, 'config': dataclasses.asdict(config),
                 'seed_model_sha256': None}, f)
    with self.assertRaisesRegex(ValueError, r'format 3.*TensorFlow op.*new output directory'), \
         mock.patch.object(models, 'build_tff_model_fn', side_effect=AssertionError('built')):
      self._train('format3', config)
    self.assertFalse(os.path.exists(os.path.join(output_dir, 'checkpoints')))

  def test_a_run_saved_before_the_features_were_recorded_resumes_only_on_its_features(self):
    # Runs saved before --feature_normalization existed normalised whole utterances, the
    # field's default, which a saved configuration without the field is compared as.
    output_dir = self._copy_of_default_run('before_features')
    path = os.path.join(output_dir, 'config.json')
    with open(path) as f:
      saved = json.load(f)
    del saved['config']['data']['feature_normalization']
    with open(path, 'w') as f:
      json.dump(saved, f)
    record = federated_training._run_record(self._default_config(), self.train_data.client_ids,
                                            None)
    self.assertTrue(run_record.check(output_dir, record))
    cmn = dataclasses.replace(self._default_config(), data=dataclasses.replace(
        self._default_config().data, feature_normalization='cmn'))
    with self.assertRaisesRegex(ValueError, r'--feature_normalization differ'):
      run_record.check(output_dir, federated_training._run_record(
          cmn, self.train_data.client_ids, None))

  def test_data_of_other_features_than_the_configuration_is_refused_before_the_build(self):
    mel_eval = data.SpeechClientData(
        [u for c in self.eval_data.client_ids for u in self.eval_data.utterances(c)],
        self.vocab, feature_normalization='cmn')
    with self.assertRaisesRegex(
        ValueError, r'\(the configuration \(`feature_normalization`\): "utterance", the '
        r'training data: "utterance", the evaluation data: "cmn"\)'), \
         mock.patch.object(models, 'build_tff_model_fn', side_effect=AssertionError('built')):
      self._train('mel_eval', self._config(), eval_data=mel_eval)
    self.assertFalse(os.path.exists(os.path.join(self.root, 'mel_eval')))

  def test_a_federated_averaging_process_is_kept_and_read_with_fresh_noise_seeds(self):
    cache = runtime.compile_cache.CompileCache(os.path.join(self.root, 'process_cache'))
    config = self._config(clipping='dim')
    built = federated_training.build_run(config, self.train_data, self.vocab,
                                         os.path.join(self.root, 'cached_1'),
                                         process_cache=cache)
    [name] = [n for n in os.listdir(cache.directory) if n.endswith('.process')]
    path = os.path.join(cache.directory, name)
    # Confirmed, as a second run's build in its own process would (tests/runtime/
    # process_cache_test.py checks that one does).
    entry = runtime.process_cache._read(path)  # pylint: disable=protected-access
    runtime.process_cache._write(path, entry._replace(status='confirmed'))  # pylint: disable=protected-access
    with mock.patch.object(config_lib.FederatedConfig, 'process',
                           side_effect=AssertionError('built despite the cache')):
      read = federated_training.build_run(config, self.train_data, self.vocab,
                                          os.path.join(self.root, 'cached_2'),
                                          process_cache=cache)
    seeds = [run.initial_state.aggregator.query_state.numerator_state.noise_seed
             for run in (built, read)]
    self.assertTrue(all(seed[0] == 0 and seed[1] >= 0 for seed in seeds))  # filled
    self.assertNotEqual(seeds[0][1], seeds[1][1])
    self.assertEqual(read.ledger.noise_multiplier, built.ledger.noise_multiplier)
    # Another configuration is another entry; DGA's and mixed FL's processes are not kept.
    federated_training.build_run(self._config(clipping='uniform'), self.train_data, self.vocab,
                                 os.path.join(self.root, 'cached_3'), process_cache=cache)
    federated_training.build_run(
        self._config(aggregation='dga_softmax', dga_loss_clip=80.0, sigma_dp=0.0),
        self.train_data, self.vocab, os.path.join(self.root, 'cached_4'), process_cache=cache)
    self.assertLen([n for n in os.listdir(cache.directory) if n.endswith('.process')], 2)

  def test_client_noise_placement_is_refused_where_it_would_not_hold(self):
    for overrides, flag in (({}, '--sampling=poisson'),
                            ({'sampling': 'fixed', 'adaptive_clipping': True},
                             '--adaptive_clipping'),
                            ({'sampling': 'fixed', 'release_client_diagnostics': True},
                             '--release_client_diagnostics')):
      with self.assertRaisesRegex(ValueError, f'--noise_placement=client .*{flag}'):
        self._config(noise_placement='client', **overrides)
    config = self._config(noise_placement='client', sampling='fixed')
    self.assertEqual(config.effective_sampling, 'fixed')
    self.assertEqual(self._config().effective_sampling, 'poisson')
    self.assertEqual(self._config(sigma_dp=0.0).effective_sampling, 'fixed')


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
