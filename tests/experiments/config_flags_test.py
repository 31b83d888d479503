"""Flags from the configuration classes, and flags to configurations (`config_flags`)."""

from absl import app
from absl import flags
from absl.testing import absltest

from experiments import config_flags
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import presets

# The federated and the central configurations, as the binaries define them (central training
# shares --model_config and --seed).
_CENTRAL_OWN = [name for name in fields_lib.config_fields(central_training.CentralConfig)
                if name not in ('model_config', 'seed')]


def _binary_flag_values(*argv, classes=(config_lib.FederatedConfig,)):
  """The flags as train_federated (or, with its classes, train_central) defines them: --preset
  and the classes' fields at the default preset's values."""
  flag_values = flags.FlagValues()
  config_flags.define_preset_flag(presets.PRESETS, presets.DEFAULT, flag_values)
  for cls in classes:
    config_flags.define_flags(cls, flag_values=flag_values,
                              defaults=presets.for_config(presets.PRESETS[presets.DEFAULT], cls))
  flag_values(['binary', *argv])
  return flag_values


def _preset_config(cls, flag_values):
  return config_flags.config_from_flags(cls, flag_values,
                                        preset=presets.PRESETS[flag_values.preset])


def _flag_values(*argv):
  flag_values = flags.FlagValues()
  for group in ('data', 'model', 'client', 'server', 'dp', 'run', 'central', 'mixed', 'dga'):
    cls = config_lib.FederatedConfig.__dataclass_fields__[group].type
    config_flags.define_flags(cls, flag_values=flag_values)
  config_flags.define_flags(central_training.CentralConfig, _CENTRAL_OWN, flag_values)
  flag_values(['binary', *argv])
  return flag_values


