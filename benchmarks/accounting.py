r"""Times user-level accounting of 2,000 rounds with the RDP and PLD accountants.

Prints, for a few of the paper's configurations, the median wall time of `compute_epsilon` over
`--repeats` runs (each run from a cold accountant), with the minimum and maximum beside it.

  python -m benchmarks.accounting --repeats=5
  bazel run //benchmarks:accounting
"""

import functools
import statistics
import time

from absl import app
from absl import flags

from fedasr_tff import privacy

_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed runs per configuration.', lower_bound=1)
_STEPS = flags.DEFINE_integer('steps', 2000, 'Rounds to account.', lower_bound=1)

# (label, z, q): the paper's headline CV-en and large-cohort settings, and a weak-noise one.
_CONFIGURATIONS = (
    ('CV-en headline  z=0.6144 q=0.00295', 0.6144, 204800 / 69506000),
    ('large cohort    z=2.048  q=0.0295 ', 2.048, 204800 / 6950600),
    ('medium noise    z=1.024  q=0.0295 ', 1.024, 102400 / 3475300),
    ('weak noise      z=0.3072 q=0.0295 ', 0.3072, 10240 / 347530),
)


def _time(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def main(argv):
  del argv
  steps, repeats = _STEPS.value, _REPEATS.value
  print(f'accounting {steps} rounds, delta={privacy.PUBLISHED_DELTA:g}, {repeats} runs each; '
        'seconds as median [min, max]')
  for label, z, q in _CONFIGURATIONS:
    row = [label]
    for accountant in privacy.ACCOUNTANTS:
      times = _time(
          functools.partial(privacy.compute_epsilon, z, q, steps, privacy.PUBLISHED_DELTA,
                            accountant), repeats)
      epsilon = privacy.compute_epsilon(z, q, steps, privacy.PUBLISHED_DELTA, accountant)
      row.append(f'{accountant}: eps={epsilon:8.4g} {statistics.median(times):6.3f} s '
                 f'[{min(times):.3f}, {max(times):.3f}]')
    print('  '.join(row), flush=True)


if __name__ == '__main__':
  app.run(main)
