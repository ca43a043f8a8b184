"""The one place files are written: atomically, only when their bytes change.

A file is written to a temporary name in its directory, flushed, then renamed
over the target (``os.replace``, atomic on POSIX), so readers and web servers
never see half a file. A file whose bytes are already on disk is not touched
(its modification time stays), so a rebuild with nothing new changes nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class Writer:
    """Writes files under one root and remembers what it did.

    Attributes:
        root: output directory.
        written: paths whose content changed this run.
        unchanged: paths already holding the same bytes.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.written: list[Path] = []
        self.unchanged: list[Path] = []
        self._seen: set[Path] = set()

    def sweep(self) -> int:
        """Remove temporary files a killed writer left under ``root`` (call with the run lock held).

        Returns:
            how many were removed.
        """
        removed = 0
        if self.root.exists():
            for tmp in self.root.rglob(".tmp-*"):
                try:
                    tmp.unlink()
                    removed += 1
                except OSError:
                    pass
        return removed

    def write(self, relpath: str, data: bytes) -> bool:
        """Write ``data`` to ``root/relpath`` if it differs; ``True`` when written.

        Raises:
            ValueError: the same path was already written in this run (two outputs clash).
            OSError: the file system refused.
        """
        path = self.root / relpath
        if path in self._seen:
            raise ValueError(f"{path} would be written twice in one run")
        self._seen.add(path)
        try:
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                self.unchanged.append(path)
                return False
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        self.written.append(path)
        return True
