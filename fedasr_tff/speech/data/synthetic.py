"""A small multi-speaker spoken corpus made offline with espeak-ng and sox.

Every speaker is one espeak-ng voice variant with its own pitch and speed; utterances are random
sentences over a small word list (spoken digits and a few dozen common words by default), so a
small model can learn it on a CPU. Utterance counts per speaker are skewed (log-normal), so
clients are heterogeneous like Common Voice's. Everything is deterministic given the seed.

`Conditions` say how the corpus is voiced and recorded. `TUNING`, the default, is the corpus the
demo's recipe was tuned on: 12 voice variants, clean 16 kHz audio. `UNSEEN` is for checking that
recipe on data it was not tuned on: 16 other voice variants, a wider range of pitch and speed,
and audio recorded as a user's might be: 8 kHz through a band-limited microphone (its band drawn
per speaker), background noise at 10-30 dB SNR and silence at the edges.
"""

import concurrent.futures
import dataclasses
import os
import shutil
import subprocess
import tempfile
from typing import Dict
from typing import Optional
from typing import Sequence
from typing import Tuple
import wave

import numpy as np

from fedasr_tff import validation
from fedasr_tff.speech.data import text as text_lib

LAYOUTS = ('librispeech', 'common_voice')

DEFAULT_WORDS: Dict[str, Sequence[str]] = {
    'en': ('zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'yes',
           'no', 'up', 'down', 'left', 'right', 'on', 'off', 'stop', 'go', 'red', 'green',
           'blue', 'black', 'white', 'house', 'water', 'light', 'music', 'open', 'close',
           'play', 'call', 'home', 'time', 'today', 'morning', 'night', 'please', 'thanks'),
    'fr': ('zéro', 'un', 'deux', 'trois', 'quatre', 'cinq', 'six', 'sept', 'huit', 'neuf', 'oui',
           'non', 'maison', 'été', 'bleu', 'rouge', 'vert', 'eau', 'lumière', 'musique'),
    'de': ('null', 'eins', 'zwei', 'drei', 'vier', 'fünf', 'sechs', 'sieben', 'acht', 'neun',
           'ja', 'nein', 'haus', 'wasser', 'licht', 'grün', 'blau', 'rot', 'größe', 'schön'),
}


@dataclasses.dataclass(frozen=True)
class Conditions:
  """How a synthetic corpus is voiced and recorded (module docstring).

  Ranges are (low, high), drawn uniformly per speaker (voice, pitch, speed, band) or per
  utterance (noise, silence).

  Attributes:
    voices: espeak-ng voice variants (`espeak-ng --voices=variant`), cycled through by speaker.
    pitch: espeak-ng's pitch (`-p`), integers, high excluded.
    speed: espeak-ng's words per minute (`-s`), integers, high excluded.
    sample_rate: the recording's rate in Hz; the FLAC files are written at it.
    band: ((low, high) of the lower edge, (low, high) of the upper edge) in Hz of a
      speaker's microphone, a band-pass filter; None for none.
    snr_db: the signal-to-noise ratio of white noise added to an utterance, in dB; None for
      none.
    edge_silence: seconds of silence (under the noise) before and after an utterance.
  """
  voices: Sequence[str]
  pitch: Tuple[int, int] = (25, 75)
  speed: Tuple[int, int] = (140, 190)
  sample_rate: int = 16000
  band: Optional[Tuple[Tuple[float, float], Tuple[float, float]]] = None
  snr_db: Optional[Tuple[float, float]] = None
  edge_silence: Tuple[float, float] = (0.0, 0.0)

  def __post_init__(self):
    if not self.voices:
      raise ValueError('`conditions.voices` is empty.')
    for name in ('pitch', 'speed'):
      low, high = getattr(self, name)
      if not 0 <= low < high:
        raise ValueError(f'`conditions.{name}` must be (low, high) with 0 <= low < high, got '
                         f'{(low, high)!r}.')
    validation.check_positive_integer('conditions.sample_rate', self.sample_rate)
    low, high = self.edge_silence
    if not 0 <= low <= high:
      raise ValueError('`conditions.edge_silence` must be (low, high) with 0 <= low <= high, got '
                       f'{(low, high)!r}.')
    if self.snr_db is not None and self.snr_db[0] > self.snr_db[1]:
      raise ValueError(f'`conditions.snr_db` must be (low, high), got {self.snr_db!r}.')
    if self.band is not None:
      (lower_low, lower_high), (upper_low, upper_high) = self.band
      if not 0 < lower_low <= lower_high < upper_low <= upper_high <= self.sample_rate / 2:
        raise ValueError('`conditions.band` must be ((low, high) of the lower edge, (low, high) of '
                         'the upper edge) in Hz, increasing and at most half of `sample_rate`; '
                         f'got {self.band!r}.')

  @property
  def recorded(self) -> bool:
    """Whether the audio is changed after synthesis (noise, silence or a band)."""
    return self.band is not None or self.snr_db is not None or self.edge_silence[1] > 0


