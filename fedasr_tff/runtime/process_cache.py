"""A disk cache of built learning processes, keyed by what builds them.

Building a process traces Keras models, TFF and our aggregators into TFF computations: seconds in
every run, before anything is compiled (`compile_cache` keeps compiled rounds, not this).
`learning_process` keeps a process's computations in the compile cache's directory under a
SHA-256 of the caller's recipe, the source of `fedasr_tff` and of the caller's `modules`, and the
library versions (`recipe_key`). An entry is read only after a build in a later process gave the
same bytes; builds that differ mark it not cacheable. No noise seed a run draws from is written:
processes are built with their DP noise seeds unset, and every process returned, built or read,
fills them from OS entropy at `initialize`. Trusted as the compile cache is (docs/running.md,
"Engines"; docs/privacy.md).
"""

import collections
import functools
import hashlib
import importlib
import inspect
import json
import os
import random
import sys
from typing import Any
from typing import Callable
from typing import Dict
from typing import Optional
from typing import Sequence
from typing import Tuple

from absl import logging
import dp_accounting
from google.protobuf import message
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2
import tensorflow_privacy as tfp

import fedasr_tff
from fedasr_tff.aggregators import noise_seeds
from fedasr_tff.runtime import compile_cache

# Changed whenever an entry's layout changes, so that older entries are never read.
_FORMAT = b'fedasr_tff learning process v1\n'
_SUFFIX = '.process'
_CANDIDATE, _CONFIRMED, _NOT_CACHEABLE = 'candidate', 'confirmed', 'not cacheable'
# The process's computations, by `LearningProcess` attribute; the last two may be None.
_PARTS = ('initialize', 'next', 'get_model_weights', 'set_model_weights', 'get_hparams',
          'set_hparams')


def learning_process(cache: compile_cache.CompileCache,
                     recipe: Any,
                     build: Callable[[], tff.learning.templates.LearningProcess],
                     *,
                     modules: Sequence[Any] = ()) -> tff.learning.templates.LearningProcess:
  """The process `build` makes, read from `cache` when a confirmed entry is there (module
  docstring); its unset noise seeds filled with fresh ones at `initialize`.

  Args:
    cache: whose directory holds the entries.
    recipe: everything `build` depends on besides code and library versions, as JSON-able
      values (`json.dumps` with sorted keys); two recipes that build different processes must
      differ.
    build: builds the process (called at most once); it must return a
      `tff.learning.templates.LearningProcess`.
    modules: modules, besides `fedasr_tff`'s, whose source `build` runs (a model function's
      module, for example).

  Returns:
    A `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: naming `recipe` if it is not JSON-able, or `modules` if one has no source file.
    TypeError: naming `build` if it returns something else than a `LearningProcess`.
  """
  key = recipe_key(recipe, modules)
  path = os.path.join(cache.directory, key + _SUFFIX)
  entry = _read(path)
  if entry is not None and entry.status == _CONFIRMED:
    try:
      process = _process_from(entry)
    except _UNREADABLE as e:
      _warn_unreadable(path, e)
      entry = None
    else:
      return _with_fresh_noise_seeds(process)
  outside = random.getstate()
  # Keras draws its initializers' seeds from Python's `random` when a model is traced, so the
  # initial weights are a function of the recipe, read or built (a caller wanting others sets
  # them, `set_model_weights`); the caller's stream is restored. A builder must not draw
  # secrets from `random` (Mersenne Twister is no source of secrets; ours come from `secrets`).
  random.seed(key)
  try:
    # Every DP query that would draw its noise seed from OS entropy leaves it at a placeholder,
    # which a round refuses to start with (an in-graph check in the queries'
    # `derive_sample_params`); a seed the caller fixes (`noise_seed=`) is in the recipe, public.
    with noise_seeds.unset_noise_seeds():
      process = build()
  finally:
    random.setstate(outside)
  if type(process) is not tff.learning.templates.LearningProcess:
    raise TypeError('`build` must return a tff.learning.templates.LearningProcess, got '
                    f'{type(process).__name__}.')
  if entry is None or entry.status != _NOT_CACHEABLE:
    _record(path, process, entry)
  return _with_fresh_noise_seeds(process)


def recipe_key(recipe: Any, modules: Sequence[Any] = ()) -> str:
  """An entry's name: SHA-256 of the recipe, the code and the libraries (module docstring).

  Args:
    recipe: as in `learning_process`.
    modules: as in `learning_process`.

  Returns:
    A hexadecimal digest.

  Raises:
    ValueError: naming `recipe` or `modules`, as `learning_process`.
  """
  try:
    described = json.dumps(recipe, sort_keys=True, separators=(',', ':'))
  except (TypeError, ValueError) as e:
    raise ValueError(f'`recipe` must be JSON-able (dicts, lists, strings, numbers): {e}') from e
  extra = []
  for module in modules:
    source = getattr(module, '__file__', None)
    if not source or not source.endswith('.py'):
      raise ValueError(f'`modules`: {module!r} has no Python source file to key on.')
    extra.append((module.__name__, _file_digest(source)))
  parts = [_FORMAT, sys.version.encode(), tf.__version__.encode(), tff.__version__.encode(),
           _version(tfp), _version(dp_accounting), _package_digest().encode(),
           json.dumps(sorted(extra)).encode(), described.encode()]
  digest = hashlib.sha256()
  for part in parts:
    # Length-prefixed, so that no two different tuples hash the same bytes.
    digest.update(len(part).to_bytes(8, 'little'))
    digest.update(part)
  return digest.hexdigest()


