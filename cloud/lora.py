"""LoRA adapters for the cloud train step: `train_step(..., lora=LoraConfig(rank=8, targets=("q_proj", "v_proj")))`.

A targeted weight W [out, in] runs as W + (alpha / rank) * B @ A, with A [rank, in] drawn
uniformly in ±1/sqrt(in) (peft's kaiming-uniform start) and B [out, rank] zeros, so step 0
computes exactly the base model. The replacement happens where the interpreter reads the
parameter (`JaxProgram.call_transformed`'s "param" hook), so the captured graph is the model's
own and the same adapters serve the training and the eval program.

Targets name modules as peft's `target_modules` do: a module matches when its name is the
target or ends with "." + target ("q_proj", "self_attn.v_proj", "layers.0.mlp.up_proj"); its
`weight` must be 2-D. This module holds the pieces; cloud/lora_step.py the train step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from tpuedge.shared_ir.errors import UserError

__all__ = ["LoraConfig", "LoraHook", "target_weights", "init_adapters", "adapter_names", "merge", "by_weight"]

_WEIGHT = ".weight"
_A, _B = "lora_A", "lora_B"


@dataclass(frozen=True)
class LoraConfig:
    """rank: the adapters' inner size. alpha: scales the update by alpha / rank (default: alpha =
    rank, scale 1). targets: module names or their dotted suffixes (see the module docstring)."""

    rank: int = 8
    alpha: float | None = None
    targets: tuple[str, ...] = ("q_proj", "v_proj")

    def __post_init__(self) -> None:
        if isinstance(self.targets, str):  # one name, as a tuple (a str would iterate by letters)
            object.__setattr__(self, "targets", (self.targets,))
        object.__setattr__(self, "targets", tuple(self.targets))
        if not isinstance(self.rank, int) or self.rank < 1:
            raise UserError(f"LoraConfig(rank={self.rank!r}): the rank is a positive integer, e.g. 8 or 16.")
        if self.alpha is not None and not self.alpha > 0:
            raise UserError(
                f"LoraConfig(alpha={self.alpha!r}): alpha is positive (the update is scaled by alpha / rank)."
            )
        if not self.targets or not all(isinstance(t, str) and t.strip(".") for t in self.targets):
            raise UserError(
                f"LoraConfig(targets={self.targets!r}): give module names or their last dotted parts, "
                'e.g. targets=("q_proj", "v_proj").'
            )

    @property
    def scale(self) -> float:
        return (self.rank if self.alpha is None else self.alpha) / self.rank


def _matches(module: str, target: str) -> bool:
    target = target.strip(".").removesuffix(_WEIGHT)
    return module == target or module.endswith("." + target)


def target_weights(model, config: LoraConfig) -> dict[str, tuple[int, int]]:
    """{model parameter name: (out, in)} of every weight a target names; every target must name
    at least one, and only 2-D ones (UserError otherwise, with the names that exist)."""
    weights = {name: tuple(p.shape) for name, p in model.named_parameters() if name.endswith(_WEIGHT)}
    found: dict[str, tuple[int, int]] = {}
    unmatched = []
    for target in config.targets:
        hits = [name for name in weights if _matches(name[: -len(_WEIGHT)], target)]
        if not hits:
            unmatched.append(target)
        flat = [f"{name} {list(weights[name])}" for name in hits if len(weights[name]) != 2]
        if flat:
            raise UserError(
                f"LoRA target {target!r} names weights that are not 2-D ({', '.join(flat[:3])}); LoRA adapts "
                "matrices (a Linear layer's [out, in] weight). Name modules with a 2-D weight instead: "
                f"{_suggestions(weights)}."
            )
        found.update({name: weights[name] for name in hits})
    if unmatched:
        raise UserError(
            f"LoRA targets {', '.join(map(repr, unmatched))} match no module of {type(model).__name__}. A target is a "
            "module's name or its last dotted parts (as in peft's target_modules); "
            f"this model's 2-D weights belong to {_suggestions(weights)}. Name those in LoraConfig(targets=...)."
        )
    return found


def _suggestions(weights: Mapping[str, tuple[int, ...]]) -> str:
    """ "q_proj, k_proj, ... (e.g. model.layers.0.self_attn.q_proj)": the 2-D weights' last parts."""
    matrices = [name[: -len(_WEIGHT)] for name, shape in weights.items() if len(shape) == 2]
    if not matrices:
        return "no module (the model has no 2-D weight)"
    endings = list(dict.fromkeys(m.rsplit(".", 1)[-1] for m in matrices))
    shown = ", ".join(endings[:10]) + (", ..." if len(endings) > 10 else "")
    return f"{shown} (e.g. {matrices[min(1, len(matrices) - 1)]})"


def adapter_names(weight: str) -> tuple[str, str]:
    """peft's file names of a weight's adapters: "<module>.lora_A.weight", "<module>.lora_B.weight"."""
    module = weight.removesuffix(_WEIGHT)
    return f"{module}.{_A}{_WEIGHT}", f"{module}.{_B}{_WEIGHT}"


def init_adapters(shapes: Mapping[str, tuple[int, int]], rank: int, seed: int) -> dict[str, jax.Array]:
    """A ~ U(±1/sqrt(in)) [rank, in] and B = 0 [out, rank] for each weight, f32, by `adapter_names`."""
    key = jax.random.PRNGKey(seed)
    adapters = {}
    for i, (weight, (out, inner)) in enumerate(sorted(shapes.items())):
        bound = 1.0 / inner**0.5
        a, b = adapter_names(weight)
        adapters[a] = jax.random.uniform(jax.random.fold_in(key, i), (rank, inner), jnp.float32, -bound, bound)
        adapters[b] = jnp.zeros((out, rank), jnp.float32)
    return adapters


def merge(weight, a, b, scale: float):
    """W + scale * B @ A, in W's dtype (the product and the sum in f32)."""
    delta = scale * (jnp.asarray(b, jnp.float32) @ jnp.asarray(a, jnp.float32))
    return (jnp.asarray(weight, jnp.float32) + delta).astype(weight.dtype)


class LoraHook:
    """The `call_transformed` transform for one call: each targeted parameter (by its name in
    the program) with its adapters folded in; everything else as it is."""

    def __init__(self, adapters: Mapping[str, Any], weights: Mapping[str, str], scale: float):
        self._adapters = adapters
        self._weights = weights  # parameter name in the program -> weight name the adapters are keyed by
        self._scale = scale

    def __call__(self, kind: str, key: str, value):
        weight = self._weights.get(key) if kind == "param" else None
        if weight is None:
            return value
        a, b = adapter_names(weight)
        return merge(value, self._adapters[a], self._adapters[b], self._scale)


def by_weight(tx, weights: Sequence[str]):
    """`tx` (from `to_optax`, whose param-group labels are keyed by weight name) over the flat
    adapter dict: each update sees {weight: {"lora_A", "lora_B"}}, so each adapter pair takes
    the hyperparameters of the group that holds its weight."""
    import optax

    pairs = {w: adapter_names(w) for w in weights}

    def nest(flat):
        return None if flat is None else {w: {_A: flat[a], _B: flat[b]} for w, (a, b) in pairs.items()}

    def unnest(tree):
        return {name: tree[w][part] for w, names in pairs.items() for name, part in zip(names, (_A, _B))}

    def update(updates, state, params=None):
        new, state = tx.update(nest(updates), state, nest(params))
        return unnest(new), state

    return optax.GradientTransformation(lambda params: tx.init(nest(params)), update)
