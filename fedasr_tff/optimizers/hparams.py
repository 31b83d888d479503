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
    return collections.OrderedDict((key, state[key]) for key in self.HPARAMS_KEYS)

  def set_hparams(self, state, hparams):
    new_state = collections.OrderedDict(state)
    new_state.update(hparams)
    return new_state
