"""Microcontroller boards: flash and RAM budgets, and the check a build must pass.

Flash holds the model array (plus your firmware and the TFLM kernels: we leave them a
reserve); RAM holds the tensor arena (plus your stack and buffers: same). Over budget is the
user's error (exit 2) with the numbers and what to try.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = [
    "check_int8_weights_fit",
    "check_int8_activations_fit",
    "check_all_int8_arena_fits",
    "activation_lower_bound",
    "Board",
    "BOARDS",
    "resolve_board",
    "budget_check",
    "boards_that_fit",
    "RESERVE",
]

# Share of flash/RAM left for the application, TFLM's kernels, stack and I/O buffers.
RESERVE = 0.25


@dataclass(frozen=True)
class Board:
    name: str
    flash_kb: int
    ram_kb: int
    description: str = ""

    @property
    def flash_budget(self) -> int:
        return int(self.flash_kb * 1024 * (1 - RESERVE))

    @property
    def ram_budget(self) -> int:
        return int(self.ram_kb * 1024 * (1 - RESERVE))

    def to_json(self) -> dict:
        return {"name": self.name, "flash_kb": self.flash_kb, "ram_kb": self.ram_kb, "description": self.description}


BOARDS: dict[str, Board] = {
    b.name: b
    for b in (
        Board("nrf52840", 1024, 256, "Nordic nRF52840 (Cortex-M4F, 64 MHz)"),
        Board("stm32f746", 1024, 320, "ST STM32F746 (Cortex-M7, 216 MHz)"),
        Board("esp32s3", 8192, 512, "Espressif ESP32-S3 (Xtensa LX7, 8 MB flash, 512 KB SRAM)"),
        Board("rp2040", 2048, 264, "Raspberry Pi RP2040 (Cortex-M0+, 2 MB flash)"),
        Board("cortex-m0plus", 256, 32, "a small Cortex-M0+ part (e.g. SAMD21: 256 KB flash, 32 KB RAM)"),
    )
}


def resolve_board(board: str | None, flash_kb: int | None, ram_kb: int | None) -> Board | None:
    """The board to check against: a built-in profile, custom --flash-kb/--ram-kb, or None."""
    if board and (flash_kb or ram_kb):
        base = _builtin(board)
        return Board(f"{board} (custom)", flash_kb or base.flash_kb, ram_kb or base.ram_kb, base.description)
    if board:
        return _builtin(board)
    if flash_kb or ram_kb:
        if not (flash_kb and ram_kb):
            raise UserError("A custom board needs both --flash-kb and --ram-kb (e.g. --flash-kb 512 --ram-kb 128).")
        if flash_kb <= 0 or ram_kb <= 0:
            raise UserError(f"--flash-kb and --ram-kb must be positive (got {flash_kb} and {ram_kb}).")
        return Board("custom", int(flash_kb), int(ram_kb), "custom budget")
    return None


def _builtin(name: str) -> Board:
    key = name.lower().replace("_", "-")
    aliases = {"m0+": "cortex-m0plus", "cortex-m0+": "cortex-m0plus", "esp32-s3": "esp32s3", "stm32": "stm32f746"}
    key = aliases.get(key, key)
    if key not in BOARDS:
        raise UserError(
            f"Unknown board {name!r}; choose one of: {', '.join(BOARDS)}, or give your own budget with "
            "--flash-kb N --ram-kb N."
        )
    return BOARDS[key]


def fits(board: Board, model_bytes: int, arena_bytes: int) -> bool:
    return model_bytes <= board.flash_budget and arena_bytes <= board.ram_budget


def boards_that_fit(model_bytes: int, arena_bytes: int) -> list[str]:
    return [b.name for b in BOARDS.values() if fits(b, model_bytes, arena_bytes)]


def budget_check(board: Board | None, model_bytes: int, arena_bytes: int) -> dict:
    """The manifest's board check; raises UserError (exit 2) when the model does not fit."""
    fits_on = boards_that_fit(model_bytes, arena_bytes)
    result = {
        "model_flash_bytes": model_bytes,
        "arena_ram_bytes": arena_bytes,
        "reserve_for_application": f"{round(RESERVE * 100)}% of flash and RAM",
        "fits_builtin_boards": fits_on,
    }
    if board is None:
        return {**result, "board": None, "fits": None}
    result.update(
        board=board.to_json(),
        flash_budget_bytes=board.flash_budget,
        ram_budget_bytes=board.ram_budget,
        fits=fits(board, model_bytes, arena_bytes),
    )
    if result["fits"]:
        return result
    over = []
    if model_bytes > board.flash_budget:
        over.append(
            f"the model needs {model_bytes:,} bytes of flash but {board.name} leaves {board.flash_budget:,} "
            f"({board.flash_kb} KB minus {round(RESERVE * 100)}% for firmware)"
        )
    if arena_bytes > board.ram_budget:
        over.append(
            f"the tensor arena needs {arena_bytes:,} bytes of RAM but {board.name} leaves {board.ram_budget:,} "
            f"({board.ram_kb} KB minus {round(RESERVE * 100)}% for stack and buffers)"
        )
    where = f"boards it fits: {', '.join(fits_on)}" if fits_on else "it fits none of the built-in boards"
    raise UserError(
        f"The model does not fit {board.name}: {'; and '.join(over)}. Nothing was written. Try: fewer channels or "
        f"layers (flash scales with parameters, the arena with the largest pair of activations), a smaller input "
        f"resolution, or a bigger board ({where}; or set --flash-kb/--ram-kb)."
    )


