"""`aten.lstm_cell` as the ops it is made of, each with an int8 TFLite-Micro kernel.

    gates = x W_ih^T + b_ih + h W_hh^T + b_hh          (FULLY_CONNECTED x2, ADD)
    i, f, g, o = the four quarters of gates             (STRIDED_SLICE)
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)          (LOGISTIC, TANH, MUL, ADD)
    h' = sigmoid(o) * tanh(c')

`nn.LSTMCell` is captured as one `aten.lstm_cell`, which no TFLite kernel implements; written
out, the cell is exact in float (the same formula as torch's kernel) and every op quantizes.
"""

from __future__ import annotations

import operator
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.graph_edit import built_in_place_of, call_functions, finish, replace_node
from tpuedge.shared_ir.passes.recurrent_layers import lstm_step

__all__ = ["DecomposeLSTMCell"]


class DecomposeLSTMCell:
    name = "decompose-lstm-cell"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        found = call_functions(exported_program, {aten.lstm_cell.default})
        if not found:
            return exported_program, PassResult(self.name, 0, "no LSTM cell in the program")
        ep = copy_program(exported_program)
        graph = ep.graph_module.graph
        names = {n.name for n in found}
        for node in [n for n in graph.nodes if n.name in names]:
            x, (h, c), w_ih, w_hh = node.args[0], node.args[1], node.args[2], node.args[3]
            biases = node.args[4:6]
            with built_in_place_of(node):
                h_new, c_new = lstm_step(graph, aten, x, h, c, w_ih, w_hh, *biases)
            for user in list(node.users):
                if user.op == "call_function" and user.target is operator.getitem:
                    replace_node(ep, user, (h_new, c_new)[user.args[1]])
            graph.erase_node(node)
        finish(ep)
        return ep, PassResult(
            self.name,
            len(found),
            f"decomposed {len(found)} LSTM cell(s) into fully connected, logistic, tanh, mul and add",
        )
