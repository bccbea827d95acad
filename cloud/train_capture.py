"""The module a train step captures: the model and its loss in one `torch.nn.Module`.

`loss_program(model, loss_fn, example_batch)` wraps them as `forward(*batch) =
loss_fn(model(*inputs), *targets)` and captures that with `tpuedge.export(..., training=True)`
(train-mode BatchNorm and dropout). `split_batch` reads the two batch layouts train_step takes.
"""

from __future__ import annotations

import contextlib

from collections.abc import Sequence
from typing import Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.torch_compat import op_schema

__all__ = ["PRECISIONS", "ModelWithLoss", "loss_program", "split_batch", "training_mode_module"]

PRECISIONS = ("f32", "bf16")


# ---- the captured module ---------------------------------------------------------------------
def _model_with_loss_class():
    import torch

    class ModelWithLoss(torch.nn.Module):
        """forward(*inputs, *targets) -> loss_fn(model(*inputs), *targets) (or, with
        `return_outputs`, (loss, outputs) for evaluation)."""

        def __init__(self, model, loss_fn, n_inputs: int, return_outputs: bool = False, precision: str = "f32"):
            super().__init__()
            self.model = model
            if isinstance(loss_fn, torch.nn.Module):
                self.loss_fn = loss_fn
            else:
                self._loss = loss_fn
            self.n_inputs = n_inputs
            self.return_outputs = return_outputs
            self.precision = precision

        def forward(self, *batch):
            # bf16: torch's own CPU autocast policy is captured into the graph as explicit casts.
            # f32 enters no autocast block at all: torch.export splits a disabled one into regions
            # too, and a torch.no_grad() block inside one came out with its grad mode lost (its
            # ops trained; tests/test_cloud_detach.py)
            bf16 = self.precision == "bf16"
            with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                outputs = self.model(*batch[: self.n_inputs])
                loss_fn = self.loss_fn if "loss_fn" in dict(self.named_children()) else self._loss
                loss = loss_fn(outputs, *batch[self.n_inputs :])
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise UserError(
                    "loss_fn must return one scalar tensor (e.g. F.cross_entropy(out, y)); "
                    f"it returned {type(loss).__name__}"
                    + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else "")
                    + ". Reduce it with .mean() or .sum()."
                )
            return (loss, outputs) if self.return_outputs else loss

    return ModelWithLoss


def ModelWithLoss(model, loss_fn, n_inputs: int = 1, return_outputs: bool = False, precision: str = "f32"):  # noqa: N802
    """The module train_step captures: `forward(*batch) -> loss_fn(model(*inputs), *targets)`
    (a class factory, to keep torch out of this module's import)."""
    if precision not in PRECISIONS:
        raise UserError(
            f"precision={precision!r} is not one of {', '.join(PRECISIONS)} (bf16: bf16 compute, f32 weights and optimizer state)."
        )
    return _model_with_loss_class()(model, loss_fn, n_inputs, return_outputs, precision)


def split_batch(batch: Sequence[Any], n_inputs: int | None) -> tuple[tuple, int]:
    """(flat batch, n_inputs) from `(x..., y...)` + n_inputs, or `((x...), (y...))`."""
    batch = tuple(batch)
    if len(batch) == 2 and all(isinstance(b, (tuple, list)) for b in batch):
        inputs, targets = batch
        if n_inputs is not None and n_inputs != len(inputs):
            raise UserError(f"n_inputs={n_inputs} but the batch's inputs tuple has {len(inputs)} tensors.")
        return tuple(inputs) + tuple(targets), len(inputs)
    n = 1 if n_inputs is None else n_inputs
    if not 0 < n <= len(batch):
        raise UserError(
            f"n_inputs={n} does not fit a batch of {len(batch)} tensors; pass (inputs..., targets...) "
            "with n_inputs = the number of model inputs, or ((inputs...), (targets...))."
        )
    return batch, n


def loss_program(
    model,
    loss_fn,
    example_batch: Sequence[Any],
    n_inputs: int | None = None,
    *,
    training: bool = True,
    precision: str = "f32",
):
    """Capture model+loss into the shared IR: a Program whose one output is the scalar loss
    (`training=False` gives the eval program, outputs (loss, model outputs...)). `precision="bf16"`
    captures under `torch.autocast("cpu", torch.bfloat16)`: the graph casts weights and
    activations to bf16 where torch's autocast does (matmuls, convolutions) and keeps its f32 ops
    (softmax, losses, norms) f32, while parameters stay f32 placeholders."""
    from tpuedge.shared_ir.capture import export

    flat, n = split_batch(example_batch, n_inputs)
    wrapper = ModelWithLoss(model, loss_fn, n, return_outputs=not training, precision=precision)
    name = type(model).__name__.lower() + ("_train" if training else "_eval")
    return export(wrapper, flat, training=training, name=name)


# ---- a captured Program back in training mode --------------------------------------------------
# Ops of torch.export's training IR that take the module's train/eval flag as an argument:
# op name -> (position of the flag, its keyword name).
_MODE_FLAGS = {
    "aten::batch_norm": (5, "training"),
    "aten::instance_norm": (5, "use_input_stats"),
    "aten::dropout": (2, "train"),
    "aten::feature_dropout": (2, "train"),
    "aten::alpha_dropout": (2, "train"),
    "aten::feature_alpha_dropout": (2, "train"),
    "aten::rrelu": (3, "training"),
}


def training_mode_module(program) -> tuple[Any, dict[str, int]]:
    """(torch module, {op: count switched}) running `program`'s graph in training mode.

    A Program captured in eval mode (what `tpuedge export`/`build` capture) carries the mode of
    BatchNorm, dropout, instance norm and RReLU as an argument of each op; the module returned
    has those arguments set to train (batch statistics and running-stat updates, active
    dropout), so capturing it with `loss_program` gives the training-mode step. Python code that
    branched on `self.training` was already resolved when the Program was captured (capture
    the model with `tpuedge.export(model, inputs, training=True)` to keep that branch)."""
    import torch.fx

    unlifted = program.exported_program.module(check_guards=False)
    module = torch.fx.GraphModule(unlifted, unlifted.graph)  # a plain module (ep.module() refuses .train())
    switched: dict[str, int] = {}
    for node in module.graph.nodes:
        name = getattr(op_schema(node.target), "name", None)
        if node.op != "call_function" or name not in _MODE_FLAGS:
            continue
        position, keyword = _MODE_FLAGS[name]
        if name == "aten::instance_norm" and node.args[3] is None:
            continue  # no running stats: it always normalizes by the batch
        if len(node.args) > position:
            if node.args[position] is True:
                continue
            node.args = node.args[:position] + (True,) + node.args[position + 1 :]
        elif node.kwargs.get(keyword, False) is not True:
            node.kwargs = {**node.kwargs, keyword: True}
        else:
            continue
        key = name.removeprefix("aten::")
        switched[key] = switched.get(key, 0) + 1
    module.recompile()
    return module, switched
