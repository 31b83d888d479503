"""BERT's WordPiece tokenizer over a `vocab.txt`, to fixed-length ids and masks, in TensorFlow.

Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019, arXiv:1810.04805, Sec. 3 "Input/Output Representations".
`tensorflow_text.BertTokenizer` does the splitting, so tokenisation runs in the TensorFlow graph
(in a `tf.data` pipeline, say).
"""

import json
import os

import tensorflow as tf
import tensorflow_text as tf_text

from fedasr_tff import validation

VOCAB_FILE = 'vocab.txt'
TOKENIZER_CONFIG_FILE = 'tokenizer_config.json'


def read_vocab(vocab_file: str) -> list:
  """The tokens of a `vocab.txt`, one a line.

  Args:
    vocab_file: the file.

  Returns:
    The tokens; a token's id is its line number from 0.

  Raises:
    FileNotFoundError: if the file does not exist.
  """
  if not os.path.isfile(vocab_file):
    raise FileNotFoundError(f'Vocabulary not found: {vocab_file}')
  with open(vocab_file, encoding='utf-8') as f:
    return [line.rstrip('\n') for line in f]


class WordPieceTokenizer(tf.Module):
  """Texts -> {'token_ids': [B, max_length] int32, 'mask': [B, max_length] int32}.

  TensorFlow ops throughout (tensorflow-text), and a `tf.Module`, so a module that holds it saves
  it with its vocabulary table in a SavedModel (loading one needs `import tensorflow_text`).

  A text is split on whitespace and punctuation (optionally lower-cased with accents stripped),
  each word into the longest vocabulary pieces left to right (continuations prefixed `##`, [UNK]
  for a word that does not split), and a sequence is `[CLS] pieces [SEP]`. Here the pieces are
  cut to `max_length - 2` and the sequence padded with [PAD] to `max_length`; the mask is 1 on
  [CLS] ... [SEP] and 0 on padding.
  """

  def __init__(self, vocab_file: str, lower_case: bool, max_length: int,
               cls_token: str = '[CLS]', sep_token: str = '[SEP]', pad_token: str = '[PAD]',
               unk_token: str = '[UNK]'):
    """Initializes the tokenizer.

    Args:
      vocab_file: the `vocab.txt`.
      lower_case: lower-case and strip accents (`normalize`).
      max_length: tokens per sequence, [CLS] and [SEP] included (>= 2).
      cls_token: the sequence's first token.
      sep_token: its last token.
      pad_token: the padding token.
      unk_token: the token of a word that does not split.

    Raises:
      ValueError: for `max_length` < 2 or a special token not in the vocabulary.
    """
    super().__init__(name='wordpiece_tokenizer')
    validation.check_positive_integer('max_length', max_length)
    if max_length < 2:
      raise ValueError(f'`max_length` must be >= 2 ([CLS] and [SEP]), got {max_length}.')
    vocab = read_vocab(vocab_file)
    ids = {token: i for i, token in enumerate(vocab)}
    for name, token in (('cls_token', cls_token), ('sep_token', sep_token),
                        ('pad_token', pad_token), ('unk_token', unk_token)):
      if token not in ids:
        raise ValueError(f'`{name}` {token!r} is not in {vocab_file}.')
    self.max_length = max_length
    self.vocab_size = len(vocab)
    self.cls_id, self.sep_id, self.pad_id = ids[cls_token], ids[sep_token], ids[pad_token]
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocab, tf.range(len(vocab), dtype=tf.int64)),
        num_oov_buckets=1)
    self.lower_case = lower_case
    self._tokenizer = tf_text.BertTokenizer(table, unknown_token=unk_token,
                                            token_out_type=tf.int64)

  def normalize(self, texts) -> tf.Tensor:
    """The texts BERT's way: lower case without accents if `lower_case`, else as given.

    Lower-casing is BERT's (Google's original `tokenization.py`, and Hugging Face's): Unicode
    lower case, then NFD decomposition with the combining marks (category Mn) removed. We do it
    ourselves rather than with the tokenizer's `lower_case=True`, which applies Unicode case
    *folding* and so maps `ß` to `ss`, where BERT keeps `ß` (and splits `Straße` differently).

    Args:
      texts: strings.

    Returns:
      A string tensor.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    if not self.lower_case:
      return texts
    texts = tf_text.normalize_utf8(tf.strings.lower(texts, encoding='utf-8'), 'NFD')
    return tf.strings.regex_replace(texts, r'\p{Mn}', '')

  def pieces(self, texts) -> tf.RaggedTensor:
    """The WordPiece ids of each text.

    Args:
      texts: strings.

    Returns:
      [B, (pieces)] int64 ids, without [CLS]/[SEP].
    """
    return self._tokenizer.tokenize(self.normalize(texts)).merge_dims(-2, -1)

  def __call__(self, texts) -> dict:
    """Returns the {'token_ids', 'mask'} of the texts (class docstring)."""
    pieces = self.pieces(texts)[:, :self.max_length - 2]
    ids, _ = tf_text.combine_segments([pieces], self.cls_id, self.sep_id)
    ids, mask = tf_text.pad_model_inputs(ids, self.max_length, pad_value=self.pad_id)
    return {'token_ids': tf.cast(ids, tf.int32), 'mask': tf.cast(mask, tf.int32)}


def build_wordpiece_tokenizer(model_dir: str, max_length: int) -> WordPieceTokenizer:
  """The tokenizer of a Hugging Face BERT model folder.

  Args:
    model_dir: the folder: its `vocab.txt`, lower-casing as its `tokenizer_config.json` says
      (`do_lower_case`, Hugging Face's default True if absent), and its special tokens.
    max_length: tokens per sequence.

  Returns:
    The `WordPieceTokenizer`.

  Raises:
    ValueError: for a `strip_accents` that differs from `do_lower_case`, or as
      `WordPieceTokenizer`.
  """
  config = {}
  config_path = os.path.join(model_dir, TOKENIZER_CONFIG_FILE)
  if os.path.isfile(config_path):
    with open(config_path) as f:
      config = json.load(f)
  lower_case = bool(config.get('do_lower_case', True))
  # Hugging Face strips accents exactly when lower-casing unless `strip_accents` says otherwise;
  # we tie the two together.
  strip_accents = config.get('strip_accents')
  if strip_accents is not None and bool(strip_accents) != lower_case:
    raise ValueError(f'{config_path}: strip_accents={strip_accents} with '
                     f'do_lower_case={lower_case} is not supported.')
  special = {key: config[key] for key in ('cls_token', 'sep_token', 'pad_token', 'unk_token')
             if isinstance(config.get(key), str)}
  return WordPieceTokenizer(os.path.join(model_dir, VOCAB_FILE), lower_case, max_length,
                            **special)
