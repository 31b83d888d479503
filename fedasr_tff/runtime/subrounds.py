"""One federated computation run over several TFF contexts in subrounds, in cohort order.

TFF compiles a computation with one aggregation into its mergeable form
(`tff.backends.native.compile_to_mergeable_comp_form`): `up_to_merge` over a block of clients,
`merge` of two partial aggregates, `after_merge` on the merged one. `SubroundContext` runs it
over several contexts (TFF workers), one contiguous block of the cohort per subround. It replaces
TFF 0.87's `MergeableCompExecutionContext`, which sends some clients twice and others never when
a SERVER-placed argument follows the clients' (mixed FL, the retriever: under DP, twice the
sensitivity the noise was calibrated for), and merges and joins blocks in the order they finish;
here both follow the cohort (docs/distributed.md; `tests/runtime/subrounds_test.py`).
"""

import asyncio
import threading
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Sequence
from typing import Tuple

import tensorflow_federated as tff

# TFF's own conversion of a result to the Python containers of its type, as its contexts use.
from tensorflow_federated.python.core.impl.types import type_conversions


def _is_partitioned(type_spec: tff.Type) -> bool:
  """Whether a value of `type_spec` is split into blocks: one value per client."""
  return (isinstance(type_spec, tff.FederatedType) and type_spec.placement is tff.CLIENTS and
          not type_spec.all_equal)


def count_clients(value: Any, type_spec: Optional[tff.Type]) -> Optional[int]:
  """The number of clients of the CLIENTS-placed values in `value`.

  Args:
    value: a computation's argument (Python containers, `tff.structure.Struct`s, and a list per
      CLIENTS-placed value).
    type_spec: its TFF type.

  Returns:
    The clients, or None if `value` holds no CLIENTS-placed value.

  Raises:
    ValueError: if two CLIENTS-placed values have different lengths.
  """
  counts = set()

  def visit(item, item_type):
    if _is_partitioned(item_type):
      counts.add(len(item))
    elif isinstance(item_type, tff.StructType):
      elements = tff.structure.from_container(item)
      for (_, element), (_, element_type) in zip(tff.structure.iter_elements(elements),
                                                 tff.structure.iter_elements(item_type),
                                                 strict=True):
        visit(element, element_type)

  if value is not None and type_spec is not None:
    visit(value, type_spec)
  if len(counts) > 1:
    raise ValueError(f'The CLIENTS-placed arguments hold different numbers of clients: '
                     f'{sorted(counts)}.')
  return counts.pop() if counts else None


def block_bounds(clients: int, subrounds: int) -> List[Tuple[int, int]]:
  """Contiguous blocks [start, stop) of `clients`, one per subround, sizes differing by <= 1.

  Args:
    clients: the cohort's clients, >= 0.
    subrounds: the blocks wanted, >= 1; fewer when there are fewer clients (no block is empty,
      except the only one of an empty cohort).

  Returns:
    The blocks, in cohort order.
  """
  count = max(1, min(subrounds, clients))
  bounds, start = [], 0
  for block in range(count):
    size = (clients - start) // (count - block)  # the larger blocks last
    bounds.append((start, start + size))
    start += size
  return bounds


def slice_clients(value: Any, type_spec: tff.Type, start: int, stop: int) -> Any:
  """`value` with every CLIENTS-placed value cut to its clients [start, stop).

  Args:
    value: as in `count_clients`.
    type_spec: its TFF type.
    start: the block's first client.
    stop: one past its last.

  Returns:
    The block's argument: other values are shared, not copied.
  """
  if _is_partitioned(type_spec):
    return list(value[start:stop])
  if isinstance(type_spec, tff.StructType):
    elements = tff.structure.iter_elements(tff.structure.from_container(value))
    return tff.structure.Struct([
        (name, slice_clients(element, element_type, start, stop))
        for (name, element), (_, element_type) in zip(
            elements, tff.structure.iter_elements(type_spec), strict=True)])
  return value


def join_blocks(results: Sequence[Any], type_spec: tff.Type) -> Any:
  """The blocks' results of `after_merge` joined into one: CLIENTS-placed values concatenated in
  block order, the rest (equal in every block) taken from the first.

  Args:
    results: each block's result, in cohort order.
    type_spec: their TFF type.

  Returns:
    The joined result, as `tff.structure.Struct`s where `type_spec` has structures.
  """
  if _is_partitioned(type_spec):
    return [client_value for result in results for client_value in result]
  if isinstance(type_spec, tff.StructType):
    structs = [tff.structure.from_container(result) for result in results]
    return tff.structure.Struct([
        (name, join_blocks([s[index] for s in structs], element_type))
        for index, (name, element_type) in enumerate(tff.structure.iter_elements(type_spec))])
  return results[0]


