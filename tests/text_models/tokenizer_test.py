"""The WordPiece tokenizer on a tiny vocabulary: hand-worked ids, [CLS]/[SEP], truncation,
padding and masks, BERT's lower-casing, and the `tokenizers` library's ids."""

import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf
import tokenizers

from fedasr_tff import text_models

_VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'the', 'cat', 'sat', '##s', 'on', 'mat', '.',
          ',', 'st', '##raße', '##ra', '##sse', 'cafe', 'Cafe', 'The', 'cats', '!', '北']
_IDS = {token: i for i, token in enumerate(_VOCAB)}


def _ids(*tokens):
  return [_IDS[token] for token in tokens]


class WordPieceTokenizerTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = self.enterContext(tempfile.TemporaryDirectory())
    self.vocab_file = os.path.join(self.directory, 'vocab.txt')
    with open(self.vocab_file, 'w', encoding='utf-8') as f:
      f.write(''.join(f'{token}\n' for token in _VOCAB))

  def test_ids_truncation_padding_and_mask(self):
    tokenizer = text_models.WordPieceTokenizer(self.vocab_file, lower_case=True, max_length=8)
    out = tokenizer(['The cats sat.', 'The cat sat on the mat, the cat!', 'dog'])
    self.assertEqual(out['token_ids'].dtype, tf.int32)
    self.assertEqual(out['token_ids'].numpy().tolist(), [
        _ids('[CLS]', 'the', 'cats', 'sat', '.', '[SEP]', '[PAD]', '[PAD]'),
        _ids('[CLS]', 'the', 'cat', 'sat', 'on', 'the', 'mat', '[SEP]'),
        _ids('[CLS]', '[UNK]', '[SEP]', '[PAD]', '[PAD]', '[PAD]', '[PAD]', '[PAD]'),
    ])
    self.assertEqual(out['mask'].numpy().tolist(), [[1] * 6 + [0] * 2, [1] * 8, [1] * 3 + [0] * 5])

  def test_lower_case_strips_accents_and_keeps_eszett(self):
    lower = text_models.WordPieceTokenizer(self.vocab_file, lower_case=True, max_length=8)
    self.assertEqual(lower.pieces(['Café STRAẞE Straße']).to_list(),
                     [_ids('cafe', 'st', '##raße', 'st', '##raße')])
    cased = text_models.WordPieceTokenizer(self.vocab_file, lower_case=False, max_length=8)
    self.assertEqual(cased.pieces(['Cafe The cafe straße Straße']).to_list(),
                     [_ids('Cafe', 'The', 'cafe', 'st', '##raße', '[UNK]')])

  def test_build_from_a_model_folder_reads_do_lower_case(self):
    for lower_case, expected in ((True, _ids('the')), (False, _ids('The'))):
      with open(os.path.join(self.directory, 'tokenizer_config.json'), 'w') as f:
        json.dump({'do_lower_case': lower_case, 'tokenizer_class': 'BertTokenizer'}, f)
      tokenizer = text_models.build_wordpiece_tokenizer(self.directory, max_length=4)
      self.assertEqual(tokenizer.pieces(['The']).to_list(), [expected])
    with open(os.path.join(self.directory, 'tokenizer_config.json'), 'w') as f:
      json.dump({'do_lower_case': True, 'strip_accents': False}, f)
    with self.assertRaisesRegex(ValueError, 'strip_accents=False'):
      text_models.build_wordpiece_tokenizer(self.directory, max_length=4)

  def test_argument_errors(self):
    with self.assertRaisesRegex(ValueError, '`max_length` must be >= 2'):
      text_models.WordPieceTokenizer(self.vocab_file, lower_case=True, max_length=1)
    with self.assertRaisesRegex(ValueError, "`cls_token` '<s>' is not in"):
      text_models.WordPieceTokenizer(self.vocab_file, lower_case=True, max_length=4,
                                     cls_token='<s>')
    with self.assertRaisesRegex(FileNotFoundError, 'Vocabulary not found'):
      text_models.WordPieceTokenizer(os.path.join(self.directory, 'none.txt'), True, 4)

  @parameterized.parameters(True, False)
  def test_matches_the_tokenizers_library(self, lower_case):
    reference = tokenizers.BertWordPieceTokenizer(dict(_IDS), lowercase=lower_case)
    ours = text_models.WordPieceTokenizer(self.vocab_file, lower_case=lower_case, max_length=40)
    texts = ['The cats sat on the mat.', 'Café, STRAẞE! 北 cats', 'unknown words, The Cat!!',
             '  spaces\tand\nnewlines  ']
    out = ours(texts)
    for text, ids, mask in zip(texts, out['token_ids'].numpy(), out['mask'].numpy(), strict=True):
      self.assertEqual(ids[mask > 0].tolist(), reference.encode(text).ids, msg=text)


if __name__ == '__main__':
  absltest.main()
