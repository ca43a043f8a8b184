"""``gather``: read every source, validate every record, keep the good ones in the store.

Each source is read whole, then written in one transaction: a source that fails
leaves the store exactly as it was, and the other sources are still taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

import requests

from .config import Config
from .errors import RecordError, SourceError
from .markup import render_markdown
from .records import check_record
from .sources import HttpCache, read_source
from .store import Store, content_hash


@dataclass
class GatherReport:
    """What a gather did.

    Attributes:
        new, updated, unchanged, rejected: record counts.
        failed_sources: sources that could not be read at all.
        problems: one line per rejected record or failed source (``source: where: reason``).
        warnings: one line per record taken with a remark (e.g. control characters removed).
    """

    new: int = 0
    updated: int = 0
    unchanged: int = 0
    rejected: int = 0
    failed_sources: int = 0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was rejected and every source was read."""
        return not self.rejected and not self.failed_sources

    def counts(self) -> dict[str, int]:
        """The counts as a dict (for the store and JSON output)."""
        return {"new": self.new, "updated": self.updated, "unchanged": self.unchanged,
                "rejected": self.rejected, "failed_sources": self.failed_sources}


def gather(config: Config, store: Store, now: datetime,
           session: Optional[requests.Session] = None) -> GatherReport:
    """Read all ``config.sources`` into ``store``.

    Args:
        config: the configuration.
        store: the open store.
        now: aware datetime of this gather (recorded as each new review's gather time).
        session: optional HTTP session to reuse for URL sources.

    Returns:
        A :class:`GatherReport`; it never raises for bad input — bad records and
        unreadable sources are counted and described in ``problems``.
    """
    report = GatherReport()
    hashes = store.review_hashes()
    first_seen: dict[str, str] = {}
    cache = {u: HttpCache(e, n) for u, (e, n) in store.http_cache().items()}
    for src in config.sources:
        try:
            read = read_source(src, cache, session)
        except SourceError as exc:
            report.failed_sources += 1
            report.problems.append(f"{exc}; nothing taken from this source, the store is unchanged")
            continue
        with store.transaction():
            for item in read.items:
                if item.error:
                    report.rejected += 1
                    report.problems.append(f"{item.location}: {item.error}")
                    continue
                rid = item.data.get("id") if isinstance(item.data, dict) else None
                label = f" (id {rid!r})" if isinstance(rid, str) and rid else ""
                try:
                    _take(item, store, report, hashes, first_seen, now)
                except RecordError as exc:
                    report.rejected += 1
                    report.problems.append(f"{item.location}{label}: {exc}")
                except (ValueError, TypeError, RecursionError, OverflowError, UnicodeError) as exc:
                    # Input no rule foresaw must still cost only its own record.
                    report.rejected += 1
                    report.problems.append(f"{item.location}{label}: cannot take this record "
                                           f"({type(exc).__name__}: {str(exc)[:120]})")
            if read.cache:
                store.save_http_cache({u: (c.etag, c.next_url) for u, c in read.cache.items()})
    with store.transaction():
        store.record_gather(now, report.counts())
    return report


def _take(item, store: Store, report: GatherReport, hashes: dict[str, str],
          first_seen: dict[str, str], now: datetime) -> None:
    """Check one decoded record and store it; raises RecordError (or ValueError…) to reject it."""
    checked = check_record(item.data)
    review = checked.review
    if review.id in first_seen:
        raise RecordError(f"the same id is already at {first_seen[review.id]} in this gather; "
                          "this one is ignored")
    digest = content_hash(review)
    if hashes.get(review.id) == digest:
        first_seen[review.id] = item.location
        report.unchanged += 1
        return
    try:
        body_html = render_markdown(review.body, review.url)
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    with store.transaction():  # a savepoint: a failure undoes this record only
        outcome = store.upsert_review(review, body_html, now)
    first_seen[review.id] = item.location
    hashes[review.id] = digest
    for w in checked.warnings:
        report.warnings.append(f"{item.location} (id {review.id!r}): {w}")
    setattr(report, outcome, getattr(report, outcome) + 1)
