"""What third-party libraries log and warn while tpuedge works: held back, kept, shown when it matters.

torch, jax, absl (ai-edge-quantizer, litert-torch), LiteRT and friends log start-up notes,
deprecations and progress that say nothing about the user's model. Inside
`held_third_party_output()` (the whole `tpuedge` command, and `tpuedge.build`):
  - every log record of a logger that isn't tpuedge's own is held, from any thread;
  - a warning attributed to a third-party module (a file of an installed library or of the
    standard library, import machinery included) is held; the user's own code's warnings and
    tpuedge's show as Python shows them. Warning filters are left alone: nothing is silenced
    or dropped;
  - what the native-stderr and tool-output blocks hold (edge/tool_output.py,
    shared_ir/native_stderr.py) is handed here too (`keep_held`).
The held text is written to the capture's `log_path` (a build's log) on success and failure;
a failing build shows it after the error. `verbose()` (TPUEDGE_VERBOSE=1, or `--verbose`,
which sets it) turns holding off: everything shows as it happens.

`held_log_records` holds one logger's records for one call, for a failure whose own message
already says what that logger would (torch's traceback for a .pt2 it can't read).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "verbose",
    "set_verbose",
    "quiet_defaults",
    "held_log_records",
    "held_third_party_output",
    "HeldOutput",
    "keep_held",
    "held_output_report",
    "build_log_path",
    "VERBOSE_ENV",
]

VERBOSE_ENV = "TPUEDGE_VERBOSE"
_OWN_PACKAGE = "tpuedge"


def verbose() -> bool:
    """TPUEDGE_VERBOSE=1 (or `--verbose`): show every library's own output as it happens."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


_QUIET_ENV = {"TQDM_DISABLE": "1"}  # ai-edge-quantizer's per-tensor progress bars
_SET_QUIET: list[str] = []


def quiet_defaults() -> None:
    """A command's start unless verbose: library switches that only draw (progress bars) go off,
    where the user has not set them; `set_verbose` turns them back on."""
    if verbose():
        return
    for name, value in _QUIET_ENV.items():
        if name not in os.environ:
            os.environ[name] = value
            _SET_QUIET.append(name)


def set_verbose() -> None:
    """What `--verbose` does: the environment variable, so child processes a build starts agree."""
    os.environ[VERBOSE_ENV] = "1"
    while _SET_QUIET:
        os.environ.pop(_SET_QUIET.pop(), None)


class _Holder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def held_log_records(logger_name: str) -> Iterator[list[logging.LogRecord]]:
    """Inside the block, `logger_name` (and its children) log into the yielded list only.

    torch attaches its console handler to its own loggers ("torch.export" included), so the
    logger's handlers are swapped out for the block, not just its propagation. The records are
    passed on when the call succeeds and, on failure, only when verbose."""
    logger = logging.getLogger(logger_name)
    holder = _Holder()
    saved, saved_handlers = logger.propagate, list(logger.handlers)
    logger.handlers = [holder]
    logger.propagate = False
    failed = False
    try:
        yield holder.records
    except BaseException:
        failed = True
        raise
    finally:
        logger.handlers = saved_handlers
        logger.propagate = saved
        if not failed or verbose():
            for record in holder.records:
                logging.getLogger(record.name).handle(record)


class HeldOutput:
    """The third-party text one capture held, in the order it came."""

    def __init__(self, log_path: Path | None) -> None:
        self.log_path = log_path
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        if text.strip():
            with self._lock:
                self._parts.append(text if text.endswith("\n") else text + "\n")

    @property
    def text(self) -> str:
        with self._lock:
            return "".join(self._parts)


_ACTIVE: list[tuple[int, HeldOutput]] = []  # (thread id, capture), innermost last
_LOCK = threading.Lock()
_ORIGINALS: dict[str, object] = {}
_FORMAT = logging.Formatter("%(levelname)s:%(name)s:%(message)s")


def _current() -> HeldOutput | None:
    """The innermost capture of this thread; a library's worker thread counts for the newest one."""
    with _LOCK:
        here = threading.get_ident()
        for thread, held in reversed(_ACTIVE):
            if thread == here:
                return held
        return _ACTIVE[-1][1] if _ACTIVE else None


def keep_held(text: str) -> None:
    """Text a tool block held (native fd 2, a tool's stderr): shown now when verbose, else kept
    by the capture around it. Outside any capture it is the block's caller's alone."""
    if not text.strip():
        return
    if verbose():
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        return
    held = _current()
    if held is not None:
        held.add(text)


def _own_logger(name: str) -> bool:
    return name == _OWN_PACKAGE or name.startswith(_OWN_PACKAGE + ".")


def _handlers_of(logger: logging.Logger | None) -> list[logging.Handler]:
    """The handlers a record of `logger` reaches, as `Logger.callHandlers` walks them."""
    found: list[logging.Handler] = []
    while logger is not None:
        found += logger.handlers
        logger = logger.parent if logger.propagate else None
    return found


def _call_handlers(logger: logging.Logger, record: logging.LogRecord) -> None:
    handlers = _handlers_of(logger)
    if any(isinstance(h, _Holder) for h in handlers):  # inside `held_log_records`: that block decides
        held = None
    else:
        # a library's record only (the file that logged it is installed or the standard
        # library's): tpuedge's own and the user's code's records show as usual
        mine = _own_logger(record.name) or not _third_party_file(record.pathname)
        held = None if verbose() or mine else _current()
    if held is not None:
        # what a handler would have printed, nothing more (torch's trace logger sends DEBUG records to none)
        printing = [h for h in handlers if not isinstance(h, logging.NullHandler)]
        last_resort = logging.lastResort.level if logging.lastResort and not handlers else logging.CRITICAL + 1
        if record.levelno < min((h.level for h in printing), default=last_resort):
            return
    if held is None:
        _ORIGINALS["callHandlers"](logger, record)  # type: ignore[operator]
        return
    try:
        if record.getMessage().strip():  # torch's structured trace sends empty records to its own files
            held.add(_FORMAT.format(record))
    except Exception:  # a record whose arguments don't format: keep what it said as given
        held.add(f"{record.levelname}:{record.name}:{record.msg!r} {record.args!r}")


