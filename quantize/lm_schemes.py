"""How a language model's weights are quantized, as data every backend reads.

    LM_SCHEMES["int4-block32"]  # LMScheme(weight_bits=4, block_size=32, activations="dynamic", ...)

A scheme says the precision of the matrix weights (every Linear and the LM head), of the
embedding table, and whether activations stay float (weight-only: the weights are dequantized
for float compute) or are quantized on the fly per step (dynamic). `overrides` keep chosen IR
points (a parameter's state-dict name, as captured) at another precision: an LM head kept at
int8 while the blocks are int4. Each backend lowers this one decision; none derives its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tpuedge.shared_ir.errors import UserError

__all__ = ["LMScheme", "LM_SCHEMES", "AUTO", "lm_scheme", "AUTO_CANDIDATES"]

AUTO = "auto"


@dataclass(frozen=True)
class LMScheme:
    name: str
    weight_bits: int | None  # None: float32 weights
    block_size: int | None = None  # None: one scale per output channel
    activations: str = "float"  # "float" (weight-only) or "dynamic" (int8 per step)
    embedding_bits: int | None = None  # the token embedding table; None: as the weights
    overrides: dict[str, int] = field(default_factory=dict)  # parameter name -> weight bits

    @property
    def quantized(self) -> bool:
        return self.weight_bits is not None

    def with_overrides(self, overrides: dict[str, int]) -> "LMScheme":
        return replace(self, overrides={**self.overrides, **overrides})

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "weight_bits": self.weight_bits,
            "block_size": self.block_size,
            "activations": self.activations,
            "embedding_bits": self.embedding_bits,
            "overrides": dict(self.overrides),
        }


LM_SCHEMES = {
    s.name: s
    for s in (
        LMScheme("none", None),
        LMScheme("weight-only-int8", 8),
        LMScheme("dynamic-int8", 8, activations="dynamic"),
        LMScheme("int4-block128", 4, 128, "dynamic", embedding_bits=8),
        LMScheme("int4-block32", 4, 32, "dynamic", embedding_bits=8),
    )
}
# --quantize auto builds these, smallest first, and keeps the first that meets the budget
AUTO_CANDIDATES = ("int4-block128", "int4-block32", "dynamic-int8", "weight-only-int8", "none")


def lm_scheme(name: str | None, *, embedding_bits: int | None = None) -> LMScheme | str:
    """The scheme named `name` (or AUTO), its embedding precision replaced when asked."""
    name = name or AUTO
    if name == AUTO:
        return AUTO
    if name not in LM_SCHEMES:
        raise UserError(
            f"Unknown quantization scheme {name!r} for a language model; choose one of: "
            f"{', '.join((*LM_SCHEMES, AUTO))}."
        )
    scheme = LM_SCHEMES[name]
    if embedding_bits is not None:
        if int(embedding_bits) not in (4, 8):
            raise UserError(f"--embedding-bits takes 8 or 4, got {embedding_bits}.")
        if not scheme.quantized:
            raise UserError(
                "--embedding-bits quantizes the embedding table of a quantized model; add a --quantize scheme."
            )
        scheme = replace(scheme, embedding_bits=int(embedding_bits))
    return scheme
