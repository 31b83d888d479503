"""Hyperparameter access shared by our optimizers (what `schedule_learning_rate` relies on)."""

import collections

import tensorflow_federated as tff

LEARNING_RATE_KEY = tff.learning.optimizers.LEARNING_RATE_KEY


class HparamsInState(tff.learning.optimizers.Optimizer):
  """An optimizer whose hyperparameters sit at the top level of its state.

  Subclasses list them in `HPARAMS_KEYS` (learning rate first).
  """

  HPARAMS_KEYS = (LEARNING_RATE_KEY,)

  def get_hparams(self, state):
    """The hyperparameters in `state`.

    Args:
      state: the optimizer's state.

    Returns:
      An ordered dict of the `HPARAMS_KEYS` entries of `state`.
    """
    return collections.OrderedDict((key, state[key]) for key in self.HPARAMS_KEYS)

  def set_hparams(self, state, hparams):
    """`state` with new hyperparameters.

    Args:
      state: the optimizer's state.
      hparams: the hyperparameters to set, by key.

    Returns:
      A copy of `state` with `hparams` written over it.
    """
    new_state = collections.OrderedDict(state)
    new_state.update(hparams)
    return new_state