TUNING = Conditions(voices=('m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7', 'f1', 'f2', 'f3', 'f4',
                            'f5'))
UNSEEN = Conditions(
    voices=('adam', 'Andy', 'Annie', 'boris', 'caleb', 'david', 'ed', 'linda', 'max', 'michel',
            'paul', 'quincy', 'robert', 'steph', 'zac', 'klatt'),
    pitch=(15, 85), speed=(120, 210), sample_rate=8000,
    band=((200.0, 400.0), (3000.0, 3600.0)), snr_db=(10.0, 30.0), edge_silence=(0.1, 0.8))
CONDITIONS = {'tuning': TUNING, 'unseen': UNSEEN}


@dataclasses.dataclass(frozen=True)
class SpeakerVoice:
  """How a synthetic speaker speaks.

  Attributes:
    speaker: the speaker id.
    voice: the espeak-ng voice, such as `en+m3`.
    pitch: espeak-ng's pitch (`-p`).
    speed: espeak-ng's speed in words per minute (`-s`).
    band: (low, high) Hz of the speaker's microphone, or None (`Conditions.band`).
  """
  speaker: str
  voice: str
  pitch: int
  speed: int
  band: Optional[Tuple[float, float]] = None


def _check_tools(layouts):
  needed = ['espeak-ng', 'sox']
  for tool in needed:
    if shutil.which(tool) is None:
      raise RuntimeError(f'`{tool}` is not installed; run `make setup` (apt package {tool}).')
  del layouts


def _run(command):
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  if result.returncode:
    raise RuntimeError(f'{" ".join(command)} failed: {result.stderr.strip()[-500:]}')


