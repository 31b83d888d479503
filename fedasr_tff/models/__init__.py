"""The CTC transformer for speech recognition.

The model of Pelikan et al., "Enabling Differentially Private Federated Learning for Speech
Recognition: Benchmarks, Adaptive Optimizers and Gradient Clipping", NeurIPS 2025,
arXiv:2310.00098, Sec. 4 and App. F.
"""

from fedasr_tff.models.configs import CONFIGS
from fedasr_tff.models.configs import TransformerConfig
from fedasr_tff.models.configs import get_config
from fedasr_tff.models.ctc import BLANK_INDEX
from fedasr_tff.models.ctc import beam_search_decode
from fedasr_tff.models.ctc import ctc_loss
from fedasr_tff.models.ctc import greedy_decode
from fedasr_tff.models.ctc import greedy_decode_with_scores
from fedasr_tff.models.ctc import ids_to_texts
from fedasr_tff.models.tff_model import CTCSpeechModel
from fedasr_tff.models.tff_model import build_tff_model_fn
from fedasr_tff.models.transformer import BLOCK_PARAMETERS
from fedasr_tff.models.transformer import MLP_PARAMETERS
from fedasr_tff.models.transformer import OUTER_LAYERS
from fedasr_tff.models.transformer import BlockTensor
from fedasr_tff.models.transformer import CTCTransformer
from fedasr_tff.models.transformer import block_parameter
from fedasr_tff.models.transformer import block_tensor
from fedasr_tff.models.transformer import build_ctc_transformer
from fedasr_tff.models.transformer import output_lengths
