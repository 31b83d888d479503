r"""pfl's side of `benchmarks.vs_pfl`: the rounds of a spec by apple's pfl 0.3.1, under .venv-pfl.

pfl's `FederatedAveraging` on its `SimulatedBackend`, with the central Gaussian mechanism
(`CentrallyAppliedPrivacyMechanism(GaussianMechanism(C, z))`: every user's model difference
clipped to L2 norm C, Gaussian noise of std z * C on the sum, the sum then divided by its weight,
1 per user: the cohort size). The model is pfl's `TFModel` of the Keras model, trained locally
by pfl's TF SGD step with Keras SGD at the client learning rate (`local_num_steps` steps, no local
clipping), updated centrally by Keras SGD at learning rate 1. Local evaluation is off in every
round (`_FedAvgWithoutEvaluation`). The users' datasets are made once, before training; the
`FederatedDataset`'s user sampler returns the spec's cohorts, in order.

The speech task. pfl's SGD step (`pfl/internal/bridge/tensorflow/sgd.py`) calls
`keras_model(inputs, training=True)` and `keras_model.loss(labels, predictions)`, with a batch's
(inputs, labels). The CTC transformer refuses a training pass without a `seed` (its random draws
are functions of the batch's seed, `fedasr_tff.speech.models.transformer`), and pfl has no way to
pass one. With the spec's `probe`, one round of the model as it is runs first, and the error it
stops with is reported (`unwrapped_error`). Then `_SeedAsInput`, a Keras model around the
transformer whose inputs carry the seed, trains: inputs (features, feature_lengths, seed), labels
(labels, label_lengths, feature_lengths) (the CTC loss needs the output lengths, a function of the
input lengths). pfl's `Dataset` slices arrays into batches of one size, and speech batches are
padded to their own lengths, so a user's dataset (`_Batches`) yields the batches the driver
prepared: those our client work takes, with the local step folded into each seed as ours does.
The model's code is our transformer and CTC loss, loaded from the source tree without the
`fedasr_tff` package's `__init__` files, which import TFF (not installed here).

  .venv-pfl/bin/python -m benchmarks.pfl.run_pfl --spec=spec.json
"""

import dataclasses
import importlib
import os
import re
import sys
import time
import types

from absl import app
from absl import flags
import numpy as np
from pfl.aggregate.simulate import SimulatedBackend
from pfl.algorithm.base import NNAlgorithmParams
from pfl.algorithm.federated_averaging import FederatedAveraging
from pfl.callback import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNTrainHyperParams
from pfl.metrics import Metrics
from pfl.model.tensorflow import TFModel
from pfl.privacy import CentrallyAppliedPrivacyMechanism
from pfl.privacy import GaussianMechanism
import tensorflow as tf

from benchmarks.pfl import task

_SPEC = flags.DEFINE_string('spec', None, 'The run\'s spec (JSON, see benchmarks.pfl.task).',
                            required=True)

_SERVER_LEARNING_RATE = 1.0
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _FedAvgWithoutEvaluation(FederatedAveraging):
  """pfl's FedAvg without local evaluation: pfl evaluates every user before and after local
  training in rounds where `iteration % evaluation_frequency == 0`, so always in round 0."""

  def get_next_central_contexts(self, *args, **kwargs):
    contexts, model, metrics = super().get_next_central_contexts(*args, **kwargs)
    if contexts is not None:
      contexts = tuple(dataclasses.replace(c, do_evaluation=False) for c in contexts)
    return contexts, model, metrics


class _RoundTimer(TrainingProcessCallback):
  """perf_counter() before the first round and after every round."""

  def __init__(self):
    self.times = []

  def on_train_begin(self, *, model):
    self.times.append(time.perf_counter())
    return Metrics()

  def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
    self.times.append(time.perf_counter())
    return False, Metrics()


class _Batches(Dataset):
  """A user's dataset of prepared (inputs, labels) batches, one per local step."""

  def __init__(self, batches, user_id, examples):
    super().__init__(raw_data=batches[0], user_id=user_id)
    self._prepared = batches
    self._examples = examples

  def __len__(self):
    return self._examples

  def iter(self, batch_size):  # noqa: A003 (pfl's name)
    del batch_size  # The batches are made.
    yield from self._prepared


class _SeedAsInput(tf.keras.Model):
  """The CTC transformer with its training seed as a third input."""

  def __init__(self, transformer):
    super().__init__()
    self.transformer = transformer

  def call(self, inputs, training=False):
    features, lengths, seed = inputs
    return self.transformer((features, lengths), training=training,
                            seed=seed if training else None)


def _import_model_modules():
  """`fedasr_tff.speech.models.transformer` and `.ctc`, without the package `__init__` files."""
  for name in ('fedasr_tff', 'fedasr_tff.speech', 'fedasr_tff.speech.models'):
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(_REPOSITORY, *name.split('.'))]
    sys.modules.setdefault(name, package)
  return (importlib.import_module('fedasr_tff.speech.models.transformer'),
          importlib.import_module('fedasr_tff.speech.models.ctc'))


