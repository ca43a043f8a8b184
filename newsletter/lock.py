"""A process lock next to the store, so two runs never overlap.

Uses ``fcntl.flock`` on ``<store>.lock``; the kernel releases it when the
process dies, so a killed run never leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import LockError


class RunLock:
    """Exclusive, non-blocking lock for a store path.

    Raises:
        LockError: on enter, when another process holds it.
    """

    def __init__(self, store_path: Path) -> None:
        self.path = Path(str(store_path) + ".lock")
        self.fd = -1

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise LockError(f"{self.path}: another newsletter run holds the lock",
                            hint="it will finish on its own; nothing was done") from None
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
