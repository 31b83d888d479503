"""Process-level runtime: TFF's local C++ execution context, with a worker that dies with us, and
TFF's distributed runtime over workers on other machines."""

from fedasr_tff.runtime.distributed import DistributedContext
from fedasr_tff.runtime.distributed import TLSCredentials
from fedasr_tff.runtime.distributed import WorkerUnavailableError
from fedasr_tff.runtime.distributed import create_distributed_execution_context
from fedasr_tff.runtime.distributed import parse_workers
from fedasr_tff.runtime.distributed import read_workers_file
from fedasr_tff.runtime.distributed import set_distributed_execution_context
from fedasr_tff.runtime.distributed import trust_statement
from fedasr_tff.runtime.execution_context import set_local_cpp_execution_context
