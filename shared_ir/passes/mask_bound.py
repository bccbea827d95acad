"""Attention masks with a finite bound: extreme constants that feed a softmax become -BOUND.

Transformers build an additive attention mask from an extreme constant: HF's eager attention
writes `where(mask, 0, finfo(float32).min)` (older versions `(1 - mask) * finfo.min` or
`* -10000`), and a boolean mask handed to `scaled_dot_product_attention` becomes
`masked_fill(-inf)` when torch decomposes it for LiteRT. In float that only has to push
exp() to zero. Quantized, the tensor where the mask meets the logits (`logits + mask`, the
softmax input) takes its range from calibration, so -3.4e38 makes its int8 (or int16) step
larger than every real logit: all of them quantize to the same value and attention goes
uniform. MiniLM-L6's android int8 build (tpuedge.build with its per-op search, 8 held-out
sentences): centered cosine 0.696 without this pass, 0.851 with it.

This pass replaces each such constant by -BOUND (sign kept), and turns a boolean SDPA mask
into the additive `where(mask, 0, -BOUND)`. A mask that depends on no input is a constant
tensor by the time this pass runs (`fold-constants` runs first: a causal LM with no attention
mask input, HF BLOOM's eager attention): its extreme entries become ±BOUND the same way. An
SDPA with `is_causal=True` and no mask gets its implicit causal mask as such a constant (0 and
-BOUND), added to the logits: decomposed, it is a SELECT of the logits and -inf whose int8
output keeps the logits' scale, and the masked entries saturated there. Left
at float32.min, its int8 ADD with the logits had a rescale factor of 6e32, and LiteRT aborted
the whole process on it. Only constants whose value reaches a softmax
through adds and shape ops are touched (found by walking users), so a -inf used for padding
a max, or a large scale elsewhere, is left alone. Exact in float while BOUND exceeds the
spread of the logits by ~20 (exp(-20) * tokens is below 1e-6); a smaller BOUND keeps a
finer step on the softmax input. The default was measured (see DEFAULT_BOUND).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.constant_fold import constant_values, lift_constant
from tpuedge.shared_ir.passes.graph_edit import SOURCE_META, call_arguments, finish

__all__ = ["FiniteMaskBound", "DEFAULT_BOUND", "EXTREME"]

# Chosen by measurement (all-int8 android build, centered cosine vs float on held-out inputs):
#   bound           finfo.min   1e4    1e3    300    100    50     30
#   small BERT      0.243       0.431  0.705  -      0.978  -      0.988
#   MiniLM-L6       0.662       0.337  -      0.787  0.778  0.774  0.801
# Below ~300 the cosine is flat; 100 keeps float exact (outputs bit-identical on both models)
# for logit spreads up to ~80, where 30 would start to leak probability onto masked tokens.
DEFAULT_BOUND = 100.0
# a constant at or beyond this magnitude is no activation value: it is a mask
EXTREME = 1e3
_MAX_HOPS = 24


def _ops():
    import torch

    aten = torch.ops.aten
    # ops whose (scalar) argument may be the mask constant: {op: indices of scalar args}
    sources = {
        aten.where.ScalarOther: (2,),
        aten.where.ScalarSelf: (1,),
        aten.where.Scalar: (1, 2),
        aten.masked_fill.Scalar: (2,),
        aten.full.default: (1,),
        aten.full_like.default: (1,),
        aten.scalar_tensor.default: (0,),
        aten.fill.Scalar: (1,),
        aten.mul.Tensor: (0, 1),
        aten.mul.Scalar: (1,),
    }
    # ops that carry a mask's values on towards the softmax unchanged in magnitude
    carriers = {
        aten.add.Tensor,
        aten.sub.Tensor,
        aten.expand.default,
        aten.view.default,
        aten.reshape.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.slice.Tensor,
        aten.select.int,
        aten.permute.default,
        aten.transpose.int,
        aten.clone.default,
        aten.contiguous.default,
        aten._to_copy.default,
        aten.to.dtype,
        aten.to.dtype_layout,
        aten.alias.default,
        aten.repeat.default,
        aten.where.self,
        aten.where.ScalarOther,
        aten.where.ScalarSelf,
        aten.masked_fill.Scalar,
        aten.masked_fill.Tensor,
        aten.mul.Tensor,
        aten.minimum.default,
        aten.maximum.default,
    }
    softmaxes = {aten.softmax.int, aten._softmax.default, aten._safe_softmax.default}
    return sources, carriers, softmaxes, aten.scaled_dot_product_attention.default


def _extreme(value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and (math.isinf(value) or abs(value) >= EXTREME)
    )


def _extreme_entries(value):
    """The boolean mask of a float tensor's extreme entries (None when it has none)."""
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() == 0:
        return None
    extreme = torch.isinf(value) | (value.abs() >= EXTREME)
    return extreme if bool(extreme.any()) else None


