"""The data and model parts of a speech run's configuration: which corpus, speakers and
features (`DataConfig`), and which transformer from which weights (`ModelConfig`).

Apart from the rest of the configuration (`speech.config`, whose sub-configurations build TFF
processes) so that what only reads audio or runs the Keras model, as transcription does, defines
the same flags without importing TensorFlow Federated. `speech.config` re-exports both.
"""

import dataclasses
import os
from typing import Dict
from typing import List
from typing import Mapping
from typing import Optional
from typing import Tuple

from fedasr_tff.program import model_io
from fedasr_tff.program.fields import field
from fedasr_tff.speech import corpus_clients
from fedasr_tff.speech import data
from fedasr_tff.speech import models
from fedasr_tff.speech.data import features as features_lib
from fedasr_tff.speech.data import text as text_lib

# The feature cache of a run that names none, under its output directory; or no cache at all.
FEATURE_CACHE_SUBDIR, NO_FEATURE_CACHE = 'feature_cache', 'none'

# The model.npz metadata naming the features a speech model was trained on (`model_features`).
FEATURES_METADATA = 'feature_normalization'


def model_metadata(feature_normalization: str) -> Dict[str, str]:
  """The metadata of a speech model's `model.npz` (`model_io.save_weights`): its features.

  Args:
    feature_normalization: the normalisation of the features it was trained on.
  """
  return {FEATURES_METADATA: feature_normalization}


def model_features(path: str, source: str = 'model') -> str:
  """The feature normalisation the speech model in `path` (a `model.npz`) was trained on.

  Args:
    path: the weights file.
    source: how to name it in errors (for example the flag it came from).

  Returns:
    Its recorded normalisation; "utterance" for a file written before models recorded it (all of
    them were trained on those features).

  Raises:
    ValueError: naming `source` for a missing or damaged file, or an unknown normalisation.
  """
  normalization = model_io.read_metadata(path, source).get(FEATURES_METADATA,
                                                           features_lib.UTTERANCE)
  if normalization not in features_lib.NORMALIZATIONS:
    raise ValueError(f'{source} {path!r} records feature normalisation {normalization!r}, '
                     f'not one of {features_lib.NORMALIZATIONS}.')
  return normalization


def check_model_features(path: str, feature_normalization: str, source: str) -> None:
  """Refuses a model (`model.npz`) trained on features other than `feature_normalization`.

  Args:
    path: the weights file.
    feature_normalization: the features the run computes.
    source: how to name the file (for example "--seed_model").

  Raises:
    ValueError: naming `source` and the flag to give, or as `model_features`.
  """
  trained_on = model_features(path, source)
  if trained_on != feature_normalization:
    raise ValueError(
        f'{source} {path!r} was trained on --feature_normalization={trained_on} features; '
        f'this run computes --feature_normalization={feature_normalization}. Give '
        f'--feature_normalization={trained_on} (a model is used with the features it was '
        'trained on).')


