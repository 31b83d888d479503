"""Tests of the progress bar: an ε shown names the round it was released for."""

import asyncio
import io

from absl.testing import absltest

from fedasr_tff.program import progress


class ProgressBarTest(absltest.TestCase):

  def _bar(self):
    out = io.StringIO()
    # A task's own metric beside the ones every task releases (`DEFAULT_SHOWN`).
    shown = (*progress.DEFAULT_SHOWN, 'eval/wer')
    return progress.ProgressBarReleaseManager(total_rounds=10, shown=shown, file=out,
                                              disable=False), out

  def test_epsilon_names_its_round_while_the_bar_counts_rounds_computed(self):
    bar, out = self._bar()
    asyncio.run(bar.release({'privacy': {'epsilon_run_rdp': 0.0}, 'eval': {'wer': 0.25}}, 0))
    bar.advance(7)  # Rounds 1-7 computed, held back until a checkpoint covers them.
    bar.close()
    last = out.getvalue().split('\r')[-1]
    self.assertIn('7/10', last)
    self.assertIn('epsilon_run_rdp=exactly 0 @r0', last)
    self.assertIn('wer=0.25', last)

  def test_a_later_release_replaces_the_epsilon_and_its_round(self):
    bar, out = self._bar()
    asyncio.run(bar.release({'privacy': {'epsilon_run_rdp': 0.0}}, 0))
    asyncio.run(bar.release({'privacy': {'epsilon_run_rdp': float('inf')}}, 3))
    bar.close()
    last = out.getvalue().split('\r')[-1]
    self.assertIn('epsilon_run_rdp=∞ @r3', last)
    self.assertNotIn('@r0', last)


if __name__ == '__main__':
  absltest.main()
