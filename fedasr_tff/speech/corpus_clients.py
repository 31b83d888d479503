"""A corpus on disk as federated client data, with the paper's seed/federated speaker split
(`load_client_data`), and the speakers' roles in a run on one corpus (`assign_speakers`).

The federated view (`data.SpeechClientData`, which imports TensorFlow Federated) loads when
client data is first made, so reading a corpus's speakers and the layouts' names needs no TFF.
"""

import dataclasses
import os
from typing import Collection
from typing import Optional
from typing import Sequence
from typing import Tuple

import numpy as np

from fedasr_tff import validation
from fedasr_tff.speech import data
from fedasr_tff.speech.data import corpora
from fedasr_tff.speech.data import features as features_lib
from fedasr_tff.speech.data import text as text_lib

LAYOUTS = ('librispeech', 'common_voice', 'manifest')
SPEAKER_PARTS = ('all', 'seed', 'federated')
# Stream of `assign_speakers`' held-out draw, apart from `data.split_speakers`' draw of the
# same seed.
_HELD_OUT_STREAM = 0x4E1D


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


@dataclasses.dataclass(frozen=True)
class SpeakerRoles:
  """The disjoint speaker sets of a run on one corpus.

  Attributes:
    seed: the server's speakers, for the central seed model.
    federated: the clients.
    held_out: the speakers evaluated on and never trained on.
  """
  seed: Tuple[str, ...]
  federated: Tuple[str, ...]
  held_out: Tuple[str, ...]

  def as_dict(self) -> dict:
    """{role: [speaker, ...]}, as JSON stores it."""
    return {name: list(getattr(self, name)) for name in ('seed', 'federated', 'held_out')}


def assign_speakers(speakers: Sequence[str], *, seed_fraction: float, split_seed: int,
                    held_out: Collection[str] = (), held_out_count: int = 0) -> SpeakerRoles:
  """Splits the speakers of one split into held-out, seed and federated speakers.

  The held-out speakers are `held_out` if given, else `held_out_count` drawn with `split_seed`
  (none when 0: the run evaluates on another split); the rest are split as
  `data.split_speakers` does for the seed part (Pelikan et al. 2025, Sec. 4 "Data"), on a
  stream of the same seed apart from the held-out draw.

  Args:
    speakers: the speakers of the split (duplicates merged).
    seed_fraction: the seed part's share of the speakers left after the held-out ones.
    split_seed: seed of both draws.
    held_out: the held-out speakers by name.
    held_out_count: how many to draw when `held_out` is empty.

  Returns:
    The `SpeakerRoles`, each role sorted.

  Raises:
    ValueError: for a held-out speaker not in `speakers`, both `held_out` and `held_out_count`,
      or fewer than 2 speakers left to train on.
  """
  speakers = sorted(set(speakers))
  validation.check_non_negative_integer('held_out_count', held_out_count)
  if held_out and held_out_count:
    raise ValueError('Give the held-out speakers by name (`held_out`) or by count '
                     '(`held_out_count`), not both.')
  unknown = sorted(set(held_out) - set(speakers))
  if unknown:
    raise ValueError(f'`held_out` names speakers the split does not have: {", ".join(unknown)}.')
  if held_out_count:
    if held_out_count > len(speakers) - 2:
      raise ValueError(f'`held_out_count`={held_out_count} leaves fewer than 2 of the '
                       f'{len(speakers)} speakers to train on (a seed speaker and a client).')
    order = np.random.default_rng([split_seed, _HELD_OUT_STREAM]).permutation(len(speakers))
    held_out = [speakers[i] for i in order[:held_out_count]]
  rest = [s for s in speakers if s not in set(held_out)]
  if len(rest) < 2:
    raise ValueError(f'{len(rest)} speaker(s) left to train on after the held-out ones: a run '
                     'needs a seed speaker and at least one client.')
  seed, federated = data.split_speakers(rest, seed_fraction, split_seed)
  return SpeakerRoles(tuple(seed), tuple(federated), tuple(sorted(held_out)))



def describe_speakers(speakers: Sequence[str], shown: int = 10) -> str:
  """'N speaker(s) (a, b, ...)', naming the first `shown` and counting the rest, for messages.

  Args:
    speakers: the speakers, in the order to name them.
    shown: how many to name at most.

  Returns:
    For example '1 speaker (s3)', '2 speakers (s1, s4)'; beyond `shown`, the first `shown`
    then 'and N more'.
  """
  speakers = list(speakers)
  named = ', '.join(speakers[:shown])
  if len(speakers) > shown:
    named += f' and {len(speakers) - shown} more'
  return f'{len(speakers)} speaker{"" if len(speakers) == 1 else "s"} ({named})'


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
                     feature_normalization: str = features_lib.UTTERANCE,
                     strict: bool = False,
                     speaker_ids: Optional[Collection[str]] = None) -> 'data.SpeechClientData':
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
    feature_normalization: "utterance" or "cmn" (`data.log_mel_features`).
    strict: raise at the first unusable utterance instead of skipping it.
    speaker_ids: the speakers to read, by name (`assign_speakers`), instead of a part; then
      `speakers` must be "all".

  Returns:
    The `SpeechClientData`: its `read_report` says what the reader read and skipped (a warning
    names any skipped row), its `report` counts the utterances skipped when audio is decoded.

  Raises:
    ValueError: for an unknown part, a part with `speaker_ids`, a named speaker the split does
      not have, or as `read_utterances` and `data.split_speakers`.
  """
  if speakers not in SPEAKER_PARTS:
    raise ValueError(f'`speakers` must be one of {SPEAKER_PARTS}, got {speakers!r}.')
  read_report = corpora.ReadReport()
  utterances = read_utterances(corpus_dir, layout, split, strict, read_report)
  read_report.warn_if_skipped(f'split {split!r} of {corpus_dir}')
  if speaker_ids is not None:
    if speakers != 'all':
      raise ValueError(f'Give `speakers`="all" with `speaker_ids`, got {speakers!r}.')
    missing = sorted(set(speaker_ids) - {u.speaker for u in utterances})
    if missing:
      raise ValueError(f'Split {split!r} of {corpus_dir!r} has no utterance of speaker(s) '
                       f'{", ".join(missing)}.')
    utterances = [u for u in utterances if u.speaker in set(speaker_ids)]
  if speakers != 'all':
    seed_part, federated_part = data.split_speakers(
        [u.speaker for u in utterances], seed_fraction, split_seed)
    keep = set(seed_part if speakers == 'seed' else federated_part)
    utterances = [u for u in utterances if u.speaker in keep]
  if iid:
    utterances = data.make_iid(utterances, iid_seed)
  return data.SpeechClientData(utterances, vocabulary, max_batch_seconds=max_batch_seconds,
                               spec_augment=spec_augment, strict=strict,
                               feature_cache_dir=feature_cache_dir,
                               feature_normalization=feature_normalization,
                               read_report=read_report)