def _over_every_board(board: Board | None, need: int, budget: str) -> tuple[str | None, str]:
    """(None, "") when `need` bytes fit `board`'s `budget` ("flash_budget" or "ram_budget"), or
    some built-in board's when none is named; else (what does not fit, "<board> leaves N")."""
    boards = [board] if board is not None else list(BOARDS.values())
    if any(need <= getattr(b, budget) for b in boards):
        return None, ""
    if board is not None:
        return board.name, f"{board.name} leaves {getattr(board, budget):,}"
    biggest = max(boards, key=lambda b: getattr(b, budget))
    return "any built-in board", f"the biggest built-in board, {biggest.name}, leaves {getattr(biggest, budget):,}"


def check_int8_weights_fit(board: Board | None, parameters: int) -> None:
    """Before any conversion: a model whose int8 weights alone (one byte per parameter, a lower
    bound of its flash) exceed the board's flash, or every built-in board's when none is named,
    is exit 2 with the numbers; the budget, not an op, is then its answer."""
    where, what = _over_every_board(board, parameters, "flash_budget")
    if where is None:
        return
    raise UserError(
        f"The model does not fit {where}: its {parameters:,} "
        f"parameters take at least {parameters / 2**20:.1f} MiB of flash as int8 weights, and {what} bytes "
        f"({round(RESERVE * 100)}% is kept for firmware). Nothing was converted or written. Try: a smaller model "
        "(fewer layers or channels, a distilled variant), --target android, or --flash-kb/--ram-kb for a bigger part."
    )


# ops TFLite-Micro runs with input and output in the arena at once (never in place, never fused
# away); an activation the converter fuses (relu) or a view it drops is not among them
_BUFFERED_OPS = {
    "aten.conv1d.default",
    "aten.conv2d.default",
    "aten.linear.default",
    "aten.addmm.default",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.matmul.default",
    "aten.max_pool2d.default",
    "aten.avg_pool2d.default",
    "aten.adaptive_avg_pool2d.default",
    "aten.mean.dim",
    "aten.cat.default",
    "aten.softmax.int",
    "aten._softmax.default",
}


def activation_lower_bound(program) -> tuple[int, Any]:
    """(bytes, node): the most int8 bytes one op of `program` holds in the arena at once, its
    output plus its biggest activation input, over the ops in _BUFFERED_OPS. A lower bound of
    the arena TFLite-Micro measures: both are live while the op runs, and int8 is one byte."""
    import math

    # values computed from a model input: the rest (weights, constants and ops on them) the
    # converter folds into flash
    live = set(program.exported_program.graph_signature.user_inputs)

    def nbytes(value) -> int:
        shape = getattr(getattr(value, "meta", {}).get("val"), "shape", None)
        if shape is None or not all(isinstance(d, int) for d in shape):  # not a tensor, or a symbolic size
            return 0
        return math.prod(shape)

    best: tuple[int, Any] = (0, None)
    for node in program.exported_program.graph.nodes:
        if node.op != "call_function" or not any(a.name in live for a in node.all_input_nodes):
            continue
        live.add(node.name)
        if str(node.target) not in _BUFFERED_OPS:
            continue
        inputs = [a for a in node.all_input_nodes if a.name in live]
        held = nbytes(node) + max((nbytes(a) for a in inputs), default=0)
        if held > best[0]:
            best = (held, node)
    return best


def check_int8_activations_fit(board: Board | None, program) -> None:
    """Before any conversion: a model one of whose ops needs more int8 activation bytes at once
    (`activation_lower_bound`) than the board's RAM, or every built-in board's when none is
    named, is exit 2 with the numbers and the op's source line; measuring its arena would take a
    whole int8 conversion to say the same."""
    from tpuedge.shared_ir.sources import node_source

    held, node = activation_lower_bound(program)
    where, what = _over_every_board(board, held, "ram_budget") if node is not None else (None, "")
    if where is None:
        return
    source = node_source(node)
    raise UserError(
        f"The model does not fit {where}: its {node.target} "
        f"{node.name}{f' at {source}' if source else ''} holds at least {held:,} bytes of int8 activations at once "
        f"(its input and output), more than the tensor arena can have: {what} bytes of RAM "
        f"({round(RESERVE * 100)}% is kept for stack and buffers). Nothing was converted or written. Try: a smaller "
        "input (activations scale with it), fewer channels in the early layers, --target android, or --ram-kb for a bigger part."
    )


def check_all_int8_arena_fits(board: Board, name: str, allocated: int | None) -> None:
    """During the int8 search, before any candidate is scored: `allocated`, what TFLite-Micro's
    allocator took for the all-int8 model (a lower bound of its arena, and of any candidate's:
    int16 activations only widen it), over the named `board`'s RAM is exit 2 with the numbers
    (without a board the build reports the boards it fits, and fitting none is no error)."""
    if allocated is None or allocated <= board.ram_budget:
        return
    fits_on = boards_that_fit(0, allocated)  # by RAM alone
    where = f"boards with that RAM: {', '.join(fits_on)}" if fits_on else "it fits none of the built-in boards"
    raise UserError(
        f"{name} does not fit {board.name}: with every activation int8, the least any quantization of it needs, "
        f"TFLite-Micro's allocator takes {allocated:,} bytes of tensor arena, and {board.name} leaves "
        f"{board.ram_budget:,} bytes of RAM ({board.ram_kb} KB minus {round(RESERVE * 100)}% for stack and buffers). "
        f"Nothing was written; the int8 search was not run. Try: a smaller input resolution or sequence length "
        f"(activations scale with it), fewer channels, --target android, or a bigger board ({where}; or set --ram-kb)."
    )
