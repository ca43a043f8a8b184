"""``gather``: read every source, validate every record, keep the good ones in the store.

Each source is read whole, then written in one transaction: a source that fails
leaves the store exactly as it was, and the other sources are still taken.

At scale (issue 6): a record whose raw form hashes to what the store kept from the
last time it was taken is counted unchanged without being validated again
(``reviews.record_hash``); the others are validated, hashed and rendered — on a pool
of worker processes when there are at least :data:`PARALLEL_MIN` of them and more
than one CPU — and stored in source order either way, with the same outcomes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Optional

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


PARALLEL_MIN = 400   # records to validate and render before worker processes pay off
MAX_WORKERS = 4
# Input no rule foresaw must still cost only its own record.
UNFORESEEN = (ValueError, TypeError, RecursionError, OverflowError, UnicodeError)


def record_hash(data: Any) -> str:
    """SHA-256 of a raw record as decoded (keys sorted): equal hashes mean the same input.

    Raises:
        ValueError, TypeError, RecursionError: the record cannot be serialised (it is then validated).
    """
    return hashlib.sha256(json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                                     default=str).encode()).hexdigest()


def _prepare(job: tuple[Any, Optional[str]]) -> tuple:
    """Validate, hash and (when its content changed) render one record; in a worker or inline.

    Returns:
        ``("error", reason)`` or ``("ok", checked, content_hash, body_html or None)``.
    """
    data, stored_digest = job
    try:
        checked = check_record(data)
        review = checked.review
        digest = content_hash(review)
        body_html = None
        if digest != stored_digest:
            try:
                body_html = render_markdown(review.body, review.url)
            except ValueError as exc:
                raise RecordError(str(exc)) from None
    except RecordError as exc:
        return ("error", str(exc))
    except UNFORESEEN as exc:
        return ("error", f"cannot take this record ({type(exc).__name__}: {str(exc)[:120]})")
    return ("ok", checked, digest, body_html)


def _prepared(jobs: list, parallel: bool = True) -> Iterator[tuple]:
    """:func:`_prepare` over ``jobs``, in order; on worker processes (fork) when it pays."""
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if parallel and workers > 1 and len(jobs) >= PARALLEL_MIN and \
            "fork" in multiprocessing.get_all_start_methods():
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            yield from pool.imap(_prepare, jobs, chunksize=64)
    else:
        yield from map(_prepare, jobs)


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
    raw_hashes = store.record_hashes()
    first_seen: dict[str, str] = {}
    cache = {u: HttpCache(e, n) for u, (e, n) in store.http_cache().items()}
    for src in config.sources:
        try:
            read = read_source(src, cache, session)
        except SourceError as exc:
            report.failed_sources += 1
            report.problems.append(f"{exc}; nothing taken from this source, the store is unchanged")
            continue
        # Plan: skip records known byte for byte; validate the rest (in workers when many).
        plans: list = []
        jobs: list = []
        for item in read.items:
            if item.error:
                plans.append(None)
                continue
            rid = item.data.get("id") if isinstance(item.data, dict) else None
            rid = rid if isinstance(rid, str) else None
            try:
                raw = record_hash(item.data)
            except UNFORESEEN:
                plans.append(("inline", ""))
                continue
            if rid and raw_hashes.get(rid) == raw:
                plans.append(("known", raw))
            else:
                plans.append(("job", raw))
                jobs.append((item.data, hashes.get(rid) if rid else None))
        prepared = _prepared(jobs)
        with store.transaction():
            for item, plan in zip(read.items, plans):
                if plan is None:
                    report.rejected += 1
                    report.problems.append(f"{item.location}: {item.error}")
                    continue
                rid = item.data.get("id") if isinstance(item.data, dict) else None
                label = f" (id {rid!r})" if isinstance(rid, str) and rid else ""
                kind, raw = plan
                if kind == "known":
                    if rid in first_seen:
                        report.rejected += 1
                        report.problems.append(f"{item.location}{label}: the same id is already at "
                                               f"{first_seen[rid]} in this gather; this one is ignored")
                    else:
                        first_seen[rid] = item.location
                        report.unchanged += 1
                    continue
                outcome = next(prepared) if kind == "job" else \
                    _prepare((item.data, hashes.get(rid) if isinstance(rid, str) else None))
                if outcome[0] == "error":
                    report.rejected += 1
                    report.problems.append(f"{item.location}{label}: {outcome[1]}")
                    continue
                try:
                    _take(item, outcome, raw, store, report, hashes, raw_hashes, first_seen, now)
                except RecordError as exc:
                    report.rejected += 1
                    report.problems.append(f"{item.location}{label}: {exc}")
                except UNFORESEEN as exc:
                    report.rejected += 1
                    report.problems.append(f"{item.location}{label}: cannot take this record "
                                           f"({type(exc).__name__}: {str(exc)[:120]})")
            if read.cache:
                store.save_http_cache({u: (c.etag, c.next_url) for u, c in read.cache.items()})
    with store.transaction():
        store.record_gather(now, report.counts())
    return report


def _take(item, prepared: tuple, raw: str, store: Store, report: GatherReport, hashes: dict[str, str],
          raw_hashes: dict[str, str], first_seen: dict[str, str], now: datetime) -> None:
    """Store one validated record; raises RecordError (or ValueError…) to reject it."""
    _, checked, digest, body_html = prepared
    review = checked.review
    if review.id in first_seen:
        raise RecordError(f"the same id is already at {first_seen[review.id]} in this gather; "
                          "this one is ignored")
    if hashes.get(review.id) == digest:
        first_seen[review.id] = item.location
        report.unchanged += 1
        if raw and raw_hashes.get(review.id) != raw:   # e.g. keys reordered: skip validation next time
            with store.transaction():
                store.set_record_hash(review.id, raw)
            raw_hashes[review.id] = raw
        return
    if body_html is None:   # rendered in _prepare only when the content differed from the store's
        try:
            body_html = render_markdown(review.body, review.url)
        except ValueError as exc:
            raise RecordError(str(exc)) from None
    with store.transaction():  # a savepoint: a failure undoes this record only
        outcome = store.upsert_review(review, body_html, now, digest, raw)
    first_seen[review.id] = item.location
    hashes[review.id] = digest
    raw_hashes[review.id] = raw
    for w in checked.warnings:
        report.warnings.append(f"{item.location} (id {review.id!r}): {w}")
    setattr(report, outcome, getattr(report, outcome) + 1)
