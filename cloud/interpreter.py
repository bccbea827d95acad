"""The shared IR as a pure JAX function: `to_jax(program) -> JaxProgram`.

The program is decomposed to core ATen (the same `decompose_to_core_aten` the cloud-tpu
capability declares), then each node is evaluated with its lowering from `LOWERINGS`:

    new_buffers, outputs = jax_program(params, buffers, *inputs, rng_key=key)

- pure and jit-able: parameters and buffers are arguments, never closed over; constants of the
  graph (lifted tensors) are embedded.
- buffer mutations (BatchNorm running stats, `num_batches_tracked`) come back in `new_buffers`
  (every buffer, mutated ones replaced), in place of torch's in-place update.
- ops that draw random numbers (dropout, rand) get `jax.random.fold_in(rng_key, i)` with `i`
  the node's position: one key per step gives reproducible, independent draws.
- torch's dtype rules: every node's result is cast to the dtype torch.export recorded for it
  (`node.meta["val"]`), so integer/float promotion follows torch, not jax.numpy.

int64: with `jax_enable_x64` off (JAX's default) int64 tensors are int32 on device. Inputs,
buffers and constants that are int64 are checked to fit int32 when converted on the host (a
label or index out of range is a UserError, never a silent wrap-around); int64 results
(argmax, arange, sums of integers) are int32 on device and written back to torch as int64 by
`train_step(...).sync_to`. With `jax.config.update("jax_enable_x64", True)` they stay int64.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpuedge.cloud.capability import decompose_to_core_aten
from tpuedge.cloud.lowerings import LOWERINGS, NOT_LOWERED, is_random_op, jax_dtype
from tpuedge.cloud.node_names import captured_name_map
from tpuedge.shared_ir.errors import InternalError, Problem, ProblemsError, UserError
from tpuedge.shared_ir.op_registry import STRUCTURAL_OPS, op_key
from tpuedge.shared_ir.sources import node_source
from tpuedge.shared_ir.tensors import TensorSpec, to_numpy

__all__ = ["to_jax", "JaxProgram", "host_to_jax"]

_INT32 = np.iinfo(np.int32)


def host_to_jax(value: Any, name: str = "tensor") -> jax.Array:
    """A torch tensor / numpy array / number as a jax array, int64 narrowed to int32 only when
    every value fits (x64 off); otherwise a UserError naming the tensor."""
    arr = to_numpy(value)
    if arr.dtype == np.int64 and not jax.config.jax_enable_x64:
        if arr.size and (arr.min() < _INT32.min or arr.max() > _INT32.max):
            raise UserError(
                f"{name} holds int64 values outside the int32 range ({arr.min()}..{arr.max()}); JAX "
                "runs int64 as int32 unless x64 is on. Enable it with "
                "jax.config.update('jax_enable_x64', True) before tpuedge.cloud, or keep the values small."
            )
        arr = arr.astype(np.int32)
    elif arr.dtype == np.float64 and not jax.config.jax_enable_x64:
        arr = arr.astype(np.float32)
    return jnp.asarray(arr)


@dataclass
class _Slot:
    """How one graph placeholder is fed."""

    kind: str  # "param" | "buffer" | "constant" | "input" | "token"
    name: str


@dataclass(eq=False)  # hashed by identity, so jax.jit(jax_program) works
class JaxProgram:
    """A Program lowered to JAX. Call it (pure), or use `forward` with its own weights.

    Attributes:
        params / buffers: initial values (jax arrays) by the ExportedProgram's state names
            ("fc1.weight", "bn1.running_mean").
        inputs / outputs: the user-facing TensorSpecs (inputs in call order).
        mutated_buffers: buffer names the program updates (returned in `new_buffers`).
        exported_program: the decomposed (core ATen) ExportedProgram that is interpreted.
        original_names: decomposed node name -> name of the captured program's node it came from.
    """

    exported_program: Any
    params: dict[str, jax.Array]
    buffers: dict[str, jax.Array]
    constants: dict[str, jax.Array]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    mutated_buffers: list[str]
    original_names: dict[str, str] = field(default_factory=dict)
    _slots: list[_Slot] = field(default_factory=list, repr=False)
    _mutation_outputs: list[tuple[int, str]] = field(default_factory=list, repr=False)
    _user_outputs: list[int] = field(default_factory=list, repr=False)
    _intermediate_keys: dict[str, str] = field(default_factory=dict, repr=False)
    _original_getitems: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)
    _jit_cache: Any = field(default=None, repr=False)

    def describe_node(self, name: str) -> str | None:
        """ "softmax_3 (aten._softmax.default) at net.py:12 (...)" for an interpreted node's name
        (the named scope XLA's op metadata carries), or None when no node has that name."""
        node = next((n for n in self.exported_program.graph.nodes if n.name == name and n.op == "call_function"), None)
        if node is None:
            return None
        return f"{node.name} ({op_key(node.target)}) at {node_source(node) or 'no source line'}"

    # ---- the pure function ------------------------------------------------------------------
    def __call__(
        self,
        params: Mapping[str, Any],
        buffers: Mapping[str, Any],
        *inputs: Any,
        rng_key: Any = None,
    ) -> tuple[dict[str, jax.Array], list[jax.Array]]:
        """(params, buffers, *inputs, rng_key) -> (new_buffers, outputs). Pure; jit it freely."""
        return self.call_transformed(params, buffers, *inputs, rng_key=rng_key)

    def call_transformed(self, params, buffers, *inputs: Any, rng_key: Any = None, transform=None):
        """`__call__` with a value hook (see `_run`); pure as long as `transform` is."""
        results = self._run(params, buffers, inputs, rng_key, record=None, transform=transform)
        new_buffers = dict(buffers)
        for index, name in self._mutation_outputs:
            new_buffers[name] = results[index]
        return new_buffers, [results[i] for i in self._user_outputs]

    def forward(self, *inputs: Any, rng_key: Any = None) -> list[jax.Array]:
        """Run with the program's own weights (host inputs: torch, numpy or jax)."""
        arrays = self._host_inputs(inputs)
        key = rng_key if rng_key is not None else jax.random.key(0)
        return self._jitted()(self.params, self.buffers, *arrays, rng_key=key)[1]

    def intermediates(
        self, params: Mapping[str, Any], buffers: Mapping[str, Any], *inputs: Any, rng_key: Any = None
    ) -> dict[str, Any]:
        """Every call_function node's value (eager, for per-layer accuracy debugging).

        Keys are the CAPTURED program's node names ("conv2d", "layer_norm_1") for the node
        that yields that original op's value; the helper nodes a decomposition adds are keyed
        "<original name>/<decomposed name>" (e.g. "scaled_dot_product_attention/bmm").
        Multi-output ops give tuples; an original `getitem` node gets its element.
        """
        record: dict[str, Any] = {}
        arrays = [a if isinstance(a, jax.Array) else host_to_jax(a, s.name) for a, s in zip(inputs, self.inputs)]
        self._run(params, buffers, arrays, rng_key if rng_key is not None else jax.random.key(0), record=record)
        return record

    # ---- plumbing ---------------------------------------------------------------------------
    def _host_inputs(self, inputs: Sequence[Any]) -> list[jax.Array]:
        if len(inputs) != len(self.inputs):
            expected = ", ".join(s.describe() for s in self.inputs)
            raise UserError(f"The program takes {len(self.inputs)} input(s) ({expected}) but got {len(inputs)}.")
        return [host_to_jax(v, spec.name) for v, spec in zip(inputs, self.inputs)]

    def _jitted(self) -> Callable:
        if self._jit_cache is None:
            self._jit_cache = jax.jit(self.__call__)
        return self._jit_cache

    def _run(self, params, buffers, inputs, rng_key, record, transform=None):
        """`transform(kind, key, value) -> value`, when given, sees every parameter ("param",
        state name), user input ("input", its name) and node value ("node", the captured
        program's node name, or "<original>/<decomposed>" for a decomposition's helpers) and
        may replace it: the hook quantization-aware training fakes int8 through."""
        if len(inputs) != len(self.inputs):
            raise UserError(f"The program takes {len(self.inputs)} input(s) but got {len(inputs)}.")
        graph = self.exported_program.graph
        env: dict[Any, Any] = {}
        user = iter(inputs)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, slot in zip(placeholders, self._slots):
            if slot.kind == "param":
                env[node] = params[slot.name] if transform is None else transform("param", slot.name, params[slot.name])
            elif slot.kind == "buffer":
                env[node] = buffers[slot.name]
            elif slot.kind == "constant":
                env[node] = self.constants[slot.name]
            elif slot.kind == "input":
                env[node] = next(user) if transform is None else transform("input", slot.name, next(user))
            else:
                env[node] = None
        outputs = None
        for position, node in enumerate(graph.nodes):
            if node.op == "placeholder":
                continue
            if node.op == "output":
                outputs = [_load(env, a) for a in node.args[0]]
                break
            if node.op != "call_function":
                raise InternalError(f"cloud interpreter: unexpected {node.op} node {node.name}")
            args = _load(env, node.args)
            kwargs = _load(env, node.kwargs)
            if node.target is operator.getitem:
                value = args[0][args[1]]
            else:
                fn = LOWERINGS.lookup(node.target)
                if is_random_op(fn):
                    if rng_key is None:
                        raise UserError(
                            f"The program draws random numbers ({op_key(node.target)}, e.g. dropout); "
                            "pass rng_key=jax.random.key(seed) (a new key per step)."
                        )
                    kwargs = dict(kwargs, rng=jax.random.fold_in(rng_key, position))
                try:
                    with jax.named_scope(node.name):  # XLA's op metadata names the IR node (compile errors cite it)
                        value = fn(*args, **kwargs)
                except (UserError, InternalError):
                    raise
                except Exception as exc:
                    raise InternalError(
                        f"cloud lowering of {op_key(node.target)} failed at node {node.name} "
                        f"({node_source(node) or 'no source line'}): {type(exc).__name__}: {exc}"
                    ) from exc
                value = _as_torch_typed(value, node)
            if transform is not None:
                value = transform("node", self._intermediate_keys.get(node.name, node.name), value)
            env[node] = value
            if record is not None:
                record[self._intermediate_keys.get(node.name, node.name)] = value
        if record is not None:
            self._fill_original_getitems(record)
        return outputs

    def _fill_original_getitems(self, record: dict[str, Any]) -> None:
        for name, (source, index) in self._original_getitems.items():
            value = record.get(source)
            if name not in record and isinstance(value, (tuple, list)) and index < len(value):
                record[name] = value[index]


def _load(env, value):
    """fx args -> values: nodes looked up, containers mapped, everything else as is."""
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_load(env, v) for v in value)
    if isinstance(value, dict):
        return {k: _load(env, v) for k, v in value.items()}
    return value


