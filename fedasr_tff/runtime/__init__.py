"""Process-level runtime: TFF's local C++ execution context, with a worker that dies with us."""

from fedasr_tff.runtime.execution_context import set_local_cpp_execution_context
