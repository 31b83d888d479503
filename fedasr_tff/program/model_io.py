"""Model weights on disk: one `.npz` file, a named array per trainable and non-trainable tensor.

The names are the Keras variable names without the model scope and the `:0` suffix (for
example `block_00/wqkv/kernel`), so a file states what it holds and a mismatch can be reported
by tensor. Beside the tensors a file may hold string metadata, each entry a 0-d array named
`metadata:KEY`: what a user of the weights needs besides them (for a speech model, the feature
normalisation it was trained on, `speech.data_config.model_features`). Central training exports
the seed model this way and federated training loads it.
TFF is imported only by the functions that return its `ModelWeights`, so a binary that loads a
model without running TFF (`load_into`) starts without it.
"""

import os
from typing import TYPE_CHECKING
from typing import Dict
from typing import List
from typing import Mapping
from typing import Optional
from typing import Sequence
from typing import Tuple
import zipfile
import zlib

import numpy as np
import tensorflow as tf

from fedasr_tff import private_files

if TYPE_CHECKING:
  import tensorflow_federated as tff

_NON_TRAINABLE_PREFIX = 'non_trainable:'
_METADATA_PREFIX = 'metadata:'


def tensor_name(variable: tf.Variable) -> str:
  """`ctc_transformer/block_00/wqkv/kernel:0` -> `block_00/wqkv/kernel`.

  Args:
    variable: a variable of a Keras model.

  Returns:
    Its name without the `:0` suffix and without the first scope (the model's), if it has one.
  """
  name = variable.name.split(':')[0]
  return name.split('/', 1)[1] if '/' in name else name


def tensor_names(model: tf.keras.Model) -> Tuple[List[str], List[str]]:
  """Names of the model's trainable and non-trainable tensors, in variable order.

  Args:
    model: a built Keras model.

  Returns:
    (trainable tensor names, non-trainable tensor names), each by `tensor_name`.
  """
  return ([tensor_name(v) for v in model.trainable_variables],
          [tensor_name(v) for v in model.non_trainable_variables])


def save_weights(path: str, model: tf.keras.Model,
                 weights: 'tff.learning.models.ModelWeights',
                 metadata: Optional[Mapping[str, str]] = None) -> None:
  """Writes `weights` (laid out like `model`'s variables) to `path` atomically.

  Args:
    path: the `.npz` file to write.
    model: the built model whose variables name the tensors (`tensor_names`).
    weights: the tensors, in `model`'s variable order.
    metadata: {key: string} stored beside them (`read_metadata`).

  Raises:
    ValueError: if `weights` and `model` hold different numbers of tensors.
  """
  save_named_weights(path, tensor_names(model), weights, metadata)


def save_named_weights(path: str, names: Tuple[Sequence[str], Sequence[str]],
                       weights: 'tff.learning.models.ModelWeights',
                       metadata: Optional[Mapping[str, str]] = None) -> None:
  """Writes `weights` to `path` atomically, a named array per tensor.

  Args:
    path: the `.npz` file to write.
    names: the names of the trainable and of the non-trainable tensors (`tensor_names`).
    weights: the tensors, in the order of `names`.
    metadata: {key: string} stored beside them (`read_metadata`).

  Raises:
    ValueError: if `names` and `weights` hold different numbers of tensors, two tensors have one
      name, or for metadata that is not a string.
  """
  arrays = {}
  for key, value in (metadata or {}).items():
    if not isinstance(value, str):
      raise ValueError(f'metadata {key!r} must be a string, got {value!r}.')
    arrays[_METADATA_PREFIX + key] = np.array(value)  # A 0-d unicode array: no pickle.
  for tensor_names_, values, prefix in ((names[0], weights.trainable, ''),
                                        (names[1], weights.non_trainable,
                                         _NON_TRAINABLE_PREFIX)):
    if len(tensor_names_) != len(values):
      raise ValueError(f'The weights have {len(values)} tensors where the model has '
                       f'{len(tensor_names_)}.')
    for name, value in zip(tensor_names_, values, strict=True):
      if prefix + name in arrays:  # A second tensor of a name would silently replace the first.
        raise ValueError(f'Two tensors are named {prefix + name!r}.')
      arrays[prefix + name] = np.asarray(value)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  partial = f'{path}.{os.getpid()}.partial.npz'
  with private_files.writing(path, partial):
    np.savez(partial, **arrays)
  os.replace(partial, path)


def _read_arrays(path: str, source: str) -> Mapping[str, np.ndarray]:
  """All arrays of a `.npz` file, by name; a clear ValueError for a missing or damaged one."""
  if not os.path.isfile(path):
    raise ValueError(f'{source} {path!r} does not exist.')
  try:
    stored = np.load(path)
    if not isinstance(stored, np.lib.npyio.NpzFile):  # A bare `.npy` array.
      raise ValueError('it holds one array, not named tensors')
    with stored:
      return {k: stored[k] for k in stored.files}
  # What NumPy raises for a damaged file: a truncated zip (BadZipFile), a bad CRC (BadZipFile),
  # an empty file (EOFError), a corrupt member (zlib.error), anything else (pickle refusal).
  except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise ValueError(f'{source} {path!r} is damaged or not a weights file written by '
                     f'save_weights ({type(e).__name__}: {e}); write it again.') from e