def _reaches_softmax(node, carriers, softmaxes, sdpa) -> bool:
    """Whether `node`'s values flow into a softmax (or SDPA's mask) through carrier ops."""
    frontier, seen = [node], {node}
    for _ in range(_MAX_HOPS):
        following = []
        for n in frontier:
            for user in n.users:
                if user.op != "call_function" or user in seen:
                    continue
                if user.target in softmaxes or (user.target == sdpa and _mask_arg(user) is n):
                    return True
                if user.target in carriers:
                    seen.add(user)
                    following.append(user)
        if not following:
            return False
        frontier = following
    return False


def _causal_without_mask(sdpa_node) -> bool:
    given = call_arguments(sdpa_node)
    return bool(given["is_causal"]) and given["attn_mask"] is None


def _mask_arg(sdpa_node):
    return call_arguments(sdpa_node)["attn_mask"]


def _is_bool(node) -> bool:
    import torch

    return getattr(getattr(node, "meta", {}).get("val"), "dtype", None) == torch.bool


class FiniteMaskBound:
    name = "finite-mask-bound"

    def __init__(self, bound: float = DEFAULT_BOUND):
        if not (0 < bound < math.inf):
            raise ValueError(f"bound must be positive and finite, got {bound}")
        self.bound = float(bound)

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        sources, carriers, softmaxes, sdpa = _ops()
        targets = [
            n
            for n in exported_program.graph.nodes
            if n.op == "call_function"
            and (
                (
                    n.target in sources
                    and any(_extreme(a) for i, a in enumerate(n.args) if i in sources[n.target])
                    and _reaches_softmax(n, carriers, softmaxes, sdpa)
                )
                or (n.target == sdpa and _mask_arg(n) is not None and _is_bool(_mask_arg(n)))
                or (n.target == sdpa and _causal_without_mask(n))
            )
        ]
        values = constant_values(exported_program)
        tensors = [
            n.name
            for n in exported_program.graph.nodes
            if n.op == "placeholder"
            and n.name in values
            and _extreme_entries(values[n.name]) is not None
            and _reaches_softmax(n, carriers, softmaxes, sdpa)
        ]
        if not targets and not tensors:
            return exported_program, PassResult(self.name, 0, "no extreme mask constant feeds a softmax")
        ep = copy_program(exported_program)
        for name in tensors:
            self._bound_tensor(ep, name, values[name])
        graph = ep.graph_module.graph
        names = {n.name for n in targets}
        constants = 0
        additive: dict = {}  # boolean mask node -> its additive form (layers share one mask)
        causal = 0
        for node in [n for n in graph.nodes if n.name in names]:
            if node.target == sdpa and _causal_without_mask(node):
                causal += self._causal_mask(ep, node)
                continue
            if node.target == sdpa:
                self._additive_mask(ep, node, additive, values)
                continue
            args = list(node.args)
            for i in sources[node.target]:
                if i < len(args) and _extreme(args[i]) and abs(args[i]) > self.bound:
                    args[i] = math.copysign(self.bound, args[i])
                    constants += 1
            node.args = tuple(args)
        finish(ep)
        masks = len(additive)
        return ep, PassResult(
            self.name,
            constants + masks + len(tensors) + causal,
            f"bounded {constants} extreme mask constant(s), {len(tensors)} constant mask tensor(s), {masks} boolean "
            f"attention mask(s) and {causal} causal attention(s) at -{self.bound:g} (exact in float; keeps the softmax "
            "input's quantization step useful)",
            {
                "constants": constants,
                "constant_tensors": len(tensors),
                "boolean_masks": masks,
                "causal": causal,
                "bound": self.bound,
            },
        )

    def _causal_mask(self, ep, node) -> int:
        """`is_causal=True` as an explicit additive mask: a constant (L, S), 0 on and below the
        diagonal, -bound above (torch's top-left aligned causal mask). Its decomposition wrote
        where(tril, scores, -inf), a SELECT whose int8 output takes the scores' scale, so the
        masked entries saturated at the scores' minimum (about -0.5 on random weights) and
        attention leaked onto later tokens: all-int8 cosine 0.69 (tests/test_passes_mask_bound.py)."""
        import torch

        query, key = node.args[0], node.args[1]
        length, source = query.meta["val"].shape[-2], key.meta["val"].shape[-2]
        if not (isinstance(length, int) and isinstance(source, int)):
            return 0
        allowed = torch.ones(length, source, dtype=torch.bool).tril()
        mask = lift_constant(ep, f"_{node.name}_causal_mask", torch.where(allowed, 0.0, -self.bound), query)
        given = call_arguments(node)
        given.update(attn_mask=mask, is_causal=False)
        node.args, node.kwargs = tuple(given.pop(k) for k in ("query", "key", "value")), given
        return 1

    def _bound_tensor(self, ep, placeholder: str, value) -> None:
        """The constant input `placeholder` of `ep` (a copy) holds `value` with its extreme
        entries at ±bound: a new tensor, so the program it was copied from keeps its own."""
        import torch
        from torch.export.graph_signature import InputKind

        spec = next(s for s in ep.graph_signature.input_specs if s.arg.name == placeholder)
        extreme = _extreme_entries(value) & (value.abs() > self.bound)
        bounded = torch.where(extreme, torch.sign(value) * self.bound, value)
        if spec.kind == InputKind.BUFFER and spec.target in ep.state_dict:
            ep.state_dict[spec.target] = bounded
        else:
            ep.constants[spec.target] = bounded

    def _additive_mask(self, ep, node, additive: dict, values: dict) -> None:
        """SDPA's boolean mask (True = attend) as the additive where(mask, 0, -bound): a constant
        where the mask is one (a causal mask built from no input, folded by `fold-constants`),
        else an op after the mask. The op goes after the program's inputs when the mask is one of
        them: inserted right after a placeholder it came before the later ones, and litert-torch
        refuses a graph whose inputs are not all first (HF GPT-J, CodeGen, Phi-3, Gemma 3)."""
        import torch

        mask = _mask_arg(node)
        if mask not in additive and mask.op == "placeholder" and mask.name in values:
            value = torch.where(values[mask.name], 0.0, -self.bound)
            additive[mask] = lift_constant(ep, f"_{mask.name}_additive", value, mask)
        if mask not in additive:
            graph = ep.graph_module.graph
            anchor = mask if mask.op != "placeholder" else [n for n in graph.nodes if n.op == "placeholder"][-1]
            with graph.inserting_after(anchor):
                new = graph.call_function(torch.ops.aten.where.Scalar, (mask, 0.0, -self.bound))
            new.meta.update({k: node.meta[k] for k in SOURCE_META if k in node.meta})
            mask_val = mask.meta["val"]  # a fake tensor, or a meta one (a program's cached snapshot)
            with getattr(mask_val, "fake_mode", contextlib.nullcontext()):
                new.meta["val"] = torch.where(mask_val, 0.0, -self.bound)
            additive[mask] = new
        if len(node.args) > 3:
            node.args = node.args[:3] + (additive[mask],) + node.args[4:]
        else:
            node.kwargs = {**node.kwargs, "attn_mask": additive[mask]}
