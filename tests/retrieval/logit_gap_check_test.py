"""The start-up check that a retriever run's DP noise will swamp its head (`noise_check`)."""

import math

from absl.testing import absltest

from fedasr_tff.retrieval import logit_gap_check
from fedasr_tff.retrieval import retriever_config


def _config(**overrides):
  return retriever_config.RetrieverConfig(output_dir='/unused', **overrides)


class NoiseToGapRatioTest(absltest.TestCase):

  def test_formula(self):
    self.assertAlmostEqual(logit_gap_check.noise_to_gap_ratio(0.01, 100, 25),
                           0.01 * math.sqrt(2 * math.log(100)) * 2)
    self.assertEqual(logit_gap_check.noise_to_gap_ratio(0.0, 5, 1), 0.0)
    # More rounds let the clipped updates outgrow the noise as √T.
    self.assertAlmostEqual(logit_gap_check.noise_to_gap_ratio(0.1, 10, 4) /
                           logit_gap_check.noise_to_gap_ratio(0.1, 10, 16), 2.0)
    # Clients of one class each push a row by C/D, not C/√D: √D times the ratio.
    self.assertAlmostEqual(logit_gap_check.noise_to_gap_ratio(0.1, 100, 4, classes_per_client=1) /
                           logit_gap_check.noise_to_gap_ratio(0.1, 100, 4), 10.0)

  def test_noise_std_of_the_averaged_update(self):
    local = _config(num_clients=4, local_dp='fixed', noise_multiplier=0.2)
    self.assertAlmostEqual(local.noise_std(), 0.1)   # z/√m
    central = _config(num_clients=100, central_dp='fixed', weighting='uniform',
                      central_noise_multiplier=1.0)
    self.assertAlmostEqual(central.noise_std(), 0.01)   # z/S
    self.assertEqual(_config(num_clients=3).noise_std(), 0.0)

  def test_argument_errors_name_the_argument(self):
    for kwargs, name in ((dict(noise_std=-1.0, num_classes=3, rounds=1), 'noise_std'),
                         (dict(noise_std=0.1, num_classes=1, rounds=1), 'num_classes'),
                         (dict(noise_std=0.1, num_classes=3, rounds=0), 'rounds'),
                         (dict(noise_std=0.1, num_classes=3, rounds=1, classes_per_client=4),
                          'classes_per_client')):
      with self.assertRaisesRegex(ValueError, name):
        logit_gap_check.noise_to_gap_ratio(**kwargs)
    with self.assertRaisesRegex(ValueError, '--local_dp and --central_dp'):
      _config(local_dp='fixed', central_dp='fixed', weighting='uniform')


class SwampWarningTest(absltest.TestCase):
  """The configurations measured in docs/retrieval.md: the spam head that works, the 150
  classes that collapsed, and the 213-class runs."""

  def test_the_2_class_spam_head_at_z_0_1_is_not_warned(self):
    # 2 clients, adaptive local DP at the paper's z = 0.1: noise norm about 2 C, lost 1.5 points.
    config = _config(num_clients=2, local_dp='adaptive', noise_multiplier=0.1)
    self.assertIsNone(config.noise_warning(2))

  def test_150_classes_over_10_clients_at_z_0_1_are_warned(self):
    # Split by intent, 92.6% to 3.0% top-1; 213 Debian classes, even split: 44.9% to
    # 11.1%, label-skewed: 38.2% to 2.4% (docs/retrieval.md).
    for split, classes in (('dirichlet', 150), ('even', 213), ('dirichlet', 213)):
      config = _config(num_clients=10, local_dp='adaptive', noise_multiplier=0.1,
                       client_split=split)
      warning = config.noise_warning(classes)
      self.assertIsNotNone(warning, (split, classes))
      self.assertIn(f'{classes} competing logits', warning)
      self.assertIn('--central_dp', warning)

  def test_central_dp_over_maintainers(self):
    # 213 classes over 1,115 Debian maintainers (one or two classes each), 30 rounds, z on the
    # sum of S: S = 200 at z = 1 fell to 8.9% top-1 (docs/retrieval.md); every client at z = 2
    # keeps σ = z/S an eighth as large.

    def config(**overrides):
      return _config(num_clients=1115, client_split='dirichlet', central_dp='fixed',
                     weighting='uniform', rounds=30, **overrides)

    self.assertIsNotNone(config(cohort_size=200, central_noise_multiplier=1.0)
                         .noise_warning(213))
    self.assertIsNone(config(central_noise_multiplier=2.0).noise_warning(213))
    self.assertIsNone(_config().noise_warning(213))   # No noise.


if __name__ == '__main__':
  absltest.main()
