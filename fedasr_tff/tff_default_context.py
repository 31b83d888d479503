"""A warning, once a process, when our factories or processes are built under TFF's own local
execution context.

Importing TFF 0.87 sets a local C++ context whose `worker_binary` serves unauthenticated gRPC on
every network interface and keeps running after Python exits. `fedasr_tff.runtime`'s contexts
run the same computations with a worker that only this process reaches and that dies with it
(docs/privacy.md, "Security"). A library user's pipeline that builds our aggregators or
processes without setting one of ours first gets one line naming the call to make.
"""

import os
import sys
import warnings

import tensorflow_federated as tff

# The function TFF 0.87's `local_cpp_executor_factory` makes its executors with, over the
# `worker_binary` it starts (tensorflow_federated/python/core/impl/executor_stacks/
# executor_factory.py). The context `import tensorflow_federated` sets runs on it, as do the
# local C++ contexts of `tff.backends.native` and `tff.backends.test`.
_TFF_WORKER_STACK = ('tensorflow_federated.python.core.impl.executor_stacks.executor_factory',
                     'local_cpp_executor_factory.<locals>.stack_fn')
_LIBRARY = os.path.dirname(os.path.abspath(__file__)) + os.sep

_warned = False  # once a process: set when the warning is issued


class TFFWorkerWarning(UserWarning):
  """Our builders ran while TFF's own local C++ context was current."""


def starts_tff_worker(context) -> bool:
  """Whether `context` runs computations on a `worker_binary` that TFF's own local C++ executor
  factory starts: on every network interface, and left running when Python exits.

  Args:
    context: a TFF context, such as `tff.framework.get_context_stack().current`.

  Returns:
    True for the context `import tensorflow_federated` sets and the other local C++ contexts
    TFF makes; False for `fedasr_tff.runtime`'s, for the contexts TFF traces computations in,
    and for any other context a user sets.
  """
  factory = getattr(context, 'executor_factory', None)
  if not isinstance(factory, tff.framework.ResourceManagingExecutorFactory):
    return False
  stack_fn = getattr(factory, '_executor_stack_fn', None)  # TFF 0.87 has no public accessor
  return (getattr(stack_fn, '__module__', None),
          getattr(stack_fn, '__qualname__', None)) == _TFF_WORKER_STACK


def warn_if_current(builder: str) -> None:
  """Warns (`TFFWorkerWarning`, once a process) if TFF's own local C++ context is current.

  A public builder calls it first. After the warning, or under any other context, it costs one
  attribute test or a few.

  Args:
    builder: the public name of what is being built, as the warning names it
      (e.g. 'aggregators.PerLayerDPFactory.gaussian_fixed').
  """
  global _warned
  if _warned or not starts_tff_worker(tff.framework.get_context_stack().current):
    return
  _warned = True
  warnings.warn(
      f'fedasr_tff.{builder} was called under TFF\'s default execution context, whose '
      'worker_binary serves unauthenticated gRPC on every network interface and outlives this '
      'process: call fedasr_tff.runtime.set_inprocess_execution_context() (or '
      'set_local_cpp_execution_context()) first (fedasr-tff docs/privacy.md, "Security").',
      TFFWorkerWarning, stacklevel=_stacklevel_of_caller())


def _stacklevel_of_caller() -> int:
  """`warnings.warn`'s stacklevel, seen from `warn_if_current`, of the first frame outside
  this library: the user's line that called our builder."""
  level, frame = 2, sys._getframe(2)  # level 2: the caller of `warn_if_current`
  while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARY):
    level, frame = level + 1, frame.f_back
  return level
