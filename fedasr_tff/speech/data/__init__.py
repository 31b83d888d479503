"""Speech data: corpus readers, audio, transcripts, features and the federated view.

The data setup of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, Sec. 4 and App. F. The federated view (`pipeline`: `SpeechClientData` and its
helpers) loads on first use (PEP 562): it imports TensorFlow Federated, which reading audio and
transcripts needs not.
"""

import importlib

from fedasr_tff.speech.data.audio import AudioError
from fedasr_tff.speech.data.audio import load_audio
from fedasr_tff.speech.data.corpora import AudioListEntry
from fedasr_tff.speech.data.corpora import ReadReport
from fedasr_tff.speech.data.corpora import Utterance
from fedasr_tff.speech.data.corpora import read_audio_list
from fedasr_tff.speech.data.corpora import read_common_voice
from fedasr_tff.speech.data.corpora import read_librispeech
from fedasr_tff.speech.data.corpora import read_manifest
from fedasr_tff.speech.data.features import NUM_MELS
from fedasr_tff.speech.data.features import SAMPLE_RATE
from fedasr_tff.speech.data.features import log_mel_features
from fedasr_tff.speech.data.features import spec_augment
from fedasr_tff.speech.data.features import spec_augment_batch
from fedasr_tff.speech.data.text import Vocabulary
from fedasr_tff.speech.data.text import normalize_transcript

_PIPELINE = ('SpeechClientData', 'group_by_speaker', 'make_iid', 'split_speakers')


def __getattr__(name):
  if name in _PIPELINE:
    return getattr(importlib.import_module(f'{__name__}.pipeline'), name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted([*globals(), *_PIPELINE])