def _version(module) -> bytes:
  return str(getattr(module, '__version__', None)).encode()


@functools.lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


@functools.lru_cache(maxsize=1)
def _package_digest() -> str:
  """SHA-256 of every module of `fedasr_tff`, by path (read once per process)."""
  root = os.path.dirname(os.path.abspath(fedasr_tff.__file__))
  digest = hashlib.sha256()
  for directory, subdirectories, files in os.walk(root):
    subdirectories.sort()
    for name in sorted(files):
      if name.endswith('.py'):
        path = os.path.join(directory, name)
        digest.update(os.path.relpath(path, root).encode() + b'\0')
        digest.update(_file_digest(path).encode())
  return digest.hexdigest()


def _with_fresh_noise_seeds(
    process: tff.learning.templates.LearningProcess) -> tff.learning.templates.LearningProcess:
  """`process` whose `initialize` fills the state's unset noise seeds with fresh ones
  (`noise_seeds.fill_unset_noise_seeds`, seeds drawn now)."""
  # initialize = fill(the builder's `initialize`): the cache keeps the builder's, seeds unset;
  # this one lives in memory only.
  initialize = process.initialize

  @tff.tensorflow.computation(initialize.type_signature.result.member)
  def fill(state):
    return noise_seeds.fill_unset_noise_seeds(state)

  @tff.federated_computation
  def initialize_with_fresh_seeds():
    return tff.federated_map(fill, initialize())

  return tff.learning.templates.LearningProcess(
      initialize_with_fresh_seeds, process.next, process.get_model_weights,
      process.set_model_weights, get_hparams_fn=process.get_hparams,
      set_hparams_fn=process.set_hparams)


_Entry = collections.namedtuple('_Entry', ['status', 'digest', 'types', 'computations'])


def _computations(process) -> Dict[str, tff.framework.ConcreteComputation]:
  return {name: getattr(process, name) for name in _PARTS if getattr(process, name) is not None}


def _record(path: str, process, entry: Optional[_Entry]) -> None:
  """Writes what this build tells: a candidate, its confirmation, or that it differed."""
  # Randomness a builder draws elsewhere (a library's seed from the clock, a key from OS
  # entropy) would be written and replayed by every run that reads the entry: an entry is read
  # only once a build in a later process gave the same bytes.
  computations = _computations(process)
  try:
    types = {name: _containers(comp.type_signature) for name, comp in computations.items()}
  except ValueError as e:
    logging.info('Not caching the process in %s: %s', path, e)
    _write(path, _Entry(_NOT_CACHEABLE, '', {}, {}))
    return
  protos = {name: tff.framework.ConcreteComputation.get_proto(comp)
            for name, comp in computations.items()}
  digest = hashlib.sha256(json.dumps(types, sort_keys=True).encode())
  for name in sorted(protos):
    digest.update(name.encode() + b'\0')
    digest.update(protos[name].SerializeToString(deterministic=True))
  digest = digest.hexdigest()
  if entry is None:
    _write(path, _Entry(_CANDIDATE, digest, types, protos))
  elif entry.digest == digest:
    _write(path, _Entry(_CONFIRMED, digest, types, protos))
  else:
    logging.warning('Two builds of the process in %s differ (randomness drawn when it is '
                    'built?): it is not cached, every run builds it.', path)
    _write(path, _Entry(_NOT_CACHEABLE, '', {}, {}))


def _write(path: str, entry: _Entry) -> None:
  header = json.dumps({'status': entry.status, 'digest': entry.digest,
                       'types': entry.types}).encode()
  protos = computation_pb2.Computation()
  for name, proto in sorted(entry.computations.items()):
    protos.struct.element.add(name=name).value.CopyFrom(proto)
  compile_cache.write_atomically(
      path, _FORMAT + len(header).to_bytes(8, 'little') + header + protos.SerializeToString())


def _read(path: str) -> Optional[_Entry]:
  data = compile_cache.read_if_present(path)
  if data is None:
    return None
  try:
    if not data.startswith(_FORMAT):
      raise ValueError('not an entry of this format')
    start = len(_FORMAT) + 8
    length = int.from_bytes(data[len(_FORMAT):start], 'little')
    header = json.loads(data[start:start + length])
    protos = computation_pb2.Computation.FromString(data[start + length:])
    computations = {element.name: element.value for element in protos.struct.element}
    entry = _Entry(header['status'], header['digest'], header['types'], computations)
    if entry.status not in (_CANDIDATE, _CONFIRMED, _NOT_CACHEABLE):
      raise ValueError(f'unknown status {entry.status!r}')
    return entry
  except _UNREADABLE as e:
    _warn_unreadable(path, e)
    return None


