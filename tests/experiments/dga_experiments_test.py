"""The DGA miniature (`experiments.dga_toys`) in a short run: the task, the runs and the table."""

from absl.testing import absltest
import numpy as np

from experiments import dga_toys
from fedasr_tff import runtime


class DGAToysTest(absltest.TestCase):

  def test_task_has_the_noisy_fraction_and_noisy_labels_disagree(self):
    data, noisy, (x_val, y_val) = dga_toys.make_task(0, clients=50, classes=5,
                                                     noisy_fraction=0.2)
    self.assertEqual(int(noisy.sum()), 10)
    self.assertLen(data, 50)
    self.assertEqual(x_val.shape, (2000, dga_toys._FEATURES))  # pylint: disable=protected-access
    self.assertTrue(np.all((y_val >= 0) & (y_val < 5)))

  def test_softmax_down_weights_noisy_clients_and_every_run_learns(self):
    settings = dict(rounds=6, clients=30, cohort=6, classes=4, noisy_fraction=0.3,
                    noise_kind='permuted', beta=2.0, server_lr=0.03)
    results = {name: [dga_toys.run(name, 0, **settings)] for name in dga_toys.RUNS}
    softmax = results['dga_softmax'][0]
    self.assertLess(softmax['noisy_weight'], softmax['clean_weight'])
    self.assertEqual(results['uniform_adam'][0]['noisy_weight'], 1.0)
    for name, (result,) in results.items():
      self.assertLen(result['errors'], 6)
      # Four classes: chance is 0.75.
      self.assertLess(result['errors'][-1], 0.6, name)
    text = dga_toys.table(results, target=0.6, rounds=6)
    self.assertIn('| dga_rl |', text)


if __name__ == '__main__':
  # Under pytest, conftest.py sets the context; bazel runs the module directly.
  runtime.set_local_cpp_execution_context()
  absltest.main()