def _holds_clients_values(type_spec: tff.Type) -> bool:
  if _is_partitioned(type_spec):
    return True
  if isinstance(type_spec, tff.StructType):
    return any(_holds_clients_values(element)
               for _, element in tff.structure.iter_elements(type_spec))
  return False


class SubroundContext(tff.framework.SyncContext):
  """Runs federated computations in their mergeable form over `contexts`, in cohort order
  (module docstring).

  Not thread-safe: invoke it from one thread at a time.
  """

  def __init__(self, contexts: Sequence[tff.framework.AsyncContext],
               num_subrounds: Optional[int] = None):
    """Initializes the context.

    Args:
      contexts: the asynchronous TFF contexts (one per worker) that run the subrounds.
      num_subrounds: blocks a cohort is split into (default: one per context). Subround i runs
        on context i modulo their number; a context runs its subrounds one after another.

    Raises:
      ValueError: if `contexts` is empty or `num_subrounds` is not a positive int.
    """
    if not contexts:
      raise ValueError('`contexts` is empty.')
    if num_subrounds is not None and (type(num_subrounds) is not int or num_subrounds < 1):
      raise ValueError(f'`num_subrounds` must be None or an int > 0, got {num_subrounds!r}.')
    self._contexts = list(contexts)
    self._num_subrounds = num_subrounds or len(self._contexts)
    # Compiled forms by computation object: TFF hashes a computation by serialising it.
    self._forms: Dict[int, Tuple[tff.Computation, tff.framework.MergeableCompForm]] = {}
    self._loop = asyncio.new_event_loop()
    threading.Thread(target=self._loop.run_forever, daemon=True).start()

  def _form(self, comp: tff.Computation) -> tff.framework.MergeableCompForm:
    cached = self._forms.get(id(comp))
    if cached is None or cached[0] is not comp:
      cached = (comp, tff.backends.native.compile_to_mergeable_comp_form(comp))
      self._forms[id(comp)] = cached
    return cached[1]

  def invoke(self, comp, arg=None):
    form = comp if isinstance(comp, tff.framework.MergeableCompForm) else self._form(comp)
    parameter = form.up_to_merge.type_signature.parameter
    clients = count_clients(arg, parameter)
    if clients is None:
      # No client values to split: one subround (TFF would run the whole computation in each).
      arguments = [arg]
    else:
      # Every CLIENTS-placed value cut alike, wherever it sits in the argument: TFF's own context
      # moves to the next block only when the argument's last element is CLIENTS-placed (its
      # `_partition_value`), so a SERVER value after the clients' sent every subround block 0.
      arguments = [slice_clients(arg, parameter, start, stop)
                   for start, stop in block_bounds(clients, self._num_subrounds)]
    future = asyncio.run_coroutine_threadsafe(self._run(form, arguments, arg is not None),
                                              self._loop)
    return type_conversions.type_to_py_container(future.result(),
                                                 form.after_merge.type_signature.result)

  async def _run(self, form, arguments: List[Any], has_argument: bool):
    contexts = self._contexts
    locks = [asyncio.Lock() for _ in contexts]

    async def on_context(index, comp, arg):
      # A context's subrounds run one after another, as TFF's would.
      async with locks[index % len(contexts)]:
        return await contexts[index % len(contexts)].invoke(comp, arg)

    partials = await asyncio.gather(*(on_context(i, form.up_to_merge, a)
                                      for i, a in enumerate(arguments)))
    merged = partials[0]
    for partial in partials[1:]:  # in cohort order: the same sums in the same order every run
      merged = await contexts[0].invoke(form.merge, tff.structure.Struct.unnamed(merged,
                                                                                  partial))

    def after_merge_argument(arg):
      return tff.structure.Struct.unnamed(arg, merged) if has_argument else merged

    result_type = form.after_merge.type_signature.result
    if not _holds_clients_values(result_type):
      # Equal in every block (no value per client): computed once, from the first block. The
      # client work `after_merge` recomputes (values cross the merge only through the
      # aggregation) is then never evaluated; a CLIENTS-placed result makes every block train its
      # clients again, so processes meant for workers return per-client values through the
      # aggregation (the retriever's local DP states: `retrieval.process`).
      return await contexts[0].invoke(form.after_merge, after_merge_argument(arguments[0]))
    results = await asyncio.gather(*(on_context(i, form.after_merge, after_merge_argument(a))
                                     for i, a in enumerate(arguments)))
    return join_blocks(results, result_type)
