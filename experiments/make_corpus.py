r"""Makes the synthetic multi-speaker spoken corpus (espeak-ng voices, LibriSpeech layout).

  python -m experiments.make_corpus --output_dir=/tmp/corpus --speakers=20 \
      --utterances_per_speaker=10 --layouts=librispeech,common_voice

--conditions=unseen voices it with other espeak-ng variants and records it as a user's corpus
might be (8 kHz, a band-limited microphone, noise, silence at the edges;
`fedasr_tff.speech.data.synthetic.UNSEEN`): data the recipe's defaults were not tuned on.
"""

import collections

from absl import app
from absl import flags

from experiments import cli
from experiments import config_flags
from fedasr_tff.speech.data import synthetic

# Checked in main rather than with required=True, so other binaries' tests can parse flags in
# the same process.
_OUTPUT_DIR = flags.DEFINE_string('output_dir', None, 'Folder to write the corpus into.')
_SPEAKERS = flags.DEFINE_integer('speakers', 10, 'Number of speakers.', lower_bound=1)
_UTTERANCES = flags.DEFINE_float('utterances_per_speaker', 8.0,
                                 'Median utterances per speaker (log-normal across speakers).',
                                 lower_bound=1.0)
_SKEW = flags.DEFINE_float('skew', 0.6, 'Log-normal sigma of utterances per speaker.',
                           lower_bound=0.0)
_LANGUAGE = flags.DEFINE_enum('language', 'en', list(synthetic.DEFAULT_WORDS),
                              'Language of the voices and words.')
_LAYOUTS = flags.DEFINE_multi_enum('layouts', ['librispeech'], list(synthetic.LAYOUTS),
                                   'Layouts to write.')
_WORDS = flags.DEFINE_list('words', None, 'Words to build sentences from (default: spoken digits '
                          'and a few dozen common words of --language).')
_SPLIT = flags.DEFINE_string('split', 'train', 'Split name.')
_SEED = flags.DEFINE_integer('seed', 0, 'Random seed; the corpus is a function of it.')
_CONDITIONS = flags.DEFINE_enum(
    'conditions', 'tuning', list(synthetic.CONDITIONS),
    'How the speakers are voiced and recorded: tuning (the demo\'s: 12 espeak-ng variants, clean '
    '16 kHz) or unseen (16 other variants, 8 kHz through a band-limited microphone, noise at '
    '10-30 dB SNR, silence at the edges).')
_FIRST_SPEAKER = flags.DEFINE_integer(
    'first_speaker', 0, 'Index of the first speaker: give a held-out split speakers of its own '
    '(e.g. --split=dev --first_speaker=<training speakers>).', lower_bound=0)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  if not _OUTPUT_DIR.value:
    raise app.UsageError('--output_dir is required.')
  cli.check_output('output_dir', _OUTPUT_DIR.value)
  with config_flags.flag_errors():  # --words, --split: the library names its arguments.
    voices = synthetic.make_corpus(
        _OUTPUT_DIR.value, num_speakers=_SPEAKERS.value, mean_utterances=_UTTERANCES.value,
        words=_WORDS.value, language=_LANGUAGE.value, seed=_SEED.value,
        layouts=tuple(_LAYOUTS.value), split=_SPLIT.value, skew=_SKEW.value,
        first_speaker=_FIRST_SPEAKER.value, conditions=synthetic.CONDITIONS[_CONDITIONS.value])
  by_voice = collections.Counter(v.voice for v in voices.values())
  print(f'wrote {len(voices)} speakers ({", ".join(sorted(by_voice))}) to {_OUTPUT_DIR.value} '
        f'in layouts {", ".join(_LAYOUTS.value)}, conditions {_CONDITIONS.value}')


if __name__ == '__main__':
  cli.run(main)
