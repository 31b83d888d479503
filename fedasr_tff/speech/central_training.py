"""Central (non-federated) training of a seed model, as the paper's seed models.

Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, Sec. 4
"Central Training" and App. F "Training": mini-batch training of the CTC transformer on pooled
data (the "seed" speakers, e.g. 10% of them) with LARS and a step or exponential learning-rate
decay, SpecAugment on. The weights are exported with `model_io` for `federated_training` to
start from.
"""

import asyncio
import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fedasr_tff import optimizers
from fedasr_tff import validation
from fedasr_tff.optimizers import hparams
from fedasr_tff.program import cohorts
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import file_sinks
from fedasr_tff.program import model_io
from fedasr_tff.program import progress as progress_lib
from fedasr_tff.speech import data_config
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models
from fedasr_tff.speech.data import pipeline
from fedasr_tff.speech.data import text as text_lib


@dataclasses.dataclass(frozen=True)
class CentralConfig:
  """Central training settings; each field is the `train_central` flag of the same name.

  Each field's help text (`fields.field`) documents it, once. The defaults are the paper's
  (`presets.PAPER`); `train_central`'s flags default to its --preset's (`presets.CPU`).
  """
  steps: int = fields_lib.field(1000, 'Training steps (batches).')
  model_config: str = fields_lib.field('tiny', 'Transformer size.', tuple(models.CONFIGS))
  optimizer: str = fields_lib.field(
      'lars', 'Optimizer (`fedasr_tff.optimizers`): lars is the paper\'s (Pelikan et al. 2025, '
      'Sec. 4 "Central Training"); adam reaches a usable tiny model in a few hundred CPU '
      'steps (the demo).', optimizers.OPTIMIZERS)
  learning_rate: float = fields_lib.field(
      0.5, 'Learning rate (Pelikan et al. 2025, Sec. 4 "Central Training": LARS 0.5).')
  momentum: Optional[float] = fields_lib.field(
      None, 'Momentum of lars or sgdm (default: the optimizer\'s own, 0.9); other optimizers '
      'take none.')
  schedule: str = fields_lib.field(
      'step', 'step: multiply by --decay_rate every --decay_every steps from --decay_start (the '
      'paper halves every 50k steps); exponential: rate^((t - start) / every).',
      optimizers.schedules.NAMES)
  decay_rate: float = fields_lib.field(0.5, 'Decay factor.')
  decay_every: int = fields_lib.field(50_000, 'Decay period in steps.')
  decay_start: int = fields_lib.field(40_000, 'Step the decay starts at.')
  warmup_steps: int = fields_lib.field(
      0, 'Steps of a linear warm-up at the start: the rate times min(1, step / warmup_steps), '
      'step counted from 1; 0 for none (the paper states none).')
  seed: int = fields_lib.field(0, 'Seed of the initialisation, batch order and random draws.')
  eval_every_steps: int = fields_lib.field(100, 'Steps between evaluations.')

  def __post_init__(self):
    validation.check_positive_integer('steps', self.steps)
    if self.optimizer not in optimizers.OPTIMIZERS:
      raise ValueError(f'`optimizer` must be one of {optimizers.OPTIMIZERS}, got '
                       f'{self.optimizer!r}.')
    validation.check_positive('learning_rate', self.learning_rate)
    if self.schedule not in optimizers.schedules.NAMES:
      raise ValueError(f'`schedule` must be one of {optimizers.schedules.NAMES}, got '
                       f'{self.schedule!r}.')
    validation.check_positive('decay_rate', self.decay_rate)
    validation.check_positive_integer('decay_every', self.decay_every)
    validation.check_non_negative_integer('decay_start', self.decay_start)
    validation.check_non_negative_integer('warmup_steps', self.warmup_steps)
    validation.check_non_negative_integer('seed', self.seed)
    validation.check_positive_integer('eval_every_steps', self.eval_every_steps)
    models.get_config(self.model_config)


@dataclasses.dataclass(frozen=True)
class CentralResult:
  """What central training produced.

  Attributes:
    weights: the trained model's weights.
    evaluation: its evaluation on the held-out speakers, or None without them.
  """
  weights: tff.learning.models.ModelWeights
  evaluation: Optional[evaluation.EvaluationResult]


