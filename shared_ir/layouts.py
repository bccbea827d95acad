"""How a runtime's tensor layout relates to the IR's: the one layout change converters make,
channels first -> channels last."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["layout_permutation", "inverse_permutation"]


def _fits(expected: Sequence[Any], actual: Sequence[Any]) -> bool:
    return len(expected) == len(actual) and all(
        not isinstance(e, int) or not isinstance(a, int) or e == a for e, a in zip(expected, actual)
    )


def layout_permutation(ir_shape: Sequence[Any], runtime_shape: Sequence[Any]) -> tuple[int, ...] | None:
    """Axes that turn an IR-layout tensor into the runtime's layout; () when they already agree.

    Only the layout change converters make is recognised: channels first -> channels last.
    None when the shapes don't correspond.
    """
    if _fits(ir_shape, runtime_shape):
        return ()
    rank = len(ir_shape)
    if rank >= 3 and len(runtime_shape) == rank:
        perm = (0, *range(2, rank), 1)
        if _fits([ir_shape[p] for p in perm], runtime_shape):
            return perm
    return None


def inverse_permutation(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))
