"""Server and client optimizers (LAMB, LARS and TFF's own) and learning-rate schedules."""

from fedasr_tff.optimizers import schedules
from fedasr_tff.optimizers.lamb import build_lamb
from fedasr_tff.optimizers.lars import build_lars
from fedasr_tff.optimizers.registry import OPTIMIZERS
from fedasr_tff.optimizers.registry import build
