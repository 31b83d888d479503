r"""WER/CER of a saved model on a split (all its speakers), with a per-speaker breakdown.

  python -m experiments.evaluate --corpus_dir=/tmp/corpus/librispeech --eval_split=dev \
      --model=/tmp/run/model.npz --model_config=tiny --per_speaker_csv=/tmp/run/dev.csv
  python -m experiments.evaluate ... --decoder=beam --top_paths=8 --word_list=/tmp/words.txt

Decoding as `experiments.transcribe` (`fedasr_tff.speech.decoding`); scoring as federated evaluation
(`fedasr_tff.speech.evaluation`).
"""

import dataclasses

from absl import app
from absl import flags

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import decoding_flags
from fedasr_tff.program import model_io
from fedasr_tff.speech import data_config
from fedasr_tff.speech import evaluation
from fedasr_tff.speech import models

# The split evaluated is --eval_split; the training split and its speaker parts are no concern.
config_flags.define_flags(
    data_config.DataConfig,
    ['corpus_dir', 'layout', 'eval_split', 'language', 'max_batch_seconds', 'feature_cache_dir'],
    helps={'eval_split': 'The split evaluated, all its speakers (for "manifest": the TSV '
                         'file).'})
config_flags.define_flags(data_config.ModelConfig, ['model_config'])
_MODEL = flags.DEFINE_string('model', None, 'Weights to evaluate (model.npz).')
_PER_SPEAKER_CSV = flags.DEFINE_string('per_speaker_csv', None, 'Where to write the '
                                       'per-speaker breakdown (optional).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal='evaluation runs no federated round.',
                      tff_computations=False)
  common.require('corpus_dir', 'eval_split', 'model')
  if _PER_SPEAKER_CSV.value:
    cli.check_output('per_speaker_csv', _PER_SPEAKER_CSV.value, folder=False)
  decoding_flags.check()
  with config_flags.flag_errors():
    data = config_flags.config_from_flags(data_config.DataConfig)
    # Scored on the features the model was trained on, as its model.npz records them.
    data = dataclasses.replace(data, feature_normalization=data_config.model_features(
        _MODEL.value, source='--model'))
    model_config = config_flags.config_from_flags(data_config.ModelConfig).model_config
    vocab = data.vocabulary()
    word_list = decoding_flags.word_list(vocab)
    eval_data = data.load_eval_data(vocab)
    model = models.build_ctc_transformer(model_config, vocab.size)
    try:
      model_io.load_into(_MODEL.value, model, source='--model')
    except ValueError as e:
      raise ValueError(f'{e} (--model_config={model_config})') from e
  result = evaluation.evaluate(
      model, eval_data, decoder=decoding_flags.DECODER.value,
      beam_width=decoding_flags.BEAM_WIDTH.value, top_paths=decoding_flags.TOP_PATHS.value,
      word_list=word_list)
  width = max(len(s) for s in result.per_speaker)
  print(f'{"speaker":<{width}}  utts  words    WER     CER')
  for speaker, counts in list(result.per_speaker.items()) + [('ALL', result.overall)]:
    print(f'{speaker:<{width}}  {int(counts.utterances):4d}  {int(counts.words):5d}  '
          f'{100 * counts.wer:5.1f}%  {100 * counts.cer:5.1f}%')
  if eval_data.report.problems:
    print(f'Skipped utterances: {eval_data.report}')
  if _PER_SPEAKER_CSV.value:
    evaluation.write_per_speaker_csv(result, _PER_SPEAKER_CSV.value)


if __name__ == '__main__':
  cli.run(main)
