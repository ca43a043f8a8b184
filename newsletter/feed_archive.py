"""Archived feeds (RFC 5005 section 4): which review sits on which page of which feed.

Every feed — ``all`` and each canonical tag — is one ordered list of
positions 1, 2, 3, … kept in the store (``feed_entries``). A review gets the
next position of a feed when it first belongs to it; reviews that join in the
same run are numbered by (``published``, ``id``), so a first build is
chronological. Positions are never renumbered or reused, so pages cut from
them never shift when new reviews arrive — even one published long ago.

Layout, with ``n = feeds.max_entries`` and ``P`` the highest position given:

- archive page ``k`` (1 = oldest) holds positions ``(k-1)·n+1 … k·n``; there are
  ``A = max(0, P // n - 1)`` of them, each written once it is full;
- the subscription document holds the positions after ``A·n``: between ``n``
  and ``2n-1`` entries once the feed has ``n`` reviews (all of them before).
  Keeping at least ``n`` entries there means a new subscriber never sees a
  nearly empty feed right after a page was sealed.

A review that leaves a feed (an update removed the tag) gives up its position:
the one page holding it is rewritten without it, nothing else moves.
Each document's content is summarised by a fingerprint (positions, review
``seq`` and ``content_hash``) so a run renders only documents that changed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from .models import StoredReview
from .store import Store

ALL = "all"


def archive_count(last_pos: int, per_page: int) -> int:
    """Full archive pages of a feed whose highest position is ``last_pos``.

    >>> archive_count(19, 10), archive_count(20, 10), archive_count(130, 10)
    (0, 1, 12)
    """
    return max(0, last_pos // per_page - 1)


def page_of(pos: int, archives: int, per_page: int) -> int:
    """The page of a position: ``k ≥ 1`` for archive page ``k``, ``0`` for the subscription document."""
    page = (pos - 1) // per_page + 1
    return page if page <= archives else 0


def page_bounds(page: int, archives: int, per_page: int) -> tuple[int, int]:
    """First and last position (inclusive) a page can hold; the subscription document is open-ended."""
    if page == 0:
        return archives * per_page + 1, 2 ** 62
    return (page - 1) * per_page + 1, page * per_page


@dataclass(frozen=True)
class FeedState:
    """One feed's size: highest position ever given, entries now, newest ``published`` (UTC)."""

    last_pos: int = 0
    count: int = 0
    newest: Optional[datetime] = None


def sync_entries(store: Store, tag_feeds: dict[str, str]) -> None:
    """Bring the stored positions up to date with the reviews and tags in the store.

    Args:
        store: the store (one transaction).
        tag_feeds: every stored tag key → the feed id its reviews belong to
            (``"tag:" + canonical key``, see :meth:`TagRegistry.feed_keys`).

    New members get the next positions in (``published``, ``id``) order; reviews
    no longer carrying a tag of a feed lose their position there. The ``all``
    feed holds every review. Cost: one pass over ``review_tags`` in SQLite.
    """
    db = store.db
    with store.transaction():
        db.execute("CREATE TEMP TABLE IF NOT EXISTS tag_feed (key TEXT PRIMARY KEY, feed TEXT NOT NULL)")
        db.execute("DELETE FROM tag_feed")
        db.executemany("INSERT INTO tag_feed (key, feed) VALUES (?, ?)", sorted(tag_feeds.items()))
        db.execute(
            "DELETE FROM feed_entries WHERE feed <> ? AND NOT EXISTS ("
            " SELECT 1 FROM review_tags rt JOIN tag_feed m ON m.key = rt.tag_key"
            " WHERE rt.review_seq = feed_entries.review_seq AND m.feed = feed_entries.feed)", (ALL,))
        db.execute(
            "INSERT INTO feed_entries (feed, pos, review_seq) "
            "SELECT feed, coalesce((SELECT last_pos FROM feed_heads h WHERE h.feed = mem.feed), 0)"
            "  + row_number() OVER (PARTITION BY feed ORDER BY published_utc, id), seq "
            "FROM (SELECT DISTINCT m.feed AS feed, r.seq AS seq, r.published_utc AS published_utc, r.id AS id"
            "      FROM review_tags rt JOIN tag_feed m ON m.key = rt.tag_key"
            "      JOIN reviews r ON r.seq = rt.review_seq"
            "      UNION ALL SELECT ?, seq, published_utc, id FROM reviews) AS mem "
            "WHERE NOT EXISTS (SELECT 1 FROM feed_entries fe WHERE fe.feed = mem.feed AND fe.review_seq = mem.seq)",
            (ALL,))
        db.execute(
            "INSERT INTO feed_heads (feed, last_pos) SELECT feed, max(pos) FROM feed_entries WHERE true "
            "GROUP BY feed ON CONFLICT (feed) DO UPDATE SET last_pos = max(last_pos, excluded.last_pos)")


def feed_states(store: Store) -> dict[str, FeedState]:
    """Every feed's :class:`FeedState`, by feed id (feeds never given a position are absent)."""
    heads = {r[0]: r[1] for r in store.db.execute("SELECT feed, last_pos FROM feed_heads")}
    rows = store.db.execute(
        "SELECT fe.feed, count(*), max(r.published_utc) FROM feed_entries fe "
        "JOIN reviews r ON r.seq = fe.review_seq GROUP BY fe.feed").fetchall()
    out = {feed: FeedState(last) for feed, last in heads.items()}
    for feed, count, newest in rows:
        out[feed] = FeedState(heads.get(feed, 0), count, datetime.fromisoformat(newest) if newest else None)
    return out


def page_digests(store: Store, per_page: int, states: dict[str, FeedState]) -> dict[tuple[str, int], str]:
    """A digest of each page's entries (positions, review seq, content hash), by (feed id, page).

    Pages without entries are absent. One ordered scan of ``feed_entries``.
    """
    digests: dict[tuple[str, int], "hashlib._Hash"] = {}
    archives = {f: archive_count(s.last_pos, per_page) for f, s in states.items()}
    for feed, pos, seq, chash in store.db.execute(
            "SELECT fe.feed, fe.pos, fe.review_seq, r.content_hash FROM feed_entries fe "
            "JOIN reviews r ON r.seq = fe.review_seq ORDER BY fe.feed, fe.pos"):
        key = (feed, page_of(pos, archives.get(feed, 0), per_page))
        h = digests.get(key)
        if h is None:
            h = digests[key] = hashlib.sha256()
        h.update(f"{pos}:{seq}:{chash};".encode())
    return {k: h.hexdigest() for k, h in digests.items()}


def page_reviews(store: Store, feed: str, page: int, archives: int, per_page: int) -> list[StoredReview]:
    """The reviews on one page, newest position first."""
    lo, hi = page_bounds(page, archives, per_page)
    seqs = [r[0] for r in store.db.execute(
        "SELECT review_seq FROM feed_entries WHERE feed = ? AND pos BETWEEN ? AND ? ORDER BY pos DESC",
        (feed, lo, hi))]
    return store.reviews_by_seq(seqs)


def document_fingerprints(store: Store) -> dict[str, str]:
    """Fingerprint of every feed document written so far, by path without extension."""
    return {r[0]: r[1] for r in store.db.execute("SELECT path, fingerprint FROM feed_documents")}


def save_fingerprints(store: Store, fingerprints: dict[str, str]) -> None:
    """Remember the fingerprints of documents just written."""
    with store.transaction():
        store.db.executemany(
            "INSERT INTO feed_documents (path, fingerprint) VALUES (?, ?) "
            "ON CONFLICT (path) DO UPDATE SET fingerprint = excluded.fingerprint",
            sorted(fingerprints.items()))
