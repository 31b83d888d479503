"""The decoding flags of the binaries that decode (`transcribe`, `evaluate`), defined once."""

from typing import Optional

from absl import app
from absl import flags

from fedasr_tff import reading
from fedasr_tff.speech import decoding
from fedasr_tff.speech.data import text as text_lib

DECODER = flags.DEFINE_enum('decoder', 'greedy', decoding.DECODERS, 'greedy: the best path; '
                            'beam: CTC prefix beam search.')
BEAM_WIDTH = flags.DEFINE_integer('beam_width', 16, 'Prefixes kept per frame by beam search '
                                  '(and in the SavedModel\'s transcribe_beam).', lower_bound=1)
TOP_PATHS = flags.DEFINE_integer('top_paths', 1, 'Beam-search candidates --word_list chooses '
                                 'from (<= --beam_width).', lower_bound=1)
WORD_LIST = flags.DEFINE_string('word_list', None, 'File of allowed words, one per line '
                                '(fedasr_tff/speech/decoding.py says what the restriction does).')


def check(has_word_list: Optional[bool] = None) -> None:
  """Checks the combination of the decoding flags.

  Args:
    has_word_list: whether transcripts are restricted to a word list (a binary may have one of
      its own); default: whether --word_list is given.

  Raises:
    app.UsageError: naming the flags, for --top_paths > 1 without beam search and a word list,
      or above --beam_width.
  """
  if has_word_list is None:
    has_word_list = WORD_LIST.value is not None
  if TOP_PATHS.value > 1 and (DECODER.value != 'beam' or not has_word_list):
    raise app.UsageError('--top_paths > 1 needs --decoder=beam and --word_list (the candidates '
                         'the word list chooses from); without them only the best is used.')
  if TOP_PATHS.value > BEAM_WIDTH.value:
    raise app.UsageError(f'--top_paths ({TOP_PATHS.value}) must be <= --beam_width '
                         f'({BEAM_WIDTH.value}).')


def word_list(vocabulary: text_lib.Vocabulary) -> Optional[decoding.WordList]:
  """The --word_list, read for `vocabulary`, or None without one; a warning names the lines it
  merged into earlier ones.

  Raises:
    app.UsageError: naming the flag and the file's line (`decoding.WordList.from_file`).
  """
  if not WORD_LIST.value:
    return None
  report = reading.ReadReport()
  try:
    words = decoding.WordList.from_file(WORD_LIST.value, vocabulary, report)
  except ValueError as e:
    raise app.UsageError(f'--word_list: {e}') from e
  report.warn_if_skipped('--word_list')
  return words
