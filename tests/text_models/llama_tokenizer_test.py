"""The Llama tokenizer loader on tiny tokenizers trained in the test, offline: a SentencePiece
`tokenizer.model` (the `sentencepiece` library trains it) and a byte-level BPE `tokenizer.json`
(the `tokenizers` library trains it), both test-only dependencies; ids against those libraries
and Hugging Face's LlamaTokenizer, BOS/EOS as `tokenizer_config.json` says, truncation, padding."""

import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import sentencepiece
import tensorflow as tf
import tokenizers
import transformers

from fedasr_tff import text_models

_CORPUS = ['the cat sat on the mat', 'a dog ran in the park', 'federated learning with privacy',
           'soft embeddings adapt a frozen language model'] * 10
_TEXTS = ['the cat sat on the mat.', 'federated dogs, Straße 北!', '', 'a' * 40]


def _write_config(directory, **config):
  with open(os.path.join(directory, 'tokenizer_config.json'), 'w') as f:
    json.dump(config, f)


# SentencePiece's trainer crashes (SIGSEGV) in a process that has imported TensorFlow, so it runs
# in a fresh interpreter; encoding with a trained model is fine in this one.
_TRAIN_SENTENCEPIECE = """
import io, json, sys
import sentencepiece
model = io.BytesIO()
sentencepiece.SentencePieceTrainer.train(
    sentence_iterator=iter(json.loads(sys.argv[2])), model_writer=model, vocab_size=48,
    model_type='unigram', unk_id=0, bos_id=1, eos_id=2, pad_id=-1, hard_vocab_limit=False,
    minloglevel=2)
with open(sys.argv[1], 'wb') as f:
  f.write(model.getvalue())
"""


def _write_sentencepiece(directory):
  """A unigram SentencePiece model with Llama's special ids (<unk> 0, <s> 1, </s> 2)."""
  path = os.path.join(directory, 'tokenizer.model')
  subprocess.run([sys.executable, '-c', _TRAIN_SENTENCEPIECE, path, json.dumps(_CORPUS)],
                 check=True)
  return sentencepiece.SentencePieceProcessor(model_file=path)


def _write_tokenizer_json(directory):
  """A byte-level BPE with Llama 3's special tokens, saved as `tokenizer.json`."""
  tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=300, special_tokens=['<|begin_of_text|>', '<|end_of_text|>'],
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
  tokenizer.train_from_iterator(_CORPUS, trainer)
  tokenizer.save(os.path.join(directory, 'tokenizer.json'))
  return tokenizer


def _real_ids(out):
  return [ids[mask > 0].tolist() for ids, mask in zip(out['token_ids'].numpy(),
                                                      out['mask'].numpy(), strict=True)]


class LlamaTokenizerTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = self.enterContext(tempfile.TemporaryDirectory())

  def test_sentencepiece_ids_bos_eos_truncation_and_padding(self):
    reference = _write_sentencepiece(self.directory)
    tokenizer = text_models.build_llama_tokenizer(self.directory, max_length=12)
    self.assertTrue(tokenizer.in_graph)
    self.assertEqual((tokenizer.bos_id, tokenizer.eos_id), (1, None))
    out = tokenizer(_TEXTS)
    self.assertEqual(out['token_ids'].dtype, tf.int32)
    self.assertEqual(out['token_ids'].shape, [4, 12])
    expected = [[1] + reference.encode(text)[:11] for text in _TEXTS]
    self.assertEqual(_real_ids(out), expected)
    self.assertEqual(out['mask'].numpy().sum(1).tolist(), [len(ids) for ids in expected])
    self.assertTrue((out['token_ids'].numpy()[out['mask'].numpy() == 0] == 0).all())
    self.assertEqual(out['mask'].numpy()[3].tolist(), [1] * 12)   # Truncated.
    # The tokenizer_config decides BOS/EOS; arguments override it.
    _write_config(self.directory, add_bos_token=False, add_eos_token=True)
    tokenizer = text_models.build_llama_tokenizer(self.directory, max_length=12)
    self.assertEqual(_real_ids(tokenizer(_TEXTS)),
                     [reference.encode(text)[:11] + [2] for text in _TEXTS])
    tokenizer = text_models.build_llama_tokenizer(self.directory, 12, add_bos=True)
    self.assertEqual(_real_ids(tokenizer(_TEXTS)),
                     [[1] + reference.encode(text)[:10] + [2] for text in _TEXTS])
    # In a tf.data pipeline.
    dataset = tf.data.Dataset.from_tensor_slices(_TEXTS).batch(2).map(tokenizer)
    self.assertEqual(_real_ids(next(iter(dataset))), _real_ids(tokenizer(_TEXTS[:2])))

  def test_sentencepiece_matches_transformers_llama_tokenizer(self):
    _write_sentencepiece(self.directory)
    reference = transformers.LlamaTokenizer(os.path.join(self.directory, 'tokenizer.model'),
                                            legacy=True)
    ours = text_models.build_llama_tokenizer(self.directory, max_length=64)
    self.assertEqual(_real_ids(ours(_TEXTS)), [reference.encode(text) for text in _TEXTS])

  def test_tokenizer_json_llama3_style(self):
    reference = _write_tokenizer_json(self.directory)
    _write_config(self.directory, bos_token='<|begin_of_text|>',
                  eos_token={'content': '<|end_of_text|>', 'special': True})
    tokenizer = text_models.build_llama_tokenizer(self.directory, max_length=10, add_eos=True)
    self.assertFalse(tokenizer.in_graph)
    self.assertEqual((tokenizer.bos_id, tokenizer.eos_id), (0, 1))
    expected = [[0] + reference.encode(text, add_special_tokens=False).ids[:8] + [1]
                for text in _TEXTS]
    self.assertGreater(max(len(ids) for ids in expected), 3)
    self.assertEqual(_real_ids(tokenizer(_TEXTS)), expected)
    self.assertEqual(tokenizer(_TEXTS)['token_ids'].shape, [4, 10])

  def test_tokenizer_model_is_preferred_over_tokenizer_json(self):
    _write_sentencepiece(self.directory)
    _write_tokenizer_json(self.directory)
    self.assertTrue(text_models.build_llama_tokenizer(self.directory, 8).in_graph)

  def test_errors(self):
    with self.assertRaisesRegex(FileNotFoundError,
                                'neither tokenizer.model nor tokenizer.json'):
      text_models.build_llama_tokenizer(self.directory, 8)
    _write_sentencepiece(self.directory)
    _write_config(self.directory, bos_token='<|begin_of_text|>')
    with self.assertRaisesRegex(ValueError, "`bos_token` '<|begin_of_text|>'"):
      text_models.build_llama_tokenizer(self.directory, 8)
    _write_config(self.directory, add_eos_token=True)
    with self.assertRaisesRegex(ValueError, r'`max_length` must be > 2'):
      text_models.build_llama_tokenizer(self.directory, 2)


if __name__ == '__main__':
  absltest.main()