def read_metadata(path: str, source: str = 'weights file') -> Dict[str, str]:
  """The metadata a file written by `save_weights` holds.

  Args:
    path: the `.npz` file.
    source: how to name the file in errors (for example the flag it came from).

  Returns:
    {key: string}; empty for a file written without metadata.

  Raises:
    ValueError: naming `source` and the path when the file is missing or damaged, or holds
      metadata that is not a string.
  """
  metadata = {}
  for name, array in _read_arrays(path, source).items():
    if name.startswith(_METADATA_PREFIX):
      if array.shape or array.dtype.kind != 'U':
        raise ValueError(f'{source} {path!r}: {name!r} is not a string.')
      metadata[name[len(_METADATA_PREFIX):]] = str(array)
  return metadata


def load_weights(path: str, model: tf.keras.Model,
                 source: str = 'weights file') -> 'tff.learning.models.ModelWeights':
  """Reads a file written by `save_weights` and checks it against `model`'s tensors.

  Args:
    path: the `.npz` file.
    model: a built model of the configuration the weights must fit.
    source: how to name the file in errors (for example the flag it came from).

  Returns:
    The weights in `model`'s variable order, the trainable ones as float32.

  Raises:
    ValueError: as `read_weights`.
  """
  import tensorflow_federated as tff  # here, not at the top: see the module docstring
  trainable, non_trainable = read_weights(path, model, source)
  return tff.learning.models.ModelWeights(trainable=trainable, non_trainable=non_trainable)


def load_into(path: str, model: tf.keras.Model, source: str = 'weights file') -> None:
  """Reads a file written by `save_weights`, checked as `read_weights`, into `model`.

  Args:
    path: the `.npz` file.
    model: a built model of the configuration the weights must fit; its variables are assigned.
    source: how to name the file in errors (for example the flag it came from).

  Raises:
    ValueError: as `read_weights` (then `model` is unchanged).
  """
  trainable, non_trainable = read_weights(path, model, source)
  for variable, value in zip(model.trainable_variables + model.non_trainable_variables,
                             trainable + non_trainable, strict=True):
    variable.assign(value)


def read_weights(path: str, model: tf.keras.Model, source: str = 'weights file'
                 ) -> Tuple[List[np.ndarray], List[np.ndarray]]:
  """Reads a file written by `save_weights` and checks it against `model`'s tensors.

  Args:
    path: the `.npz` file.
    model: a built model of the configuration the weights must fit.
    source: how to name the file in errors (for example the flag it came from).

  Returns:
    (trainable, non-trainable) arrays in `model`'s variable order, the trainable ones float32.

  Raises:
    ValueError: naming `source` and the path when the file is missing, damaged (truncated, for
      example) or not an `.npz`, and the first tensor that is missing, extra, of a different
      shape or not finite.
  """
  arrays = _read_arrays(path, source)
  trainable_names, non_trainable_names = tensor_names(model)
  expected = [(n, v) for n, v in zip(trainable_names, model.trainable_variables, strict=True)]
  expected += [(_NON_TRAINABLE_PREFIX + n, v)
               for n, v in zip(non_trainable_names, model.non_trainable_variables, strict=True)]
  for key, variable in expected:
    if key not in arrays:
      raise ValueError(f'{source} {path!r} has no tensor {key!r}: it was saved from a model of '
                       'a different configuration.')
    if tuple(arrays[key].shape) != tuple(variable.shape):
      raise ValueError(f'{source} {path!r}: tensor {key!r} has shape {arrays[key].shape}, the '
                       f'model configuration needs {tuple(variable.shape)}.')
    # A non-finite seed would make every client delta non-finite (zeroed by the clipping), so
    # a DP run would spend its budget and end non-finite.
    if np.issubdtype(arrays[key].dtype, np.inexact):
      bad = int(np.size(arrays[key]) - np.count_nonzero(np.isfinite(arrays[key])))
      if bad:
        raise ValueError(f'{source} {path!r}: tensor {key!r} has {bad} non-finite values (NaN '
                         f'or Inf) of {np.size(arrays[key])}; a model trained or evaluated '
                         'from it is not finite.')
  extra = sorted(set(arrays) - {key for key, _ in expected}
                 - {k for k in arrays if k.startswith(_METADATA_PREFIX)})
  if extra:
    raise ValueError(f'{source} {path!r} has tensors the model does not: {extra[:5]}; it was '
                     'saved from a model of a different configuration.')
  return ([arrays[n].astype(np.float32) for n in trainable_names],
          [arrays[_NON_TRAINABLE_PREFIX + n] for n in non_trainable_names])


def model_weights(model: tf.keras.Model) -> 'tff.learning.models.ModelWeights':
  """The model's current weights as numpy arrays.

  Args:
    model: a built Keras model.

  Returns:
    Its trainable and non-trainable variables' values, in variable order.
  """
  import tensorflow_federated as tff  # here, not at the top: see the module docstring
  return tff.learning.models.ModelWeights(
      trainable=[v.numpy() for v in model.trainable_variables],
      non_trainable=[v.numpy() for v in model.non_trainable_variables])

