"""fedasr-tff: differentially private federated learning for speech recognition on TFF."""

from fedasr_tff.runtime import tff_workers as _tff_workers

# TFF's C++ worker outlives the process that started it; stop ours at exit (see tff_workers).
_tff_workers.stop_tff_workers_at_exit()
