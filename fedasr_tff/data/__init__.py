"""Speech data: corpus readers, audio, transcripts, features and the federated view.

The data setup of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, Sec. 4 and App. F.
"""

from fedasr_tff.data.audio import AudioError
from fedasr_tff.data.audio import load_audio
from fedasr_tff.data.corpora import AudioListEntry
from fedasr_tff.data.corpora import ReadReport
from fedasr_tff.data.corpora import Utterance
from fedasr_tff.data.corpora import read_audio_list
from fedasr_tff.data.corpora import read_common_voice
from fedasr_tff.data.corpora import read_librispeech
from fedasr_tff.data.corpora import read_manifest
from fedasr_tff.data.features import NUM_MELS
from fedasr_tff.data.features import SAMPLE_RATE
from fedasr_tff.data.features import log_mel_features
from fedasr_tff.data.features import spec_augment
from fedasr_tff.data.features import spec_augment_batch
from fedasr_tff.data.pipeline import SpeechClientData
from fedasr_tff.data.pipeline import group_by_speaker
from fedasr_tff.data.pipeline import make_iid
from fedasr_tff.data.pipeline import split_speakers
from fedasr_tff.data.text import Vocabulary
from fedasr_tff.data.text import normalize_transcript
