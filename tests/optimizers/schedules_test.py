from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from fedasr_tff.optimizers import schedules


class SchedulesTest(parameterized.TestCase):

  def test_exponential_decay_cv_seed_recipe(self):
    # Pelikan et al. 2025 (arXiv:2310.00098), Fig. 4 caption and Tables 4, 16 (CV with a seed):
    # eta0 = 0.002, t0 = 750, rho = 0.6, tau = 750; the values at t are our arithmetic.
    schedule = schedules.exponential_decay(0.002, 0.6, 750, start_round=750)
    self.assertAlmostEqual(float(schedule(0)), 0.002, places=9)
    self.assertAlmostEqual(float(schedule(749)), 0.002, places=9)
    self.assertAlmostEqual(float(schedule(1500)), 0.0012, places=8)
    self.assertAlmostEqual(float(schedule(1999)), 8.54e-4, delta=1e-6)

  def test_exponential_decay_ls_recipes(self):
    # Pelikan et al. 2025, Fig. 3 caption and Table 3 (LS: 0.006, t0 = 1000, tau = 500; with a
    # seed 0.003, tau = 250); eta(2000) = 0.00216 and 3.888e-4 are our arithmetic.
    self.assertAlmostEqual(float(schedules.exponential_decay(0.006, 0.6, 500, 1000)(2000)),
                           0.00216, places=7)
    self.assertAlmostEqual(float(schedules.exponential_decay(0.003, 0.6, 250, 1000)(2000)),
                           3.888e-4, places=8)

  def test_by_name_builds_the_named_schedule(self):
    for name, expected in (('constant', schedules.constant(0.4)),
                           ('exponential', schedules.exponential_decay(0.4, 0.5, 10, 5)),
                           ('step', schedules.step_decay(0.4, 0.5, 10, 5))):
      schedule = schedules.by_name(name, 0.4, 0.5, 10, 5)
      for t in (0, 5, 14, 15, 40):
        self.assertAlmostEqual(float(schedule(t)), float(expected(t)), places=7, msg=(name, t))
    self.assertLess(float(schedules.by_name('step', 0.4, 0.5, 10, 5)(15)), 0.4)
    with self.assertRaisesRegex(ValueError, '`name`.*cosine'):
      schedules.by_name('cosine', 0.4, 0.5, 10, 5)

  def test_staircase(self):
    schedule = schedules.exponential_decay(1.0, 0.5, 10, start_round=5, staircase=True)
    self.assertEqual([float(schedule(t)) for t in (5, 14, 15, 25)], [1.0, 1.0, 0.5, 0.25])

  def test_step_decay_halves_every_period_from_start(self):
    schedule = schedules.step_decay(0.5, 0.5, every_rounds=100, start_round=300)
    self.assertEqual([float(schedule(t)) for t in (0, 299, 300, 399, 400)],
                     [0.5, 0.5, 0.25, 0.25, 0.125])

  def test_linear_warmup(self):
    schedule = schedules.linear_warmup(schedules.constant(0.4), warmup_rounds=4)
    self.assertEqual([round(float(schedule(t)), 6) for t in range(6)],
                     [0.1, 0.2, 0.3, 0.4, 0.4, 0.4])

  def test_works_on_tensors(self):
    schedule = schedules.exponential_decay(0.002, 0.6, 750, start_round=750)
    self.assertAlmostEqual(float(schedule(tf.constant(1500))), 0.0012, places=8)

  @parameterized.named_parameters(
      ('lr', lambda: schedules.constant(0.0), 'learning_rate'),
      ('rate', lambda: schedules.exponential_decay(0.1, -0.5, 10), 'decay_rate'),
      ('transition', lambda: schedules.exponential_decay(0.1, 0.5, 0), 'transition_rounds'),
      ('start', lambda: schedules.exponential_decay(0.1, 0.5, 5, start_round=-1), 'start_round'),
      ('warmup', lambda: schedules.linear_warmup(schedules.constant(0.1), 0), 'warmup_rounds'),
      ('every', lambda: schedules.step_decay(0.1, 0.5, 0, 0), 'every_rounds'),
  )
  def test_bad_input(self, build, name):
    with self.assertRaisesRegex(ValueError, name):
      build()


if __name__ == '__main__':
  absltest.main()
