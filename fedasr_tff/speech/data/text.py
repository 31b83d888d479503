"""Transcript normalisation and the character vocabulary.

As in Pelikan et al., "Enabling Differentially Private Federated Learning for Speech Recognition:
Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025, arXiv:2310.00098, App. F.
"""

import collections
import string
from typing import Dict
from typing import List
from typing import Sequence
from typing import Tuple
import unicodedata

LANGUAGES = ('en', 'fr', 'de')
WORD_BOUNDARY = ' '
_BASE_TOKENS = tuple(string.ascii_lowercase) + ("'", '-', WORD_BOUNDARY)
_EXTRA_LETTERS = {
    'en': '',
    'fr': 'àâæçéèêëîïôœùûüÿ',
    'de': 'äöüß',
}
_APOSTROPHES = str.maketrans({'’': "'", '‘': "'", 'ʼ': "'", '`': "'", '´': "'"})
_NON_DECOMPOSING = str.maketrans({
    'æ': 'ae', 'œ': 'oe', 'ß': 'ss', 'ø': 'o', 'đ': 'd', 'ð': 'd', 'þ': 'th', 'ł': 'l',
    'ı': 'i',
})


def _check_language(language: str) -> None:
  if language not in LANGUAGES:
    raise ValueError(f'`language` must be one of {LANGUAGES}, got {language!r}.')


def normalize_transcript(text: str, language: str = 'en') -> str:
  """The normalised transcript.

  Lower case; typographic apostrophes become "'"; punctuation and symbols other than "'" and "-"
  become spaces, and runs of spaces collapse. Digits and other characters stay (and are counted
  as out of vocabulary by `Vocabulary.encode`). English is transliterated to ASCII (accents
  dropped through Unicode NFKD decomposition, plus the Latin letters that do not decompose:
  æ→ae, œ→oe, ß→ss, ø→o, ...; the paper uses the unidecode package); French and German keep
  their own letters.

  Args:
    text: a transcript.
    language: one of `LANGUAGES`.

  Returns:
    The normalised text.

  Raises:
    ValueError: for an unknown language.
  """
  _check_language(language)
  text = unicodedata.normalize('NFC', text).lower().translate(_APOSTROPHES)
  if language == 'en':
    text = text.translate(_NON_DECOMPOSING)
    text = ''.join(c for c in unicodedata.normalize('NFKD', text)
                   if not unicodedata.combining(c))
  # Punctuation and symbols become spaces; anything else (letters, digits, ...) stays, so that
  # characters outside the vocabulary reach `encode` and get counted.
  kept = [' ' if c not in "'-" and unicodedata.category(c)[0] in 'PSZC' else c for c in text]
  return ' '.join(''.join(kept).split())


class Vocabulary:
  """Characters <-> token ids 1..size; id 0 is the CTC blank (`models.BLANK_INDEX`).

  26 letters, apostrophe, hyphen and the word boundary (space) make the 29 English tokens, with
  ids 1..29; French and German add their letters. Characters outside the vocabulary are not
  silently dropped: `encode` counts them for the caller to report.
  """

  def __init__(self, language: str = 'en'):
    """Initializes the vocabulary of a language.

    Args:
      language: one of `LANGUAGES`.

    Raises:
      ValueError: for an unknown language.
    """
    _check_language(language)
    self.language = language
    self.tokens: Tuple[str, ...] = _BASE_TOKENS + tuple(_EXTRA_LETTERS[language])
    self._ids: Dict[str, int] = {t: i + 1 for i, t in enumerate(self.tokens)}

  @property
  def size(self) -> int:
    """Number of tokens without the blank (29 for English)."""
    return len(self.tokens)

  def encode(self, text: str) -> Tuple[List[int], collections.Counter]:
    """Encodes a normalised transcript.

    Args:
      text: a transcript normalised by `normalize_transcript`.

    Returns:
      (token ids, a count of the characters not in the vocabulary, which are skipped).
    """
    ids, unknown = [], collections.Counter()
    for char in text:
      token = self._ids.get(char)
      if token is None:
        unknown[char] += 1
      else:
        ids.append(token)
    return ids, unknown

  def decode(self, ids: Sequence[int]) -> str:
    """Decodes token ids.

    Args:
      ids: token ids.

    Returns:
      The text, the blank and ids outside the vocabulary skipped and runs of spaces collapsed.
    """
    chars = [self.tokens[i - 1] for i in ids if 1 <= i <= len(self.tokens)]
    return ' '.join(''.join(chars).split())
