"""Flags from the configuration classes, and flags to configurations (`experiments.common`)."""

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver

from experiments import common
from experiments import train_central  # noqa: F401  (defines its flags)
from experiments import train_federated  # noqa: F401  (defines its flags)
from fedasr_tff.program import central_training
from fedasr_tff.program import config as config_lib

FLAGS = flags.FLAGS


class CommonTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not FLAGS.is_parsed():
      FLAGS.mark_as_parsed()

  def test_every_field_is_a_flag_with_its_default_help_and_choices(self):
    for cls in (config_lib.FederatedConfig, central_training.CentralConfig):
      for name, field in config_lib.config_fields(cls).items():
        flag = FLAGS[name]
        if cls is central_training.CentralConfig and name in ('model_config', 'seed'):
          continue   # Shared flags, defined from ModelConfig and RunConfig.
        self.assertEqual(flag.default, field.default, name)
        # absl puts an enum's values before its help.
        self.assertTrue(flag.help.endswith(field.metadata[config_lib.HELP]), name)
        choices = field.metadata[config_lib.CHOICES]
        if choices:
          self.assertEqual(tuple(flag.parser.enum_values), choices, name)

  def test_unset_flags_give_the_default_configuration(self):
    self.assertEqual(common.config_from_flags(config_lib.FederatedConfig),
                     config_lib.FederatedConfig())
    self.assertEqual(common.config_from_flags(central_training.CentralConfig),
                     central_training.CentralConfig())

  @flagsaver.flagsaver(client_lr=0.3, cohort_size=4, clipping='uniform', sigma_dp=1e-3,
                       iid=True, seed=5, steps=7)
  def test_flags_reach_their_fields(self):
    config = common.config_from_flags(config_lib.FederatedConfig)
    self.assertEqual((config.client.client_lr, config.run.cohort_size, config.dp.clipping,
                      config.dp.sigma_dp, config.data.iid, config.run.seed),
                     (0.3, 4, 'uniform', 1e-3, True, 5))
    central = common.config_from_flags(central_training.CentralConfig)
    self.assertEqual((central.steps, central.seed), (7, 5))

  def test_errors_name_the_flags(self):
    with self.assertRaises(app.UsageError) as raised:
      with common.flag_errors():
        raise ValueError('`sigma_dp` must be a finite number >= 0; `not_a_flag` is not.')
    self.assertEqual(str(raised.exception),
                     '--sigma_dp must be a finite number >= 0; `not_a_flag` is not.')
    with self.assertRaisesRegex(app.UsageError, '--corpus_dir, --output_dir must be given'):
      common.require('corpus_dir', 'output_dir')


if __name__ == '__main__':
  absltest.main()
