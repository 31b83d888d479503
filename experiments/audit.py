r"""Empirical privacy audit of a federated run's configuration (`fedasr_tff.audit`).

Give the DP, round and model flags of the run you want audited, as you would give them to
`train_federated` (no corpus is needed): the audit builds the same aggregator, process and
cohort sampling, runs it on canary clients, and prints, for the one-run audit through the TFF
process and the many-run distinguishing audit of one round, the ε the ledger claims for that
configuration, the measured lower bound and a verdict; then the verdicts of the direct checks of
the mechanism's structure (every tensor's noise scale and their correlation, canaries below the
clip, of unequal group norms and non-finite). It exits with status 1 when a lower bound exceeds
its claim or a check fails (a VIOLATION: the mechanism breaks its guarantee).

    python -m experiments.audit --clipping=dim --noise_multiplier=2.1 --cohort_size=1000 \
        --canaries=1000 --rounds=2 --delta=1e-6 --output_dir=/tmp/audit

The audited population is the canaries (K = --canaries, cohort --cohort_size); --seed fixes the
sampling secret and --audit_seed the canaries, for a reproducible audit.

It runs on one machine (a local worker): `--workers` is refused.
"""

import json
import os

from absl import app

from experiments import cli
from experiments import common
from experiments import config_flags
from fedasr_tff.audit import mechanism
from fedasr_tff.program import dp_config
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import models

config_flags.define_flags(data_config.DataConfig, ['language'])
config_flags.define_flags(data_config.ModelConfig, ['model_config'])
config_flags.define_flags(dp_config.DPConfig)
config_flags.define_flags(config_lib.RunConfig, ['rounds', 'cohort_size', 'sampling', 'seed'])
config_flags.define_flags(mechanism.AuditConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal=(
      'the privacy audit runs its rounds on one machine (a local worker).'))
  with config_flags.flag_errors():
    config = config_flags.config_from_flags(config_lib.FederatedConfig)
    audit = config_flags.config_from_flags(mechanism.AuditConfig)
    shapes, names = config.model.trainable_leaves(config.data.vocabulary().size)
    # The population of the audited claim is the canaries.
    noise = config.noise_level(audit.canaries)
    results = mechanism.audit_mechanism(
        config.dp, noise.noise_multiplier, audit, shapes, names, rounds=config.run.rounds,
        cohort_size=config.run.cohort_size, sampling=config.effective_sampling,
        weighted_leaf=models.is_mlp_tensor, sampling_secret=config.run.seed)
  for result in results:
    print(result.summary())
  if common.OUTPUT_DIR.value:
    os.makedirs(common.OUTPUT_DIR.value, exist_ok=True)
    report = {
        'configuration': fields_lib.to_flat(config),
        'audit': fields_lib.to_flat(audit),
        'results': [r.report() for r in results],
    }
    path = os.path.join(common.OUTPUT_DIR.value, 'audit.json')
    with open(path, 'w') as f:  # Canaries and public claims only: nothing private.
      f.write(json.dumps(report, indent=2, default=float) + '\n')
    print(f'Wrote {path}')
  return 1 if any(r.verdict == 'VIOLATION' for r in results) else 0


if __name__ == '__main__':
  cli.run(main)
