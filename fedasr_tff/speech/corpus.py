"""A corpus on disk as federated client data, with the paper's seed/federated speaker split
(`load_client_data`).
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
  """The utterances of one split of a corpus.

  Args:
    corpus_dir: the corpus's folder.
    layout: one of `LAYOUTS`.
    split: the split (`data.corpora`); for "manifest", the TSV's path relative to `corpus_dir`.
    strict: raise at the first unusable utterance instead of skipping it.
    report: where skipped utterances are counted, or None.

  Returns:
    The utterances.

  Raises:
    ValueError: for an unknown layout, a missing folder or a split with no utterance.
  """
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
  """The speakers of one split, or of one part of it, as clients.

  The parts are those of Pelikan et al., "Enabling Differentially Private Federated Learning for
  Speech Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
  arXiv:2310.00098, Sec. 4 "Data" and App. F, Table 2: CV-en-train-10 for the central seed
  model and -90 for federated training, a random 10% of the users for the seed; disjoint, so no
  user is counted twice.

  Args:
    corpus_dir: the corpus's folder.
    layout: one of `LAYOUTS`.
    split: the split (`read_utterances`).
    vocabulary: the model's vocabulary.
    speakers: "all", "seed" (the `seed_fraction` of speakers, for central training) or
      "federated" (the rest); the two never share a speaker.
    seed_fraction: the share of the seed part, in (0, 1).
    split_seed: seed of the speaker split.
    iid: apply the IID control (`data.make_iid`).
    iid_seed: seed of the IID control.
    spec_augment: apply SpecAugment to the batches (training data).
    max_batch_seconds: audio per dynamic batch.
    feature_cache_dir: the feature cache's folder, or None.
    strict: raise at the first unusable utterance instead of skipping it.

  Returns:
    The `SpeechClientData`, its `report` counting what was skipped.

  Raises:
    ValueError: for an unknown part, or as `read_utterances` and `data.split_speakers`.
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
