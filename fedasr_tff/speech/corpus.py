"""A corpus on disk as federated client data, with the paper's seed/federated speaker split.

`load_client_data` reads one split of a corpus (LibriSpeech or Common Voice layout, or a TSV
manifest), keeps the speakers of the requested part of a seeded speaker split (as
CV-en-train-10 for the central seed model and -90 for federated training: a random 10% of the
users for the seed, in Pelikan et al., NeurIPS 2025, arXiv:2310.00098, Sec. 4 "Data" and App. F,
Table 2; disjoint, so no user is counted twice), optionally applies the IID control, and
returns `SpeechClientData`.
"""

import os
from typing import Optional

from fedasr_tff.data import corpora
from fedasr_tff.data import pipeline
from fedasr_tff.data import text as text_lib

LAYOUTS = ('librispeech', 'common_voice', 'manifest')
SPEAKER_PARTS = ('all', 'seed', 'federated')


def read_utterances(corpus_dir: str, layout: str, split: str, strict: bool = False,
                    report: Optional[corpora.ReadReport] = None):
  """Utterances of `split`; for "manifest", `split` is the TSV's path relative to the dir."""
  if layout not in LAYOUTS:
    raise ValueError(f'`layout` must be one of {LAYOUTS}, got {layout!r}.')
  if corpus_dir is None or not os.path.isdir(corpus_dir):
    raise ValueError(f'`corpus_dir` must be an existing directory; {corpus_dir!r} does not exist.')
  if layout == 'librispeech':
    utterances = corpora.read_librispeech(corpus_dir, split, strict, report)
  elif layout == 'common_voice':
    utterances = corpora.read_common_voice(corpus_dir, split, strict, report)
  else:
    utterances = corpora.read_manifest(os.path.join(corpus_dir, split), strict, report)
  if not utterances:
    raise ValueError(f'No utterances found for split {split!r} in {corpus_dir!r} '
                     f'({layout} layout).')
  return utterances


def load_client_data(corpus_dir: str,
                     layout: str,
                     split: str,
                     vocabulary: text_lib.Vocabulary,
                     *,
                     speakers: str = 'all',
                     seed_fraction: float = 0.1,
                     split_seed: int = 0,
                     iid: bool = False,
                     iid_seed: int = 0,
                     spec_augment: bool = False,
                     max_batch_seconds: float = 120.0,
                     feature_cache_dir: Optional[str] = None,
                     strict: bool = False) -> pipeline.SpeechClientData:
  """The speakers of `split` in part `speakers` ("all", "seed" or "federated") as clients.

  "seed" is the `seed_fraction` of speakers (seeded by `split_seed`) used for central
  training and "federated" the rest; the two never share a speaker.
  """
  if speakers not in SPEAKER_PARTS:
    raise ValueError(f'`speakers` must be one of {SPEAKER_PARTS}, got {speakers!r}.')
  report = corpora.ReadReport()
  utterances = read_utterances(corpus_dir, layout, split, strict, report)
  if speakers != 'all':
    seed_part, federated_part = pipeline.split_speakers(
        [u.speaker for u in utterances], seed_fraction, split_seed)
    keep = set(seed_part if speakers == 'seed' else federated_part)
    utterances = [u for u in utterances if u.speaker in keep]
  if iid:
    utterances = pipeline.make_iid(utterances, iid_seed)
  return pipeline.SpeechClientData(utterances, vocabulary, max_batch_seconds=max_batch_seconds,
                                   spec_augment=spec_augment, strict=strict,
                                   feature_cache_dir=feature_cache_dir, report=report)
