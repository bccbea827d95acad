"""The one reader of numpy array files (.npz archives, .npy arrays) that users hand to tpuedge.

`read_arrays(path, role)` gives {name: array} (an .npy is one unnamed array, "arr_0", the name
numpy.savez gives a positional array). It checks what the file really is before numpy sees it
and never loads pickles, so a corrupt or truncated archive, an empty or text file, an .npy named
.npz or an archive member that is not an array is one UserError saying which, not a BadZipFile
traceback or numpy's advice about pickles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = ["read_arrays", "UNNAMED"]

UNNAMED = "arr_0"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip archive (the second: an empty one)
_NPY_MAGIC = b"\x93NUMPY"


def _looks_like(head: bytes) -> str:
    """What a file that is not what its suffix says seems to be, from its first bytes."""
    if not head:
        return "it is empty (0 bytes)"
    if head.startswith(_NPY_MAGIC):
        return "it is a single .npy array, not an .npz archive (rename it to .npy)"
    if head.startswith(_ZIP_MAGIC):
        return "it is a zip archive, not a single .npy array (rename it to .npz)"
    if head.startswith(b"\x80") or head.startswith(b"\x1f\x8b"):
        return "it looks like a pickle or gzip file, not numpy arrays"
    sample = head.decode("utf-8", errors="replace")
    if sum(c.isprintable() or c in "\r\n\t" for c in sample) >= 0.9 * len(sample):
        first = sample.strip().splitlines()[0][:40] if sample.strip() else ""
        return f"it is a text file (it starts with {first!r})"
    return f"it is binary data starting with {head[:8]!r}"


def _first_sentence(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0][:120]


def read_arrays(path: str | Path, role: str = "Array file") -> dict[str, np.ndarray]:
    """{name: array} from an .npy (one array, named UNNAMED) or any other path as an .npz."""
    path = Path(path)
    npy = path.suffix == ".npy"

    def unreadable(problem: str) -> UserError:
        return UserError(
            f"{role} {path} is not a readable {'.npy array' if npy else '.npz archive'}: {problem}. Write it with "
            + ("numpy.save(path, array)." if npy else "numpy.savez(path, <input name>=array, ...).")
        )

    with path.open("rb") as f:
        head = f.read(64)
    if not head.startswith((_NPY_MAGIC,) if npy else _ZIP_MAGIC):
        raise unreadable(_looks_like(head))
    # numpy's reader raises many kinds on damaged bytes (BadZipFile, zlib.error, EOFError,
    # ValueError, SyntaxError and tokenize.TokenError from its header parser, ...); the calls
    # below only decode the user's file, so any of them means the file is damaged.
    damaged = Exception
    if npy:
        try:
            return {UNNAMED: np.load(path, allow_pickle=False)}
        except damaged as exc:  # a damaged header or data; pickles (object arrays) are never loaded
            raise unreadable(f"it is damaged or holds Python objects ({_first_sentence(exc)})") from None
    arrays = {}
    try:
        data = np.load(path, allow_pickle=False)
    except damaged as exc:
        raise unreadable(f"the archive is corrupt or truncated ({_first_sentence(exc)})") from None
    with data:
        for key in data.files:
            try:
                value = data[key]
            except damaged as exc:
                raise unreadable(
                    f"the archive is corrupt or truncated: member {key!r} ({_first_sentence(exc)})"
                ) from None
            if not isinstance(value, np.ndarray):  # numpy hands back a non-.npy member as raw bytes
                raise unreadable(f"its member {key!r} is not a .npy array ({_looks_like(bytes(value)[:64])})")
            arrays[key] = value
    return arrays
