"""`nn.LSTMCell`, `nn.GRUCell` and `nn.RNNCell` as the ops they are made of, each with an int8
TFLite-Micro kernel.

    LSTM: gates = x W_ih^T + b_ih + h W_hh^T + b_hh     (FULLY_CONNECTED x2, ADD)
          i, f, g, o = the four quarters of gates        (STRIDED_SLICE)
          c' = sigmoid(f) * c + sigmoid(i) * tanh(g)     (LOGISTIC, TANH, MUL, ADD)
          h' = sigmoid(o) * tanh(c')
    GRU:  r, z = sigmoid of their thirds of x W_ih^T + h W_hh^T (+ biases)
          n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn));  h' = n + z * (h - n)
    RNN:  h' = tanh (or relu) of (x W_ih^T + b_ih + h W_hh^T + b_hh)

Each cell is captured as one op (`aten.lstm_cell`, `aten.gru_cell`, `aten.rnn_tanh_cell`,
`aten.rnn_relu_cell`), which no TFLite kernel implements, so a streaming model that steps a cell
per frame (keyword spotting, voice activity) was refused on mcu; written out, each is exact in
float (torch's formula) and every op quantizes. The steps are recurrent_layers.py's, which
unrolls whole layers with them.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, call_with_val, rewrite_calls
from tpuedge.shared_ir.passes.recurrent_layers import gru_step, lstm_step, rnn_step

__all__ = ["DecomposeRecurrentCells"]


class DecomposeRecurrentCells:
    name = "decompose-recurrent-cells"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        kinds = {
            aten.lstm_cell.default: "lstm",
            aten.gru_cell.default: "gru",
            aten.rnn_tanh_cell.default: "tanh",
            aten.rnn_relu_cell.default: "relu",
        }
        decomposed: dict[str, int] = {}

        def rewrite(graph, node):
            x, state, w_ih, w_hh = node.args[:4]
            b_ih, b_hh = (*node.args[4:6], None, None)[:2]
            kind = kinds[node.target]
            decomposed[kind] = decomposed.get(kind, 0) + 1
            if kind == "lstm":
                return lstm_step(graph, aten, x, state[0], state[1], w_ih, w_hh, b_ih, b_hh)  # (h', c')
            if kind == "gru":
                return gru_step(graph, aten, x, state, w_ih, w_hh, b_ih, b_hh)
            bias = b_ih if b_hh is None else call_with_val(graph, aten.add.Tensor, b_ih, b_hh)
            return rnn_step(graph, aten, call_with_val(graph, aten.linear.default, x, w_ih, bias), state, w_hh, kind)

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, set(kinds)), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no recurrent cell in the program")
        what = ", ".join(f"{k} x{v}" for k, v in sorted(decomposed.items()))
        return ep, PassResult(
            self.name,
            count,
            f"decomposed {count} recurrent cell(s) ({what}) into fully connected, logistic, tanh, mul and add",
            {"decomposed": decomposed},
        )
