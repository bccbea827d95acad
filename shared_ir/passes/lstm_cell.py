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
from tpuedge.shared_ir.passes.graph_edit import SOURCE_META, call_functions, finish, replace_node

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
            before = set(graph.nodes)
            with graph.inserting_before(node):
                h_new, c_new = self._emit(graph, aten, node)
            for new in (n for n in graph.nodes if n not in before):
                new.meta.update({k: node.meta[k] for k in SOURCE_META if k in node.meta})
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

    @staticmethod
    def _emit(graph, aten, node):
        x, (h, c), w_ih, w_hh = node.args[0], node.args[1], node.args[2], node.args[3]
        b_ih = node.args[4] if len(node.args) > 4 else None
        b_hh = node.args[5] if len(node.args) > 5 else None
        h_val, c_val = node.meta["val"]
        hidden = h_val.shape[-1]

        def call(target, args, val):
            new = graph.call_function(target, args)
            new.meta["val"] = val
            return new

        gates_val = x.meta["val"].new_empty((*h_val.shape[:-1], 4 * hidden))
        gates = call(
            aten.add.Tensor,
            (call(aten.linear.default, (x, w_ih, b_ih), gates_val), call(aten.linear.default, (h, w_hh, b_hh), gates_val)),
            gates_val,
        )
        dim = len(h_val.shape) - 1
        quarter = [call(aten.slice.Tensor, (gates, dim, k * hidden, (k + 1) * hidden), h_val) for k in range(4)]
        i, f, o = (call(aten.sigmoid.default, (quarter[k],), h_val) for k in (0, 1, 3))
        g = call(aten.tanh.default, (quarter[2],), h_val)
        c_new = call(aten.add.Tensor, (call(aten.mul.Tensor, (f, c), c_val), call(aten.mul.Tensor, (i, g), c_val)), c_val)
        h_new = call(aten.mul.Tensor, (o, call(aten.tanh.default, (c_new,), c_val)), h_val)
        return h_new, c_new
