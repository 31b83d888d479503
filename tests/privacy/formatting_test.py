"""How ε is written (`fedasr_tff.privacy.format_epsilon`)."""

import math

from absl.testing import absltest

from fedasr_tff import privacy


class FormatEpsilonTest(absltest.TestCase):

  def test_small_values_keep_their_digits_and_an_exact_zero_is_said_in_words(self):
    self.assertEqual(privacy.format_epsilon(3.2649), '3.26')
    self.assertEqual(privacy.format_epsilon(0.0001234), '0.000123')  # not 0.00
    self.assertEqual(privacy.format_epsilon(15912.0), '1.59e+04')
    self.assertEqual(privacy.format_epsilon(math.inf), '∞')
    self.assertEqual(privacy.format_epsilon(0.0), 'exactly 0')
    self.assertEqual(privacy.format_epsilon(0.0, 1e-9), 'exactly 0 at δ = 1e-09')
    self.assertEqual(privacy.format_epsilon(1.5, 1e-5), '1.5 at δ = 1e-05')
    self.assertEqual(privacy.format_epsilon(7.2234, digits=4), '7.223')

  def test_dp_accounting_returns_an_exact_zero_where_delta_covers_the_loss(self):
    # The case the words are for: RDP's conversion clamps at 0 (a valid (0, δ) guarantee).
    epsilon = privacy.compute_epsilon(10.0, 1e-6, 1, 1e-9, accountant='rdp')
    self.assertEqual(epsilon, 0.0)
    self.assertEqual(privacy.format_epsilon(epsilon, 1e-9), 'exactly 0 at δ = 1e-09')


if __name__ == '__main__':
  absltest.main()
