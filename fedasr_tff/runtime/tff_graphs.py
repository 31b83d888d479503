"""TFF's TensorFlow computations run in this process, by TensorFlow's own runtime.

TFF serialises a `tff.tensorflow.computation` as a GraphDef with bindings (TFF's
`computation.proto`, message `TensorFlow`): the parameter's placeholders, the result's tensors
and an `initialize_op`. Its C++ worker imports the graph into a session and, on every call, runs
`initialize_op` and then fetches the result (TFF's `tensorflow_executor.cc`);
`InProcessComputation` does the same through `tf.compat.v1.wrap_function`, on TFF's graph
unchanged but for names. It reads TFF's computation protos, internals that TFF does not promise
to keep: it is pinned to TFF 0.87 (`tests/runtime/tff_graphs_test.py` fails if the layout changes).
"""

import itertools
from typing import Any
from typing import List
from typing import Sequence

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

_import_ids = itertools.count()


def _binding_names(binding: computation_pb2.TensorFlow.Binding, where: str) -> List[str]:
  """The tensor names of a binding, flattened depth-first as TFF flattens the type."""
  kind = binding.WhichOneof('binding')
  if kind == 'tensor':
    return [binding.tensor.tensor_name]
  if kind == 'sequence':
    if binding.sequence.WhichOneof('binding') != 'variant_tensor_name':
      raise ValueError(f'{where}: a sequence bound as a serialised graph, not as a variant tensor.')
    return [binding.sequence.variant_tensor_name]
  if kind == 'struct':
    return [name for element in binding.struct.element
            for name in _binding_names(element, where)]
  raise ValueError(f'{where}: unknown binding {kind!r} (not TFF 0.87\'s computation.proto?).')


def _uniquely_named(graph_def: tf.compat.v1.GraphDef, prefix: str) -> tf.compat.v1.GraphDef:
  """`graph_def` with its library functions and variables' shared names prefixed by `prefix`."""
  graph_def = tf.compat.v1.GraphDef.FromString(graph_def.SerializeToString())
  functions = {function.signature.name for function in graph_def.library.function}

  def rename_attribute(value):
    if value.HasField('func') and value.func.name in functions:
      value.func.name = prefix + value.func.name
    if value.HasField('list'):
      for function in value.list.func:
        if function.name in functions:
          function.name = prefix + function.name

  def rename_nodes(nodes):
    for node in nodes:
      if node.op in functions:  # a call of a library function by its name
        node.op = prefix + node.op
      for value in node.attr.values():
        rename_attribute(value)
      if node.op == 'VarHandleOp':
        # An empty shared name means the node's name, which is unique within one graph only.
        shared = node.attr['shared_name'].s.decode() or node.name
        node.attr['shared_name'].s = (prefix + shared).encode()

  rename_nodes(graph_def.node)
  for function in graph_def.library.function:
    function.signature.name = prefix + function.signature.name
    rename_nodes(function.node_def)
  for gradient in graph_def.library.gradient:
    gradient.function_name = prefix + gradient.function_name
    gradient.gradient_func = prefix + gradient.gradient_func
  return graph_def


def _placeholder_spec(graph_def: tf.compat.v1.GraphDef, tensor: str, where: str) -> tf.TensorSpec:
  node_name = tensor.split(':')[0]
  node = next((node for node in graph_def.node if node.name == node_name), None)
  if node is None or node.op != 'Placeholder':
    raise ValueError(f'{where}: the parameter\'s tensor {tensor} is not a placeholder (not TFF '
                     '0.87?).')
  return tf.TensorSpec(tf.TensorShape(node.attr['shape'].shape),
                       tf.dtypes.as_dtype(node.attr['dtype'].type))


