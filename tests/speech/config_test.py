"""The grouped run configuration (`fedasr_tff.speech.config`)."""

import dataclasses
import os
import tempfile
from unittest import mock

from absl.testing import absltest

from fedasr_tff import aggregators
from fedasr_tff import optimizers
from fedasr_tff import privacy
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import models
from fedasr_tff.speech import presets

_SUB_CONFIGS = (data_config.DataConfig, data_config.ModelConfig, config_lib.ClientConfig,
                config_lib.ServerConfig, dp_config.DPConfig, config_lib.RunConfig,
                config_lib.CentralDataConfig, config_lib.MixedConfig, config_lib.DGAConfig)


class ConfigTest(absltest.TestCase):

  def test_every_sub_configuration_builds_from_python_with_its_required_fields_only(self):
    for cls in _SUB_CONFIGS:
      required = {f.name: None for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
      self.assertEqual(required, {}, cls.__name__)   # Each has a default for every field.
      config = cls()
      for f in dataclasses.fields(cls):
        self.assertEqual(getattr(config, f.name), f.default, f'{cls.__name__}.{f.name}')
        self.assertTrue(f.metadata[fields_lib.HELP], f'{cls.__name__}.{f.name} has no help')
    self.assertEqual(config_lib.FederatedConfig().client.local_work(),
                     (config_lib.ClientConfig.DEFAULT_LOCAL_STEPS, None))

  def test_local_epochs_alone_is_a_valid_configuration(self):
    # The flat configuration refused this: its dataclass defaulted local_steps to 10.
    config = config_lib.FederatedConfig(run=config_lib.RunConfig(rounds=1, cohort_size=1),
                                        client=config_lib.ClientConfig(local_epochs=2))
    self.assertEqual(config.client.local_work(), (None, 2))

  def test_a_round_uses_its_local_steps_in_batches(self):
    self.assertEqual(config_lib.ClientConfig().batches_per_round(),
                     config_lib.ClientConfig.DEFAULT_LOCAL_STEPS)
    self.assertEqual(config_lib.ClientConfig(local_steps=3).batches_per_round(), 3)
    self.assertIsNone(config_lib.ClientConfig(local_epochs=2).batches_per_round())

  def test_feature_cache_defaults_under_the_output_directory(self):
    root = '/cache/root'
    data = data_config.DataConfig(corpus_dir='/corpus')
    self.assertEqual(data.with_default_feature_cache('/out').feature_cache_dir,
                     '/out/feature_cache')
    self.assertIsNone(data.with_default_feature_cache(None).feature_cache_dir)
    for given in ('/shared/cache', 'none'):
      named = dataclasses.replace(data, feature_cache_dir=given)
      self.assertEqual(named.with_default_feature_cache('/out').feature_cache_dir, given)
    # "none" turns the cache off: what reaches the client data.
    with mock.patch.object(config_lib.corpus_clients, 'load_client_data') as load:
      for given, want in ((f'{root}/cache', f'{root}/cache'), ('none', None)):
        dataclasses.replace(data, feature_cache_dir=given).load_client_data('train', None)
        self.assertEqual(load.call_args.kwargs['feature_cache_dir'], want)

  def test_spec_augment_applies_to_training_data_only(self):
    data = data_config.DataConfig(corpus_dir='/corpus')
    central = config_lib.CentralDataConfig(central_split='train')
    with mock.patch.object(config_lib.corpus_clients, 'load_client_data') as load:
      for spec_augment in (False, True):
        on = dataclasses.replace(data, spec_augment=spec_augment)
        for training in (False, True):
          on.load_client_data('train', None, training=training)
          self.assertEqual(load.call_args.kwargs['spec_augment'], spec_augment and training)
          central.load(on, None, training=training)
          self.assertEqual(load.call_args.kwargs['spec_augment'], spec_augment and training)
        # The server's data trains by default; evaluation data never augments.
        central.load(on, None)
        self.assertEqual(load.call_args.kwargs['spec_augment'], spec_augment)
        dataclasses.replace(on, eval_split='dev').load_eval_data(None)
        self.assertFalse(load.call_args.kwargs.get('spec_augment', False))

  def test_max_delta_norm_is_client_lr_x_local_clip_x_local_steps(self):
    self.assertAlmostEqual(config_lib.ClientConfig(local_steps=1).max_delta_norm(), 0.2)
    self.assertAlmostEqual(config_lib.ClientConfig(
        client_lr=0.5, local_clip=2.0, local_steps=3).max_delta_norm(), 3.0)
    # Without --local_steps, the default 10 steps.
    self.assertAlmostEqual(config_lib.ClientConfig().max_delta_norm(), 2.0)
    for client, named in ((config_lib.ClientConfig(local_epochs=1), '`local_epochs`.*`clip`'),
                          (config_lib.ClientConfig(local_clip=0.0), '`local_clip`.*`clip`'),
                          (config_lib.ClientConfig(client_lr=0.0), '`client_lr`')):
      with self.assertRaisesRegex(ValueError, named):
        client.max_delta_norm()

  def test_the_library_defaults_are_the_paper_preset(self):
    self.assertEqual(set(presets.CPU), set(presets.PAPER))
    defaults = {**fields_lib.to_flat(config_lib.FederatedConfig()),
                **fields_lib.to_flat(central_training.CentralConfig())}
    self.assertEqual({name: defaults[name] for name in presets.PAPER}, presets.PAPER)
    for name, value in presets.CPU.items():
      self.assertIn(name, defaults)
      self.assertNotEqual(value, defaults[name], name)

  def test_field_names_are_unique_flag_names_and_flat_values_round_trip(self):
    fields = fields_lib.config_fields(config_lib.FederatedConfig)
    self.assertLen(fields, sum(len(dataclasses.fields(cls)) for cls in _SUB_CONFIGS))
    config = fields_lib.from_flat(config_lib.FederatedConfig, {
        'client_lr': 0.3, 'cohort_size': 4, 'clip': 0.5, 'iid': True, 'unrelated_flag': 1})
    self.assertEqual((config.client.client_lr, config.run.cohort_size, config.dp.clip,
                      config.data.iid), (0.3, 4, 0.5, True))
    self.assertEqual(fields_lib.from_flat(config_lib.FederatedConfig,
                                          fields_lib.to_flat(config)), config)

  def test_noise_given_three_ways(self):
    def level(**noise):
      config = fields_lib.from_flat(config_lib.FederatedConfig, dict(
          cohort_size=8, population_cohort_size=100, population=10**5, rounds=50, delta=1e-9,
          **noise))
      return config.noise_level(num_clients=54)

    given_sigma = level(sigma_dp=0.01)
    self.assertEqual(given_sigma.sigma_dp, 0.01)
    self.assertAlmostEqual(given_sigma.noise_multiplier, 0.08)
    self.assertAlmostEqual(given_sigma.declared_noise_multiplier, 1.0)
    given_z = level(noise_multiplier=0.8)
    self.assertAlmostEqual(given_z.sigma_dp, 0.1)
    self.assertEqual(given_z.noise_multiplier, 0.8)   # Used as given, not via sigma_dp.
    target = level(target_epsilon=2.0)
    epsilon = privacy.compute_epsilon(target.declared_noise_multiplier, 100 / 10**5, 50, 1e-9)
    self.assertLessEqual(epsilon, 2.0)
    self.assertGreater(epsilon, 1.9)
    self.assertAlmostEqual(target.sigma_dp * 100, target.declared_noise_multiplier)
    self.assertAlmostEqual(target.noise_multiplier, target.sigma_dp * 8)
    self.assertEqual(level(), dp_config.NoiseLevel(0.0, 0.0, 0.0))
    with self.assertRaisesRegex(ValueError, 'one way only'):
      level(sigma_dp=0.1, noise_multiplier=1.0)
    for name in ('sigma_dp', 'noise_multiplier'):
      with self.assertRaisesRegex(ValueError, f'`{name}` must be a finite number >= 0'):
        level(**{name: -1.0})
    with self.assertRaisesRegex(ValueError, 'target_epsilon'):
      level(target_epsilon=-1.0)

  def test_builder_errors_name_the_configuration_field(self):
    sgd = optimizers.build('sgd', 1.0)
    with self.assertRaisesRegex(ValueError, '`client_lr` must be'):
      config_lib.ClientConfig(client_lr=-1.0).fed_avg_process(None, server_optimizer=sgd)
    with self.assertRaisesRegex(ValueError, '`local_clip` must be'):
      config_lib.ClientConfig(local_clip=-1.0).fed_avg_process(None, server_optimizer=sgd)
    with self.assertRaisesRegex(ValueError, '`server_lr`'):
      config_lib.ServerConfig(server_lr=-1.0).optimizer()
    with self.assertRaisesRegex(ValueError, '`server_lr_schedule`'):
      config_lib.ServerConfig(server_lr_schedule='cosine').schedule()
    with self.assertRaisesRegex(ValueError, '`clip`'):
      dp_config.DPConfig(clip=0.0, adaptive_clipping=True).aggregator(0.1, 2, ['a'], False)
    with self.assertRaisesRegex(ValueError, '`clip_learning_rate`'):
      dp_config.DPConfig(adaptive_clipping=True, clip_learning_rate=-1.0).aggregator(
          0.1, 2, ['a'], False)
    with self.assertRaisesRegex(ValueError, 'clipping`=none'):
      dp_config.DPConfig(clipping='none', sigma_dp=0.1)

  def test_aggregator_of_each_clipping(self):
    self.assertIsNone(dp_config.DPConfig(clipping='none').aggregator(0.0, 2, ['a'], True))
    for clipping in ('global', 'uniform', 'dim', 'weighted'):
      factory = dp_config.DPConfig(clipping=clipping).aggregator(
          0.5, 4, ['block_00/w1/kernel', 'output/kernel'], diagnostics=False,
          weighted_leaf=models.is_mlp_tensor)
      self.assertIsInstance(factory, aggregators.PerLayerDPFactory, clipping)
    # The run layer knows no model: "weighted" needs to be told which tensors are the MLP's.
    with self.assertRaisesRegex(ValueError, 'clipping`=weighted needs .* MLP tensors'):
      dp_config.DPConfig(clipping='weighted').aggregator(0.5, 4, ['block_00/w1/kernel'], False)


class ModelFeaturesTest(absltest.TestCase):
  """A speech model is used with the features it was trained on (`data_config`)."""

  def _model_file(self, metadata):
    path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), 'model.npz')
    tiny = models.build_ctc_transformer('tiny', 29)
    model_io.save_weights(path, tiny, model_io.model_weights(tiny), metadata)
    return path

  def test_the_model_file_records_its_features_and_older_files_mean_utterance(self):
    mel = self._model_file(data_config.model_metadata('cmn'))
    self.assertEqual(data_config.model_features(mel), 'cmn')
    self.assertEqual(data_config.model_features(self._model_file(None)), 'utterance')
    with self.assertRaisesRegex(ValueError, "--model .* records feature normalisation 'cmvn'"):
      data_config.model_features(self._model_file({'feature_normalization': 'cmvn'}),
                                 '--model')

  def test_a_seed_model_of_other_features_is_refused_naming_the_flag(self):
    mel = self._model_file(data_config.model_metadata('cmn'))
    data_config.check_model_features(mel, 'cmn', '--seed_model')
    with self.assertRaisesRegex(
        ValueError, r"--seed_model '.*' was trained on --feature_normalization=cmn features; "
        r'this run computes --feature_normalization=utterance\. Give '
        r'--feature_normalization=cmn'):
      data_config.check_model_features(mel, 'utterance', '--seed_model')

  def test_data_of_different_features_is_refused_naming_each(self):
    data_config.check_same_features({'a': 'cmn', 'b': 'cmn'})
    with self.assertRaisesRegex(ValueError, r'\(a: "cmn", b: "utterance"\)'):
      data_config.check_same_features({'a': 'cmn', 'b': 'utterance'})


if __name__ == '__main__':
  absltest.main()
