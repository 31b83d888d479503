"""Speech data: transcripts, vocabulary and features (more of the pipeline follows)."""

from fedasr_tff.data.features import NUM_MELS
from fedasr_tff.data.features import SAMPLE_RATE
from fedasr_tff.data.features import log_mel_features
from fedasr_tff.data.features import spec_augment
from fedasr_tff.data.text import Vocabulary
from fedasr_tff.data.text import normalize_transcript
