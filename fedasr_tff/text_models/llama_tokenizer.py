"""The tokenizer of a Llama checkpoint, to fixed-length ids and masks: `tokenizer.model` or
`tokenizer.json`, whichever the model folder has (`build_llama_tokenizer`).
"""

import json
import os
from typing import Optional

import tensorflow as tf
import tensorflow_text as tf_text

from fedasr_tff import validation

SENTENCEPIECE_FILE = 'tokenizer.model'
TOKENIZERS_FILE = 'tokenizer.json'
TOKENIZER_CONFIG_FILE = 'tokenizer_config.json'
PAD_ID = 0
# Hugging Face's LlamaTokenizer defaults.
_DEFAULTS = {'add_bos_token': True, 'add_eos_token': False, 'bos_token': '<s>',
             'eos_token': '</s>'}


class _SentencePiece:
  """Texts -> pieces [B, (n)] with a SentencePiece model, in the TensorFlow graph."""

  def __init__(self, path: str):
    with open(path, 'rb') as f:
      self._tokenizer = tf_text.SentencepieceTokenizer(model=f.read(), out_type=tf.int32)
    self.vocab_size = int(self._tokenizer.vocab_size())

  def token_id(self, token: str) -> Optional[int]:
    token_id = int(self._tokenizer.string_to_id(token))
    # Unknown strings map to the unknown token's id.
    if self._tokenizer.id_to_string(token_id).numpy().decode('utf-8') != token:
      return None
    return token_id

  def pieces(self, texts) -> tf.RaggedTensor:
    return self._tokenizer.tokenize(tf.convert_to_tensor(texts, tf.string))


class _HuggingFaceTokenizers:
  """Texts -> pieces [B, (n)] with a `tokenizer.json`, through the `tokenizers` library."""

  def __init__(self, path: str):
    try:
      import tokenizers
    except ImportError as e:
      raise ModuleNotFoundError(f'{path} needs the `tokenizers` library (pip install '
                                'tokenizers).') from e
    self._tokenizer = tokenizers.Tokenizer.from_file(path)
    self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)

  def token_id(self, token: str) -> Optional[int]:
    return self._tokenizer.token_to_id(token)

  def pieces(self, texts) -> tf.RaggedTensor:
    texts = [text.decode('utf-8') if isinstance(text, bytes) else text
             for text in tf.convert_to_tensor(texts, tf.string).numpy().tolist()]
    ids = [encoding.ids for encoding in
           self._tokenizer.encode_batch(texts, add_special_tokens=False)]
    return tf.RaggedTensor.from_row_lengths(
        tf.constant([i for row in ids for i in row], tf.int32, shape=[sum(map(len, ids))]),
        [len(row) for row in ids])


class LlamaTokenizer:
  """Texts -> {'token_ids': [B, max_length] int32, 'mask': [B, max_length] int32}.

  The sequence is `[BOS] pieces [EOS]` (each if its id is given), pieces cut to fit `max_length`,
  right-padded with id 0 (Llama has no padding token; the mask, 1 on tokens and 0 on padding, is
  what marks padding).
  """

  def __init__(self, backend, max_length: int, bos_id: Optional[int], eos_id: Optional[int]):
    """Initializes the tokenizer.

    Args:
      backend: the SentencePiece or `tokenizers` backend (`build_llama_tokenizer`).
      max_length: tokens per sequence, BOS and EOS included.
      bos_id: the BOS token's id, or None for no BOS.
      eos_id: the EOS token's id, or None for no EOS.

    Raises:
      ValueError: if `max_length` leaves no room for a piece.
    """
    validation.check_positive_integer('max_length', max_length)
    specials = [token_id for token_id in (bos_id, eos_id) if token_id is not None]
    if max_length <= len(specials):
      raise ValueError(f'`max_length` must be > {len(specials)} (the BOS/EOS tokens), got '
                       f'{max_length}.')
    self._backend = backend
    self.max_length = max_length
    self.vocab_size = backend.vocab_size
    self.bos_id, self.eos_id = bos_id, eos_id

  @property
  def in_graph(self) -> bool:
    """Whether tokenisation is TensorFlow ops (SentencePiece) rather than Python."""
    return isinstance(self._backend, _SentencePiece)

  def pieces(self, texts) -> tf.RaggedTensor:
    """The ids of each text.

    Args:
      texts: strings.

    Returns:
      [B, (pieces)] int32 ids, without BOS/EOS.
    """
    return self._backend.pieces(texts)

  def __call__(self, texts) -> dict:
    """Returns the {'token_ids', 'mask'} of the texts (class docstring)."""
    pieces = self.pieces(texts)
    room = self.max_length - (self.bos_id is not None) - (self.eos_id is not None)
    pieces = pieces[:, :room]

    def column(token_id):
      return tf.RaggedTensor.from_tensor(tf.fill([pieces.nrows(), 1], token_id))

    parts = ([column(self.bos_id)] if self.bos_id is not None else []) + [pieces]
    parts += [column(self.eos_id)] if self.eos_id is not None else []
    ids = tf.concat(parts, axis=1)
    ids, mask = tf_text.pad_model_inputs(ids, self.max_length, pad_value=PAD_ID)
    return {'token_ids': tf.cast(ids, tf.int32), 'mask': tf.cast(mask, tf.int32)}


