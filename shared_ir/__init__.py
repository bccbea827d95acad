"""The shared graph IR: a torch.export program with named I/O and a content fingerprint.

Both backends (cloud, edge) start from a `Program`, never from the nn.Module.
Imports here stay light; torch is imported when a Program is made or loaded.
"""

from tpuedge.shared_ir.errors import InternalError, Problem, ProblemsError, UserError

__all__ = ["export", "Program", "UserError", "InternalError", "Problem", "ProblemsError"]


def __getattr__(name):  # lazy: keep `tpuedge --help` free of torch
    if name == "Program":
        from tpuedge.shared_ir.program import Program

        return Program
    if name == "export":
        from tpuedge.shared_ir.capture import export

        return export
    raise AttributeError(name)