@functools.cache
def _distribution_modules() -> frozenset[str]:
    from importlib.metadata import packages_distributions

    return frozenset(packages_distributions())


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Folders installed libraries and the standard library live in (site-packages, lib/python3.x)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    roots += [*site.getsitepackages(), site.getusersitepackages()]
    return tuple({os.path.realpath(r) for r in roots if r})


def _module_of(path: str) -> str:
    """The dotted module a file belongs to, by sys.modules or else by its place under sys.path."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and os.path.abspath(file) == path:
            return name
    roots = sorted((os.path.abspath(p) for p in sys.path if p), key=len, reverse=True)
    relative = next((os.path.relpath(path, r) for r in roots if path.startswith(r + os.sep)), path)
    return relative.removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")


@functools.cache
@functools.lru_cache(maxsize=4096)
def _third_party_file(filename: str) -> bool:
    """A warning attributed to `filename` is a library's: a file of an installed distribution or
    of the standard library (import machinery included), not tpuedge's or the user's code. A file
    that isn't on disk is judged by its module's top-level name."""
    if filename.startswith("<frozen "):  # importlib._bootstrap: a library being imported
        return True
    path = os.path.abspath(filename)
    module = _module_of(path) if os.path.isfile(path) else filename.removesuffix(".py").replace(os.sep, ".")
    top = module.lstrip(".").split(".", 1)[0]
    if not top or top == _OWN_PACKAGE:
        return False
    if os.path.isfile(path):
        real = os.path.realpath(path)
        return any(real.startswith(root + os.sep) for root in _library_roots())
    return top in sys.stdlib_module_names or top in _distribution_modules()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    held = None if verbose() else _current()
    if held is None or file is not None or not _third_party_file(str(filename)):
        _ORIGINALS["showwarning"](message, category, filename, lineno, file, line)  # type: ignore[operator]
        return
    held.add(warnings.formatwarning(message, category, filename, lineno, line))


def _install() -> None:
    """Route logging and warnings through the captures while any is open (first one in)."""
    _ORIGINALS["callHandlers"] = logging.Logger.callHandlers
    _ORIGINALS["showwarning"] = warnings.showwarning
    logging.Logger.callHandlers = _call_handlers  # type: ignore[method-assign]
    warnings.showwarning = _show_warning


def _uninstall() -> None:
    logging.Logger.callHandlers = _ORIGINALS.pop("callHandlers")  # type: ignore[method-assign]
    shown = _ORIGINALS.pop("showwarning")
    if warnings.showwarning is _show_warning:  # unless someone replaced it meanwhile (theirs stays)
        warnings.showwarning = shown  # type: ignore[assignment]


def build_log_path(out_dir: os.PathLike | str) -> Path:
    """Where a build's held third-party output goes: beside its output folder (build/m/android ->
    build/m/android.build.log), so the folder itself stays byte for byte the same between builds."""
    out = Path(os.path.normpath(out_dir))
    if out.name in ("", ".", ".."):
        out = out.resolve()
    return out.with_name(out.name + ".build.log")


def _write_log(held: HeldOutput) -> None:
    from tpuedge.shared_ir.atomic import write_bytes_atomic

    path = held.log_path
    if path is None:
        return
    text = held.text
    if text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, text.encode(errors="backslashreplace"))
    else:  # a log beside a build is that build's: none from an earlier one stays
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def held_third_party_output(log_path: Path | None = None) -> Iterator[HeldOutput]:
    """Hold third-party log records and warnings inside the block (see the module docstring).

    On leaving, the held text is written to `log_path` (when given), then handed to an enclosing
    capture, which also learns the log's path; with none around it a failure carries the text
    (`exc.held_output`, `exc.held_log`) for the caller that reports the error."""
    held = HeldOutput(Path(log_path) if log_path is not None else None)
    with _LOCK:
        if not _ACTIVE:
            _install()
        _ACTIVE.append((threading.get_ident(), held))
    failure: BaseException | None = None
    try:
        yield held
    except BaseException as exc:  # re-raised below, with the text attached
        failure = exc
        raise
    finally:
        with _LOCK:
            _ACTIVE.remove(next(entry for entry in _ACTIVE if entry[1] is held))
            if not _ACTIVE:
                _uninstall()
        with contextlib.suppress(OSError):  # an unwritable log must not hide the build's outcome
            _write_log(held)
        outer = _current()
        if outer is not None:
            outer.add(held.text)
            outer.log_path = outer.log_path or held.log_path
        elif failure is not None and held.text:
            failure.held_output = held.text  # type: ignore[attr-defined]
            failure.held_log = held.log_path  # type: ignore[attr-defined]
            if not isinstance(failure, (KeyboardInterrupt, SystemExit)):
                failure.add_note(held_output_report(held.text, held.log_path))


def held_output_report(text: str, log_path: Path | None, lines: int = 20) -> str:
    """What a failure shows under its error: the held lines, or their tail and where the rest is."""
    kept = [line for line in text.splitlines() if line.strip()]
    if len(kept) <= lines:
        return "third-party output held during this run:\n" + "\n".join(kept)
    where = f"all of them in {log_path}" if log_path is not None else "--verbose shows them all as they happen"
    return f"third-party output held during this run (last {lines} of {len(kept)} lines; {where}):\n" + "\n".join(
        kept[-lines:]
    )