def _token_string(value) -> Optional[str]:
  """A special token of `tokenizer_config.json`: a string, or {'content': string, ...}."""
  if isinstance(value, dict):
    return value.get('content')
  return value


def build_llama_tokenizer(model_dir: str, max_length: int, add_bos: Optional[bool] = None,
                          add_eos: Optional[bool] = None) -> LlamaTokenizer:
  """The tokenizer of a Hugging Face Llama model folder.

  - `tokenizer.model` is a SentencePiece model (Kudo and Richardson, "SentencePiece: A simple
    and language independent subword tokenizer and detokenizer for Neural Text Processing",
    EMNLP 2018, arXiv:1808.06226), as Llama 1/2 and TinyLlama ship it; tensorflow-text's
    `SentencepieceTokenizer` runs it in the TensorFlow graph (in a `tf.data` pipeline, say).
  - `tokenizer.json` is a Hugging Face `tokenizers` pipeline, as Llama 3 ships it (a byte-level
    BPE); the `tokenizers` library runs it, in Python, so it works eagerly only.

  When a folder has both, `tokenizer.model` is used. The special tokens follow the folder's
  `tokenizer_config.json` as Hugging Face's Llama tokenizers do: BOS if `add_bos_token`
  (default true), EOS if `add_eos_token` (default false).

  Args:
    model_dir: the folder.
    max_length: tokens per sequence, BOS and EOS included.
    add_bos: overrides the folder's `add_bos_token` when given.
    add_eos: overrides the folder's `add_eos_token` when given.

  Returns:
    The `LlamaTokenizer`.

  Raises:
    FileNotFoundError: if the folder has neither tokenizer file.
    ValueError: for a special token not in the vocabulary, or as `LlamaTokenizer`.
  """
  sentencepiece = os.path.join(model_dir, SENTENCEPIECE_FILE)
  json_file = os.path.join(model_dir, TOKENIZERS_FILE)
  if os.path.isfile(sentencepiece):
    backend = _SentencePiece(sentencepiece)
  elif os.path.isfile(json_file):
    backend = _HuggingFaceTokenizers(json_file)
  else:
    raise FileNotFoundError(f'No tokenizer in {model_dir}: neither {SENTENCEPIECE_FILE} nor '
                            f'{TOKENIZERS_FILE} is there.')
  config = dict(_DEFAULTS)
  config_path = os.path.join(model_dir, TOKENIZER_CONFIG_FILE)
  if os.path.isfile(config_path):
    with open(config_path) as f:
      config.update({key: value for key, value in json.load(f).items() if value is not None})
  wanted = {'bos_token': config['add_bos_token'] if add_bos is None else add_bos,
            'eos_token': config['add_eos_token'] if add_eos is None else add_eos}
  ids = {}
  for key, wanted_token in wanted.items():
    if not wanted_token:
      ids[key] = None
      continue
    token = _token_string(config[key])
    ids[key] = backend.token_id(token) if isinstance(token, str) else None
    if ids[key] is None:
      raise ValueError(f'`{key}` {token!r} ({config_path}) is not in the vocabulary of '
                       f'{model_dir}.')
  return LlamaTokenizer(backend, max_length, ids['bos_token'], ids['eos_token'])
