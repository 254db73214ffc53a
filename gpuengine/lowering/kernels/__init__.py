"""Lowering: one kernel module per op family (kernels/registry.py lists them), each building the WGSL dispatches of
its ops.

The passes below ask what lowering can run and what it costs (passes/kernel_support.py) without importing it:
importing any kernel module first runs this, which installs the registry and the dispatch cost there.
"""

from ...passes import kernel_support
from . import dispatch_cost, registry

kernel_support.install(registry, dispatch_cost.op_ns)  # type: ignore[arg-type]
