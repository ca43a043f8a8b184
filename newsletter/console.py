"""Terminal output for long sends: a rich progress bar and the end-of-send summary table.

Only the CLI uses this module. On a terminal the bar redraws in place; when
output is a pipe or file there is no bar and the table is plain text.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .deliver import DeliverySummary

LEDGER_ORDER = ("sent", "failed", "unknown", "skipped", "pending", "sending")


@contextmanager
def send_progress(label: str, enabled: Optional[bool] = None) -> Iterator[Optional[Callable[[int, int], None]]]:
    """A ``progress(done, total)`` callback drawing a bar on stderr, or ``None`` when stderr is not a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield None
        return
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def summary_table(summary: DeliverySummary) -> Table:
    """This run's outcomes, the ledger after it, and each error with how many recipients got it."""
    table = Table(title=f"send {summary.issue_id} via {summary.transport or '?'}", show_lines=False)
    table.add_column("outcome")
    table.add_column("this run", justify="right")
    table.add_column("ledger", justify="right")
    for key in LEDGER_ORDER:
        run, led = summary.counts.get(key, 0), summary.ledger.get(key, 0)
        if run or led or key in ("sent", "failed", "unknown", "skipped"):
            table.add_row(key, str(run), str(led))
    for key in ("retried", "replayed", "requeued"):
        if summary.counts.get(key):
            table.add_row(key, str(summary.counts[key]), "")
    if summary.requests:
        table.add_row("HTTP requests", str(summary.requests), "")
    for err, n in summary.errors.most_common(10):
        table.add_row(f"error: {err}", str(n), "", style="red")
    return table


def print_summary(summary: DeliverySummary) -> None:
    """Print :func:`summary_table` to stdout (plain when not a terminal)."""
    Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160).print(summary_table(summary))
