"""`nn.LSTM`, `nn.GRU` and `nn.RNN` layers (aten.lstm.input, aten.gru.input, aten.rnn_tanh.input,
aten.rnn_relu.input) unrolled over time into cells.

    for each direction of the first layer, the input projection once over all time steps:
        LSTM: P = x W_ih^T + (b_ih + b_hh);  GRU: P = x W_ih^T + (b_ih + [b_hr, b_hz, 0])
    (a later layer projects the previous layer's h of each step, bias-free, then adds that bias:
    projecting their stack would need a CONCATENATION of one input per step, and TFLite-Micro's
    takes at most 10)
    then for each time step t (backwards for the reverse direction), with P_t its slice:
        LSTM: gates = P_t + h W_hh^T; i, f, g, o = quarters
              c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)
        GRU:  r = sigmoid(P_r + h W_hr);  z = sigmoid(P_z + h W_hz)
              n = tanh(P_n + r * (h W_hn + b_hn));  h = n + z * (h - n)
        RNN:  h = tanh (or relu) of (P_t + h W_hh^T), P = x W_ih^T + (b_ih + b_hh)
    output = the h of every step, stacked on the time axis (directions concatenated);
    h_n (and c_n) = each layer and direction's last state

When the initial state is zeros (no hx given, the usual case), the first step has no recurrent
term: LSTM gates = P_t, c = sigmoid(i) * tanh(g); GRU r, z, n from P_t alone (n from r * b_hn),
h = n - z * n. Written with zeros, the int8 graph kept a FULLY_CONNECTED of a zero constant, an
ADD and a MUL of zeros per layer and direction, each rounding once more.

TFLite-Micro has no kernel for a whole recurrent layer that ai-edge-quantizer turns into int8,
and litert-torch lowers these ops to one; written out, every op is FULLY_CONNECTED, ADD, MUL,
slices, LOGISTIC or TANH, each with an int8 kernel, and the numbers are torch's formula (exact
in float up to the order of the bias additions). The graph grows with the sequence length (one
cell per step and layer), which is what a microcontroller runs anyway. The input projection is
hoisted out of the recurrence because an int8 FULLY_CONNECTED stores its bias as int32 on the
scale of its input: one per step (each step's input has its own scale) made the zoo's 16-unit
LSTM over 8 steps carry eight int32 bias copies and their per-channel quantization tables. The
recurrent projections have no bias either: the LSTM's b_hh and the GRU's b_hr, b_hz join the
input projection's bias, and the GRU's b_hn, which its n gate scales by r, is one ADD of a
constant (an int8 ADD's constant is one tensor, whatever the step's scale). Left alone: training-mode dropout between layers, projections (`proj_size`), and
inputs that are not [batch, time, features] / [time, batch, features].
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls

__all__ = ["UnrollRecurrentLayers", "lstm_step", "gru_step", "rnn_step", "layer_args", "is_zeros"]


def _quarters(graph, aten, gates, hidden: int, parts: int) -> list:
    last = gates.meta["val"].dim() - 1
    return [call_with_val(graph, aten.slice.Tensor, gates, last, k * hidden, (k + 1) * hidden) for k in range(parts)]


def lstm_step(graph, aten, x, h, c, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM cell step: (h', c')."""
    return _lstm_gates_step(graph, aten, call_with_val(graph, aten.linear.default, x, w_ih, b_ih), h, c, w_hh, b_hh)


def _lstm_gates_step(graph, aten, x_gates, h, c, w_hh, b_hh=None, hidden: int | None = None):
    """One LSTM cell step from the input's projection x W_ih^T (+ biases): (h', c'); h and c
    None: a zero state (the first step's, without hx)."""
    hidden = hidden or h.meta["val"].shape[-1]
    gates = (
        x_gates
        if h is None
        else call_with_val(graph, aten.add.Tensor, x_gates, call_with_val(graph, aten.linear.default, h, w_hh, b_hh))
    )
    i, f, g, o = _quarters(graph, aten, gates, hidden, 4)
    i, f, o = (call_with_val(graph, aten.sigmoid.default, q) for q in (i, f, o))
    g = call_with_val(graph, aten.tanh.default, g)
    c_new = call_with_val(graph, aten.mul.Tensor, i, g)
    if c is not None:
        c_new = call_with_val(graph, aten.add.Tensor, call_with_val(graph, aten.mul.Tensor, f, c), c_new)
    h_new = call_with_val(graph, aten.mul.Tensor, o, call_with_val(graph, aten.tanh.default, c_new))
    return h_new, c_new


