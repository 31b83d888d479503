"""Empirical privacy audits: lower bounds on the ε a running DP mechanism loses.

`one_run` (one training run with canary clients, through the TFF process) and `distinguishing`
(many runs of one round of the DP query); `bounds` turns their guesses into ε lower bounds.
`noise_check` and `clipping_check` test the query's structure directly, where no ε lower bound
can see a break. `mechanism` audits the DP mechanism a run configures, whatever its task
(`experiments/audit.py`).
"""

from fedasr_tff.audit import bounds
from fedasr_tff.audit import clipping_check
from fedasr_tff.audit import distinguishing
from fedasr_tff.audit import noise_check
from fedasr_tff.audit import one_run
from fedasr_tff.audit.mechanism import AuditConfig
from fedasr_tff.audit.mechanism import audit_mechanism
from fedasr_tff.audit.result import AuditResult
from fedasr_tff.audit.result import CheckResult