def _as_torch_typed(value, node):
    """Cast to the dtype torch.export recorded; a shape disagreement is our bug."""
    val = node.meta.get("val")
    if isinstance(value, (tuple, list)) and isinstance(val, (tuple, list)):
        return type(value)(_typed_one(v, m, node) for v, m in zip(value, val)) if len(value) == len(val) else value
    return _typed_one(value, val, node)


def _typed_one(value, val, node):
    if value is None or not hasattr(val, "dtype") or not hasattr(value, "dtype"):
        return value
    want = jax_dtype(val.dtype)
    if value.dtype != want:
        value = value.astype(want)
    expected = tuple(val.shape)
    if all(isinstance(d, int) for d in expected) and tuple(value.shape) != expected:
        raise InternalError(
            f"cloud lowering of {op_key(node.target)} at node {node.name} gave shape {tuple(value.shape)}, "
            f"torch gives {expected}"
        )
    return value


# ---- construction ------------------------------------------------------------------------------
def to_jax(program: Any, *, weights_from: JaxProgram | None = None) -> JaxProgram:
    """Lower a `Program` (or a torch.export ExportedProgram) to a `JaxProgram`.

    `weights_from`: a JaxProgram lowered from another entry of the same bundle; its parameter
    arrays are reused by name instead of converted again (a decoder's entries share every weight).

    Raises ProblemsError listing every op cloud-tpu can't lower (with model source lines)
    before anything runs.
    """
    from torch.export.graph_signature import InputKind, OutputKind

    from tpuedge.shared_ir.program import Program

    if not isinstance(program, Program):
        if not hasattr(program, "graph_signature"):
            raise UserError(
                f"to_jax takes a tpuedge Program or a torch.export ExportedProgram, got {type(program).__name__}; "
                "capture the model with tpuedge.export(model, example_inputs) first."
            )
        program = Program(program)
    captured = program.exported_program
    ep = decompose_to_core_aten(captured)
    _check_lowerable(ep)

    sig = ep.graph_signature
    state = dict(ep.state_dict)
    constants = dict(getattr(ep, "constants", {}) or {})
    params: dict[str, jax.Array] = {}
    buffers: dict[str, jax.Array] = {}
    consts: dict[str, jax.Array] = {}
    slots: list[_Slot] = []
    tied: dict[int, jax.Array] = {}
    user_specs: list[TensorSpec] = []
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for spec in sig.input_specs:
        if spec.kind == InputKind.PARAMETER:
            shared = weights_from.params.get(spec.target) if weights_from is not None else None
            if shared is None:  # a tied parameter (one tensor under two names) becomes one array
                shared = tied.get(id(state[spec.target]))
            params[spec.target] = shared if shared is not None else host_to_jax(state[spec.target], spec.target)
            tied[id(state[spec.target])] = params[spec.target]
            slots.append(_Slot("param", spec.target))
        elif spec.kind == InputKind.BUFFER:
            value = state[spec.target] if spec.target in state else constants[spec.target]
            buffers[spec.target] = host_to_jax(value, spec.target)
            slots.append(_Slot("buffer", spec.target))
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            consts[spec.target] = host_to_jax(constants[spec.target], spec.target)
            slots.append(_Slot("constant", spec.target))
        elif spec.kind == InputKind.USER_INPUT:
            val = placeholders[spec.arg.name].meta.get("val")
            if not hasattr(val, "shape"):
                raise UserError(
                    f"Input {spec.arg.name!r} is not a tensor; cloud-tpu programs take tensors only "
                    "(make Python numbers attributes of the module)."
                )
            slots.append(_Slot("input", spec.arg.name))
        elif spec.kind == InputKind.TOKEN:
            slots.append(_Slot("token", spec.arg.name))
        else:
            raise UserError(f"cloud-tpu can't lower programs with {spec.kind.name} inputs ({spec.arg.name}).")
    user_specs = [s for s in program.inputs]

    mutations, user_outputs = [], []
    for i, spec in enumerate(sig.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            mutations.append((i, spec.target))
        elif spec.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT):
            user_outputs.append(i)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            raise UserError(
                f"The model writes into its input {spec.target!r} in place; cloud-tpu programs are pure. "
                "Compute a new tensor instead of mutating the input (e.g. x = x + 1, not x += 1)."
            )

    original_names, keys, getitems = captured_name_map(captured, ep)
    jp = JaxProgram(
        exported_program=ep,
        params=params,
        buffers=buffers,
        constants=consts,
        inputs=user_specs,
        outputs=list(program.outputs),
        mutated_buffers=[name for _, name in mutations],
        original_names=original_names,
        _slots=slots,
        _mutation_outputs=mutations,
        _user_outputs=user_outputs,
        _intermediate_keys=keys,
        _original_getitems=getitems,
    )
    return jp


def _check_lowerable(ep) -> None:
    missing: dict[str, list] = defaultdict(list)
    for node in ep.graph.nodes:
        if node.op == "call_function":
            key = op_key(node.target)
            if (
                key not in STRUCTURAL_OPS
                and node.target is not operator.getitem
                and not LOWERINGS.supports(node.target)
            ):
                missing[key].append(node)
        elif node.op == "get_attr" or node.op == "call_module":
            missing[f"{node.op}:{node.target}"].append(node)
    if not missing:
        return
    problems = []
    for key, nodes in sorted(missing.items()):
        sources = tuple(dict.fromkeys(s for s in (node_source(n) for n in nodes) if s))[:3]
        problems.append(
            Problem(
                kind="op",
                subject=key,
                message=NOT_LOWERED.get(key, "cloud-tpu has no lowering for this op"),
                suggestion="rewrite that layer with ops `tpuedge ops --target cloud-tpu` lists",
                count=len(nodes),
                sources=sources,
            )
        )
    raise ProblemsError("cloud-tpu can't lower this program:", problems)
