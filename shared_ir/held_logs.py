"""Hold back what a library logs during one call, so a failure shows one paragraph, not two.

torch logs its own traceback (logger "torch.export") before raising on a file it can't read;
our UserError already names the problem and the fix. The held records are passed on when the
call succeeds (they may matter then) and, on failure, only with TPUEDGE_VERBOSE=1.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

__all__ = ["held_log_records", "verbose"]


def verbose() -> bool:
    """TPUEDGE_VERBOSE=1: show every library's own output, also what tpuedge would hold back."""
    return os.environ.get("TPUEDGE_VERBOSE", "") not in ("", "0")


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
    logger's handlers are swapped out for the block, not just its propagation."""
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
