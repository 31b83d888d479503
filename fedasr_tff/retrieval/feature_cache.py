"""The frozen backbone's pooled features, cached across runs (the classifier-only mode).

In the classifier-only mode (the paper's mode A, Fofonjka et al., webAI 2025) the backbone is
frozen, so every text's pooled state depends only on the backbone's weights, the text's tokens
and the pooling, and computing them takes most of a run (docs/benchmarks.md, "Measurements behind
the code"). They are computed once per (backbone, tokens, pooling) and kept as `KEY.npy` in a
cache folder, KEY the SHA-256 of the three (`cache_key`). The features are derived from the
corpus's texts (in a simulation, the clients' data), so they are as private as the corpus: the
files and the folder are owner-only (docs/retrieval.md, "Performance").
"""

import hashlib
import os
import tempfile
from typing import Callable
from typing import Dict
from typing import Optional
from typing import Tuple

from absl import logging
import numpy as np


def default_dir() -> str:
  """`$XDG_CACHE_HOME/fedasr_tff/retriever_features` (default `~/.cache/...`)."""
  cache_home = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'),
                                                                 '.cache')
  return os.path.join(cache_home, 'fedasr_tff', 'retriever_features')


def cache_key(backbone, tokens: Dict[str, np.ndarray], pooling: str) -> str:
  """The hex SHA-256 naming the features of `tokens` through `backbone`.

  It hashes the backbone's class and every weight (name, dtype, shape, bytes), so another
  checkpoint, or the same one changed, is another entry; the pooling; and the token ids and mask
  of every text, in order, which fix the texts, the tokenizer and `max_length`.

  Args:
    backbone: the frozen backbone (a Keras model; its weights are built if they are not yet).
    tokens: {"token_ids", "mask"} of the texts.
    pooling: the pooling.
  """
  backbone.build_weights()
  h = hashlib.sha256()
  h.update(f'{type(backbone).__module__}.{type(backbone).__qualname__}\n{pooling}\n'.encode())
  for weight in backbone.weights:
    value = np.ascontiguousarray(weight.numpy())
    h.update(f'{weight.name}:{value.dtype.str}:{value.shape}\n'.encode())
    h.update(value.tobytes())
  for key in sorted(tokens):
    value = np.ascontiguousarray(tokens[key])
    h.update(f'{key}:{value.dtype.str}:{value.shape}\n'.encode())
    h.update(value.tobytes())
  return h.hexdigest()


def cached_features(cache_dir: Optional[str], backbone, tokens: Dict[str, np.ndarray],
                    pooling: str, compute: Callable[[], np.ndarray]
                    ) -> Tuple[np.ndarray, bool]:
  """The features of `tokens`, read from `cache_dir` or computed by `compute` and written there.

  Args:
    cache_dir: the cache folder (created owner-only if missing); None for no cache.
    backbone: the frozen backbone (for the key).
    tokens: {"token_ids", "mask"} of the N texts.
    pooling: the pooling (for the key).
    compute: () -> [N, d] float32, the features computed.

  Returns:
    (the features, whether they came from the cache). A cached file that does not load as
    [N, d] float32 is computed again and replaced.
  """
  if cache_dir is None:
    return compute(), False
  count = len(tokens['token_ids'])
  path = os.path.join(cache_dir, cache_key(backbone, tokens, pooling) + '.npy')
  if os.path.isfile(path):
    try:
      features = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
      logging.warning('%s: unreadable (%s); computing the features again.', path, e)
    else:
      if features.ndim == 2 and len(features) == count and features.dtype == np.float32:
        return features, True
      logging.warning('%s: shape %s %s, not [%d, d] float32; computing the features again.',
                      path, features.shape, features.dtype, count)
  features = np.asarray(compute(), np.float32)
  # A folder that exists keeps its mode: `--feature_cache_dir=/tmp` must not close /tmp.
  os.makedirs(cache_dir, mode=0o700, exist_ok=True)
  # Written to a temporary name (0600) and renamed: a reader sees a whole file or none.
  descriptor, partial = tempfile.mkstemp(dir=cache_dir, suffix='.partial')
  try:
    with os.fdopen(descriptor, 'wb') as f:
      np.save(f, features, allow_pickle=False)
    os.replace(partial, path)
  except BaseException:
    if os.path.exists(partial):
      os.remove(partial)
    raise
  return features, False
