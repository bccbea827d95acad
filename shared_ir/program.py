"""`Program`: the shared IR. An ExportedProgram plus named I/O, stats and a fingerprint."""

from __future__ import annotations

import os
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.shared_ir.errors import Problem, UserError
from tpuedge.shared_ir.tensors import TensorSpec, to_numpy, validate_inputs
from tpuedge.shared_ir.torch_compat import tree_leaves

__all__ = ["Program"]

_FORMAT = 1


def _dtype_name(torch_dtype) -> str:
    # numpy has no bfloat16: the runtimes' float interface for it is float32
    return {"torch.bfloat16": "float32"}.get(str(torch_dtype), str(torch_dtype).removeprefix("torch."))


def _spec_of(name: str, val) -> TensorSpec:
    shape = tuple(int(d) if str(d).lstrip("-").isdigit() else str(d) for d in val.shape)
    return TensorSpec(name, shape, _dtype_name(val.dtype))


def _output_names(ep, count: int) -> list[str]:
    spec = ep.call_spec.out_spec
    ctx = getattr(spec, "context", None)
    if spec is not None and spec.type is dict and ctx and len(ctx) == count:
        return [str(k) for k in ctx]
    fields = getattr(spec.type, "_fields", None) if spec is not None else None
    if fields and len(fields) == count:
        return list(fields)
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]


