"""`aten.lstm_cell` as the ops it is made of, each with an int8 TFLite-Micro kernel.

    gates = x W_ih^T + b_ih + h W_hh^T + b_hh          (FULLY_CONNECTED x2, ADD)
    i, f, g, o = the four quarters of gates             (STRIDED_SLICE)
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)          (LOGISTIC, TANH, MUL, ADD)
    h' = sigmoid(o) * tanh(c')

`nn.LSTMCell` is captured as one `aten.lstm_cell`, which no TFLite kernel implements; written
out, the cell is exact in float (the same formula as torch's kernel) and every op quantizes.
"""

from __future__ import annotations

from typing import Any

from tpuedge.shared_ir.passes import PassResult
from tpuedge.shared_ir.passes.graph_edit import call_functions, rewrite_calls
from tpuedge.shared_ir.passes.recurrent_layers import lstm_step

__all__ = ["DecomposeLSTMCell"]


class DecomposeLSTMCell:
    name = "decompose-lstm-cell"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        def rewrite(graph, node):
            x, (h, c), w_ih, w_hh = node.args[0], node.args[1], node.args[2], node.args[3]
            return lstm_step(graph, aten, x, h, c, w_ih, w_hh, *node.args[4:6])  # (h', c')

        ep, count = rewrite_calls(exported_program, call_functions(exported_program, {aten.lstm_cell.default}), rewrite)
        if not count:
            return exported_program, PassResult(self.name, 0, "no LSTM cell in the program")
        return ep, PassResult(
            self.name,
            count,
            f"decomposed {count} LSTM cell(s) into fully connected, logistic, tanh, mul and add",
        )
