"""The CTC transformer for speech recognition.

The model of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, Sec. 4 and App. F. Its TFF wrapper (`ctc_speech_model`) loads on first use
(PEP 562): it imports TensorFlow Federated, which running the Keras model needs not.
"""

import importlib

from fedasr_tff.speech.models.ctc import BLANK_INDEX
from fedasr_tff.speech.models.ctc import beam_search_decode
from fedasr_tff.speech.models.ctc import ctc_loss
from fedasr_tff.speech.models.ctc import greedy_decode
from fedasr_tff.speech.models.ctc import greedy_decode_with_scores
from fedasr_tff.speech.models.ctc import ids_to_texts
from fedasr_tff.speech.models.sizes import CONFIGS
from fedasr_tff.speech.models.sizes import TransformerConfig
from fedasr_tff.speech.models.sizes import get_config
from fedasr_tff.speech.models.transformer import BLOCK_PARAMETERS
from fedasr_tff.speech.models.transformer import MLP_PARAMETERS
from fedasr_tff.speech.models.transformer import OUTER_LAYERS
from fedasr_tff.speech.models.transformer import BlockTensor
from fedasr_tff.speech.models.transformer import CTCTransformer
from fedasr_tff.speech.models.transformer import block_parameter
from fedasr_tff.speech.models.transformer import block_tensor
from fedasr_tff.speech.models.transformer import build_ctc_transformer
from fedasr_tff.speech.models.transformer import is_mlp_tensor
from fedasr_tff.speech.models.transformer import output_lengths

_TFF_MODEL = ('CTCSpeechModel', 'build_tff_model_fn')


def __getattr__(name):
  if name in _TFF_MODEL:
    return getattr(importlib.import_module(f'{__name__}.ctc_speech_model'), name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted([*globals(), *_TFF_MODEL])
