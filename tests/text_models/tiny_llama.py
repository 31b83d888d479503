"""Tiny random Llama checkpoints written in exactly Hugging Face's format, for tests.

`LlamaForCausalLM.save_pretrained` writes `config.json` and the tensors `model.embed_tokens.weight`,
`model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
mlp.{gate,up,down}_proj}.weight`, `model.norm.weight` and, unless the embeddings are tied,
`lm_head.weight`; Linear weights are [out, in]. Two architectures:

- `LLAMA2_CONFIG`: Llama 2 / TinyLlama style, grouped-query attention, untied LM head, no RoPE
  scaling, stored in float32.
- `LLAMA3_CONFIG`: Llama 3.2 style, grouped-query attention, tied embeddings, `rope_scaling` of
  rope_type llama3, θ = 500000, stored in bfloat16 as Meta publishes it. The scaling constants
  put one rotary frequency in each of the three bands of the scaling (kept, interpolated,
  divided by the factor) at head_dim 8.
"""

import numpy as np

from tests.text_models import tiny_bert

LLAMA2_CONFIG = {
    'architectures': ['LlamaForCausalLM'],
    'model_type': 'llama',
    'vocab_size': 48,
    'hidden_size': 16,
    'intermediate_size': 40,
    'num_hidden_layers': 2,
    'num_attention_heads': 4,
    'num_key_value_heads': 2,
    'hidden_act': 'silu',
    'max_position_embeddings': 32,
    'rms_norm_eps': 1e-5,
    'rope_theta': 10000.0,
    'rope_scaling': None,
    'tie_word_embeddings': False,
    'attention_bias': False,
    'attention_dropout': 0.0,
    'mlp_bias': False,
    'bos_token_id': 1,
    'eos_token_id': 2,
    'initializer_range': 0.02,
    'pretraining_tp': 1,
    'torch_dtype': 'float32',
    'use_cache': True,
}

LLAMA3_CONFIG = dict(
    LLAMA2_CONFIG,
    vocab_size=56,
    hidden_size=24,
    intermediate_size=48,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=1024,
    rope_theta=500000.0,
    rope_scaling={'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0,
                  'high_freq_factor': 4.0, 'original_max_position_embeddings': 256},
    tie_word_embeddings=True,
    torch_dtype='bfloat16',
)


def random_llama_tensors(config: dict, seed: int = 0) -> dict:
  """{Hugging Face tensor name: float32 array} of a LlamaForCausalLM with random weights
  (projections of standard deviation 1.5/√fan-in, so attention is far from uniform; norm gains
  around 1)."""
  rng = np.random.default_rng(seed)
  d, f = config['hidden_size'], config['intermediate_size']
  head_dim = config.get('head_dim') or d // config['num_attention_heads']
  q = config['num_attention_heads'] * head_dim
  kv = config['num_key_value_heads'] * head_dim

  def linear(out, fan_in):
    return (rng.normal(0.0, 1.5 / np.sqrt(fan_in), (out, fan_in))).astype(np.float32)

  def gain(n):
    return (1.0 + 0.2 * rng.normal(size=n)).astype(np.float32)

  tensors = {'model.embed_tokens.weight':
             rng.normal(0.0, 1.0, (config['vocab_size'], d)).astype(np.float32)}
  shapes = {'self_attn.q_proj': (q, d), 'self_attn.k_proj': (kv, d), 'self_attn.v_proj': (kv, d),
            'self_attn.o_proj': (d, q), 'mlp.gate_proj': (f, d), 'mlp.up_proj': (f, d),
            'mlp.down_proj': (d, f)}
  for i in range(config['num_hidden_layers']):
    for name, shape in shapes.items():
      tensors[f'model.layers.{i}.{name}.weight'] = linear(*shape)
    for name in ('input_layernorm', 'post_attention_layernorm'):
      tensors[f'model.layers.{i}.{name}.weight'] = gain(d)
  tensors['model.norm.weight'] = gain(d)
  if not config['tie_word_embeddings']:
    tensors['lm_head.weight'] = linear(config['vocab_size'], d)
  return tensors


def write_tiny_llama(directory: str, config: dict = None, seed: int = 0, num_shards: int = 1,
                     bfloat16: bool = None, **overrides) -> tuple:
  """A random tiny Llama checkpoint in `directory` (`config` defaults to `LLAMA2_CONFIG`,
  `bfloat16` to whether its torch_dtype is bfloat16); returns (config, tensors as the model
  will read them, i.e. rounded to bfloat16 where stored so)."""
  config = dict(config or LLAMA2_CONFIG, **overrides)
  if bfloat16 is None:
    bfloat16 = config.get('torch_dtype') == 'bfloat16'
  tensors = random_llama_tensors(config, seed)
  tiny_bert.write_checkpoint(directory, config, tensors, num_shards, bfloat16)
  if bfloat16:
    tensors = {name: tiny_bert.from_bfloat16(tiny_bert.to_bfloat16(value))
               for name, value in tensors.items()}
  return config, tensors
