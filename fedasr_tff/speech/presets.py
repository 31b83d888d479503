"""Named defaults of the training flags: what trains at small scale on a CPU, and the paper's.

A preset is {flag (field) name: default} for the flattened fields of `config.FederatedConfig` and
`central_training.CentralConfig` (their names do not collide); a value may be `fields.Derived`
from the other fields. The binaries make the chosen preset their flags' defaults, so a flag given
explicitly wins and `config.json` saves the values, not the preset. `CPU` is the demo's recipe
(`experiments/recipe.py`, `make demo`), tuned on its synthetic corpus and on recorded voices.
`PAPER`, also the configuration classes' own defaults, is the large-scale setting of Pelikan et
al., "Enabling Differentially Private Federated Learning for Speech Recognition: Benchmarks,
Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, App. F. The values
and why: docs/running.md, "Experiment binaries", and docs/results.md, "The defaults chosen".
"""

from typing import Any
from typing import Mapping

from fedasr_tff.program import fields as fields_lib
from fedasr_tff.speech import config as config_lib


def _max_delta_norm(values: Mapping[str, Any]) -> float:
  return fields_lib.from_flat(config_lib.ClientConfig, values).max_delta_norm()


# The clip of the rule the demo found: the largest delta local training can make, so the noise
# (sigma_dp x C) is no larger than it needs to be (docs/results.md, "The demo, measured"). C is a
# public constant of public flags: the sensitivity argument is unchanged.
MAX_DELTA_NORM = fields_lib.Derived(
    'client_lr x local_clip x local_steps, the largest delta local training can make (a public '
    'constant of public flags, so the DP sensitivity argument is unchanged; with --local_epochs '
    'give --clip)', _max_delta_norm)
# One local step, but no fixed number of them with --local_epochs.
ONE_LOCAL_STEP = fields_lib.Derived(
    '1, or none with --local_epochs', lambda values: None if values['local_epochs'] else 1)
# The demo's step decay: the learning rate halved at every third of the steps.
THIRD_OF_STEPS = fields_lib.Derived('a third of --steps',
                                    lambda values: max(1, values['steps'] // 3))

# The demo's recipe, tuned on its synthetic corpus and on its voices recorded as through a phone
# (docs/results.md, "The demo, measured" and "The recipe on unseen voices and recording
# conditions").
CPU = {
    # train_central. 2,000 steps: better than 1,000 on the recorded voices.
    'steps': 2000, 'optimizer': 'adam', 'learning_rate': 2e-3, 'decay_every': THIRD_OF_STEPS,
    'decay_start': THIRD_OF_STEPS,
    # train_central and train_federated. `cmn` (each mel channel's mean removed) helped most on
    # recorded 8 kHz speech and cost little on the clean synthetic corpus.
    'spec_augment': False, 'feature_normalization': 'cmn',
    # train_federated.
    'rounds': 30, 'cohort_size': 16, 'local_steps': ONE_LOCAL_STEP, 'server_lr': 0.003,
    'clip': MAX_DELTA_NORM,
}
# The paper's large-scale setting (Pelikan et al., NeurIPS 2025, arXiv:2310.00098, App. F).
PAPER = {
    'steps': 1000, 'optimizer': 'lars', 'learning_rate': 0.5, 'decay_every': 50_000,
    'decay_start': 40_000,
    'spec_augment': True, 'feature_normalization': 'utterance',
    # local_steps None: 10 (`config.ClientConfig.DEFAULT_LOCAL_STEPS`) unless --local_epochs.
    # A run size for the paper's settings on a small machine; the paper's cohorts are far larger.
    'rounds': 100, 'cohort_size': 8, 'local_steps': None, 'server_lr': 0.002, 'clip': 0.01,
}

CPU_NAME, PAPER_NAME = 'cpu', 'paper'
PRESETS = {CPU_NAME: CPU, PAPER_NAME: PAPER}
DEFAULT = CPU_NAME


def for_config(preset: Mapping[str, Any], cls) -> dict:
  """The entries of `preset` that are fields of the configuration class `cls`.

  Args:
    preset: {field name: default}.
    cls: a configuration class (sub-configurations flattened).

  Returns:
    {field name: default} of `cls`'s fields.
  """
  names = fields_lib.config_fields(cls)
  return {name: value for name, value in preset.items() if name in names}

