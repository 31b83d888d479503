r"""Transcribes audio files with a trained model, and exports the model as a TF SavedModel.

  python -m experiments.transcribe --model=/tmp/run/model.npz --model_config=tiny a.wav b.flac
  python -m experiments.transcribe --model=/tmp/run/model.npz --manifest=/tmp/test.tsv \
      --decoder=beam --beam_width=16 --top_paths=8 --word_list=/tmp/words.txt --output=/tmp/hyp
  python -m experiments.transcribe --model=/tmp/run/model.npz --export_saved_model=/tmp/asr
  python -m experiments.transcribe --saved_model=/tmp/asr c.mp3

Audio: WAV, FLAC or MP3, any sample rate (read and resampled to 16 kHz mono by
`data.load_audio`), given as arguments, with --audio (comma-separated) and/or in --manifest: the
corpus's own manifest (a header line naming the columns path, transcript, speaker; the transcript
is the reference) or a simple list (one path per line, optionally `<TAB>reference transcript`);
paths relative to the manifest's folder (`data.read_audio_list`).
A missing file stops the run before any file is transcribed, and an unreadable one (corrupt,
unsupported, shorter than 25 ms) when it is reached, with an error naming the file (the
transcripts before it are written); with --skip_unreadable either is reported on stderr and left
out instead.

Output: `PATH<TAB>TRANSCRIPT` per file (the absolute path), in input order, each written as soon
as it is done, on stdout or in --output (opened at the first transcript: a run stopped before it
leaves an existing --output as it was). With references, the corpus-level WER and CER against
the normalised references follow on stderr.

Decoding (`fedasr_tff.speech.decoding`): greedy (best path) or CTC prefix beam search; --word_list
restricts the words of the transcripts as that module's docstring says (the first of the
--top_paths candidates whose words are all listed, else the best candidate with each unlisted
word replaced by the nearest listed word in edit distance).

--export_saved_model: a SavedModel of --model (`fedasr_tff.speech.transcription`):
`serving_default` takes `waveforms` [B, S] float32 (16 kHz mono) and `lengths` [B] int32 and
returns `transcripts` [B] tf.string (greedy), `logits` and `logit_lengths`; `transcribe_beam`
returns the best beam-search `transcripts` (beam of --beam_width) and `log_probabilities`.
"""

import contextlib
import os
import sys

from absl import app
from absl import flags
import tensorflow as tf

from experiments import cli
from experiments import common
from experiments import config_flags
from experiments import decoding_flags
from fedasr_tff.program import model_io
from fedasr_tff.speech import data
from fedasr_tff.speech import data_config
from fedasr_tff.speech import metrics
from fedasr_tff.speech import models
from fedasr_tff.speech import transcription

FLAGS = flags.FLAGS

config_flags.define_flags(data_config.DataConfig, ['language'])
config_flags.define_flags(data_config.ModelConfig, ['model_config'])

_AUDIO = flags.DEFINE_list('audio', [], 'Audio files to transcribe (also as arguments).')
_MANIFEST = flags.DEFINE_string(
    'manifest', None, 'File listing audio to transcribe: a corpus manifest (header line path, '
    'transcript, speaker: the transcript is the reference) or one path per line, optionally '
    'followed by a tab and the reference transcript; with references, WER and CER are printed. '
    "Paths relative to the manifest's folder.")
_MODEL = flags.DEFINE_string('model', None, 'Weights (model.npz) of a --model_config model.')
_SAVED_MODEL = flags.DEFINE_string('saved_model', None, 'A SavedModel written by '
                                   '--export_saved_model, instead of --model.')
_OUTPUT = flags.DEFINE_string('output', None, 'Write the transcripts here instead of stdout.')
_SKIP_UNREADABLE = flags.DEFINE_bool('skip_unreadable', False, 'Report unreadable or missing '
                                     'audio on stderr and go on, instead of stopping.')
_EXPORT_SAVED_MODEL = flags.DEFINE_string('export_saved_model', None, 'Write --model as a '
                                          'SavedModel to this (new or empty) folder.')


def _check_flags(audio_args):
  if (_MODEL.value is None) == (_SAVED_MODEL.value is None):
    raise app.UsageError('Give exactly one of --model and --saved_model.')
  if _SAVED_MODEL.value is not None:
    for name in ('model_config', 'export_saved_model'):
      if FLAGS[name].present:
        raise app.UsageError(f'--{name} applies to --model, not --saved_model.')
  if not (audio_args or _AUDIO.value or _MANIFEST.value or _EXPORT_SAVED_MODEL.value):
    raise app.UsageError('Nothing to do: give audio files (arguments, --audio or --manifest) '
                         'or --export_saved_model.')
  if _OUTPUT.value:
    cli.check_output('output', _OUTPUT.value, folder=False)
  if _EXPORT_SAVED_MODEL.value:
    cli.check_output('export_saved_model', _EXPORT_SAVED_MODEL.value)
  decoding_flags.check()


