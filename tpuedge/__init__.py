"""tpuedge: one PyTorch model source to Cloud TPU training and to phones and microcontrollers.

    program = tpuedge.export(model, (x,))          # the shared IR
    program.check("mcu")                           # every problem, before any conversion
    artifact = tpuedge.build(program, "android", "build/android", quantize="int8", calibration=...)
    artifact.run(x)                                # in the real runtime

Everything heavy (torch, jax, litert) is imported on first use, so `tpuedge --help` is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Run from a checkout (scripts, notebooks, `python bench/...` at the repo root): the four
# top-level folders are tpuedge's subpackages there, as `package-dir` maps them when installed.
# An installed copy has them inside this folder and no pyproject.toml beside it.
_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "shared_ir" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # type: ignore[name-defined]  # noqa: F821

from tpuedge.shared_ir.errors import InternalError, Problem, ProblemsError, UserError

__all__ = [
    "export",
    "load",
    "build",
    "verify",
    "Program",
    "cache_write",
    "UserError",
    "InternalError",
    "Problem",
    "ProblemsError",
]
__version__ = "0.1.0"


def export(model: Any, example_inputs: Any, **kwargs: Any):
    """torch.export `model` into the shared IR (`Program`); see `tpuedge.shared_ir.capture.export`."""
    from tpuedge.shared_ir.capture import export as _export

    return _export(model, example_inputs, **kwargs)


def load(path: Any):
    """Open a build folder, a `.tflite` or a saved `.pt2`."""
    from tpuedge.shared_ir.artifact import load as _load

    return _load(path)


def build(program: Any, target: str, out_dir: Any = None, **options: Any):
    """`program.lower(target, **options).compile(out_dir)`; options default as in `tpuedge build`.

    What third-party libraries log and warn meanwhile is held (TPUEDGE_VERBOSE=1 shows it as it
    happens): written to `<out_dir>.build.log` beside the folder, and on failure added to the
    exception's notes."""
    from tpuedge.shared_ir.targets import implemented_targets

    targets = implemented_targets()
    if target not in targets:
        raise UserError(f"Target {target!r} can't be built here; choose one of: {', '.join(targets)}.")
    defaults = {o.name: o.default for o in targets[target].build_options()}
    from tpuedge.shared_ir.held_logs import build_log_path, held_third_party_output

    # third-party logs and warnings are held: kept beside out_dir, carried by a failure's notes
    with held_third_party_output(build_log_path(out_dir) if out_dir is not None else None):
        return program.lower(target, **{**defaults, **options}).compile(out_dir)


def __getattr__(name: str):
    if name == "verify":  # the package; calling it runs tpuedge.verify.compare.verify
        import tpuedge.verify

        return tpuedge.verify
    if name == "Program":
        from tpuedge.shared_ir.program import Program

        return Program
    if name == "cache_write":  # a decoder's KV-cache write (shared_ir/generative/decoder.py's protocol)
        from tpuedge.shared_ir.generative.cache_ops import cache_write

        return cache_write
    raise AttributeError(name)