class ConfigFlagsTest(absltest.TestCase):

  def test_every_field_is_a_flag_with_its_default_help_and_choices(self):
    flag_values = _flag_values()
    for cls in (config_lib.FederatedConfig, central_training.CentralConfig):
      for name, field in fields_lib.config_fields(cls).items():
        if cls is central_training.CentralConfig and name not in _CENTRAL_OWN:
          continue
        flag = flag_values[name]
        self.assertEqual(flag.default, field.default, name)
        # absl puts an enum's values before its help.
        self.assertTrue(flag.help.endswith(field.metadata[fields_lib.HELP]), name)
        choices = field.metadata[fields_lib.CHOICES]
        if choices:
          self.assertEqual(tuple(flag.parser.enum_values), choices, name)

  def test_unset_flags_give_the_default_configuration(self):
    flag_values = _flag_values()
    self.assertEqual(config_flags.config_from_flags(config_lib.FederatedConfig, flag_values),
                     config_lib.FederatedConfig())
    self.assertEqual(config_flags.config_from_flags(central_training.CentralConfig, flag_values),
                     central_training.CentralConfig())

  def test_flags_reach_their_fields(self):
    flag_values = _flag_values('--client_lr=0.3', '--cohort_size=4', '--clipping=uniform',
                               '--sigma_dp=1e-3', '--iid', '--seed=5', '--steps=7')
    config = config_flags.config_from_flags(config_lib.FederatedConfig, flag_values)
    self.assertEqual((config.client.client_lr, config.run.cohort_size, config.dp.clipping,
                      config.dp.sigma_dp, config.data.iid, config.run.seed),
                     (0.3, 4, 'uniform', 1e-3, True, 5))
    central = config_flags.config_from_flags(central_training.CentralConfig, flag_values)
    self.assertEqual((central.steps, central.seed), (7, 5))

  def test_a_binary_defines_the_fields_it_names_with_its_own_defaults(self):
    # What the demo does: the runner's names, its own defaults, sub-configurations flattened.
    flag_values = flags.FlagValues()
    config_flags.define_flags(config_lib.FederatedConfig, ['rounds', 'local_steps', 'clip'],
                              flag_values, defaults={'rounds': 30, 'local_steps': 1})
    self.assertEqual(sorted(flag_values), ['clip', 'local_steps', 'rounds'])
    self.assertEqual((flag_values['rounds'].default, flag_values['local_steps'].default,
                      flag_values['clip'].default), (30, 1, dp_config.DPConfig().clip))
    fields = fields_lib.config_fields(config_lib.FederatedConfig)
    self.assertEqual(flag_values['rounds'].help, fields['rounds'].metadata[fields_lib.HELP])
    flag_values(['binary', '--clip=0.5'])
    self.assertEqual(config_flags.values_from_flags(config_lib.FederatedConfig, flag_values),
                     {'rounds': 30, 'local_steps': 1, 'clip': 0.5})
    config = config_flags.config_from_flags(config_lib.FederatedConfig, flag_values)
    self.assertEqual((config.run.rounds, config.client.local_steps, config.dp.clip,
                      config.run.cohort_size), (30, 1, 0.5, config_lib.RunConfig().cohort_size))

  def test_defaults_only_for_fields_the_binary_defines(self):
    with self.assertRaisesRegex(ValueError, "no field 'fl_rounds'"):
      config_flags.define_flags(config_lib.RunConfig, ['rounds'], flags.FlagValues(),
                                defaults={'fl_rounds': 30})
    with self.assertRaisesRegex(ValueError, "not defined: 'cohort_size'"):
      config_flags.define_flags(config_lib.RunConfig, ['rounds'], flags.FlagValues(),
                                defaults={'cohort_size': 16})

  def test_errors_name_the_flags(self):
    flag_values = _flag_values()
    with self.assertRaises(app.UsageError) as raised:
      with config_flags.flag_errors(flag_values):
        raise ValueError('`sigma_dp` must be a finite number >= 0; `not_a_flag` is not.')
    self.assertEqual(str(raised.exception),
                     '--sigma_dp must be a finite number >= 0; `not_a_flag` is not.')

  def test_argv_from_config_rebuilds_the_configuration(self):
    config = config_lib.FederatedConfig(
        client=config_lib.ClientConfig(client_lr=0.3),
        dp=dp_config.DPConfig(clipping='uniform', normalize=True, sigma_dp=1e-3,
                               release_client_diagnostics=True),
        run=config_lib.RunConfig(cohort_size=4, seed=5))
    argv = config_flags.argv_from_config(config)
    self.assertIn('--normalize=True', argv)
    self.assertNotIn('--rounds=100', argv)  # defaults are left out
    self.assertEqual(config_flags.config_from_flags(config_lib.FederatedConfig,
                                                    _flag_values(*argv)), config)

  def test_argv_from_config_refuses_a_none_no_flag_can_give(self):
    config = config_lib.FederatedConfig(data=data_config.DataConfig(layout=None))
    with self.assertRaisesRegex(ValueError, '`layout` is None'):
      config_flags.argv_from_config(config)


  def test_the_cpu_preset_is_the_default_and_the_paper_preset_the_librarys(self):
    config = _preset_config(config_lib.FederatedConfig, _binary_flag_values())
    # The demo's federated recipe; C = client_lr x local_clip x local_steps = 0.2 x 1 x 1.
    self.assertEqual((config.run.rounds, config.run.cohort_size, config.client.local_steps,
                      config.client.client_lr, config.server.server_optimizer,
                      config.server.server_lr, config.dp.clipping, config.dp.clip,
                      config.data.spec_augment, config.data.feature_normalization),
                     (30, 16, 1, 0.2, 'lamb', 0.003, 'dim', 0.2, False, 'cmn'))
    self.assertEqual(
        _preset_config(config_lib.FederatedConfig, _binary_flag_values('--preset=paper')),
        config_lib.FederatedConfig())
    classes = (data_config.DataConfig, central_training.CentralConfig)
    flag_values = _binary_flag_values(classes=classes)
    # The demo's seed model (`speech_stages.SeedConfig.central_config` at 2,000 steps).
    self.assertEqual(_preset_config(central_training.CentralConfig, flag_values),
                     central_training.CentralConfig(
                         steps=2000, optimizer='adam', learning_rate=2e-3, schedule='step',
                         decay_rate=0.5, decay_every=666, decay_start=666))
    cpu_data = _preset_config(data_config.DataConfig, flag_values)
    self.assertEqual((cpu_data.spec_augment, cpu_data.feature_normalization), (False, 'cmn'))
    flag_values = _binary_flag_values('--preset=paper', classes=classes)
    self.assertEqual(_preset_config(central_training.CentralConfig, flag_values),
                     central_training.CentralConfig())
    paper_data = _preset_config(data_config.DataConfig, flag_values)
    self.assertEqual((paper_data.spec_augment, paper_data.feature_normalization),
                     (True, 'utterance'))

  def test_a_flag_given_explicitly_wins_over_the_preset(self):
    for argv, want in (
        (['--spec_augment'], (30, 1, 0.003, 0.2, True)),
        (['--preset=paper', '--nospec_augment', '--rounds=5'], (5, None, 0.002, 0.01, False)),
        (['--preset=paper', '--local_steps=1'], (100, 1, 0.002, 0.01, True)),
        (['--server_lr=0.01', '--clip=0.5'], (30, 1, 0.01, 0.5, False))):
      config = _preset_config(config_lib.FederatedConfig, _binary_flag_values(*argv))
      self.assertEqual((config.run.rounds, config.client.local_steps, config.server.server_lr,
                        config.dp.clip, config.data.spec_augment), want, argv)
    central = _preset_config(central_training.CentralConfig, _binary_flag_values(
        '--steps=3000', '--decay_start=100', classes=(central_training.CentralConfig,)))
    # The decay follows --steps (a third of them) unless given.
    self.assertEqual((central.steps, central.decay_every, central.decay_start),
                     (3000, 1000, 100))

  def test_the_clip_is_derived_from_the_local_training_flags_unless_given(self):
    flag_values = _binary_flag_values()
    self.assertIsNone(flag_values['clip'].default)
    self.assertIn('client_lr x local_clip x local_steps', flag_values['clip'].help)
    self.assertIn('sensitivity argument is unchanged', flag_values['clip'].help)
    for argv, clip in ((['--local_steps=10'], 2.0),
                       (['--client_lr=0.1', '--local_clip=2', '--local_steps=3'], 0.6),
                       (['--local_steps=10', '--clip=0.05'], 0.05),
                       (['--local_epochs=2', '--clip=0.3'], 0.3)):
      config = _preset_config(config_lib.FederatedConfig, _binary_flag_values(*argv))
      self.assertAlmostEqual(config.dp.clip, clip, msg=argv)
      # The aggregator (its noise std is z x C) is built with the resolved C.
      factory = config.dp.aggregator(0.5, 4, ['output/kernel'], diagnostics=False)
      self.assertAlmostEqual(factory.params.clip, clip, msg=argv)
    self.assertIsNone(_preset_config(config_lib.FederatedConfig, _binary_flag_values(
        '--local_epochs=2', '--clip=0.3')).client.local_steps)
    for argv, named in ((['--local_epochs=2'], '--local_epochs .*give --clip'),
                        (['--local_clip=0'], '--local_clip .*give --clip')):
      with self.assertRaisesRegex(app.UsageError, named):
        flag_values = _binary_flag_values(*argv)
        with config_flags.flag_errors(flag_values):
          _preset_config(config_lib.FederatedConfig, flag_values)

  def test_argv_from_config_rebuilds_the_configuration_under_a_preset(self):
    # What the ablation gives its train_federated cells.
    config = fields_lib.from_flat(config_lib.FederatedConfig, {
        'rounds': 15, 'cohort_size': 8, 'local_steps': 3, 'clip': 0.2, 'server_lr': 0.003,
        'spec_augment': True})
    argv = config_flags.argv_from_config(
        config, presets.for_config(presets.CPU, config_lib.FederatedConfig))
    self.assertNotIn('--server_lr=0.003', argv)   # the preset's
    self.assertIn('--clip=0.2', argv)   # equal to no default: a derived one is always given
    self.assertEqual(_preset_config(config_lib.FederatedConfig, _binary_flag_values(*argv)),
                     config)

  def test_impossible_flag_combinations_are_usage_errors_naming_the_flags(self):
    # What the binaries do at start-up (`flag_errors` around `config_from_flags`), in-process;
    # tests/experiments/train_federated_test.py runs the checks that need the whole binary.
    cases = [
        (['--sigma_dp=0.1', '--noise_multiplier=1'], '--sigma_dp, --noise_multiplier'),
        (['--sigma_dp=0.1', '--target_epsilon=8'], '--sigma_dp, --target_epsilon'),
        (['--clipping=none', '--sigma_dp=0.1'], '--clipping=none'),
        # Client noise is calibrated for exactly S clients and protects only the sum.
        (['--noise_placement=client', '--sigma_dp=0.1'], '--sampling=poisson'),
        (['--noise_placement=client', '--sigma_dp=0.1', '--sampling=fixed',
          '--adaptive_clipping'], '--adaptive_clipping'),
        (['--noise_placement=client', '--sigma_dp=0.1', '--sampling=fixed',
          '--release_client_diagnostics'], '--release_client_diagnostics'),
    ]
    for argv, expected in cases:
      flag_values = _flag_values(*argv)
      with self.assertRaises(app.UsageError, msg=argv) as raised:
        with config_flags.flag_errors(flag_values):
          config_flags.config_from_flags(config_lib.FederatedConfig, flag_values)
      self.assertIn(expected, str(raised.exception), msg=argv)
    # The same flags one at a time are a configuration.
    flag_values = _flag_values('--noise_placement=client', '--sigma_dp=0.1', '--sampling=fixed')
    with config_flags.flag_errors(flag_values):
      config = config_flags.config_from_flags(config_lib.FederatedConfig, flag_values)
    self.assertEqual(config.dp.noise_placement, 'client')


if __name__ == '__main__':
  absltest.main()