# What a damaged or foreign entry raises while it is read; it is then built again.
_UNREADABLE = (message.DecodeError, ValueError, TypeError, KeyError, AttributeError, ImportError)


def _warn_unreadable(path: str, error: Exception) -> None:
  # An entry is only ever a copy: one that does not parse is built again and rewritten.
  logging.warning('Process cache entry %s does not parse (%s); building the process again.',
                  path, error)


def _process_from(entry: _Entry) -> tff.learning.templates.LearningProcess:
  # `ConcreteComputation`s from the built process's protos: the same rounds (the same
  # compile-cache key, bit-equal rounds: `tests/runtime/process_cache_test.py`).
  stack = tff.framework.get_context_stack()
  parts = {}
  for name, proto in entry.computations.items():
    plain = tff.framework.ConcreteComputation(computation_proto=proto, context_stack=stack)
    parts[name] = tff.framework.ConcreteComputation(
        computation_proto=proto, context_stack=stack,
        annotated_type=_annotated(plain.type_signature, entry.types[name]))
  return tff.learning.templates.LearningProcess(
      parts['initialize'], parts['next'], parts['get_model_weights'],
      parts['set_model_weights'], get_hparams_fn=parts.get('get_hparams'),
      set_hparams_fn=parts.get('set_hparams'))


# The Python containers of a type, which TFF's protos do not keep: a tree mirroring the type,
# with every struct's container by import path.


def _containers(type_spec: tff.Type):
  """The containers of `type_spec`'s structs; ValueError if one cannot be imported back."""
  if isinstance(type_spec, tff.FunctionType):
    return {'parameter': (None if type_spec.parameter is None else
                          _containers(type_spec.parameter)),
            'result': _containers(type_spec.result)}
  if isinstance(type_spec, tff.FederatedType):
    return _containers(type_spec.member)
  if isinstance(type_spec, tff.SequenceType):
    return _containers(type_spec.element)
  if isinstance(type_spec, tff.StructType):
    container = (type_spec.python_container if isinstance(type_spec, tff.StructWithPythonType)
                 else None)
    return {'container': None if container is None else _import_path(container),
            'elements': [_containers(element) for element in type_spec]}
  return None


def _import_path(container: type) -> str:
  """`module:Name` (or `module:Outer.Name`) of a class; `namedtuple:module:Name` for a namedtuple
  made at run time (dp-accounting makes one per event: what reads it uses its fields only)."""
  module = sys.modules.get(container.__module__)
  if module is not None:
    if _lookup(module, container.__qualname__) is container:
      return f'{container.__module__}:{container.__qualname__}'
    for name, value in vars(module).items():  # a class kept as another class's attribute
      if inspect.isclass(value):
        for attribute, inner in vars(value).items():
          if inner is container:
            return f'{container.__module__}:{name}.{attribute}'
  if issubclass(container, tuple) and hasattr(container, '_fields'):
    return f'namedtuple:{container.__module__}:{container.__name__}'
  raise ValueError(f'the container {container.__module__}.{container.__qualname__} of the '
                   'process\'s types cannot be imported by name')


def _lookup(module, qualified_name: str):
  value = module
  for part in qualified_name.split('.'):
    value = getattr(value, part, None)
  return value


@functools.lru_cache(maxsize=None)
def _namedtuple(module: str, name: str, fields: Tuple[str, ...]) -> type:
  return collections.namedtuple(name, fields, module=module)


def _container(path: str, names: Tuple[str, ...]) -> type:
  if path.startswith('namedtuple:'):
    _, module, name = path.split(':')
    return _namedtuple(module, name, names)
  module, name = path.split(':')
  value = _lookup(importlib.import_module(module), name)
  if not inspect.isclass(value):
    raise ValueError(f'{path} is not a class')
  return value


def _annotated(type_spec: tff.Type, containers) -> tff.Type:
  """`type_spec` with the containers recorded by `_containers`."""
  if containers is None:
    return type_spec
  if isinstance(type_spec, tff.FunctionType):
    parameter = type_spec.parameter
    return tff.FunctionType(
        None if parameter is None else _annotated(parameter, containers['parameter']),
        _annotated(type_spec.result, containers['result']))
  if isinstance(type_spec, tff.FederatedType):
    return tff.FederatedType(_annotated(type_spec.member, containers), type_spec.placement,
                             type_spec.all_equal)
  if isinstance(type_spec, tff.SequenceType):
    return tff.SequenceType(_annotated(type_spec.element, containers))
  if not isinstance(type_spec, tff.StructType):
    raise ValueError(f'recorded containers do not match the type {type_spec}')
  elements = [(name, _annotated(element, inner)) for (name, element), inner in zip(
      tff.structure.iter_elements(type_spec), containers['elements'], strict=True)]
  if containers['container'] is None:
    return tff.StructType(elements)
  return tff.StructWithPythonType(
      elements, _container(containers['container'], tuple(name for name, _ in elements)))
