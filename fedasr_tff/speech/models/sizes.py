"""Named sizes of the CTC transformer.

The baseline of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, App. F, its variants (App. H.7, Table 21) and sizes for CPU runs.
"""

import dataclasses
from typing import Mapping
from typing import Union

from fedasr_tff import validation


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Settings of `build_ctc_transformer`.

  Attributes:
    num_blocks: pre-LN transformer blocks.
    model_dim: d, width of the residual stream.
    mlp_dim: hidden width of each block's ReLU MLP.
    num_heads: attention heads.
    num_mels: log-mel features per frame (the input width).
    conv_kernel: kernel of the 1-D convolution front-end (stride `conv_stride`, GLU).
    conv_stride: feature frames per output frame.
    dropout: dropout on attention weights, the MLP hidden layer and after the front-end.
    layer_drop: probability of skipping a whole block during training.
    cape_max_global_shift: CAPE's random global shift during training, in seconds.
    cape_freq_scale: CAPE's scale on positions (seconds) before the sinusoids.
  """
  num_blocks: int
  model_dim: int
  mlp_dim: int
  num_heads: int = 4
  num_mels: int = 80
  conv_kernel: int = 7
  conv_stride: int = 3
  dropout: float = 0.3
  layer_drop: float = 0.3
  cape_max_global_shift: float = 30.0
  cape_freq_scale: float = 30.0

  def __post_init__(self):
    for name in ('num_blocks', 'model_dim', 'mlp_dim', 'num_heads', 'num_mels', 'conv_kernel',
                 'conv_stride'):
      validation.check_positive_integer(name, getattr(self, name))
    if self.model_dim % self.num_heads:
      raise ValueError(f'`model_dim` ({self.model_dim}) must be divisible by `num_heads` '
                       f'({self.num_heads}).')
    validation.check_unit_interval_right_open('dropout', self.dropout)
    validation.check_unit_interval_right_open('layer_drop', self.layer_drop)
    validation.check_non_negative('cape_max_global_shift', self.cape_max_global_shift)
    validation.check_positive('cape_freq_scale', self.cape_freq_scale)


CONFIGS: Mapping[str, TransformerConfig] = {
    # The paper's baseline (App. F: 255M; our count: 255.8M parameters with 30 outputs).
    'baseline': TransformerConfig(num_blocks=36, model_dim=768, mlp_dim=3072),
    # The paper's Table 21 variants (layer drop 0.1 for all).
    'narrow': TransformerConfig(num_blocks=36, model_dim=512, mlp_dim=2048, layer_drop=0.1),
    'wide': TransformerConfig(num_blocks=36, model_dim=1024, mlp_dim=4096, layer_drop=0.1),
    'shallow': TransformerConfig(num_blocks=16, model_dim=768, mlp_dim=3072, layer_drop=0.1),
    'deep': TransformerConfig(num_blocks=72, model_dim=768, mlp_dim=3072, layer_drop=0.1),
    # Sizes for CPU runs (tests, the demo). CAPE's global shift is a regulariser for long runs;
    # in short ones it keeps a small model from fitting (docs/benchmarks.md, "Measurements
    # behind the code"), so it is off here.
    'small': TransformerConfig(num_blocks=6, model_dim=192, mlp_dim=768, dropout=0.1,
                               layer_drop=0.1, cape_max_global_shift=0.0),
    'tiny': TransformerConfig(num_blocks=2, model_dim=96, mlp_dim=384, dropout=0.0,
                              layer_drop=0.0, cape_max_global_shift=0.0),
    # `tiny` three times as deep, for the ablation: the paper explains the benefit of
    # per-layer clipping by update norms whose imbalance grows with depth.
    'tiny_deep': TransformerConfig(num_blocks=6, model_dim=96, mlp_dim=384, dropout=0.0,
                                   layer_drop=0.0, cape_max_global_shift=0.0),
}


def get_config(config: Union[str, TransformerConfig]) -> TransformerConfig:
  """A named configuration, or `config` itself.

  Args:
    config: a name in `CONFIGS` or a `TransformerConfig`.

  Returns:
    The `TransformerConfig`.

  Raises:
    ValueError: for an unknown name.
  """
  if isinstance(config, TransformerConfig):
    return config
  if config not in CONFIGS:
    raise ValueError(f'Unknown model config {config!r}; known: {", ".join(sorted(CONFIGS))}.')
  return CONFIGS[config]