def _subgraph_function(graph_def: tf.compat.v1.GraphDef, inputs: Sequence[str],
                       input_specs: Sequence[tf.TensorSpec], outputs: Sequence[str]):
  """A function of the `inputs` placeholders computing `outputs`, from the part of `graph_def`
  they need (`extract_sub_graph`, by inputs and control inputs): a function's stateful operations
  all run, so the result's function must not hold the initialisation's, and extracting the
  subgraph is cheaper than importing everything and pruning it."""
  subgraph = tf.compat.v1.graph_util.extract_sub_graph(
      graph_def, sorted({tensor.split(':')[0] for tensor in outputs}))
  present = {node.name for node in subgraph.node}

  def body(*args):
    input_map = {tensor: arg for tensor, arg in zip(inputs, args, strict=True)
                 if tensor.split(':')[0] in present}
    return tf.compat.v1.import_graph_def(subgraph, input_map=input_map,
                                         return_elements=list(outputs), name='tff')

  return tf.compat.v1.wrap_function(body, list(input_specs))


def flatten(value: Any, type_spec: tff.Type, where: str) -> List[Any]:
  """The tensors of a Python `value` of `type_spec`, depth-first (datasets as variants).

  Args:
    value: the value, in Python containers or `tff.structure.Struct`s.
    type_spec: its TFF type, of tensors, sequences and structures.
    where: what to call it in errors.

  Returns:
    The flat list, in the order of TFF's bindings.

  Raises:
    TypeError: naming `where`, if a sequence is not a `tf.data.Dataset` or a type is federated.
  """
  if isinstance(type_spec, tff.StructType):
    elements = tff.structure.iter_elements(tff.structure.from_container(value))
    return [leaf for (_, element), (_, element_type) in zip(
        elements, tff.structure.iter_elements(type_spec), strict=True)
            for leaf in flatten(element, element_type, where)]
  if isinstance(type_spec, tff.SequenceType):
    if not isinstance(value, tf.data.Dataset):
      raise TypeError(f'{where}: a sequence argument must be a tf.data.Dataset, got '
                      f'{type(value).__name__}.')
    return [tf.data.experimental.to_variant(value)]
  if isinstance(type_spec, tff.TensorType):
    return [value]
  raise TypeError(f'{where}: {type_spec} is not a TensorFlow type.')


def _unflatten(tensors: Sequence[tf.Tensor], type_spec: tff.Type) -> Any:
  leaves = iter(tensors)

  def build(element_type):
    if isinstance(element_type, tff.StructType):
      return tff.structure.Struct([(name, build(element))
                                   for name, element in tff.structure.iter_elements(element_type)])
    return next(leaves)

  return build(type_spec)


