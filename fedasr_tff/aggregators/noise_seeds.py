"""The server-side noise seed a DP query draws from, and leaving it unset for a cached process.

A query's noise is a function of the seed in its state (`per_layer_query`), drawn from OS entropy
by default (`fresh_noise_seed`). A process whose computations are kept and reused
(`fedasr_tff.runtime.process_cache`) must hold no seed a run draws its noise from: built inside
`unset_noise_seeds()`, its queries leave the seed unset, each process made from it fills the seed
with fresh entropy (`fill_unset_noise_seeds`), and a round refuses to start with an unset one
(`after_noise_seed_check`).
"""

import contextlib
import contextvars
import secrets

import tensorflow as tf

# The noise seed of a query built inside `unset_noise_seeds()`: negative, so never a seed a
# caller gives (those are checked non-negative) nor one `fresh_noise_seed` draws.
UNSET_NOISE_SEED = -1
_UNSET_SEED_STATE = (0, UNSET_NOISE_SEED)  # the state's `noise_seed` tensor, [0, seed]
_SEEDS_UNSET = contextvars.ContextVar('unset_noise_seeds', default=False)


def fresh_noise_seed() -> int:
  """Returns 63 bits of OS entropy, the default seed of the server-side noise; inside
  `unset_noise_seeds()`, `UNSET_NOISE_SEED` instead."""
  if _SEEDS_UNSET.get():
    return UNSET_NOISE_SEED
  return secrets.randbits(63)


@contextlib.contextmanager
def unset_noise_seeds():
  """Queries built in this context leave their default noise seed unset (`UNSET_NOISE_SEED`).

  For a process whose computations are kept and reused (`fedasr_tff.runtime.process_cache`):
  what it keeps must hold no seed that a run draws its noise from, so the seed is left unset in
  the initial state and filled with fresh OS entropy by every process made from it
  (`fill_unset_noise_seeds`). A round refuses to start with an unset seed
  (`after_noise_seed_check`), so a state that was never filled stops at its first round instead
  of drawing predictable noise. Seeds given by the caller (`noise_seed=`) are kept as given.
  """
  token = _SEEDS_UNSET.set(True)
  try:
    yield
  finally:
    _SEEDS_UNSET.reset(token)


def is_unset_seed_state(value) -> tf.Tensor:
  """Whether a state's `noise_seed` tensor (int64, [2]) is the unset seed, as a bool tensor."""
  return tf.reduce_all(tf.equal(value, tf.constant(_UNSET_SEED_STATE, tf.int64)))


def after_noise_seed_check(seed: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
  """`value`, after an in-graph check that `seed` is not the unset seed (`unset_noise_seeds`).

  Called in `derive_sample_params`, which starts every round (TFF's DP aggregator derives the
  round's parameters from the state before any client trains) but not `initialize` (which calls
  `get_noised_result` once, on the initial state, for the round's DP event).

  Args:
    seed: a query state's `noise_seed`.
    value: what the caller returns (the round's sample parameters).

  Returns:
    `value`, computed only once the check passed.

  Raises:
    tf.errors.InvalidArgumentError: when the graph runs with the unset seed.
  """
  check = tf.debugging.Assert(
      tf.logical_not(is_unset_seed_state(seed)),
      ['The DP noise seed was never set: a process built inside unset_noise_seeds() must be '
       'initialised through fill_unset_noise_seeds (fedasr_tff.runtime.process_cache).'])
  with tf.control_dependencies([check]):
    return tf.nest.map_structure(tf.identity, value)


def fill_unset_noise_seeds(state):
  """`state` (a process state, in a TF graph) with every unset noise seed replaced by a fresh
  one (63 bits of OS entropy, drawn now, one per seed): the counterpart of `unset_noise_seeds`.

  Every int64 tensor of shape [2] that holds the unset seed `[0, UNSET_NOISE_SEED]` at run time
  is replaced; any other tensor is passed through. Each call traces new seeds into the graph it
  builds, so the graph must not be kept beyond the process it initialises.

  Args:
    state: a structure of tensors (`tf.nest`).

  Returns:
    The same structure.
  """
  def fill(value):
    if value.dtype != tf.int64 or value.shape != [2]:
      return value
    seed = secrets.randbits(63)  # not fresh_noise_seed: never unset, whatever the context
    return tf.where(is_unset_seed_state(value), tf.constant([0, seed], tf.int64), value)

  return tf.nest.map_structure(fill, state)
