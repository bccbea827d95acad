"""The module a train step captures: the model and its loss in one `torch.nn.Module`.

`loss_program(model, loss_fn, example_batch)` wraps them as `forward(*batch) =
loss_fn(model(*inputs), *targets)` and captures that with `tpuedge.export(..., training=True)`
(train-mode BatchNorm and dropout). `split_batch` reads the two batch layouts train_step takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["ModelWithLoss", "loss_program", "split_batch"]


# ---- the captured module ---------------------------------------------------------------------
def _model_with_loss_class():
    import torch

    class ModelWithLoss(torch.nn.Module):
        """forward(*inputs, *targets) -> loss_fn(model(*inputs), *targets) (or, with
        `return_outputs`, (loss, outputs) for evaluation)."""

        def __init__(self, model, loss_fn, n_inputs: int, return_outputs: bool = False):
            super().__init__()
            self.model = model
            if isinstance(loss_fn, torch.nn.Module):
                self.loss_fn = loss_fn
            else:
                self._loss = loss_fn
            self.n_inputs = n_inputs
            self.return_outputs = return_outputs

        def forward(self, *batch):
            outputs = self.model(*batch[: self.n_inputs])
            loss_fn = self.loss_fn if "loss_fn" in self._modules else self._loss
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


def ModelWithLoss(model, loss_fn, n_inputs: int = 1, return_outputs: bool = False):  # noqa: N802 (a class factory)
    """The module train_step captures: `forward(*batch) -> loss_fn(model(*inputs), *targets)`."""
    return _model_with_loss_class()(model, loss_fn, n_inputs, return_outputs)


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


def loss_program(model, loss_fn, example_batch: Sequence[Any], n_inputs: int | None = None, *, training: bool = True):
    """Capture model+loss into the shared IR: a Program whose one output is the scalar loss
    (`training=False` gives the eval program, outputs (loss, model outputs...))."""
    import tpuedge

    flat, n = split_batch(example_batch, n_inputs)
    wrapper = ModelWithLoss(model, loss_fn, n, return_outputs=not training)
    name = type(model).__name__.lower() + ("_train" if training else "_eval")
    return tpuedge.export(wrapper, flat, training=training, name=name)
