"""Cloud TPU chips and topology names: published per-chip figures and `--topology` parsing.

Light module (no jax import): the CLI validates `--topology` before anything heavy runs.

Per-chip figures are Google's published numbers from the Cloud TPU system-architecture pages
(read 2026-11; they have not changed since each chip's launch):
- v4:  https://cloud.google.com/tpu/docs/v4  — 275 TFLOP/s peak (bf16), 32 GiB HBM2, 1,200 GB/s.
- v5e: https://cloud.google.com/tpu/docs/v5e — 197 TFLOP/s peak (bf16), 16 GB HBM2, 819 GB/s.
- v5p: https://cloud.google.com/tpu/docs/v5p — 459 TFLOP/s peak (bf16), 95 GB HBM2e, 2,765 GB/s.
- v6e: https://cloud.google.com/tpu/docs/v6e — 918 TFLOP/s peak (bf16), 32 GB HBM, 1,640 GB/s.
Google's tables write "GB" for HBM capacity; the stacks are binary sizes, so we store GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpuedge.shared_ir.errors import UserError

__all__ = ["TpuChip", "CHIPS", "TopologyChoice", "parse_topology", "valid_topologies_text", "DEFAULT_TOPOLOGY"]

DEFAULT_TOPOLOGY = "v5e:2x2"
_GIB = 2**30


@dataclass(frozen=True)
class TpuChip:
    """One TPU generation: its published per-chip peak and memory, and how libtpu names it."""

    name: str  # the short name users type: "v5e"
    device_kind: str  # jax Device.device_kind of its compile-only devices
    peak_bf16_flops: float  # per chip, FLOP/s
    hbm_bytes: int  # per chip
    hbm_bandwidth: float  # per chip, bytes/s
    default_topology: str  # what a bare chip name means
    mesh_dims: int  # 2 for the 2-D torus slices (v5e, v6e), 3 for the 3-D ones (v4, v5p)
    examples: tuple[str, ...]  # topologies verified to compile without a TPU (docs/stack-facts.md)
    source: str


CHIPS: dict[str, TpuChip] = {
    "v4": TpuChip(
        "v4", "TPU v4", 275e12, 32 * _GIB, 1200e9, "v4:2x2x1", 3, ("v4:2x2x1",), "https://cloud.google.com/tpu/docs/v4"
    ),
    "v5e": TpuChip(
        "v5e",
        "TPU v5 lite",
        197e12,
        16 * _GIB,
        819e9,
        "v5e:2x2",
        2,
        ("v5e:2x2", "v5e:2x4"),
        "https://cloud.google.com/tpu/docs/v5e",
    ),
    "v5p": TpuChip(
        "v5p",
        "TPU v5",
        459e12,
        95 * _GIB,
        2765e9,
        "v5p:2x2x1",
        3,
        ("v5p:2x2x1",),
        "https://cloud.google.com/tpu/docs/v5p",
    ),
    "v6e": TpuChip(
        "v6e",
        "TPU v6 lite",
        918e12,
        32 * _GIB,
        1640e9,
        "v6e:2x2",
        2,
        ("v6e:2x2",),
        "https://cloud.google.com/tpu/docs/v6e",
    ),
}


@dataclass(frozen=True)
class TopologyChoice:
    """A parsed `--topology`: the chip and the full libtpu topology name ("v5e:2x2")."""

    chip: TpuChip
    name: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.name.split(":", 1)[1].split("x"))

    @property
    def chip_count(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count


def valid_topologies_text() -> str:
    names = ", ".join(t for chip in CHIPS.values() for t in chip.examples)
    return f"{names} (or a bare chip name: {', '.join(CHIPS)}; its default slice)"


def parse_topology(text: str) -> TopologyChoice:
    """`"v5e"` / `"v5e:2x2"` / `"v4:2x2x1"` -> TopologyChoice; anything else is a UserError."""
    raw = (text or "").strip()
    chip_name, _, shape = raw.lower().partition(":")
    chip = CHIPS.get(chip_name)
    if chip is None:
        raise UserError(
            f"Unknown TPU topology {text!r}: the chip must be one of {', '.join(CHIPS)}. "
            f"Pass --topology as CHIP or CHIP:SHAPE, e.g. {valid_topologies_text()}."
        )
    if not shape:
        return TopologyChoice(chip, chip.default_topology)
    if not re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)+", shape) or shape.count("x") + 1 != chip.mesh_dims:
        dims = "AxB" if chip.mesh_dims == 2 else "AxBxC"
        raise UserError(
            f"TPU topology {text!r} has a malformed slice shape: {chip.name} slices are {dims} chips "
            f"(e.g. {chip.default_topology}). Valid names: {valid_topologies_text()}."
        )
    return TopologyChoice(chip, f"{chip.name}:{shape}")