def check_same_features(normalizations: Mapping[str, str]) -> None:
  """Refuses data or models of different feature normalisations.

  Args:
    normalizations: {what (for the message): its normalisation}.

  Raises:
    ValueError: naming each, if they differ: a model scored or trained on features it was not
      trained on gives meaningless figures.
  """
  if len(set(normalizations.values())) > 1:
    listed = ', '.join(f'{what}: "{value}"' for what, value in normalizations.items())
    raise ValueError(f'Different feature normalisations ({listed}); a model is used with the '
                     'features it was trained on (--feature_normalization).')


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Which corpus, which speakers, and how their audio becomes batches.

  Each field is the flag of the same name, documented by its help.
  """
  corpus_dir: Optional[str] = field(
      None, 'Root of the corpus: the folder holding the split folders (LibriSpeech), SPLIT.tsv '
      'and clips/ (Common Voice), or the manifest TSVs (manifest).', fingerprint=False)
  layout: str = field('librispeech', 'Corpus layout.', corpus_clients.LAYOUTS)
  split: str = field('train', 'Training split (for "manifest": the TSV file).')
  speakers: Optional[str] = field(
      None, 'Speakers of --split to train on: the "seed" part of the seeded speaker split '
      '(--seed_fraction of them), the "federated" rest, or "all". Default: seed for central '
      'training, federated for federated training.', corpus_clients.SPEAKER_PARTS)
  seed_fraction: float = field(
      0.1, 'Fraction of speakers in the seed part (Pelikan et al. 2025, Sec. 4 "Data": a '
      'random 10% of the users for the seed model).')
  split_seed: int = field(0, 'Seed of the speaker split.')
  iid: bool = field(False, 'IID control: give every utterance a speaker drawn uniformly from '
                     'the speakers.')
  language: str = field('en', 'Token set and text normalisation.', text_lib.LANGUAGES)
  max_batch_seconds: float = field(120.0, 'Audio per dynamic batch, in seconds.')
  feature_cache_dir: Optional[str] = field(
      None, 'Folder of the log-mel feature cache: each utterance is featurised once and read '
      'back after (owner-only, as it holds features of client audio; runs on the same corpus may '
      f'share one). Default: OUTPUT_DIR/{FEATURE_CACHE_SUBDIR}; "{NO_FEATURE_CACHE}": none.',
      fingerprint=False)
  client_store_dir: Optional[str] = field(
      None, 'Folder of a client store (docs/distributed.md, "Workers read their clients\' '
      'data"): before the first round every training client\'s features and labels are written '
      'there (owner-only; kept while current), and each round sends the cohort\'s store indices '
      'and seeds instead of their batches; the TFF workers build the batches from the store in '
      'TensorFlow ops, bit for bit as the driver would. Every worker must reach it at this path '
      '(a shared filesystem, or a copy per worker), and can then read every client in it, not '
      'only a round\'s. Default: none (the driver ships each client\'s batches).',
      fingerprint=False)
  eval_split: Optional[str] = field(None, 'Held-out split to evaluate on (its speakers are all '
                                     'used); empty: no evaluation.')
  spec_augment: bool = field(
      True, 'SpecAugment on the training batches, the clients\' and the server\'s (Pelikan et al. '
      '2025, App. F: on). At small scale it slows a small model more than it regularises it '
      '(docs/results.md, "The demo, measured"), hence off in the cpu preset.')
  feature_normalization: str = field(
      features_lib.UTTERANCE, 'How each utterance\'s log-mels are normalised: "utterance", zero '
      'mean and unit variance over its whole time x mel matrix (the released code of Pelikan et '
      'al. 2025; best on the clean 16 kHz synthetic corpus); "cmn", each mel channel\'s mean '
      'removed, then the utterance\'s variance, for speech recorded at 8 kHz, band-limited or '
      'noisy (docs/results.md, "The recipe on unseen voices and recording conditions"). A model '
      'is used with the features it was trained on: its model.npz records them, and a seed '
      'model of the other kind is refused.', features_lib.NORMALIZATIONS)

  def vocabulary(self) -> data.Vocabulary:
    """The token set of `language`."""
    return data.Vocabulary(self.language)

  def with_default_feature_cache(self, output_dir: Optional[str]) -> 'DataConfig':
    """This configuration, its feature cache under `output_dir` if it names none.

    Args:
      output_dir: the run's output directory; None or empty leaves the configuration as it is.

    Returns:
      This configuration, or a copy whose `feature_cache_dir` is `output_dir`/feature_cache.
    """
    if self.feature_cache_dir is not None or not output_dir:
      return self
    return dataclasses.replace(self,
                               feature_cache_dir=os.path.join(output_dir, FEATURE_CACHE_SUBDIR))

  def feature_cache(self) -> Optional[str]:
    """The feature cache folder, or None for no cache."""
    if self.feature_cache_dir in (None, '', NO_FEATURE_CACHE):
      return None
    return self.feature_cache_dir

  def load_client_data(self, split: str, vocabulary: data.Vocabulary, *, speakers: str = 'all',
                       training: bool = False, iid_seed: int = 0) -> 'data.SpeechClientData':
    """The speakers of `split` (part `speakers` unless --speakers is given) as clients.

    Args:
      split: the split to read (for the "manifest" layout, its TSV file).
      vocabulary: the token set of the transcripts.
      speakers: the part of the seeded speaker split ("all", "seed" or "federated") read when
        --speakers is not given.
      training: the batches are training data: SpecAugment if `spec_augment` (never on other
        data).
      iid_seed: the seed of the speakers drawn for the --iid control.

    Returns:
      The clients, one per speaker.

    Raises:
      ValueError: if the speaker part is not one of `corpus_clients.SPEAKER_PARTS`.
    """
    return corpus_clients.load_client_data(
        self.corpus_dir, self.layout, split, vocabulary, speakers=self.speakers or speakers,
        seed_fraction=self.seed_fraction, split_seed=self.split_seed, iid=self.iid,
        iid_seed=iid_seed, spec_augment=training and self.spec_augment,
        max_batch_seconds=self.max_batch_seconds,
        feature_cache_dir=self.feature_cache(),
        feature_normalization=self.feature_normalization)

  def load_eval_data(self, vocabulary: data.Vocabulary) -> Optional['data.SpeechClientData']:
    """All speakers of --eval_split as clients, or None without one.

    Args:
      vocabulary: the token set of the transcripts.

    Returns:
      The evaluation speakers as clients (no SpecAugment), or None without --eval_split.
    """
    if not self.eval_split:
      return None
    return corpus_clients.load_client_data(self.corpus_dir, self.layout, self.eval_split,
                                           vocabulary,
                                           max_batch_seconds=self.max_batch_seconds,
                                           feature_cache_dir=self.feature_cache(),
                                           feature_normalization=self.feature_normalization)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The transformer and the weights it starts from.

  Each field is the flag of the same name, documented by its help.
  """
  model_config: str = field(
      'tiny', 'Transformer size (Pelikan et al. 2025, App. F and App. H.7, Table 21; tiny, '
      'tiny_deep and small are ours, for CPUs).', tuple(models.CONFIGS))
  seed_model: Optional[str] = field(
      None, 'Weights to start from (model.npz of train_central or train_federated); default '
      'random init.', fingerprint=False)

  def trainable_leaves(self, vocabulary_size: int) -> Tuple[List[Tuple[int, ...]], List[str]]:
    """(shapes, names) of the model's trainable tensors, in flatten order (what the privacy
    audit's canaries live in, `audit.audit_mechanism`).

    Args:
      vocabulary_size: the output vocabulary's size.
    """
    model = models.build_ctc_transformer(self.model_config, vocabulary_size)
    names, _ = model_io.tensor_names(model)
    return [tuple(v.shape) for v in model.trainable_variables], list(names)
