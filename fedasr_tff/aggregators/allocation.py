"""Splitting a total clip C over H clipping groups (per-layer clipping, [1], Sec. 3, Def. 3).

Per-layer clipping bounds each group h of a client delta by its own C_h and keeps

    sqrt(sum_h C_h^2) = C,

so the clipped delta's total L2 norm is at most C and the DP sensitivity is unchanged. With d_h the
number of parameters in group h:

* ``global``:   one group, C_1 = C.
* ``uniform``:  C_h = C / sqrt(H).
* ``dim``:      C_h = C * sqrt(d_h / sum_i d_i)              (the best in [1], Table 1).
* ``weighted``: C_h = C * sqrt(a_h d_h / sum_i a_i d_i)      ([1], App. H.5; weights a_h > 0).

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
"""

from typing import Optional
from typing import Sequence

import numpy as np

ALLOCATIONS = ('global', 'uniform', 'dim', 'weighted')


def check_allocation(allocation: str, layer_weights: Optional[Sequence[float]]) -> None:
  """Checks an allocation and its layer weights.

  Args:
    allocation: one of `ALLOCATIONS`.
    layer_weights: a_h, one per group, for "weighted" only (else None).

  Raises:
    ValueError: for an unknown allocation, or `layer_weights` missing for "weighted", given for
      another allocation, or not all finite and > 0.
  """
  if allocation not in ALLOCATIONS:
    raise ValueError(f'`allocation` must be one of {ALLOCATIONS}, got {allocation!r}.')
  if allocation == 'weighted':
    if layer_weights is None:
      raise ValueError('`layer_weights` is required with allocation="weighted".')
    weights = np.asarray(layer_weights, dtype=np.float64)
    if weights.ndim != 1 or not np.all(np.isfinite(weights)) or np.any(weights <= 0):
      raise ValueError(f'`layer_weights` must be a list of finite numbers > 0, got '
                       f'{layer_weights!r}.')
  elif layer_weights is not None:
    raise ValueError(f'`layer_weights` applies to allocation="weighted" only, got '
                     f'allocation={allocation!r}.')


def group_clips(clip: float, group_sizes: Sequence[int], allocation: str,
                layer_weights: Optional[Sequence[float]] = None) -> np.ndarray:
  """The clip C_h of every group (module docstring).

  Args:
    clip: the total clip C > 0.
    group_sizes: d_h, the number of parameters in each group.
    allocation: one of `ALLOCATIONS`.
    layer_weights: a_h for "weighted", one per group.

  Returns:
    A float64 array of C_h, with sqrt(Σ_h C_h²) = C; for "global" a single entry C.

  Raises:
    ValueError: as `check_allocation`, or if `layer_weights` has not one weight per group.
  """
  check_allocation(allocation, layer_weights)
  sizes = np.asarray(group_sizes, dtype=np.float64)
  if allocation == 'global':
    return np.array([clip], dtype=np.float64)
  if allocation == 'uniform':
    shares = np.ones_like(sizes)
  elif allocation == 'dim':
    shares = sizes
  else:
    weights = np.asarray(layer_weights, dtype=np.float64)
    if weights.shape != sizes.shape:
      raise ValueError(f'`layer_weights` needs one weight per clipping group ({len(sizes)}), '
                       f'got {len(weights)}.')
    shares = weights * sizes
  return clip * np.sqrt(shares / shares.sum())
