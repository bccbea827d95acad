"""A decoder LM against a board: flash for its int8 weights, RAM for an arena that holds its KV cache.

The decode step's caches are its inputs and outputs, so TFLite-Micro plans them in the tensor
arena with the activations: the cache is RAM the board must have, at one int8 byte a value.

- Before any conversion, `LMEstimate` bounds the model from below: flash at one byte a
  parameter, RAM at the int8 cache (every cache input is in the arena when a step starts) plus
  the most activation bytes one op holds at once (edge/boards.activation_lower_bound). A model
  over the named board (or, with none named, over every built-in board) stops there (exit 2).
- After the build measured the file and the arena, `check_measured_fit` is the same check on
  the measured numbers.
Both messages name flash and RAM, and the cache's share of the RAM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpuedge.edge.mcu.boards import BOARDS, RESERVE, Board, boards_that_fit, fits
from tpuedge.shared_ir.errors import UserError

__all__ = ["LMEstimate", "estimate_lm", "check_estimate_fits", "check_measured_fit", "int8_cache_bytes"]


def int8_cache_bytes(spec) -> int:
    """The KV cache at one byte a value: every layer's keys and values, every position."""
    return int(sum(int(np.prod(shape)) for shape in spec.cache_shapes))


@dataclass(frozen=True)
class LMEstimate:
    parameters: int
    flash_bytes: int  # lower bound: one byte a parameter
    cache_bytes: int  # the int8 KV cache
    activation_bytes: int  # lower bound of what one op holds at once beside the cache
    cache_shape: str  # in words, for the message

    @property
    def ram_bytes(self) -> int:
        return self.cache_bytes + self.activation_bytes

    def to_json(self) -> dict:
        return {
            "flash_bytes_at_least": self.flash_bytes,
            "arena_bytes_at_least": self.ram_bytes,
            "kv_cache_bytes": self.cache_bytes,
            "activation_bytes_at_least": self.activation_bytes,
        }


def estimate_lm(bundle, decode_program) -> LMEstimate:
    from tpuedge.edge.mcu.boards import activation_lower_bound

    spec = bundle.decoder
    _, heads, positions, head_dim = spec.cache_shapes[0]
    shape = (
        f"{spec.layers} layers x keys and values x {heads} KV heads x {positions} positions x {head_dim} values"
        if len(set(spec.cache_shapes)) == 1
        else f"{spec.layers} layers' keys and values"
    )
    held, _ = activation_lower_bound(decode_program)
    return LMEstimate(bundle.parameter_count, bundle.parameter_count, int8_cache_bytes(spec), int(held), shape)


def _boards(board: Board | None) -> list[Board]:
    return [board] if board is not None else list(BOARDS.values())


def check_estimate_fits(name: str, board: Board | None, estimate: LMEstimate) -> None:
    """Exit 2 before any conversion when even the lower bounds are over `board` (or every built-in board)."""
    if any(fits(b, estimate.flash_bytes, estimate.ram_bytes) for b in _boards(board)):
        return
    raise UserError(_message(name, board, estimate.flash_bytes, estimate.ram_bytes, estimate, measured=False))


def check_measured_fit(
    name: str, board: Board | None, flash_bytes: int, arena_bytes: int, estimate: LMEstimate
) -> None:
    """Exit 2, nothing written, when the built model's file or measured arena is over the named board."""
    if board is None or fits(board, flash_bytes, arena_bytes):
        return
    raise UserError(_message(name, board, flash_bytes, arena_bytes, estimate, measured=True))


def _message(name: str, board: Board | None, flash: int, ram: int, estimate: LMEstimate, *, measured: bool) -> str:
    reserve = f"{round(RESERVE * 100)}%"
    if board is not None:
        where = board.name
        flash_budget, ram_budget = board.flash_budget, board.ram_budget
        leaves = f"{board.name} leaves {flash_budget:,} bytes of flash and {ram_budget:,} of RAM ({reserve} of each kept for firmware, stack and buffers)"
    else:
        where = "any built-in board"
        flash_budget = max(b.flash_budget for b in BOARDS.values())
        ram_budget = max(b.ram_budget for b in BOARDS.values())
        leaves = (
            f"the built-in boards leave at most {flash_budget:,} bytes of flash and {ram_budget:,} of RAM "
            f"({reserve} of each kept for firmware, stack and buffers)"
        )
    over = [what for what, need, budget in (("flash", flash, flash_budget), ("RAM", ram, ram_budget)) if need > budget]
    if measured:
        needs = (
            f"its int8 decode step is {flash:,} bytes of flash and its tensor arena, measured in TFLite-Micro, "
            f"{ram:,} bytes of RAM, of which the KV cache is {estimate.cache_bytes:,}"
        )
        done = "Nothing was written"
    else:
        needs = (
            f"its {estimate.parameters:,} parameters take at least {flash:,} bytes of flash as int8 weights, and its "
            f"tensor arena at least {ram:,} bytes of RAM: the int8 KV cache alone is {estimate.cache_bytes:,} "
            f"({estimate.cache_shape})"
        )
        done = "Nothing was converted or written"
    fitting = boards_that_fit(flash, ram)
    bigger = f"a bigger board ({', '.join(fitting)})" if fitting else "a bigger part (--flash-kb/--ram-kb)"
    return (
        f"{name} does not fit {where} ({' and '.join(over)} over): {needs}, since the decode step's caches are its "
        f"inputs and outputs and TFLite-Micro holds them in the arena; {leaves}. {done}. Try: a shorter "
        f"--cache-length (the cache and the arena scale with it), fewer layers or KV heads, a smaller model "
        f"(flash scales with its parameters), {bigger}, or --target android."
    )
