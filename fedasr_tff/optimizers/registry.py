"""One entry point for building optimizers by name (for flags)."""

import tensorflow_federated as tff

from fedasr_tff import validation
from fedasr_tff.optimizers import lamb
from fedasr_tff.optimizers import lars


def _sgd(learning_rate):
  return tff.learning.optimizers.build_sgdm(learning_rate)


def _sgdm(learning_rate, momentum=0.9):
  return tff.learning.optimizers.build_sgdm(learning_rate, momentum=momentum)


def _adam(learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
  # epsilon 1e-8, optax's default, which the released code of Pelikan et al. (NeurIPS 2025,
  # arXiv:2310.00098) uses; TFF's own default is 1e-7.
  return tff.learning.optimizers.build_adam(learning_rate, beta_1, beta_2, epsilon)


_BUILDERS = {
    'sgd': _sgd,
    'sgdm': _sgdm,
    'adam': _adam,
    'adagrad': tff.learning.optimizers.build_adagrad,
    'yogi': tff.learning.optimizers.build_yogi,
    'lamb': lamb.build_lamb,
    'lars': lars.build_lars,
}

OPTIMIZERS = tuple(sorted(_BUILDERS))


def build(name: str, learning_rate: float, **kwargs) -> tff.learning.optimizers.Optimizer:
  """Builds an optimizer by name: TFF's own for sgd/sgdm/adam/adagrad/yogi, ours for lamb/lars.

  Args:
    name: one of `OPTIMIZERS`.
    learning_rate: > 0.
    **kwargs: further arguments of the builder (e.g. `momentum`, `beta_1`, `weight_decay`).

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: for an unknown name, a learning rate <= 0 or arguments the builder rejects.
  """
  if name not in _BUILDERS:
    raise ValueError(f'Unknown optimizer {name!r}; known: {", ".join(OPTIMIZERS)}.')
  validation.check_positive('learning_rate', learning_rate)
  try:
    return _BUILDERS[name](learning_rate, **kwargs)
  except TypeError as e:
    raise ValueError(f'Bad arguments for optimizer {name!r}: {e}') from e