def _train(keras_model, loss, users, spec, cohorts, callbacks=()):
  """pfl's DP FedAvg (module docstring) of `keras_model` over `cohorts` of `users`."""
  keras_model.compile(optimizer=tf.keras.optimizers.SGD(spec['client_learning_rate']), loss=loss)
  model = TFModel(keras_model, metrics={},
                  central_optimizer=tf.keras.optimizers.SGD(_SERVER_LEARNING_RATE))
  order = iter([c for cohort in cohorts for c in cohort])
  federated_data = FederatedDataset(lambda c: users[c], lambda: next(order))
  mechanism = GaussianMechanism(spec['clip'], spec['noise_multiplier'])
  backend = SimulatedBackend(federated_data, None,
                             postprocessors=[CentrallyAppliedPrivacyMechanism(mechanism)])
  algorithm_params = NNAlgorithmParams(central_num_iterations=len(cohorts),
                                       evaluation_frequency=len(cohorts),
                                       train_cohort_size=len(cohorts[0]), val_cohort_size=None)
  train_params = NNTrainHyperParams(local_num_epochs=None,
                                    local_learning_rate=spec['client_learning_rate'],
                                    local_batch_size=spec['batch_size'],
                                    local_num_steps=spec['local_steps'])
  _FedAvgWithoutEvaluation().run(algorithm_params, backend, model, train_params,
                                 callbacks=list(callbacks), send_metrics_to_platform=False)


def _set_weights(keras_model, weights):
  for variable, value in zip(keras_model.trainable_variables, weights, strict=True):
    variable.assign(value)


def _what_stops(error: Exception) -> str:
  """The line of pfl that reached `error`, and the innermost error message."""
  lines = str(error).splitlines()
  messages = [line.strip() for line in lines if re.match(r'\s*\w+Error: ', line)]
  where = []
  for line, code in zip(lines, lines[1:], strict=False):
    frame = re.search(r'File "[^"]*/site-packages/(pfl/[^"]+)", line (\d+), in (\w+)', line)
    if frame:
      where.append(f'{frame[1]}:{frame[2]} ({frame[3]}): {code.strip()}')
  message = messages[-1] if messages else f'{type(error).__name__}: {lines[0] if lines else ""}'
  return '\n'.join(where[:1] + [message])


def _speech(spec, weights):
  """(build, loss, users) of the speech task, and the probe's error if asked for one."""
  transformer, ctc = _import_model_modules()
  speech = spec['speech']

  def loss(labels, logits):
    label_ids, label_lengths, feature_lengths = labels
    return ctc.ctc_loss(label_ids, label_lengths, logits,
                        transformer.output_lengths(feature_lengths, speech['model']))

  def build(seed_as_input=True):
    model = transformer.build_ctc_transformer(speech['model'], speech['vocab_size'])
    _set_weights(model, weights)
    return _SeedAsInput(model) if seed_as_input else model

  def users(seed_as_input=True):
    made = []
    for c, batches in enumerate(task.load_speech_batches(spec['data'])):
      made.append(_Batches(
          [((b['features'], b['feature_lengths']) + ((b['seed'],) if seed_as_input else ()),
            (b['labels'], b['label_lengths'], b['feature_lengths'])) for b in batches],
          user_id=str(c), examples=sum(len(b['feature_lengths']) for b in batches)))
    return made

  unwrapped_error = None
  if spec['probe']:
    try:
      _train(build(False), loss, users(False), spec, spec['cohorts'][:1])
      unwrapped_error = 'none: the transformer as it is trained'
    except Exception as e:  # pylint: disable=broad-except  (reported: what we look for)
      unwrapped_error = _what_stops(e)
  return build, loss, users(), unwrapped_error


def _mlp(spec, weights):
  """(build, loss, users) of the MLP task."""
  x, y = task.load_arrays(spec['data'])

  def build():
    model = task.build_mlp()
    _set_weights(model, weights)
    return model

  return build, task.mlp_loss(), [Dataset((x[c], y[c]), user_id=str(c)) for c in range(len(x))]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  spec = task.read_spec(_SPEC.value)
  np.random.seed(spec['seed'])  # pfl draws its noise seeds from NumPy's global state.
  weights = task.load_arrays(spec['weights'])
  result = {}
  if spec['task'] == 'mlp':
    build, loss, users = _mlp(spec, weights)
  else:
    build, loss, users, result['unwrapped_error'] = _speech(spec, weights)
  start = time.perf_counter()
  keras_model = build()
  timer = _RoundTimer()
  _train(keras_model, loss, users, spec, spec['cohorts'], [timer])
  if spec['weights_out']:
    task.save_arrays(spec['weights_out'], [v.numpy() for v in keras_model.trainable_variables])
  task.print_result(setup_s=timer.times[0] - start, round_s=np.diff(timer.times).tolist(),
                    **result)


if __name__ == '__main__':
  app.run(main)