def make_corpus(output_dir: str,
                *,
                num_speakers: int = 10,
                mean_utterances: float = 8.0,
                words_per_utterance: Sequence[int] = (2, 5),
                words: Optional[Sequence[str]] = None,
                language: str = 'en',
                seed: int = 0,
                layouts: Sequence[str] = ('librispeech',),
                split: str = 'train',
                skew: float = 0.6,
                first_speaker: int = 0,
                conditions: Conditions = TUNING) -> Dict[str, SpeakerVoice]:
  """Writes the corpus (module docstring) in the layouts asked for.

  `librispeech/SPLIT/SPEAKER/1/SPEAKER-1-UTT.flac` with `SPEAKER-1.trans.txt` (FLAC at the
  recording's rate, 16 kHz by default; upper-case transcripts as in LibriSpeech);
  `common_voice/clips/*.mp3` (22.05 kHz, or the recording's rate below 16 kHz) with
  `common_voice/SPLIT.tsv` (client_id, path, sentence).

  Args:
    output_dir: folder to write the layouts into (created if needed).
    num_speakers: speakers (clients).
    mean_utterances: median utterances per speaker; counts are log-normal with sigma `skew`,
      at least 1.
    words_per_utterance: (min, max) words per sentence.
    words: the word list; default `DEFAULT_WORDS[language]`.
    language: "en", "fr" or "de" (espeak-ng voice family).
    seed: makes the corpus reproducible.
    layouts: any of "librispeech", "common_voice".
    split: split name (LibriSpeech folder, Common Voice TSV name).
    skew: log-normal sigma of utterances per speaker (0: all equal).
    first_speaker: index of the first speaker (ids are 1000 + index), so that splits written
      with different values hold different speakers.
    conditions: how the speakers are voiced and recorded (`TUNING`, `UNSEEN` or your own).

  Returns:
    {speaker id: its `SpeakerVoice`}.

  Raises:
    ValueError: for an argument out of range, words the language's vocabulary cannot spell, or
      a split `output_dir` already holds.
    RuntimeError: if espeak-ng or sox is missing or fails.
  """
  validation.check_positive_integer('num_speakers', num_speakers)
  validation.check_positive('mean_utterances', mean_utterances)
  validation.check_non_negative('skew', skew)
  validation.check_non_negative_integer('first_speaker', first_speaker)
  if language not in DEFAULT_WORDS:
    raise ValueError(f'`language` must be one of {tuple(DEFAULT_WORDS)}, got {language!r}.')
  unknown = [layout for layout in layouts if layout not in LAYOUTS]
  if unknown or not layouts:
    raise ValueError(f'`layouts` must be a non-empty subset of {LAYOUTS}, got {layouts!r}.')
  low, high = words_per_utterance
  if not 1 <= low <= high:
    raise ValueError(f'`words_per_utterance` must be (min, max) with 1 <= min <= max, got '
                     f'{words_per_utterance!r}.')
  words = tuple(words or DEFAULT_WORDS[language])
  if not words:
    raise ValueError('`words` is empty.')
  # A word of other characters would be spoken as something else than its transcript says.
  vocabulary = text_lib.Vocabulary(language)
  unspelled = [word for word in words
               if vocabulary.encode(text_lib.normalize_transcript(word, language))[1]]
  if unspelled:
    raise ValueError(f'`words` has words the {language!r} vocabulary cannot spell: '
                     f'{", ".join(map(repr, unspelled[:5]))}.')
  written = [path for layout, path in (
      ('librispeech', os.path.join(output_dir, 'librispeech', split)),
      ('common_voice', os.path.join(output_dir, 'common_voice', f'{split}.tsv')))
             if layout in layouts and os.path.exists(path)]
  if written:  # Written over, it would mix two corpora's speakers.
    raise ValueError(f'`output_dir` holds split {split!r} already ({written[0]}): give another '
                     '`split` or `output_dir`.')
  _check_tools(layouts)

  rng = np.random.default_rng(seed)
  # The recording's draws come from a stream of their own, so that a seed's sentences are the
  # same under any conditions (and `TUNING`'s corpus is what it was before conditions existed).
  recording_rng = np.random.default_rng([seed, 1])
  voices = {}
  for index in range(first_speaker, first_speaker + num_speakers):
    speaker = str(1000 + index)
    band = None
    if conditions.band is not None:
      band = tuple(float(recording_rng.uniform(*edge)) for edge in conditions.band)
    voices[speaker] = SpeakerVoice(
        speaker=speaker,
        voice=f'{language}+{conditions.voices[index % len(conditions.voices)]}',
        pitch=int(rng.integers(*conditions.pitch)),
        speed=int(rng.integers(*conditions.speed)),
        band=band)
  counts = np.maximum(1, np.round(mean_utterances * rng.lognormal(0.0, skew, num_speakers)))
  # Every sentence is drawn first, in a fixed order, so the synthesis can run in parallel and the
  # corpus stays a function of `seed`.
  sentences = {speaker: [' '.join(rng.choice(words, size=int(rng.integers(low, high + 1))))
                         for _ in range(count)]
               for speaker, count in zip(voices, counts.astype(int), strict=True)}
  # Per utterance: (SNR in dB or None, leading and trailing silence in s, noise seed).
  takes = {speaker: [(None if conditions.snr_db is None
                      else float(recording_rng.uniform(*conditions.snr_db)),
                      float(recording_rng.uniform(*conditions.edge_silence)),
                      float(recording_rng.uniform(*conditions.edge_silence)),
                      int(recording_rng.integers(2**31)))
                     for _ in said]
           for speaker, said in sentences.items()}
  band_effects = {speaker: ([] if voice.band is None else
                            ['highpass', f'{voice.band[0]:.0f}', 'lowpass', f'{voice.band[1]:.0f}'])
                  for speaker, voice in voices.items()}
  cv_rate = 22050 if conditions.sample_rate >= 16000 else conditions.sample_rate
  clips = os.path.join(output_dir, 'common_voice', 'clips')
  if 'common_voice' in layouts:
    os.makedirs(clips, exist_ok=True)
  cv_rows = []
  with tempfile.TemporaryDirectory() as tmp:

    def synthesise(speaker, utt, sentence):
      voice = voices[speaker]
      utterance_id = f'{speaker}-1-{utt:04d}'
      wav = os.path.join(tmp, f'{utterance_id}.wav')
      _run(['espeak-ng', '-v', voice.voice, '-p', str(voice.pitch), '-s', str(voice.speed),
            '-w', wav, sentence])
      if conditions.recorded:
        _record(wav, *takes[speaker][utt])
      # -R: sox dithers when it cuts the bit depth; repeatable mode draws the dither from a
      # fixed seed, so the audio, like the transcripts, is a function of `seed`.
      if 'librispeech' in layouts:
        _run(['sox', '-R', wav, '-r', str(conditions.sample_rate), '-b', '16', '-c', '1',
              os.path.join(output_dir, 'librispeech', split, speaker, '1',
                           f'{utterance_id}.flac'), *band_effects[speaker]])
      if 'common_voice' in layouts:
        _run(['sox', '-R', wav, '-r', str(cv_rate),
              os.path.join(clips, f'common_voice_{language}_{utterance_id}.mp3'),
              *band_effects[speaker]])
      os.remove(wav)

    if 'librispeech' in layouts:
      for speaker in voices:
        os.makedirs(os.path.join(output_dir, 'librispeech', split, speaker, '1'), exist_ok=True)
    # The work is in the espeak-ng and sox processes, so threads keep every core busy.
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
      jobs = [pool.submit(synthesise, speaker, utt, sentence)
              for speaker, said in sentences.items() for utt, sentence in enumerate(said)]
      for job in jobs:
        job.result()
  for speaker, said in sentences.items():
    utterance_ids = [f'{speaker}-1-{utt:04d}' for utt in range(len(said))]
    if 'librispeech' in layouts:
      with open(os.path.join(output_dir, 'librispeech', split, speaker, '1',
                             f'{speaker}-1.trans.txt'), 'w', encoding='utf-8') as f:
        f.write(''.join(f'{u} {sentence.upper()}\n'
                        for u, sentence in zip(utterance_ids, said, strict=True)))
    if 'common_voice' in layouts:
      cv_rows += [(f'client-{speaker}', f'common_voice_{language}_{u}.mp3',
                   sentence.capitalize() + '.') for u, sentence in zip(utterance_ids, said,
                                                                       strict=True)]
  if cv_rows:
    with open(os.path.join(output_dir, 'common_voice', f'{split}.tsv'), 'w',
              encoding='utf-8') as f:
      f.write('client_id\tpath\tsentence\tup_votes\tdown_votes\n')
      for client, clip, sentence in cv_rows:
        f.write(f'{client}\t{clip}\t{sentence}\t2\t0\n')
  return voices


