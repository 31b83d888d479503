"""Flags from the configuration classes, and flags to configurations (`config_flags`)."""

from absl import app
from absl import flags
from absl.testing import absltest

from experiments import config_flags
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.speech import central_training
from fedasr_tff.speech import config as config_lib

# The federated and the central configurations, as the binaries define them (central training
# shares --model_config and --seed).
_CENTRAL_OWN = [name for name in fields_lib.config_fields(central_training.CentralConfig)
                if name not in ('model_config', 'seed')]


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
    config = config_lib.FederatedConfig(data=config_lib.DataConfig(layout=None))
    with self.assertRaisesRegex(ValueError, '`layout` is None'):
      config_flags.argv_from_config(config)


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
