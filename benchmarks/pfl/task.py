"""What both sides of `benchmarks.vs_pfl` share: the run's spec, the files, the MLP, the result.

Imports only NumPy and TensorFlow, so that it loads under .venv (our side, `run_tff`) and
.venv-pfl (pfl's side, `run_pfl`) alike.

The driver writes, for every run, a JSON spec (keys below) and the files it names: the initial
trainable weights (`save_arrays`, in the model's `trainable_variables` order), and the clients'
data: for the MLP task one .npz of `x` [clients, examples, MLP_LAYOUT[0]] and `y` [clients,
examples]; for the speech task pfl's side reads the batches of every local step of every client
(`save_speech_batches`) and our side makes the same datasets from the corpus with the pipeline.
A side trains `len(cohorts)` rounds, round r on the clients `cohorts[r]`, and prints its result
as JSON on its last stdout line (`print_result`).
"""

import json

import numpy as np
import tensorflow as tf

# The MLP: 32 inputs -> 64 (ReLU) -> 4 logits: 33 * 64 + 65 * 4 = 2,372 parameters.
MLP_LAYOUT = (32, 64, 4)
MLP_PARAMETERS = 2372

# Keys of a spec.
SPEC_KEYS = (
    'task',                   # 'mlp' or 'speech'
    'weights',                # .npz of the initial trainable weights
    'data',                   # mlp: .npz of x, y; speech: .npz of pfl's batches
    'cohorts',                # client indices of every round
    'local_steps',            # local SGD steps of every client
    'batch_size',             # mlp: examples per local batch
    'client_learning_rate',
    'clip',                   # C: the L2 norm every client delta is clipped to (global)
    'noise_multiplier',       # z: Gaussian noise of std z * C on the sum of the deltas
    'seed',
    'weights_out',            # None, or .npz to write the final trainable weights to
    'speech',                 # speech only: dict of model, vocab_size, language, corpus_dir,
                              # feature_cache_dir, max_batch_seconds, clients
    'probe',                  # pfl, speech: first try the model as it is (see run_pfl)
    'clients_in_parallel',    # ours: clients trained at once (None: the engine's default)
    'engine',                 # ours: 'inprocess' or 'worker', as the binaries' --engine
    'compile_cache_dir',      # ours in process: the rounds' compile cache, or None for none
)


def build_mlp() -> tf.keras.Model:
  inputs, hidden, classes = MLP_LAYOUT
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(inputs,)),
      tf.keras.layers.Dense(hidden, activation='relu'),
      tf.keras.layers.Dense(classes),
  ])


def mlp_loss() -> tf.keras.losses.Loss:
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def mlp_model_fn():
  """The MLP as our side's TFF model (`tff.learning.models.VariableModel`)."""
  # Imported here: the pfl side imports this module too, in .venv-pfl, which has no TFF.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  return tff.learning.models.from_keras_model(
      build_mlp(), loss=mlp_loss(),
      input_spec=(tf.TensorSpec([None, MLP_LAYOUT[0]], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def write_spec(path: str, **spec) -> None:
  unknown = set(spec) - set(SPEC_KEYS)
  if unknown:
    raise ValueError(f'Unknown spec keys {sorted(unknown)}.')
  with open(path, 'w') as f:
    json.dump(spec, f)


def read_spec(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def save_arrays(path: str, arrays) -> None:
  np.savez(path, *[np.asarray(a) for a in arrays])


def load_arrays(path: str) -> list:
  with np.load(path) as f:
    return [f[f'arr_{i}'] for i in range(len(f.files))]


_BATCH_FIELDS = ('features', 'feature_lengths', 'labels', 'label_lengths', 'seed')


def save_speech_batches(path: str, clients) -> None:
  """`clients[c][k]`: the batch (a dict of `_BATCH_FIELDS`) of client c's local step k."""
  np.savez(path, **{f'{c}/{k}/{name}': np.asarray(batch[name])
                    for c, batches in enumerate(clients) for k, batch in enumerate(batches)
                    for name in _BATCH_FIELDS})


def load_speech_batches(path: str) -> list:
  """The `clients` given to `save_speech_batches`."""
  clients = {}
  with np.load(path) as f:
    for key in f.files:
      c, k, name = key.split('/')
      clients.setdefault(int(c), {}).setdefault(int(k), {})[name] = f[key]
  return [[clients[c][k] for k in sorted(clients[c])] for c in sorted(clients)]


def print_result(**result) -> None:
  """The side's result, as JSON on the last line of stdout (the driver reads it there)."""
  print(json.dumps(result), flush=True)