def _entries(audio_args):
  entries = [data.AudioListEntry(os.path.abspath(p), 'argument')
             for p in list(audio_args) + _AUDIO.value]
  if _MANIFEST.value:
    try:
      entries += data.read_audio_list(_MANIFEST.value)
    except ValueError as e:
      raise app.UsageError(f'--manifest: {e}') from e
  if not _SKIP_UNREADABLE.value:
    for entry in entries:
      if not os.path.isfile(entry.path):
        raise app.UsageError(f'{entry.path}: no such audio file ({entry.where}; '
                             '--skip_unreadable goes on without it).')
  return entries


def _load(vocab):
  """(the `Transcriber` of --model (exported if asked) or the loaded --saved_model, its tokens).

  The caller keeps the returned object: a loaded SavedModel's functions hold its variables only
  weakly.
  """
  if _SAVED_MODEL.value is not None:
    try:
      loaded = tf.saved_model.load(_SAVED_MODEL.value)
      tokens = [t.decode('utf-8') for t in loaded.tokens.numpy()]
    except (OSError, ValueError, AttributeError) as e:
      raise app.UsageError(f'--saved_model {_SAVED_MODEL.value!r}: not a SavedModel written by '
                           f'--export_saved_model: {e}') from e
    if tuple(tokens) != vocab.tokens:
      raise app.UsageError(f'--saved_model has the vocabulary {"".join(tokens)!r}, --language='
                           f'{vocab.language} has {"".join(vocab.tokens)!r}.')
    return loaded, tokens
  with config_flags.flag_errors():
    model_config = config_flags.config_from_flags(data_config.ModelConfig).model_config
    keras_model = models.build_ctc_transformer(model_config, vocab.size)
    try:
      model_io.load_into(_MODEL.value, keras_model, source='--model')
    except ValueError as e:
      raise ValueError(f'{e} (--model_config={model_config})') from e
    # The features the model was trained on, as its model.npz records them.
    transcriber = transcription.Transcriber(
        keras_model, vocab.tokens, decoding_flags.BEAM_WIDTH.value,
        data_config.model_features(_MODEL.value, source='--model'))
    if _EXPORT_SAVED_MODEL.value:
      try:
        transcription.export_saved_model(transcriber, _EXPORT_SAVED_MODEL.value)
      except ValueError as e:
        raise ValueError(f'--export_saved_model: {e}') from e
      print(f'SavedModel written to {_EXPORT_SAVED_MODEL.value}', file=sys.stderr)
  return transcriber, vocab.tokens


def _open_output():
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  return open(_OUTPUT.value, 'w', encoding='utf-8')


def main(argv):
  audio_args = argv[1:]
  common.start_binary(distributed_refusal='transcription runs no federated round.',
                      tff_computations=False)
  _check_flags(audio_args)
  vocab = config_flags.config_from_flags(data_config.DataConfig).vocabulary()
  entries = _entries(audio_args)
  word_list = decoding_flags.word_list(vocab)
  transcriber, tokens = _load(vocab)
  if not entries:
    return
  results = []
  with contextlib.ExitStack() as stack:
    # --output is opened (emptied) at the first transcript, or at the end if every file was
    # skipped: a run stopped by an unreadable first file leaves an existing --output as it was.
    out = None if _OUTPUT.value else sys.stdout
    try:
      for result in transcription.transcribe_files(
          transcriber.transcribe, tokens, entries, decoding_flags.DECODER.value,
          decoding_flags.BEAM_WIDTH.value, decoding_flags.TOP_PATHS.value, word_list,
          _SKIP_UNREADABLE.value):
        results.append(result)
        if result.error is not None:
          print(f'Skipped {result.error}', file=sys.stderr)
          continue
        if out is None:
          out = stack.enter_context(_open_output())
        out.write(f'{result.entry.path}\t{result.text}\n')
        out.flush()
    except data.AudioError as e:
      raise app.UsageError(f'{e} (--skip_unreadable goes on without it)') from e
    if out is None:  # Every file skipped: this run's --output is empty.
      stack.enter_context(_open_output())
  scored = [r for r in results if r.error is None and r.entry.reference is not None]
  if scored:
    references = [data.normalize_transcript(r.entry.reference, vocab.language) for r in scored]
    hypotheses = [r.text for r in scored]
    print(f'WER {100 * metrics.word_error_rate(references, hypotheses):.2f}%  '
          f'CER {100 * metrics.character_error_rate(references, hypotheses):.2f}%  '
          f'({len(scored)} utterances)', file=sys.stderr)
  skipped = len(results) - sum(r.error is None for r in results)
  if skipped:
    print(f'{skipped} of {len(results)} files skipped as unreadable.', file=sys.stderr)


if __name__ == '__main__':
  cli.run(main)
