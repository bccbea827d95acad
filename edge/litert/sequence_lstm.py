"""LSTM layers as LiteRT's fused UNIDIRECTIONAL_SEQUENCE_LSTM on android: one op per layer and
direction instead of the layer written out over time.

Written out (litert-torch's own lowering of `aten.lstm`, or shared_ir/passes/recurrent_layers.py),
an LSTM is about 16 ops per time step and layer: Resemblyzer's 3 layers over 160 frames were
7,834 ops, whose op and tensor tables (about 70 bytes each) made its int8 file 1.32x the zoo's
size goal on 1.4 MB of weights. LiteRT runs a whole layer as one kernel:

  - `FuseSequenceLSTM` (an android IR pass): an `aten.lstm.input` becomes, per layer and
    direction, `tpuedge::sequence_lstm(x, w_ih, w_hh, b_ih + b_hh or zeros, batch_first)` over one
    clearing step and then x (`_clearing_step`: the op's states outlive an invoke), its first
    output step dropped; the reverse direction reads its input flipped in time and flips its
    output back; h_n is each output's last step. Only where the fused op computes what torch
    does: eval mode, a zero initial state, constant weights, no projections, a 3-D float32
    input of static shape, and c_n unread (the op keeps its cell state inside). Others stay for the unrolling.
  - the op's lowering: `tfl.unidirectional_sequence_lstm`, its weights and biases cut into gates
    (torch's order i, f, g, o is the op's).
  - its weights in a quantized build: edge/litert/fused_lstm_weights.py (the flatbuffer's side, no torch).

mcu keeps unrolling (its own passes run before this one could see an LSTM): TFLite-Micro's
UNIDIRECTIONAL_SEQUENCE_LSTM is integer-only, with int16 cell states and per-gate intermediate
scales ai-edge-quantizer does not produce.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.constant_fold import lift_constant
from tpuedge.shared_ir.passes.graph_edit import (
    call_functions,
    call_with_val,
    drop_unused_inputs,
    rewritten_calls,
    static_shapes,
)
from tpuedge.shared_ir.passes.recurrent_layers import is_zeros, layer_args

__all__ = ["FuseSequenceLSTM", "register_litert_lowering"]


@torch.library.custom_op("tpuedge::sequence_lstm", mutates_args=())
def sequence_lstm(
    x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, bias: torch.Tensor, batch_first: bool
) -> torch.Tensor:
    """One LSTM layer and direction from a zero state: its output sequence (torch's own kernel)."""
    zeros = x.new_zeros(1, x.shape[0 if batch_first else 1], w_hh.shape[1])
    output, _, _ = torch.ops.aten.lstm.input(
        x, [zeros, zeros], [w_ih, w_hh, bias, torch.zeros_like(bias)], True, 1, 0.0, False, False, batch_first
    )
    return output


@sequence_lstm.register_fake
def _sequence_lstm_fake(x, w_ih, w_hh, bias, batch_first):
    return x.new_empty((*x.shape[:-1], w_hh.shape[1]))


def _value(program, node):
    """The value of a parameter, buffer or constant input; None for anything computed."""
    if node.op != "placeholder":
        return None
    target = next((s.target for s in program.graph_signature.input_specs if s.arg.name == node.name), None)
    value = program.constants[target] if target in program.constants else program.state_dict.get(target)
    return None if value is None else value.detach()


def _fusable(program, node) -> bool:
    x, h0, c0, params, has_biases, layers, train, bidirectional, _ = layer_args(node, lstm=True)
    reads_cell_state = any(u.args[1] == 2 and u.users for u in node.users)
    return (
        not train
        and len(params) == layers * (2 if bidirectional else 1) * (4 if has_biases else 2)
        and all(_value(program, p) is not None for p in params)
        and static_shapes(x)
        and x.meta["val"].dim() == 3
        and x.meta["val"].dtype == torch.float32
        and is_zeros(program, h0)
        and is_zeros(program, c0)
        and not reads_cell_state
    )


def _clearing_step(w_ih: torch.Tensor, w_hh: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(w_ih with a "clear" input column, the value that column reads at the clearing step).

    LiteRT's op keeps its states in variable tensors that outlive an invoke: run twice on one
    input, a model answers differently (by 3e-4 on a 16-unit layer), unless the app resets them
    each time. So the op reads one step more, first: zeros and, in a column of its own, a value
    whose weights drive the input and forget gates to sigmoid(-R) = 0, whatever the carried h:
    c = 0 * c + 0 * g = 0 and h = o * tanh(0) = 0, the zero state torch starts from. The column
    weighs each of those two gates at minus its weights' largest magnitude (an int8 weight keeps
    its scale) and 0 on the other two; R exceeds what W_hh h + b can add (|h| <= 1) by 200."""
    hidden = w_hh.shape[1]
    gates = [slice(0, hidden), slice(hidden, 2 * hidden)]  # torch's order: i, f, g, o
    column = torch.zeros(w_ih.shape[0], 1, dtype=w_ih.dtype)
    largest = []
    for rows in gates:
        peak = float(w_ih[rows].abs().max()) or 1.0
        column[rows] = -peak
        largest.append(peak)
    reach = max(float((w_hh[rows].abs().sum(1) + bias[rows].abs()).max()) for rows in gates)
    return torch.cat([w_ih, column], 1), (reach + 200.0) / min(largest)


def _sequence(program, graph, node, x, w_ih, w_hh, b_ih=None, b_hh=None, *, batch_first: bool):
    """One direction's output sequence over `x` (read forwards), from a cleared state; no
    biases (bias=False): zeros."""
    aten = torch.ops.aten
    time_dim = 1 if batch_first else 0
    weights = [_value(program, p) for p in (w_ih, w_hh)]
    bias = (
        _value(program, b_ih) + _value(program, b_hh) if b_ih is not None else weights[0].new_zeros(weights[0].shape[0])
    )
    w_clear, clear_value = _clearing_step(weights[0], weights[1], bias)
    shape = list(x.meta["val"].shape)
    steps = shape[time_dim]
    shape[time_dim], shape[-1] = 1, shape[-1] + 1
    first = torch.zeros(shape)
    first[..., -1] = clear_value
    w_clear = lift_constant(program, f"_{node.name}_{w_ih.name}_clear", w_clear, w_ih)
    bias = lift_constant(program, f"_{node.name}_{w_ih.name}_bias", bias, w_ih)
    first = lift_constant(program, f"_{node.name}_{w_ih.name}_first", first, x)
    padded = call_with_val(graph, aten.constant_pad_nd.default, x, [0, 1], 0.0)
    read = call_with_val(graph, aten.cat.default, [first, padded], time_dim)
    out = call_with_val(graph, torch.ops.tpuedge.sequence_lstm.default, read, w_clear, w_hh, bias, batch_first)
    return call_with_val(graph, aten.slice.Tensor, out, time_dim, 1, steps + 1)


def _fused(program, graph, node):
    """(output, h_n, None) of the fused layers; None leaves the node."""
    if not _fusable(program, node):
        return None
    aten = torch.ops.aten
    x, _, _, params, has_biases, layers, _, bidirectional, batch_first = layer_args(node, lstm=True)
    time_dim = 1 if batch_first else 0
    directions = 2 if bidirectional else 1
    per_cell = 4 if has_biases else 2
    layer_in, h_last = x, []
    for layer in range(layers):
        outputs = []
        for direction in range(directions):
            cell = layer * directions + direction
            seq_in = layer_in if direction == 0 else call_with_val(graph, aten.flip.default, layer_in, [time_dim])
            seq_out = _sequence(
                program, graph, node, seq_in, *params[cell * per_cell : (cell + 1) * per_cell], batch_first=batch_first
            )
            h_last.append(call_with_val(graph, aten.select.int, seq_out, time_dim, -1))
            outputs.append(seq_out if direction == 0 else call_with_val(graph, aten.flip.default, seq_out, [time_dim]))
        layer_in = outputs[0] if directions == 1 else call_with_val(graph, aten.cat.default, outputs, -1)
    for unread in [u for u in node.users if u.args[1] == 2]:  # c_n, which nothing reads (`_fusable`)
        graph.erase_node(unread)
    return layer_in, call_with_val(graph, aten.stack.default, h_last, 0), None


class FuseSequenceLSTM:
    name = "fuse-sequence-lstm"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        found = call_functions(exported_program, {torch.ops.aten.lstm.input})
        ep, result = rewritten_calls(
            self.name,
            exported_program,
            found,
            _fused,
            with_program=True,
            unchanged="no LSTM layer LiteRT's fused sequence LSTM computes as torch does",
            changed="{count} LSTM layer(s) as LiteRT's UNIDIRECTIONAL_SEQUENCE_LSTM, one op per layer and direction",
        )
        if result.changed:
            drop_unused_inputs(ep)  # the layers' own weights and biases: their fused forms replace them
            register_litert_lowering()
        return ep, result


_REGISTERED = threading.Lock()
_registered = False


def register_litert_lowering() -> None:
    """Teach litert-torch to lower `tpuedge::sequence_lstm` (once per process)."""
    global _registered
    with _REGISTERED:
        if _registered:
            return
        from tpuedge.edge.litert.litert_session import litert_session

        with litert_session():
            from litert_converter.mlir import ir
            from litert_converter.mlir.dialects import stablehlo
            from litert_torch.backend.lowerings import registry
            from litert_torch.backend.lowerings import utils as lowering_utils

        def lower(lctx, x, w_ih, w_hh, bias, batch_first):
            hidden = int(lctx.node.args[2].meta["val"].shape[1])
            features = int(lctx.node.args[1].meta["val"].shape[1])
            batch = int(lctx.node.args[0].meta["val"].shape[0 if batch_first else 1])

            def gate(value, k: int, columns: int | None):
                start, stop = [k * hidden], [(k + 1) * hidden]
                if columns is not None:
                    start, stop = start + [0], stop + [columns]
                return stablehlo.slice(
                    value,
                    ir.DenseI64ArrayAttr.get(start),
                    ir.DenseI64ArrayAttr.get(stop),
                    ir.DenseI64ArrayAttr.get([1] * len(start)),
                )

            f32 = ir.F32Type.get()
            none = ir.Operation.create(
                "tfl.no_value", results=[ir.NoneType.get()], attributes={"value": ir.UnitAttr.get()}
            ).result
            states = [lowering_utils.splat(0.0, f32, [batch, hidden]) for _ in range(2)]  # stateful: own tensors each
            operands = [
                x,
                *(gate(w_ih, k, features) for k in range(4)),
                *(gate(w_hh, k, hidden) for k in range(4)),
                none,
                none,
                none,
                *(gate(bias, k, None) for k in range(4)),
                none,
                none,
                *states,
                none,
                none,
                none,
                none,
            ]
            return ir.Operation.create(
                "tfl.unidirectional_sequence_lstm",
                results=lowering_utils.node_meta_to_ir_types(lctx.node),
                operands=operands,
                attributes={
                    "fused_activation_function": ir.StringAttr.get("TANH"),
                    "cell_clip": ir.FloatAttr.get(f32, 0.0),
                    "proj_clip": ir.FloatAttr.get(f32, 0.0),
                    "time_major": ir.BoolAttr.get(not batch_first),
                },
            ).result

        registry.lower(torch.ops.tpuedge.sequence_lstm.default)(lower)
        _registered = True