def _gru_gates_step(graph, aten, x_gates, h, w_hh, b_hn=None, hidden: int | None = None):
    """One GRU step from the input's projection x W_ih^T + b_ih + [b_hr, b_hz, 0]: h'; h None:
    a zero state (the first step's, without hx)."""
    hidden = hidden or h.meta["val"].shape[-1]
    xr, xz, xn = _quarters(graph, aten, x_gates, hidden, 3)
    if h is None:
        r, z = (call_with_val(graph, aten.sigmoid.default, q) for q in (xr, xz))
        inner = (
            xn
            if b_hn is None
            else call_with_val(graph, aten.add.Tensor, xn, call_with_val(graph, aten.mul.Tensor, r, b_hn))
        )
        n = call_with_val(graph, aten.tanh.default, inner)
        return call_with_val(graph, aten.sub.Tensor, n, call_with_val(graph, aten.mul.Tensor, z, n))
    hr, hz, hn = _quarters(graph, aten, call_with_val(graph, aten.linear.default, h, w_hh), hidden, 3)
    if b_hn is not None:
        hn = call_with_val(graph, aten.add.Tensor, hn, b_hn)
    r = call_with_val(graph, aten.sigmoid.default, call_with_val(graph, aten.add.Tensor, xr, hr))
    z = call_with_val(graph, aten.sigmoid.default, call_with_val(graph, aten.add.Tensor, xz, hz))
    n = call_with_val(
        graph,
        aten.tanh.default,
        call_with_val(graph, aten.add.Tensor, xn, call_with_val(graph, aten.mul.Tensor, r, hn)),
    )
    # (1 - z) * n + z * h, written n + z * (h - n): no constant 1, one MUL fewer
    return call_with_val(
        graph, aten.add.Tensor, n, call_with_val(graph, aten.mul.Tensor, z, call_with_val(graph, aten.sub.Tensor, h, n))
    )


def rnn_step(graph, aten, x_gates, h, w_hh, activation: str):
    """One plain RNN step (nn.RNN, nn.RNNCell) from the input's projection x W_ih^T + b_ih + b_hh:
    h' = tanh or relu of (that + h W_hh^T); h None: a zero state."""
    pre = (
        x_gates
        if h is None
        else call_with_val(graph, aten.add.Tensor, x_gates, call_with_val(graph, aten.linear.default, h, w_hh))
    )
    return call_with_val(graph, aten.tanh.default if activation == "tanh" else aten.relu.default, pre)


