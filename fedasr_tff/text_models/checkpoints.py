"""Reading Hugging Face checkpoints (`config.json` + safetensors) into NumPy, with no framework.

A Hugging Face model folder holds `config.json` (the architecture's hyper-parameters) and its
weights either in one `model.safetensors` or in shards listed by `model.safetensors.index.json`
(https://github.com/huggingface/safetensors). A checkpoint can be pinned to the SHA-256 of its
weights file, so that a tampered or corrupted copy is refused before any of it is used.
"""

import hashlib
import json
import os
from typing import Mapping
from typing import Optional
from typing import Sequence

import numpy as np
import safetensors

CONFIG_FILE = 'config.json'
WEIGHTS_FILE = 'model.safetensors'
WEIGHTS_INDEX_FILE = 'model.safetensors.index.json'

_HASH_CHUNK_BYTES = 1 << 20
# A safetensors file starts with the byte length of its JSON header, a little-endian uint64.
_HEADER_LENGTH_BYTES = 8


def sha256_of_file(path: str) -> str:
  """The SHA-256 of a file's bytes.

  Args:
    path: the file.

  Returns:
    64 lower-case hex digits.
  """
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(_HASH_CHUNK_BYTES), b''):
      digest.update(chunk)
  return digest.hexdigest()


def _require_file(path: str, what: str) -> None:
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{what} not found: {path}')


def read_config(model_dir: str) -> dict:
  """The parsed `config.json` of a Hugging Face model folder.

  Args:
    model_dir: the folder.

  Returns:
    The JSON object.

  Raises:
    FileNotFoundError: if the folder has no `config.json`.
  """
  path = os.path.join(model_dir, CONFIG_FILE)
  _require_file(path, 'Model config')
  with open(path) as f:
    return json.load(f)


def weight_files(model_dir: str) -> list:
  """The safetensors files of a model folder.

  The index's `weight_map` maps each tensor name to the shard file holding it.

  Args:
    model_dir: the folder.

  Returns:
    [`model.safetensors`], or the shards its index lists (in the index's order, each once).

  Raises:
    FileNotFoundError: for a folder with neither file, or a listed shard that is missing.
    ValueError: for an index without a `weight_map`.
  """
  single = os.path.join(model_dir, WEIGHTS_FILE)
  index = os.path.join(model_dir, WEIGHTS_INDEX_FILE)
  if os.path.isfile(single):
    return [single]
  if not os.path.isfile(index):
    raise FileNotFoundError(f'No weights in {model_dir}: neither {WEIGHTS_FILE} nor '
                            f'{WEIGHTS_INDEX_FILE} is there.')
  with open(index) as f:
    weight_map = json.load(f).get('weight_map')
  if not isinstance(weight_map, dict) or not weight_map:
    raise ValueError(f'{index} has no `weight_map` of tensor names to shard files.')
  shards = [os.path.join(model_dir, name) for name in dict.fromkeys(weight_map.values())]
  for shard in shards:
    _require_file(shard, f'Shard listed in {index}')
  return shards


def _bfloat16_as_float32(path: str, names: Sequence[str]) -> dict:
  """{name: float32 array} of the bfloat16 tensors `names` of the safetensors file `path`."""
  with open(path, 'rb') as f:
    header_length = int.from_bytes(f.read(_HEADER_LENGTH_BYTES), 'little')
    header = json.loads(f.read(header_length))
  data = np.memmap(path, np.uint8, 'r', offset=_HEADER_LENGTH_BYTES + header_length)
  arrays = {}
  for name in names:
    begin, end = header[name]['data_offsets']
    bits = np.frombuffer(data[begin:end], '<u2').astype(np.uint32) << 16
    arrays[name] = bits.view(np.float32).reshape(header[name]['shape'])
  return arrays


def read_weight_file(path: str) -> dict:
  """Every tensor of one safetensors file.

  The format is a JSON header of names, dtypes, shapes and offsets followed by raw
  little-endian buffers. NumPy has no bfloat16, the dtype TinyLlama and Llama 3 are published
  in, so `safetensors`' NumPy reader cannot read those tensors; they are widened to float32
  here, exactly (a bfloat16 is the upper 16 bits of a float32), from the offsets in the file's
  header.

  Args:
    path: the file.

  Returns:
    {tensor name: np.ndarray}; bfloat16 tensors come as float32.
  """
  tensors, bfloat16 = {}, []
  with safetensors.safe_open(path, framework='numpy') as f:
    for name in f.keys():
      if f.get_slice(name).get_dtype() == 'BF16':
        bfloat16.append(name)
      else:
        tensors[name] = f.get_tensor(name)
  if bfloat16:
    tensors.update(_bfloat16_as_float32(path, bfloat16))
  return tensors


def load_tensors(model_dir: str, expected_sha256: Optional[Mapping[str, str]] = None) -> dict:
  """Every tensor of the checkpoint in `model_dir`, {name: np.ndarray}.

  Args:
    model_dir: a Hugging Face model folder (single-file or sharded safetensors).
    expected_sha256: optional {weights file name: SHA-256 hex digest}; each named file is hashed
      and refused (ValueError naming the file) unless its digest matches, before it is read.
      A name that is not among the checkpoint's weight files is an error too.

  Returns:
    {tensor name: array} over all weight files.

  Raises:
    FileNotFoundError: for missing weights, or a pinned file that is not among them.
    ValueError: for a SHA-256 mismatch, or a tensor in two shards.
  """
  files = weight_files(model_dir)
  if expected_sha256:
    by_name = {os.path.basename(path): path for path in files}
    for name, digest in expected_sha256.items():
      if name not in by_name:
        raise FileNotFoundError(f'`expected_sha256` names {name}, which is not among the weight '
                                f'files of {model_dir}: {sorted(by_name)}.')
      actual = sha256_of_file(by_name[name])
      if actual != digest.lower():
        raise ValueError(f'SHA-256 mismatch for {by_name[name]}: expected {digest.lower()}, got '
                         f'{actual}. The file is not the pinned checkpoint; refusing to load it.')
  tensors = {}
  for path in files:
    for name, array in read_weight_file(path).items():
      if name in tensors:
        raise ValueError(f'Tensor {name!r} appears in more than one shard of {model_dir}.')
      tensors[name] = array
  return tensors


def check_tensor(tensors: Mapping[str, np.ndarray], name: str, shape: Sequence[int]) -> None:
  """Checks that a checkpoint tensor exists with a shape.

  Args:
    tensors: the checkpoint's {name: array}.
    name: the tensor's name.
    shape: its expected shape.

  Raises:
    KeyError: naming the tensor if it is missing.
    ValueError: naming it if its shape differs.
  """
  if name not in tensors:
    raise KeyError(f'Checkpoint tensor {name!r} is missing.')
  if tuple(tensors[name].shape) != tuple(shape):
    raise ValueError(f'Checkpoint tensor {name!r} has shape {tuple(tensors[name].shape)}, '
                     f'expected {tuple(shape)}.')


def get_tensor(tensors: Mapping[str, np.ndarray], name: str,
               shape: Sequence[int]) -> np.ndarray:
  """A checkpoint tensor as float32, checked (`check_tensor`).

  Args:
    tensors: the checkpoint's {name: array}.
    name: the tensor's name.
    shape: its expected shape.

  Returns:
    `tensors[name]` as a float32 array.
  """
  check_tensor(tensors, name, shape)
  return np.asarray(tensors[name], np.float32)
