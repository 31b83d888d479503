"""A TFF context that runs computations in this process where it can, and on a TFF worker where
it cannot: an in-process simulation engine.

`InProcessContext.invoke(comp, arg)` runs in process a TensorFlow computation
(`tff_graphs.InProcessComputation`), a federated computation of no argument with a SERVER-placed
result (a process's `initialize`, by the TensorFlow computation TFF's map-reduce backend
extracts) and a round `(state@SERVER, data@CLIENTS) -> (state@SERVER, output@SERVER)` (by
`inprocess.MapReduceRound`). Anything else (mixed FL's three-argument round, the retriever's,
secure sums) runs on the fallback context, a TFF worker made on first use. Results come back as
the worker's would (docs/running.md, "Engines").
"""

import threading
from typing import Any
from typing import Callable
from typing import Dict
from typing import Optional
from typing import Tuple

from absl import logging
import tensorflow_federated as tff

# TFF's conversion of a result to the Python containers of its type, as its contexts use.
from tensorflow_federated.python.core.impl.types import type_conversions

from fedasr_tff.runtime import compile_cache
from fedasr_tff.runtime import inprocess
from fedasr_tff.runtime import tff_graphs

# Clients a round trains at once when not told: 2 on vs_pfl's MLP beat one lane's round on 2
# cores, and 3 or 4 were no faster (docs/benchmarks.md, "Measurements behind the code").
DEFAULT_LANES = 2


def is_round_type(type_signature: tff.FunctionType) -> bool:
  """Whether a computation has a round's type, `(S@SERVER, D@CLIENTS) -> (S@SERVER, O@SERVER)`:
  the only shape TFF compiles to a map-reduce form (TFF's `form_utils`)."""
  parameter, result = type_signature.parameter, type_signature.result

  def placed(types, placements):
    return (isinstance(types, tff.StructType) and len(types) == len(placements) and all(
        isinstance(t, tff.FederatedType) and t.placement is p
        for t, p in zip(types, placements, strict=True)))

  return (placed(parameter, (tff.SERVER, tff.CLIENTS)) and
          placed(result, (tff.SERVER, tff.SERVER)))


