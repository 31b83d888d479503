"""How ε is written in every log line, table, statement and report.

Three significant digits, so a small ε never prints as `0.00`; `∞` where there is no guarantee;
and an ε that dp-accounting returns as exactly 0 said in words, `exactly 0`. That is a valid
(0, δ) guarantee, not a rounding: the RDP-to-(ε, δ) conversion (Mironov, "Rényi Differential
Privacy", CSF 2017, Prop. 3, as dp-accounting implements it) clamps at 0 when δ alone covers the
privacy loss, which happens for very large noise or very few releases.
"""

import math
from typing import Optional


def format_epsilon(epsilon: float, delta: Optional[float] = None, digits: int = 3) -> str:
  """ε as this project prints it (module docstring), optionally with its δ.

  Args:
    epsilon: ε ≥ 0, or inf.
    delta: the δ it holds at, to write `at δ = ...` after it; None writes ε alone.
    digits: significant digits (4 where ε is compared with a published table's).

  Returns:
    For example `3.26`, `0.000123`, `1.59e+04`, `∞`, `exactly 0`, or `exactly 0 at δ = 1e-09`.
  """
  epsilon = float(epsilon)
  if math.isnan(epsilon):
    text = 'nan'
  elif math.isinf(epsilon):
    text = '∞'
  elif epsilon == 0:
    text = 'exactly 0'
  else:
    text = f'{epsilon:.{digits}g}'
  return text if delta is None else f'{text} at δ = {delta:g}'