def _record(wav: str, snr_db: Optional[float], lead: float, tail: float, noise_seed: int) -> None:
  """Rewrites the 16-bit mono WAV `wav` as recorded: silence at the edges, then white noise at
  `snr_db` (relative to the speech's power) over all of it."""
  with wave.open(wav, 'rb') as f:
    params = f.getparams()
    speech = np.frombuffer(f.readframes(params.nframes), np.int16).astype(np.float64)
  rate = params.framerate
  audio = np.concatenate([np.zeros(round(lead * rate)), speech, np.zeros(round(tail * rate))])
  if snr_db is not None:
    power = np.mean(speech**2) if speech.size else 0.0
    noise = np.random.default_rng(noise_seed).standard_normal(audio.size)
    audio += noise * np.sqrt(power / 10**(snr_db / 10))
  with wave.open(wav, 'wb') as f:
    f.setparams(params)
    f.writeframes(np.clip(np.round(audio), -32768, 32767).astype(np.int16).tobytes())


def corrupt_transcripts(split_dir: str, speakers: Sequence[str], seed: int,
                        words: Optional[Sequence[str]] = None) -> None:
  """Replaces the transcripts of some speakers by random words: clients whose labels are noise.

  For experiments on robust aggregation. Every transcript becomes as many words drawn uniformly
  from `words`; the audio is left as it is.

  Args:
    split_dir: a LibriSpeech split folder.
    speakers: the speakers to corrupt.
    seed: seed of the draws.
    words: the word list; default `DEFAULT_WORDS["en"]`.

  Raises:
    ValueError: for a speaker not in the folder.
  """
  words = list(words or DEFAULT_WORDS['en'])
  rng = np.random.default_rng(seed)
  for speaker in speakers:
    speaker_dir = os.path.join(split_dir, speaker)
    if not os.path.isdir(speaker_dir):
      raise ValueError(f'No speaker {speaker!r} in {split_dir!r}.')
    for chapter in sorted(os.listdir(speaker_dir)):
      path = os.path.join(speaker_dir, chapter, f'{speaker}-{chapter}.trans.txt')
      with open(path, encoding='utf-8') as f:
        lines = [line.split() for line in f if line.strip()]
      with open(path, 'w', encoding='utf-8') as f:
        for utterance_id, *said in lines:
          f.write(f'{utterance_id} {" ".join(rng.choice(words, size=len(said))).upper()}\n')