class Program:
    """The shared IR both backends consume. Immutable in use: stages return new objects."""

    def __init__(self, exported_program, *, name: str = "model", activation_ranges=None):
        self.exported_program = exported_program
        self.name = name
        # trained int8 ranges keyed by IR node (shared_ir.node_ranges.ActivationRanges), or
        # None; not part of the fingerprint (graph and weights), so float stages are shared
        self.activation_ranges = activation_ranges

    def with_activation_ranges(self, ranges) -> "Program":
        """This program carrying `ranges`: int8 edge builds use them instead of calibrating."""
        return Program(self.exported_program, name=self.name, activation_ranges=ranges)

    # ---- interface -------------------------------------------------------------------
    @cached_property
    def inputs(self) -> list[TensorSpec]:
        from torch.export.graph_signature import InputKind

        nodes = {n.name: n for n in self.exported_program.graph.nodes if n.op == "placeholder"}
        specs = []
        for spec in self.exported_program.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                val = nodes[spec.arg.name].meta.get("val")
                if hasattr(val, "shape"):
                    specs.append(_spec_of(spec.arg.name, val))
        return specs

    @cached_property
    def outputs(self) -> list[TensorSpec]:
        from torch.export.graph_signature import OutputKind

        out_node = next(n for n in self.exported_program.graph.nodes if n.op == "output")
        values = out_node.args[0]
        user = [
            values[i]
            for i, spec in enumerate(self.exported_program.graph_signature.output_specs)
            if spec.kind == OutputKind.USER_OUTPUT
        ]
        names = _output_names(self.exported_program, len(user))
        return [_spec_of(n, v.meta["val"]) for n, v in zip(names, user)]

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    @cached_property
    def parameter_count(self) -> int:
        """Parameters, a tied one (an LM's embedding table and head) counted once."""
        ep = self.exported_program
        tensors = {id(ep.state_dict[n]): ep.state_dict[n] for n in ep.graph_signature.parameters if n in ep.state_dict}
        return int(sum(t.numel() for t in tensors.values()))

    @cached_property
    def op_histogram(self) -> dict[str, int]:
        from tpuedge.shared_ir.op_registry import STRUCTURAL_OPS, op_key

        counts = Counter(
            op_key(n.target)
            for n in self.exported_program.graph.nodes
            if n.op == "call_function" and op_key(n.target) not in STRUCTURAL_OPS
        )
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @cached_property
    def fingerprint(self) -> str:
        from tpuedge.shared_ir.fingerprint import fingerprint
        from tpuedge.shared_ir.stage_times import timed

        with timed("fingerprint"):
            return fingerprint(self.exported_program)

    @property
    def has_dynamic_shapes(self) -> bool:
        return any(isinstance(d, str) for s in self.inputs for d in s.shape)

    # ---- execution -------------------------------------------------------------------
    def run(self, *inputs: Any, memo: bool = True) -> list[np.ndarray]:
        """Reference execution of the IR itself (torch eager over the captured graph).

        memo=False: neither read nor remember outputs (a decoder's step, never run twice on the
        same cache, would hash and keep every cache it is given)."""
        import torch

        arrays = validate_inputs(self.inputs, inputs, f"Program {self.name!r}")
        # A build runs the float reference on the same samples more than once (the quantization
        # search, then the verification): an eval-mode graph gives the same outputs, so remember them.
        memo = (
            None
            if not memo or self.exported_program.graph_signature.buffers_to_mutate
            else self.__dict__.setdefault("_run_memo", {})
        )
        key = _inputs_key(arrays) if memo is not None else None
        if memo is not None and key in memo:
            return [a.copy() for a in memo[key]]
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
        with torch.no_grad():
            try:
                out = self._runnable_module()(*tensors)
            except (IndexError, RuntimeError, ValueError) as exc:
                raise _refused_inputs(self, arrays, exc) from exc
        leaves = tree_leaves(out)
        result = [to_numpy(t) for t in leaves]
        if memo is not None and sum(a.nbytes for v in memo.values() for a in v) < _RUN_MEMO_BYTES:
            memo[key] = [a.copy() for a in result]
        return result

    def run_replacing(self, tensors: dict[str, Any], *inputs: Any) -> list[np.ndarray]:
        """`run`, with some of the program's state tensors (parameters, buffers, constants, by
        state-dict name) replaced for this call: what the model computes with one weight rounded
        (quantize/weight_sensitivity.py). Runs a module of its own (built once), its attributes
        swapped and put back: never the program's tensors written, never `run`'s memo."""
        import torch

        arrays = validate_inputs(self.inputs, inputs, f"Program {self.name!r}")
        if self.__dict__.get("_variant_module") is None:
            self.__dict__["_variant_module"] = self.exported_program.module()
        module = self.__dict__["_variant_module"]
        saved = []
        try:
            for name, value in tensors.items():
                *path, attr = name.split(".")
                holder = module.get_submodule(".".join(path))
                saved.append((holder, attr, _swap_attribute(holder, attr, value)))
            with torch.no_grad():
                out = module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
            return [to_numpy(t) for t in tree_leaves(out)]
        finally:
            for holder, attr, original in reversed(saved):
                _swap_attribute(holder, attr, original)

    def _runnable_module(self):
        """The graph itself, compiled once from a copy (a pass that edits a program's graph need
        not recompile its module), called with the program's state tensors before the user's
        inputs. Not `exported_program.module()`: that also unlifts the state, and imports
        torch._dynamo (0.7 s of an mcu build that reads its program from the cache). The graph is
        functional: state is never written; a buffer's new value is an output, dropped."""
        import copy

        import torch
        from torch.export.graph_signature import InputKind, OutputKind

        if self.__dict__.get("_module_cache") is not None:
            return self.__dict__["_module_cache"]
        ep = self.exported_program
        tables = {
            InputKind.PARAMETER: ep.state_dict,
            InputKind.BUFFER: ep.state_dict,
            InputKind.CONSTANT_TENSOR: ep.constants,
        }
        inputs = ep.graph_signature.input_specs
        if any(spec.kind not in (InputKind.USER_INPUT, *tables) for spec in inputs):  # script objects, tokens
            return ep.module()
        user = [i for i, spec in enumerate(ep.graph_signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
        graph_module = torch.fx.GraphModule(
            ep.graph_module, copy.deepcopy(ep.graph)
        )  # the node metadata shared, not copied

        def run(*tensors):
            given = iter(tensors)
            args = []
            for spec in inputs:
                if spec.kind == InputKind.USER_INPUT:
                    args.append(next(given))
                elif spec.kind == InputKind.BUFFER and spec.target not in ep.state_dict:  # non-persistent
                    args.append(ep.constants[spec.target])
                else:
                    args.append(tables[spec.kind][spec.target])
            outputs = graph_module(*args)
            return [outputs[i] for i in user]

        self.__dict__["_module_cache"] = run
        return run

    def example_inputs(self, seed: int = 0, count: int = 1) -> list[list[np.ndarray]]:
        """Deterministic inputs of the right shapes: normal floats, random bools, and integers
        within the range the example given at export held (an attention mask's 0..1, token ids
        under the vocabulary); 0..7 where that example is not known."""
        rng = np.random.default_rng(seed)
        ranges = self._example_integer_ranges()
        samples = []
        for _ in range(count):
            sample = []
            for spec, (low, high) in zip(self.inputs, ranges):
                shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
                if np.issubdtype(np.dtype(spec.dtype), np.floating):
                    sample.append(rng.standard_normal(shape).astype(spec.dtype))
                elif spec.dtype == "bool":
                    sample.append(rng.integers(0, 2, shape).astype(bool))
                else:
                    sample.append(rng.integers(low, high + 1, shape).astype(spec.dtype))
            samples.append(sample)
        return samples

    def _example_integer_ranges(self) -> list[tuple[int, int]]:
        """Per input, (min, max) of the integer example torch.export kept (ExportedProgram.
        example_inputs, saved in a .pt2 too); (0, 7) for the rest. Values outside what the model
        was exported with can be outside what it takes: an attention mask of 7 overflowed a
        CANINE encoder's additive mask, token ids past a vocabulary raise in its embedding."""
        import torch

        default = [(0, 7)] * len(self.inputs)
        example = getattr(self.exported_program, "example_inputs", None)
        leaves = [t for t in tree_leaves(example) if isinstance(t, torch.Tensor)] if example else []
        if len(leaves) != len(self.inputs):
            return default
        return [
            (int(t.min()), int(t.max())) if t.numel() and not t.is_floating_point() and t.dtype != torch.bool else d
            for t, d in zip(leaves, default)
        ]

    # ---- targets ---------------------------------------------------------------------
    def check(self, target: str) -> list[Problem]:
        """Every problem `target` has with this program, all at once (empty list: clean)."""
        from tpuedge.shared_ir.cache_keys import cached_clean_check
        from tpuedge.shared_ir.check import check_program
        from tpuedge.shared_ir.stage_times import timed

        with timed(f"check ({target} op tables)"):
            return cached_clean_check(self, target, lambda: check_program(self, target))

    def rewrites(self, target: str) -> list[str]:
        """What `target`'s own IR rewrites will change in this program (announced, not problems)."""
        from tpuedge.shared_ir.targets import get_target

        cap = get_target(target).capability()
        return cap.rewrite_notes(self.exported_program) if cap.rewrite_notes else []

    def lower(self, target: str, **options: Any):
        """Lower for `target` (-> a target-specific `Lowered`, see `Lowered.compile()`)."""
        from tpuedge.shared_ir.targets import get_target

        return get_target(target).lower(self, **options)

    # ---- persistence -----------------------------------------------------------------
    def metadata(self) -> dict:
        return {
            "format": _FORMAT,
            "name": self.name,
            "fingerprint": self.fingerprint,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "parameter_count": self.parameter_count,
            **({"activation_ranges": self.activation_ranges.to_json()} if self.activation_ranges else {}),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write a `.pt2` (torch.export format) with tpuedge's metadata inside; atomic
        (shared_ir/program_file.py)."""
        from tpuedge.shared_ir.program_file import save_program

        return save_program(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Program":
        """The program a `.pt2` holds (shared_ir/program_file.py), read through the build cache."""
        from tpuedge.shared_ir.program_file import load_program

        return load_program(cls, path)

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.inputs)
        return f"Program({self.name!r}, inputs=[{ins}], params={self.parameter_count}, fingerprint={self.fingerprint[:12]})"


def _swap_attribute(holder, attr: str, value):
    """Set a module's parameter, buffer or plain tensor attribute to `value`; returns the old one."""
    import torch

    old = getattr(holder, attr)
    if attr in dict(holder.named_parameters(recurse=False)) and not isinstance(value, torch.nn.Parameter):
        value = torch.nn.Parameter(value, requires_grad=False)  # a parameter's slot takes only a Parameter
    setattr(holder, attr, value)
    return old


_RUN_MEMO_BYTES = 64 * 1024 * 1024  # outputs remembered per Program (a few hundred samples of a small model)


def _refused_inputs(program: "Program", arrays: list[np.ndarray], exc: Exception) -> UserError:
    """The model itself (torch, on its own graph) refuses these samples: the caller's data,
    most often a token id past an embedding's table. Names each input's value range."""
    ranges = ", ".join(
        f"{spec.name!r} {a.dtype} values {a.min()}..{a.max()}"
        if a.size and a.dtype.kind in "iub"
        else f"{spec.name!r} {a.dtype}"
        for spec, a in zip(program.inputs, arrays)
    )
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return UserError(
        f"Program {program.name!r} fails in torch on a sample it was given ({type(exc).__name__}: {first}); the "
        f"sample's inputs: {ranges}. The model itself refuses these values: an index input (token ids, positions) "
        "must stay below its table's size (the vocabulary), so give calibration and evaluation samples the model takes."
    )


def _inputs_key(arrays) -> str:
    import hashlib

    digest = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()
