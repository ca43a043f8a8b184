"""The end-of-send summary table and the progress callback."""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from newsletter.console import send_progress, summary_table
from newsletter.deliver import DeliverySummary


def test_summary_table_lists_outcomes_and_errors():
    """The table shows sent/failed/unknown/skipped for the run and the ledger, and each error with its count."""
    s = DeliverySummary("2026-W48", counts=Counter(sent=5, failed=2, retried=1), transport="postmark",
                        ledger={"sent": 9, "failed": 2, "unknown": 1}, requests=3,
                        errors=Counter({"postmark: ErrorCode 406: inactive": 2}))
    console = Console(width=120, record=True)
    console.print(summary_table(s))
    text = console.export_text()
    for needle in ("send 2026-W48 via postmark", "sent", "unknown", "skipped", "retried", "HTTP requests",
                   "error: postmark: ErrorCode 406: inactive"):
        assert needle in text
    rows = {cells[0]: cells[1:] for line in text.splitlines() if line.startswith("│")
            for cells in [[c.strip() for c in line.strip("│").split("│")]]}
    assert rows["sent"] == ["5", "9"] and rows["unknown"] == ["0", "1"] and rows["failed"] == ["2", "2"]


def test_no_progress_bar_when_not_a_terminal():
    """Off a terminal there is no bar (the callback is None), so logs stay clean."""
    with send_progress("sending", enabled=False) as progress:
        assert progress is None
    with send_progress("sending", enabled=True) as progress:
        progress(3, 10)