def gru_step(graph, aten, x, h, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU cell step (nn.GRUCell): h'."""
    bias, b_hn = _input_projection_bias(graph, aten, b_ih, b_hh, gru=True)
    return _gru_gates_step(graph, aten, call_with_val(graph, aten.linear.default, x, w_ih, bias), h, w_hh, b_hn)


def _input_projection_bias(graph, aten, b_ih, b_hh, gru: bool):
    """(the input projection's bias, the GRU's b_hn or None): the LSTM's and the RNN's b_ih + b_hh;
    the GRU's b_ih + [b_hr, b_hz, 0], since only b_hn sits inside r * (...)."""
    if b_hh is None:
        return b_ih, None
    if not gru:
        return call_with_val(graph, aten.add.Tensor, b_ih, b_hh), None
    hidden = b_hh.meta["val"].shape[0] // 3
    rz = call_with_val(
        graph,
        aten.add.Tensor,
        call_with_val(graph, aten.slice.Tensor, b_ih, 0, 0, 2 * hidden),
        call_with_val(graph, aten.slice.Tensor, b_hh, 0, 0, 2 * hidden),
    )
    n_ih = call_with_val(graph, aten.slice.Tensor, b_ih, 0, 2 * hidden, 3 * hidden)
    b_hn = call_with_val(graph, aten.slice.Tensor, b_hh, 0, 2 * hidden, 3 * hidden)
    return call_with_val(graph, aten.cat.default, [rz, n_ih]), b_hn


def layer_args(node, lstm: bool):
    """(input, h0, c0 or None, params, has_biases, layers, train, bidirectional, batch_first)."""
    x, hx, params, has_biases, layers, _dropout, train, bidirectional, batch_first = node.args[:9]
    h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    return x, h0, c0, list(params), bool(has_biases), int(layers), bool(train), bool(bidirectional), bool(batch_first)


_ZERO_FACTORIES = {"aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default"}


def is_zeros(program, node) -> bool:
    """Whether `node` is all zeros whatever the input: a zeros factory, or a constant of zeros."""
    from tpuedge.shared_ir.op_registry import op_key

    if node.op == "call_function":
        return op_key(node.target) in _ZERO_FACTORIES
    if node.op != "placeholder":
        return False
    target = next((s.target for s in program.graph_signature.input_specs if s.arg.name == node.name), None)
    value = program.constants[target] if target in program.constants else program.state_dict.get(target)
    return value is not None and not bool(value.any())


def _unroll(program, graph, aten, node, kind: str):
    """The replacement values (output, h_n[, c_n]), or None to leave the node; `kind` is "lstm",
    "gru", "rnn_tanh" or "rnn_relu"."""
    lstm = kind == "lstm"
    x, h0, c0, params, has_biases, layers, train, bidirectional, batch_first = layer_args(node, lstm)
    zero_start = is_zeros(program, h0) and (not lstm or is_zeros(program, c0))
    directions = 2 if bidirectional else 1
    per_cell = 4 if has_biases else 2
    if (train and layers > 1) or len(params) != layers * directions * per_cell or x.meta["val"].dim() != 3:
        return None
    time_dim = 1 if batch_first else 0
    steps = x.meta["val"].shape[time_dim]
    layer_in, h_last, c_last = x, [], []
    steps_in = None  # a later layer's input, step by step: the previous layer's h of each step
    for layer in range(layers):
        outputs, per_direction = [], []
        for direction in range(directions):
            cell = layer * directions + direction
            w_ih, w_hh, b_ih, b_hh = (*params[cell * per_cell : (cell + 1) * per_cell], None, None)[:4]
            hidden = h0.meta["val"].shape[-1]
            if zero_start:  # the first step starts from nothing (no constant zeros in the graph)
                h = c = None
            else:
                h = call_with_val(graph, aten.select.int, h0, 0, cell)
                c = call_with_val(graph, aten.select.int, c0, 0, cell) if lstm else None
            # the input projection of every step at once (one int32 bias, not one per step),
            # carrying the recurrent biases outside a product: ops on constants, which the
            # converter folds into that one bias
            bias, b_hn = _input_projection_bias(graph, aten, b_ih, b_hh, gru=kind == "gru")
            projected = call_with_val(graph, aten.linear.default, layer_in, w_ih, bias) if steps_in is None else None
            per_step = [None] * steps
            for t in range(steps) if direction == 0 else reversed(range(steps)):
                if projected is not None:
                    x_gates = call_with_val(graph, aten.select.int, projected, time_dim, t)
                else:
                    # a later layer projects the previous one's h step by step: projecting them all
                    # at once needs their stack, a CONCATENATION of one input per step, and
                    # TFLite-Micro's takes at most 10 (Resemblyzer: 3 layers over 160 frames).
                    # Bias-free, with the bias one ADD of a constant (one tensor, not one int32
                    # copy per step on each step's scale)
                    x_gates = call_with_val(graph, aten.linear.default, steps_in[t], w_ih)
                    if bias is not None:
                        x_gates = call_with_val(graph, aten.add.Tensor, x_gates, bias)
                if lstm:
                    h, c = _lstm_gates_step(graph, aten, x_gates, h, c, w_hh, hidden=hidden)
                elif kind == "gru":
                    h = _gru_gates_step(graph, aten, x_gates, h, w_hh, b_hn, hidden=hidden)
                else:
                    h = rnn_step(graph, aten, x_gates, h, w_hh, kind.removeprefix("rnn_"))
                per_step[t] = h
            if layer == layers - 1:  # the model's output sequence (a later layer reads steps_in instead)
                outputs.append(call_with_val(graph, aten.stack.default, per_step, time_dim))
            per_direction.append(per_step)
            h_last.append(h)
            c_last.append(c)
        if layer == layers - 1:
            layer_in = outputs[0] if directions == 1 else call_with_val(graph, aten.cat.default, outputs, -1)
        else:
            steps_in = (
                per_direction[0]
                if directions == 1
                else [call_with_val(graph, aten.cat.default, [d[t] for d in per_direction], -1) for t in range(steps)]
            )
    results = [layer_in, call_with_val(graph, aten.stack.default, h_last, 0)]
    if lstm:
        results.append(call_with_val(graph, aten.stack.default, c_last, 0))
    return results


class UnrollRecurrentLayers:
    name = "unroll-recurrent-layers"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        kinds = {
            aten.lstm.input: "lstm",
            aten.gru.input: "gru",
            aten.rnn_tanh.input: "rnn_tanh",
            aten.rnn_relu.input: "rnn_relu",
        }
        unrolled: dict[str, int] = {}

        def rewrite(program, graph, node):
            results = _unroll(program, graph, aten, node, kinds[node.target])
            if results is not None:
                unrolled[kinds[node.target]] = unrolled.get(kinds[node.target], 0) + 1
            return results

        found = call_functions(exported_program, set(kinds))
        if not found:
            return exported_program, PassResult(self.name, 0, "no LSTM, GRU or RNN layer in the program")
        ep, count = rewrite_calls(exported_program, found, rewrite, with_program=True)
        if not count:
            return exported_program, PassResult(self.name, 0, "no LSTM, GRU or RNN layer it can unroll")
        what = ", ".join(f"{k} x{v}" for k, v in sorted(unrolled.items()))
        return ep, PassResult(
            self.name,
            count,
            f"unrolled {what} over time into fully connected, logistic, tanh, mul and add",
            {"unrolled": unrolled},
        )
