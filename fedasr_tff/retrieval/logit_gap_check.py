"""Whether a retriever run's DP noise will swamp what its head can learn, known at start-up.

The norm of the noise against the clip is the wrong yardstick: the 2-class spam head at z = 0.1
with 2 clients has a noise norm of about 2 C and loses 1.5 points, while 150 classes over 10
clients collapse (docs/benchmarks.md, "Measurements behind the code"). What matters is the
noise in the quantity the head ranks by, a query's logit gaps, against the largest gap the
clipped updates can build:

- Each round adds to every head weight noise of std σ·C, σ the per-coordinate noise std of the
  round's averaged update in units of the clip C, the σ_DP of `privacy.conventions` (central
  DP: z/S; local DP: z_rel/√m over m uploads averaged with equal weights, the least noise m
  uploads can have), times the server
  learning rate η. After T rounds a class row holds noise of std η σ C √T in every direction,
  so a query x's logit moves by η σ C √T ||x||, independently per class.
- A client's clipped update (norm ≤ C) is spread over the rows of the D_c classes it holds,
  C/√D_c each, and a row is pushed by the S D_c / D cohort clients holding its class, so the
  averaged update moves a row by at most C √D_c / D a round: C/√D when every client holds
  every class (an even split), C/D when each holds one (label-skewed clients: by a client
  column or Dirichlet shares, taken at that worst case since the server cannot know better).
  Over T rounds a row moves by at most η T C √D_c / D, a logit by that times ||x||.
- The top class must beat D − 1 noisy competitors, whose largest noise is about √(2 ln D)
  standard deviations.

    ρ = σ · √(2 ln D) · (D / √D_c) / √T          (η, C and ||x|| cancel)

the noise in the largest competing logit against the largest logit gap training can make. The
signal bound is optimistic (real updates are neither aligned with a query nor all in one
direction; local DP's noise grows with `--dp_granularity=step` and unequal weights), so ρ is a
lower bound on the noise's share, and a run whose ρ exceeds `SWAMP_THRESHOLD` is warned. The
threshold is set from runs of MiniLM heads on Debian package descriptions and maintainers, with
and without noise at the same clip (docs/retrieval.md, "DP at many classes"): the cost in top-1
grows with ρ, and some remains below the threshold, which is why every DP run states its ρ.
"""

import math
from typing import Optional

from fedasr_tff import validation

SWAMP_THRESHOLD = 0.25


def noise_to_gap_ratio(noise_std: float, num_classes: int, rounds: int,
                       classes_per_client: Optional[int] = None) -> float:
  """ρ of the module docstring.

  Args:
    noise_std: σ >= 0, the per-coordinate noise std of one round's averaged update, in units
      of the clip.
    num_classes: D >= 2.
    rounds: T >= 1.
    classes_per_client: D_c in [1, D], the classes a client holds; None for D (every client
      holds every class).

  Returns:
    ρ = σ √(2 ln D) (D / √D_c) / √T.
  """
  validation.check_non_negative('noise_std', noise_std)
  validation.check_positive_integer('rounds', rounds)
  if not isinstance(num_classes, int) or num_classes < 2:
    raise ValueError(f'`num_classes` must be an integer >= 2, got {num_classes!r}.')
  if classes_per_client is None:
    classes_per_client = num_classes
  if not isinstance(classes_per_client, int) or not 1 <= classes_per_client <= num_classes:
    raise ValueError(f'`classes_per_client` must be an integer in [1, {num_classes}], got '
                     f'{classes_per_client!r}.')
  return (noise_std * math.sqrt(2 * math.log(num_classes)) *
          num_classes / math.sqrt(classes_per_client * rounds))


def swamp_warning(noise_std: float, num_classes: int, rounds: int,
                  classes_per_client: Optional[int] = None) -> Optional[str]:
  """The start-up warning of a run whose noise will swamp its head, or None.

  Args:
    noise_std: σ (`RetrieverConfig.noise_std`).
    num_classes: D.
    rounds: T.
    classes_per_client: D_c (`noise_to_gap_ratio`).

  Returns:
    A message with ρ, what it compares and what lowers it, when ρ > `SWAMP_THRESHOLD`.
  """
  if num_classes < 2:
    return None
  ratio = noise_to_gap_ratio(noise_std, num_classes, rounds, classes_per_client)
  if ratio <= SWAMP_THRESHOLD:
    return None
  held = ('every client holding every class' if classes_per_client in (None, num_classes) else
          f'{classes_per_client} class(es) a client')
  return (f'The DP noise will likely swamp the head: after {rounds} rounds the noise in the '
          f'largest of {num_classes} competing logits is at least {ratio:.2f} times the largest '
          f'logit gap the clipped updates can build ({held}; σ = {noise_std:.3g} of the clip '
          f'per coordinate of the averaged update; warned above {SWAMP_THRESHOLD}). Lower σ: '
          '--central_dp rather than --local_dp (σ = z/S rather than z/√S), a larger '
          '--cohort_size with z raised less than S; or train more rounds.')
