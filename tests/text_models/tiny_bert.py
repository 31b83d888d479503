"""Tiny random BERT checkpoints written in exactly Hugging Face's format, for tests.

A model folder holds `config.json` and either `model.safetensors` or shards
`model-0000i-of-0000n.safetensors` listed by `model.safetensors.index.json` (`metadata` with the
total size, `weight_map` from tensor name to shard), as `transformers` saves them, in float32
or, as Llama checkpoints are published, bfloat16. Linear weights are [out, in]. The tensors a
`BertModel` saves beyond the encoder (`position_ids`, the pooler) are included so that readers
are seen to ignore them.
"""

import json
import os

import numpy as np
from safetensors import numpy as safetensors_numpy

TINY_CONFIG = {
    'architectures': ['BertModel'],
    'model_type': 'bert',
    'vocab_size': 40,
    'hidden_size': 16,
    'num_hidden_layers': 2,
    'num_attention_heads': 4,
    'intermediate_size': 24,
    'hidden_act': 'gelu',
    'max_position_embeddings': 12,
    'type_vocab_size': 2,
    'layer_norm_eps': 1e-12,
    'hidden_dropout_prob': 0.1,
    'attention_probs_dropout_prob': 0.1,
    'initializer_range': 0.02,
    'pad_token_id': 0,
    'position_embedding_type': 'absolute',
}


def random_bert_tensors(config: dict, seed: int = 0) -> dict:
  """{Hugging Face tensor name: float32 array} of a BertModel with random weights (scale 0.5,
  so attention is far from uniform and GELU far from linear; LayerNorm gains around 1)."""
  rng = np.random.default_rng(seed)
  d, f = config['hidden_size'], config['intermediate_size']

  def normal(*shape):
    return rng.normal(0.0, 0.5, shape).astype(np.float32)

  def gain(n):
    return (1.0 + 0.1 * rng.normal(size=n)).astype(np.float32)

  tensors = {
      'embeddings.word_embeddings.weight': normal(config['vocab_size'], d),
      'embeddings.position_embeddings.weight': normal(config['max_position_embeddings'], d),
      'embeddings.token_type_embeddings.weight': normal(config['type_vocab_size'], d),
      'embeddings.LayerNorm.weight': gain(d),
      'embeddings.LayerNorm.bias': normal(d),
      'embeddings.position_ids': np.arange(config['max_position_embeddings'])[None],
      'pooler.dense.weight': normal(d, d),
      'pooler.dense.bias': normal(d),
  }
  shapes = {'attention.self.query': (d, d), 'attention.self.key': (d, d),
            'attention.self.value': (d, d), 'attention.output.dense': (d, d),
            'intermediate.dense': (f, d), 'output.dense': (d, f)}
  for i in range(config['num_hidden_layers']):
    for name, shape in shapes.items():
      tensors[f'encoder.layer.{i}.{name}.weight'] = normal(*shape) / np.sqrt(shape[1] / 4)
      tensors[f'encoder.layer.{i}.{name}.bias'] = normal(shape[0])
    for name in ('attention.output.LayerNorm', 'output.LayerNorm'):
      tensors[f'encoder.layer.{i}.{name}.weight'] = gain(d)
      tensors[f'encoder.layer.{i}.{name}.bias'] = normal(d)
  return tensors


def to_bfloat16(array: np.ndarray) -> np.ndarray:
  """The bfloat16 bits (uint16) nearest to float32 `array`, ties to even."""
  bits = np.asarray(array, np.float32).view(np.uint32).astype(np.uint64)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bfloat16(bits: np.ndarray) -> np.ndarray:
  """float32 values of bfloat16 bits (uint16)."""
  return (bits.astype(np.uint32) << 16).view(np.float32)


def save_file(tensors: dict, path: str, bfloat16: bool = False) -> None:
  """One safetensors file; with `bfloat16`, float32 tensors are stored rounded to bfloat16.

  NumPy has no bfloat16, so the bits are saved as uint16 and the header's dtype `U16` is then
  relabelled `BF16` (header: little-endian uint64 length, then JSON padded with spaces to a
  multiple of 8 bytes).
  """
  if bfloat16:
    tensors = {name: to_bfloat16(value) if value.dtype == np.float32 else value
               for name, value in tensors.items()}
  safetensors_numpy.save_file(tensors, path, metadata={'format': 'pt'})
  if not bfloat16:
    return
  with open(path, 'rb') as f:
    length = int.from_bytes(f.read(8), 'little')
    header, data = json.loads(f.read(length)), f.read()
  for name, entry in header.items():
    if name != '__metadata__' and entry['dtype'] == 'U16':
      entry['dtype'] = 'BF16'
  text = json.dumps(header).encode()
  text += b' ' * (-len(text) % 8)
  with open(path, 'wb') as f:
    f.write(len(text).to_bytes(8, 'little') + text + data)


def write_checkpoint(directory: str, config: dict, tensors: dict, num_shards: int = 1,
                     bfloat16: bool = False) -> None:
  """Writes `config.json` and the tensors, in one file or `num_shards` shards with an index."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(config, f, indent=2)
  if num_shards == 1:
    save_file(tensors, os.path.join(directory, 'model.safetensors'), bfloat16)
    return
  names = sorted(tensors)
  weight_map = {}
  for shard in range(num_shards):
    file_name = f'model-{shard + 1:05d}-of-{num_shards:05d}.safetensors'
    part = {name: tensors[name] for name in names[shard::num_shards]}
    save_file(part, os.path.join(directory, file_name), bfloat16)
    weight_map.update(dict.fromkeys(part, file_name))
  total_size = sum(t.nbytes // (2 if bfloat16 and t.dtype == np.float32 else 1)
                   for t in tensors.values())
  index = {'metadata': {'total_size': int(total_size)},
           'weight_map': dict(sorted(weight_map.items()))}
  with open(os.path.join(directory, 'model.safetensors.index.json'), 'w') as f:
    json.dump(index, f, indent=2)


def write_tiny_bert(directory: str, seed: int = 0, num_shards: int = 1, prefix: str = '',
                    **overrides) -> tuple:
  """A random tiny BERT checkpoint in `directory`; returns (config, tensors without prefix)."""
  config = dict(TINY_CONFIG, **overrides)
  tensors = random_bert_tensors(config, seed)
  write_checkpoint(directory, config, {prefix + k: v for k, v in tensors.items()}, num_shards)
  return config, tensors
