"""Frozen pretrained text models in Keras (BERT encoders, Llama decoders), loaded from Hugging
Face checkpoints.

The backbone of the soft-embedding adapter and classifier-as-retriever of Fofonjka, Zehtabi,
Behtash, Mauer and Stout, "Federated Learning with Ad-hoc Adapter Insertions: The Case of
Soft-Embeddings for Training Classifier-as-Retriever", webAI 2025 (Secs. 3.1-3.2): a frozen
language model whose token embeddings (`embed`) pass through a trainable adapter before its
transformer (`encode`), pooled (`pool`) into one vector per text. Usage: `docs/retrieval.md`.
"""

from fedasr_tff.text_models.backbone import Backbone
from fedasr_tff.text_models.backbone import trim_padding
from fedasr_tff.text_models.bert import ACTIVATIONS
from fedasr_tff.text_models.bert import BertConfig
from fedasr_tff.text_models.bert import BertEncoder
from fedasr_tff.text_models.bert import build_bert_encoder
from fedasr_tff.text_models.checkpoints import load_tensors
from fedasr_tff.text_models.checkpoints import read_config
from fedasr_tff.text_models.checkpoints import sha256_of_file
from fedasr_tff.text_models.frozen import MAX_MESSAGE_BYTES
from fedasr_tff.text_models.frozen import FrozenBackbone
from fedasr_tff.text_models.frozen import FrozenWeight
from fedasr_tff.text_models.llama import LlamaConfig
from fedasr_tff.text_models.llama import LlamaDecoder
from fedasr_tff.text_models.llama import build_llama_decoder
from fedasr_tff.text_models.llama_tokenizer import LlamaTokenizer
from fedasr_tff.text_models.llama_tokenizer import build_llama_tokenizer
from fedasr_tff.text_models.minilm import load_minilm
from fedasr_tff.text_models.pooling import POOLINGS
from fedasr_tff.text_models.pooling import pool
from fedasr_tff.text_models.tokenizer import WordPieceTokenizer
from fedasr_tff.text_models.tokenizer import build_wordpiece_tokenizer