class InProcessComputation:
  """A `tff.tensorflow.computation`, called in this process as TFF's worker calls it.

  Calls take and return flat lists of tensors, in the order of the parameter's and result's
  types (`flatten` and `unflatten` convert), so that a caller chaining computations (the
  map-reduce round of `inprocess`) converts nothing between them.
  """

  def __init__(self, computation: tff.Computation, name: str = 'computation'):
    """Imports the computation's graph.

    Args:
      computation: a TensorFlow computation (`tff.tensorflow.computation`, or a part of a
        `tff.backends.mapreduce.MapReduceForm`).
      name: what to call it in errors.

    Raises:
      ValueError: if `computation` is not a TensorFlow computation, returns a sequence, or binds
        a sequence otherwise than TFF 0.87 does.
    """
    self.name = name
    self.type_signature = computation.type_signature
    self._import(tff.framework.ConcreteComputation.get_proto(computation))

  def _import(self, proto: computation_pb2.Computation) -> None:
    name = self.name
    if proto.WhichOneof('computation') != 'tensorflow':
      raise ValueError(f'{name} is a {proto.WhichOneof("computation")!r} computation, not a '
                       'TensorFlow one.')
    if any(isinstance(t, tff.SequenceType) for t in _leaf_types(self.type_signature.result)):
      raise ValueError(f'{name} returns a sequence; only tensors are returned in process.')
    tensorflow = proto.tensorflow
    graph_def = tf.compat.v1.GraphDef()
    if not tensorflow.graph_def.Unpack(graph_def):
      raise ValueError(f'{name}: its graph_def is not a GraphDef (not TFF 0.87?).')
    # One process holds what TFF's worker keeps in separate sessions: library function names and
    # variables' shared names are global to TensorFlow's eager context (where this process's own
    # `tf.function`s live too), so each import gets names of its own.
    prefix = f'fedasr_{next(_import_ids)}_'
    graph_def = _uniquely_named(graph_def, prefix)
    initialized = None
    if tensorflow.initialize_op:
      # A tensor that exists once `initialize_op` ran: what a caller orders the result after
      # (a pruned function's operations are not returned to a graph that calls it).
      initialized = f'{prefix}initialized'
      graph_def.node.add(name=initialized, op='Const', input=[f'^{tensorflow.initialize_op}'])
      graph_def.node[-1].attr['dtype'].type = tf.bool.as_datatype_enum
      graph_def.node[-1].attr['value'].tensor.CopyFrom(tf.make_tensor_proto(True))
    inputs = (_binding_names(tensorflow.parameter, name)
              if tensorflow.HasField('parameter') else [])
    outputs = _binding_names(tensorflow.result, name)
    self._input_specs = [_placeholder_spec(graph_def, tensor, name) for tensor in inputs]
    self._call = _subgraph_function(graph_def, inputs, self._input_specs, outputs)
    self._initialize = None
    if initialized is not None:
      initialize = _subgraph_function(graph_def, inputs, self._input_specs, [f'{initialized}:0'])
      # The operation too, as the function's control output: a call's side effects are complete
      # before what depends on the call by control runs, even where TensorFlow inlines the call.
      graph = initialize.graph
      self._initialize = initialize.prune(
          initialize.inputs, [graph.as_graph_element(f'tff/{initialized}:0'),
                              graph.get_operation_by_name(f'tff/{tensorflow.initialize_op}')])
    self._dtypes = [spec.dtype for spec in self._input_specs]

  @property
  def input_specs(self) -> List[tf.TensorSpec]:
    """The `tf.TensorSpec` of each of the parameter's flat tensors."""
    return list(self._input_specs)

  @property
  def output_specs(self) -> List[tf.TensorSpec]:
    """The `tf.TensorSpec` of each of the result's flat tensors."""
    return [tf.TensorSpec(t.shape, t.dtype) for t in self._call.outputs]

  def flatten(self, value: Any) -> List[Any]:
    """The parameter's tensors (datasets as variants) of the Python `value`, in binding order."""
    parameter = self.type_signature.parameter
    return [] if parameter is None else flatten(value, parameter, self.name)

  def unflatten(self, tensors: Sequence[tf.Tensor]) -> Any:
    """The result's `tff.structure.Struct` (or tensor) of the flat `tensors`."""
    return _unflatten(tensors, self.type_signature.result)

  def call_flat(self, *tensors) -> List[tf.Tensor]:
    """Runs the computation on the parameter's flat tensors; returns the result's, in order.

    As TFF's worker: `initialize_op` first (it sets the graph's variables), then the result,
    ordered by an explicit control dependency, so also in a graph built without `tf.function`'s
    automatic ones. The variables are this import's alone: two calls must not overlap.
    """
    tensors = [t if isinstance(t, tf.Tensor) else tf.convert_to_tensor(t, dtype)
               for t, dtype in zip(tensors, self._dtypes, strict=True)]
    if self._initialize is None:
      return list(self._call(*tensors))
    with tf.control_dependencies([self._initialize(*tensors)[0]]):
      return list(self._call(*tensors))

  def __call__(self, value: Any = None) -> Any:
    """Runs the computation on a Python `value`; returns the result as `tff.structure.Struct`s
    of eager tensors."""
    return self.unflatten(self.call_flat(*self.flatten(value)))


def _leaf_types(type_spec: tff.Type) -> List[tff.Type]:
  if isinstance(type_spec, tff.StructType):
    return [leaf for _, element in tff.structure.iter_elements(type_spec)
            for leaf in _leaf_types(element)]
  return [type_spec]
