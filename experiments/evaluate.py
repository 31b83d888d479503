r"""WER/CER of a saved model on a split, with greedy decoding and a per-speaker breakdown.

  python -m experiments.evaluate --corpus_dir=/tmp/corpus/librispeech --split=dev \
      --model=/tmp/run/model.npz --model_config=tiny --per_speaker_csv=/tmp/run/dev.csv
"""

from absl import app
from absl import flags

from experiments import common
from experiments import config_flags
from fedasr_tff import models
from fedasr_tff.program import fields as fields_lib
from fedasr_tff.program import model_io
from fedasr_tff.speech import config as config_lib
from fedasr_tff.speech import evaluation

config_flags.define_flags(config_lib.DataConfig, [
    name for name in fields_lib.config_fields(config_lib.DataConfig) if name != 'eval_split'])
config_flags.define_flags(config_lib.ModelConfig, ['model_config'])
_MODEL = flags.DEFINE_string('model', None, 'Weights to evaluate (model.npz).')
_PER_SPEAKER_CSV = flags.DEFINE_string('per_speaker_csv', None, 'Where to write the '
                                       'per-speaker breakdown (optional).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  common.start_binary(distributed_refusal='evaluation runs no federated round.')
  common.require('corpus_dir', 'model')
  with config_flags.flag_errors():
    data = config_flags.config_from_flags(config_lib.DataConfig)
    model_config = config_flags.config_from_flags(config_lib.ModelConfig).model_config
    vocab = data.vocabulary()
    eval_data = data.load_client_data(data.split, vocab, speakers='all')
    model = models.build_tff_model_fn(model_config, vocab.tokens)()
    try:
      weights = model_io.load_weights(_MODEL.value, model.keras_model, source='--model')
    except ValueError as e:
      raise ValueError(f'{e} (--model_config={model_config})') from e
  result = evaluation.evaluate(model, eval_data, weights)
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
  app.run(main)
