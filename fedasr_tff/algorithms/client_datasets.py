"""A process whose clients build their own datasets from keys (TFF's pattern for simulation at
scale).

`with_dataset_computation(process, dataset_computation)` returns the same process with every
computation that takes the clients' datasets taking, instead, a CLIENTS-placed key per client
(the parameter of `dataset_computation`), which each client maps to its dataset where it runs,
as `tff.simulation.compose_dataset_computation_with_computation` does. That function picks the
clients' parameter by its sequence type and refuses a computation that also takes a
SERVER-placed sequence of the same type (mixed FL's and DGA rehearsal's central batches), so
`compose` picks it by placement instead. On TFF workers the driver then sends a few bytes per
client instead of the client's batches (`data.client_store`).
"""

import tensorflow_federated as tff

from fedasr_tff.algorithms import central_work
from fedasr_tff.algorithms import dga


def compose(dataset_computation: tff.Computation, computation: tff.Computation) -> tff.Computation:
  """`computation` with its one CLIENTS-placed dataset parameter replaced by client keys.

  Args:
    dataset_computation: a TFF computation from a client's key to its `tf.data.Dataset`.
    computation: a federated computation with exactly one parameter `{D*}@CLIENTS`, D the
      element type of `dataset_computation`'s datasets.

  Returns:
    The federated computation taking `{K}@CLIENTS` there (K the key type), the rest unchanged.

  Raises:
    TypeError: if `computation` has no such parameter, or more than one.
  """
  dataset_type = dataset_computation.type_signature.result
  parameters = list(tff.structure.iter_elements(computation.type_signature.parameter))
  positions = [i for i, (_, t) in enumerate(parameters)
               if isinstance(t, tff.FederatedType) and t.placement is tff.CLIENTS
               and isinstance(t.member, tff.SequenceType)]
  if len(positions) != 1:
    raise TypeError(f'Expected one CLIENTS-placed dataset parameter, got {len(positions)} in '
                    f'{computation.type_signature.parameter}.')
  position = positions[0]
  if not parameters[position][1].member.is_assignable_from(dataset_type):
    raise TypeError(f'The datasets {dataset_type} are not the computation\'s '
                    f'{parameters[position][1].member}.')
  key_type = tff.FederatedType(dataset_computation.type_signature.parameter, tff.CLIENTS)
  parameters[position] = (parameters[position][0], key_type)

  @tff.federated_computation(tff.StructType(parameters))
  def composed(argument):
    arguments = [argument[i] for i in range(len(parameters))]
    arguments[position] = tff.federated_map(dataset_computation, arguments[position])
    return computation(*arguments)

  return composed


def with_dataset_computation(process, dataset_computation: tff.Computation):
  """`process` taking client keys instead of client datasets (module docstring).

  Args:
    process: a `tff.learning.templates.LearningProcess`, `central_work.ServerDataProcess` or
      `dga.DGAProcess`.
    dataset_computation: a TFF computation from a client's key to its `tf.data.Dataset`, of the
      element type the process's clients take.

  Returns:
    The process of the same kind; its other computations and accessors are unchanged.

  Raises:
    TypeError: for another kind of process, or a dataset type the process does not take.
  """
  def keyed(computation):
    return compose(dataset_computation, computation)

  if isinstance(process, dga.DGAProcess):
    return dga.DGAProcess(
        process.initialize, keyed(process.next), process.get_model_weights,
        process.set_model_weights, process.central_data_type,
        client_round=None if process.client_round is None else keyed(process.client_round),
        server_step=process.server_step, rehearse=process.rehearse)
  if isinstance(process, central_work.ServerDataProcess):
    return central_work.ServerDataProcess(
        process.initialize, keyed(process.next), process.get_model_weights,
        process.set_model_weights, process.central_data_type)
  if isinstance(process, tff.learning.templates.LearningProcess):
    return tff.learning.templates.LearningProcess(
        process.initialize, keyed(process.next), process.get_model_weights,
        process.set_model_weights, get_hparams_fn=process.get_hparams,
        set_hparams_fn=process.set_hparams)
  raise TypeError(f'Cannot give clients keys instead of datasets in a {type(process).__name__}.')
