"""Logging for people and for schedulers.

Everything the library logs goes to the ``newsletter`` logger tree and, from the
CLI, to stderr. Two formats:

- ``text`` (default): ``LEVEL logger: message``, for a terminal;
- ``json``: one JSON object per line (``time`` RFC 3339 UTC with milliseconds,
  ``level``, ``logger``, ``message``, plus ``exc`` with the traceback text when an
  exception is attached), for cron mail filters, journald and CI log viewers.

Chosen with ``--log-format`` or the environment variable ``NEWSLETTER_LOG_FORMAT``.
Levels: ``-v`` DEBUG, ``-q`` ERROR, otherwise WARNING for ``text`` and INFO for
``json`` (a scheduler wants the record of what each run did).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Optional, TextIO

FORMATS = ("text", "json")
ENV_VAR = "NEWSLETTER_LOG_FORMAT"


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON: ``{"time", "level", "logger", "message"[, "exc"]}``."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def setup_logging(verbose: int = 0, quiet: bool = False, fmt: Optional[str] = None,
                  stream: Optional[TextIO] = None) -> int:
    """Send the ``newsletter`` loggers to ``stream`` (default stderr) in ``fmt``.

    Args:
        verbose: ``-v`` count (≥ 1: DEBUG).
        quiet: ``-q`` (ERROR and worse only).
        fmt: ``"text"`` or ``"json"`` (default ``"text"``).
        stream: where to write (default ``sys.stderr``, looked up at each call).

    Returns:
        The level set, as a :mod:`logging` number.

    Raises:
        ValueError: unknown format.
    """
    fmt = (fmt or "text").lower()
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if verbose:
        level = logging.DEBUG
    elif quiet:
        level = logging.ERROR
    else:
        level = logging.INFO if fmt == "json" else logging.WARNING
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("newsletter")
    for old in list(root.handlers):
        if getattr(old, "_newsletter", False):
            root.removeHandler(old)
    handler._newsletter = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    return level