class InProcessContext(tff.framework.SyncContext):
  """Runs TFF computations in this process where it can (module docstring).

  Not thread-safe: invoke it from one thread at a time (the main thread, if the fallback starts
  a local worker).
  """

  def __init__(self, fallback: Callable[[], tff.framework.SyncContext], lanes: int = DEFAULT_LANES,
               cache: Optional[compile_cache.CompileCache] = None):
    """Initializes the context.

    Args:
      fallback: makes the context that runs what this process cannot (called once, on first
        need), for example a local TFF worker's.
      lanes: clients a round trains at once (`inprocess.MapReduceRound`).
      cache: where rounds' compiled forms are kept across processes
        (`compile_cache.CompileCache`); None (the default) compiles every round in every
        process.

    Raises:
      ValueError: if `lanes` is not an int >= 1.
    """
    if type(lanes) is not int or lanes < 1:
      raise ValueError(f'`lanes` must be an int >= 1, got {lanes!r}.')
    self._cache = cache
    self._make_fallback = fallback
    self._fallback: Optional[tff.framework.SyncContext] = None
    self._lanes = lanes
    # By computation object, each examined once, as TFF's own compiler cache does: (the
    # computation, kept alive so that its id stays its own; the in-process runner, or None for
    # the fallback).
    self._runners: Dict[int, Tuple[tff.Computation, Optional[Callable[[Any], Any]]]] = {}
    self._fallback_reasons: Dict[int, str] = {}

  @property
  def lanes(self) -> int:
    """Clients a round trains at once."""
    return self._lanes

  @property
  def fallback_started(self) -> bool:
    """Whether the fallback context (a TFF worker) was made."""
    return self._fallback is not None

  def runs_in_process(self, comp: tff.Computation) -> bool:
    """Whether `comp` runs in this process (compiling it on first ask, as `invoke` would)."""
    return self._runner(comp) is not None

  def fallback_reason(self, comp: tff.Computation) -> Optional[str]:
    """Why `comp` runs on the fallback context, or None if it runs in this process."""
    self._runner(comp)
    return self._fallback_reasons.get(id(comp))

  def invoke(self, comp, arg=None):
    runner = self._runner(comp)
    if runner is None:
      if self._fallback is None:
        if threading.current_thread() is not threading.main_thread():
          raise RuntimeError(f'{comp.type_signature} needs a TFF worker, which starts from the '
                             'main thread only (it dies with the thread that starts it).')
        self._fallback = self._make_fallback()
      return self._fallback.invoke(comp, arg)
    # As the worker returns results: the type's Python containers, with numpy arrays.
    return tff.tensorflow.transform_result(runner(arg))

  def _runner(self, comp) -> Optional[Callable[[Any], Any]]:
    cached = self._runners.get(id(comp))
    if cached is not None and cached[0] is comp:
      return cached[1]
    try:
      runner = self._compile(comp)
      self._fallback_reasons.pop(id(comp), None)
    except (TypeError, ValueError, NotImplementedError) as e:
      runner = None
      self._fallback_reasons[id(comp)] = str(e)
      logging.info('Running %s on a TFF worker: %s', comp.type_signature, e)
    self._runners[id(comp)] = (comp, runner)
    return runner

  def _compile(self, comp) -> Callable[[Any], Any]:
    """The in-process runner of `comp`; raises (TypeError, ValueError) naming why there is none."""
    if not isinstance(comp, tff.framework.ConcreteComputation):
      raise TypeError(f'not a concrete TFF computation ({type(comp).__name__})')
    type_signature = comp.type_signature
    kind = tff.framework.ConcreteComputation.get_proto(comp).WhichOneof('computation')
    if kind == 'tensorflow':  # a process's `get_model_weights`, `set_model_weights`, ...
      return _TensorFlowRunner(tff_graphs.InProcessComputation(comp, 'a TensorFlow computation'),
                               type_signature.result)
    if type_signature.parameter is None:  # a process's `initialize`
      result = type_signature.result
      if not (isinstance(result, tff.FederatedType) and result.placement is tff.SERVER):
        raise TypeError(f'a computation of no argument returning {result}, not a SERVER-placed '
                        'value')
      initialization = tff.backends.mapreduce.get_state_initialization_computation(
          comp, grappler_config=inprocess.WITHOUT_GRAPPLER)
      return _TensorFlowRunner(tff_graphs.InProcessComputation(initialization, 'initialize'),
                               result)
    if not is_round_type(type_signature):
      raise TypeError(f'{type_signature} is not a round (state@SERVER, data@CLIENTS) -> '
                      '(state@SERVER, output@SERVER), the one shape with a map-reduce form')
    # A process's `next`, DP aggregation included; what TFF cannot compile to a map-reduce form
    # raises here and runs on the fallback.
    round_ = inprocess.MapReduceRound(comp, lanes=self._lanes, cache=self._cache)
    return lambda arg: round_(*_arguments(arg))


class _TensorFlowRunner:
  """Calls an `InProcessComputation`, returning the result in the containers of `result_type`."""

  def __init__(self, computation: tff_graphs.InProcessComputation, result_type: tff.Type):
    self._computation = computation
    self._result_type = result_type

  def __call__(self, arg):
    return type_conversions.type_to_py_container(self._computation(arg), self._result_type)


def _arguments(arg) -> Tuple[Any, Any]:
  """A round's two arguments, from what TFF packed (`function_utils.pack_args`)."""
  elements = [value for _, value in tff.structure.iter_elements(tff.structure.from_container(arg))]
  if len(elements) != 2:
    raise ValueError(f'A round takes two arguments, got {len(elements)}.')
  return elements[0], elements[1]
