"""Transcript normalisation and the character vocabulary ([1], App. F).

Normalisation: lower case; typographic apostrophes become "'"; punctuation and symbols other
than "'" and "-" become spaces, and runs of spaces collapse. Digits and other characters stay
(and are counted as out of vocabulary by `encode`). English is transliterated to
ASCII (accents dropped through Unicode NFKD decomposition, plus the Latin letters that do not
decompose: æ→ae, œ→oe, ß→ss, ø→o, ...; [1] uses the unidecode package); French and German keep
their own letters.

Vocabulary: 26 letters, apostrophe, hyphen and the word boundary (space) make the 29 English
tokens, with ids 1..29; id 0 is the CTC blank. French and German add their letters. Characters
outside the vocabulary are not silently dropped: `encode` counts them for the caller to report.

References:
[1] M. Pelikan, S. S. Azam, V. Feldman, J. Silovsky, K. Talwar, C. G. Brinton,
    T. Likhomanenko. Enabling Differentially Private Federated Learning for Speech
    Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping. NeurIPS 2025,
    arXiv:2310.00098.
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
  """The normalised transcript (module docstring)."""
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
  """Characters <-> token ids 1..size; id 0 is the CTC blank (`models.BLANK_INDEX`)."""

  def __init__(self, language: str = 'en'):
    _check_language(language)
    self.language = language
    self.tokens: Tuple[str, ...] = _BASE_TOKENS + tuple(_EXTRA_LETTERS[language])
    self._ids: Dict[str, int] = {t: i + 1 for i, t in enumerate(self.tokens)}

  @property
  def size(self) -> int:
    """Number of tokens without the blank (29 for English)."""
    return len(self.tokens)

  def encode(self, text: str) -> Tuple[List[int], collections.Counter]:
    """Token ids of a normalised transcript, and a count of characters not in the vocabulary."""
    ids, unknown = [], collections.Counter()
    for char in text:
      token = self._ids.get(char)
      if token is None:
        unknown[char] += 1
      else:
        ids.append(token)
    return ids, unknown

  def decode(self, ids: Sequence[int]) -> str:
    """Text of token ids; the blank and ids outside the vocabulary are skipped."""
    chars = [self.tokens[i - 1] for i in ids if 1 <= i <= len(self.tokens)]
    return ' '.join(''.join(chars).split())
