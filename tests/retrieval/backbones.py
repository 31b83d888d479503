"""Tiny random frozen backbones (BERT and Llama) for the retrieval tests."""

import tempfile

import numpy as np

from fedasr_tff import text_models
from tests.text_models import tiny_bert
from tests.text_models import tiny_llama

# Two sequences, the second right-padded.
IDS = np.array([[2, 17, 5, 9, 8, 3], [2, 11, 3, 0, 0, 0]], np.int32)
MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], np.int32)


def tiny_backbone(kind: str, seed: int = 0) -> text_models.Backbone:
  """A frozen tiny random 'bert' or 'llama' backbone (d = 16 for BERT)."""
  with tempfile.TemporaryDirectory() as directory:
    if kind == 'bert':
      tiny_bert.write_tiny_bert(directory, seed=seed)
      return text_models.build_bert_encoder(directory)
    tiny_llama.write_tiny_llama(directory, seed=seed)
    return text_models.build_llama_decoder(directory)


def inputs(ids=IDS, mask=MASK) -> dict:
  return {'token_ids': np.asarray(ids, np.int32), 'mask': np.asarray(mask, np.int32)}