def train(config: CentralConfig,
          train_data: pipeline.SpeechClientData,
          vocabulary: text_lib.Vocabulary,
          output_dir: str,
          *,
          eval_data: Optional[pipeline.SpeechClientData] = None,
          show_progress: bool = True,
          log=print) -> CentralResult:
  """Trains a seed model and writes `output_dir/model.npz`.

  LARS (`optimizers.build_lars`, κ = 0.001, momentum 0.9) is the paper's optimizer; Adam is
  offered for short CPU runs. Batches are the speakers' dynamic batches, visited in an order
  reshuffled every epoch from (seed, epoch), with fresh SpecAugment masks every epoch (with masks
  fixed once, the tiny demo model memorised its six speakers: docs/benchmarks.md, "Measurements
  behind the code").
  Every random draw of a step (SpecAugment, dropout, layer drop, CAPE's shift) comes from its
  batch's `seed`, a function of (seed, epoch, speaker, batch), so a run is a function of its
  configuration.

  Args:
    config: the settings.
    train_data: the training speakers' data.
    vocabulary: the model's vocabulary.
    output_dir: where `model.npz`, `metrics.csv` (loss, learning rate, and WER/CER on the
      held-out speakers every `eval_every_steps` steps, through `tff.program`'s CSV manager)
      and `eval_per_speaker.csv` go.
    eval_data: the held-out speakers' data, or None.
    show_progress: show a progress bar.
    log: where progress lines are written.

  Returns:
    The `CentralResult`.

  Raises:
    ValueError: if the training speakers have no usable utterance, or the evaluation data has
      other features (`feature_normalization`).
  """
  if eval_data is not None:
    data_config.check_same_features({'the training data': train_data.feature_normalization,
                                     'the evaluation data': eval_data.feature_normalization})
  tf.keras.utils.set_random_seed(config.seed)
  model = models.build_tff_model_fn(config.model_config, vocabulary.tokens)()
  keras_model = model.keras_model
  variables = keras_model.trainable_variables
  momentum = {} if config.momentum is None else {'momentum': config.momentum}
  optimizer = optimizers.build(config.optimizer, config.learning_rate, **momentum)
  opt_state = optimizer.initialize([tf.TensorSpec(v.shape, v.dtype) for v in variables])
  schedule = optimizers.schedules.by_name(config.schedule, config.learning_rate,
                                          config.decay_rate, config.decay_every,
                                          config.decay_start)
  if config.warmup_steps:
    schedule = optimizers.schedules.linear_warmup(schedule, config.warmup_steps)

  # Traced once, for any batch shape (and the model's forward pass inline): a first trace for
  # the first batch's exact shapes followed by a relaxed one (reduce_retracing) makes TF's graph
  # optimizer report errors about the CTC loss loop's shapes ("'tfg.While' op body function
  # argument ... is not compatible").
  forward_pass = model.forward_pass.python_function
  opt_state_spec = tf.nest.map_structure(lambda t: tf.TensorSpec.from_tensor(
      tf.convert_to_tensor(t)), opt_state)

  @tf.function(input_signature=[opt_state_spec, train_data.element_type_structure,
                                tf.TensorSpec([], tf.float32)])
  def train_step(opt_state, batch, learning_rate):
    with tf.GradientTape() as tape:
      loss = forward_pass(batch, training=True).loss
    gradients = tape.gradient(loss, variables)
    opt_state = optimizer.set_hparams(opt_state, {**optimizer.get_hparams(opt_state),
                                                  hparams.LEARNING_RATE_KEY: learning_rate})
    opt_state, new_weights = optimizer.next(opt_state, [v.read_value() for v in variables],
                                            gradients)
    for variable, value in zip(variables, new_weights, strict=True):
      variable.assign(value)
    return opt_state, loss

  def epoch_batches(epoch):
    # Made anew every epoch, so SpecAugment (when on) and the model's dropout, layer drop and
    # CAPE shift draw afresh, from the batches' seeds: functions of (seed, epoch, speaker).
    batches = []
    for speaker in train_data.client_ids:
      batches.extend(train_data.create_tf_dataset_for_client(
          speaker, seed=cohorts.client_seed(config.seed, epoch, speaker)))
    return batches

  batches = epoch_batches(0)
  if not batches:
    raise ValueError('The training speakers have no usable utterance (see the data report).')
  eval_model = models.build_tff_model_fn(config.model_config, vocabulary.tokens)()
  release = file_sinks.metrics_csv(os.path.join(output_dir, 'metrics.csv'))
  progress = progress_lib.ProgressBarReleaseManager(config.steps, unit='step',
                                                    shown=evaluation.SHOWN_METRICS,
                                                    disable=not show_progress)
  managers = tff.program.GroupingReleaseManager([release, progress])
  rng_order = None
  losses = []
  try:
    for step in range(1, config.steps + 1):
      position = (step - 1) % len(batches)
      if position == 0:
        epoch = (step - 1) // len(batches)
        if epoch > 0:
          batches = epoch_batches(epoch)
        rng_order = np.random.default_rng([config.seed, epoch]).permutation(len(batches))
      learning_rate = float(schedule(step - 1))
      opt_state, loss = train_step(opt_state, batches[rng_order[position]],
                                   tf.constant(learning_rate))
      losses.append(float(loss))
      values = {'train': {'loss': float(np.mean(losses)), 'learning_rate': learning_rate}}
      if eval_data is not None and (step % config.eval_every_steps == 0 or step == config.steps):
        result = evaluation.evaluate(eval_model, eval_data, model_io.model_weights(keras_model))
        values['eval'] = result.metrics()
        progress.write(f'step {step}/{config.steps} | loss {values["train"]["loss"]:.3f} | '
                       f'WER {100 * result.overall.wer:.1f}% CER '
                       f'{100 * result.overall.cer:.1f}%', log)
      if step % 10 == 0 or 'eval' in values:
        asyncio.run(managers.release(values, step))
        losses = []
  finally:
    progress.close()
  weights = model_io.model_weights(keras_model)
  model_io.save_weights(os.path.join(output_dir, 'model.npz'), keras_model, weights,
                        data_config.model_metadata(train_data.feature_normalization))
  final = None
  if eval_data is not None:
    final = evaluation.evaluate(eval_model, eval_data, weights)
    evaluation.write_per_speaker_csv(final, os.path.join(output_dir, 'eval_per_speaker.csv'))
  return CentralResult(weights, final)
