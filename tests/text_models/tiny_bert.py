"""Tiny random BERT checkpoints written in exactly Hugging Face's format, for tests.

A model folder holds `config.json` and either `model.safetensors` or shards
`model-0000i-of-0000n.safetensors` listed by `model.safetensors.index.json` (`metadata` with the
total size, `weight_map` from tensor name to shard), as `transformers` saves them. Linear
weights are [out, in]. The tensors a `BertModel` saves beyond the encoder (`position_ids`, the
pooler) are included so that readers are seen to ignore them.
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


def write_checkpoint(directory: str, config: dict, tensors: dict, num_shards: int = 1) -> None:
  """Writes `config.json` and the tensors, in one file or `num_shards` shards with an index."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(config, f, indent=2)
  if num_shards == 1:
    safetensors_numpy.save_file(tensors, os.path.join(directory, 'model.safetensors'),
                                metadata={'format': 'pt'})
    return
  names = sorted(tensors)
  weight_map = {}
  for shard in range(num_shards):
    file_name = f'model-{shard + 1:05d}-of-{num_shards:05d}.safetensors'
    part = {name: tensors[name] for name in names[shard::num_shards]}
    safetensors_numpy.save_file(part, os.path.join(directory, file_name),
                                metadata={'format': 'pt'})
    weight_map.update(dict.fromkeys(part, file_name))
  index = {'metadata': {'total_size': int(sum(t.nbytes for t in tensors.values()))},
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
