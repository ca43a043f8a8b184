"""The SQLite store: reviews, tags, issues, subscribers and the delivery ledger.

One file (``[store] path``), WAL journal, foreign keys on. The schema is a list of
numbered migrations; ``PRAGMA user_version`` records how many ran, so opening
an old store upgrades it and opening twice is safe. Times are stored as UTC
ISO 8601 text (``2026-11-23T02:15:00+00:00``) which sorts chronologically.

Every write that must stand or fall together runs in :meth:`Store.transaction`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator, Optional

from .errors import StoreError
from .models import Issue, Review, StoredReview, Subscriber, Tag
from .tags import tag_key, unique_slug

MIGRATIONS: list[str] = [
    # 1: the first schema
    """
    CREATE TABLE reviews (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        title TEXT NOT NULL,
        url TEXT NOT NULL,
        tags TEXT NOT NULL,              -- JSON list of tag keys, in the review's order
        published TEXT NOT NULL,          -- RFC 3339 as given (offset kept)
        published_utc TEXT NOT NULL,
        updated TEXT NOT NULL,
        updated_utc TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        summary TEXT NOT NULL DEFAULT '',
        repo TEXT NOT NULL DEFAULT '',
        author TEXT NOT NULL DEFAULT '',
        body_html TEXT NOT NULL DEFAULT '',
        content_hash TEXT NOT NULL,
        gathered_at TEXT NOT NULL,
        changed_at TEXT NOT NULL,
        issue_id TEXT                     -- NULL: not yet in an issue; '-' : never mailed (before email.since)
    );
    CREATE INDEX reviews_published ON reviews (published_utc DESC, id);
    CREATE INDEX reviews_issue ON reviews (issue_id);
    CREATE TABLE tags (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        slug TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL
    );
    CREATE TABLE review_tags (
        review_seq INTEGER NOT NULL REFERENCES reviews (seq) ON DELETE CASCADE,
        tag_key TEXT NOT NULL REFERENCES tags (key),
        published_utc TEXT NOT NULL,
        PRIMARY KEY (review_seq, tag_key)
    );
    CREATE INDEX review_tags_by_tag ON review_tags (tag_key, published_utc DESC);
    CREATE TABLE http_cache (
        url TEXT PRIMARY KEY,
        etag TEXT NOT NULL DEFAULT '',
        next_url TEXT
    );
    CREATE TABLE gathers (
        id INTEGER PRIMARY KEY,
        at TEXT NOT NULL,
        new INTEGER NOT NULL, updated INTEGER NOT NULL, unchanged INTEGER NOT NULL,
        rejected INTEGER NOT NULL, failed_sources INTEGER NOT NULL
    );
    CREATE TABLE issues (
        id TEXT PRIMARY KEY,
        period_start TEXT NOT NULL,
        period_end TEXT NOT NULL,
        composed_at TEXT NOT NULL,
        status TEXT NOT NULL,             -- composed | sending | sent | empty
        review_count INTEGER NOT NULL,
        sent_at TEXT
    );
    CREATE TABLE subscribers (
        email TEXT PRIMARY KEY COLLATE NOCASE,
        name TEXT NOT NULL DEFAULT '',
        tags TEXT NOT NULL DEFAULT '[]',  -- JSON list of tag keys; [] = every tag
        status TEXT NOT NULL DEFAULT 'active',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE deliveries (
        issue_id TEXT NOT NULL REFERENCES issues (id),
        email TEXT NOT NULL COLLATE NOCASE,
        status TEXT NOT NULL,             -- pending | sending | sent | failed | unknown | skipped
        provider_id TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        attempts INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (issue_id, email)
    );
    CREATE INDEX deliveries_status ON deliveries (issue_id, status);
    """,
    # 2: double opt-in requests (one confirmation email per address per hour) and the suppression log
    """
    CREATE TABLE confirmations (
        email TEXT PRIMARY KEY COLLATE NOCASE,
        name TEXT NOT NULL DEFAULT '',
        tags TEXT NOT NULL DEFAULT '[]',  -- JSON list of tag keys asked for; [] = every tag
        nonce TEXT NOT NULL,              -- '' once invalidated (the address unsubscribed since)
        requested_at TEXT NOT NULL,
        sent_at TEXT NOT NULL,            -- last confirmation email sent (rate limit)
        confirmed_at TEXT                 -- NULL while pending; a used link stays used
    );
    CREATE TABLE suppressions (
        id INTEGER PRIMARY KEY,
        email TEXT NOT NULL COLLATE NOCASE,
        status TEXT NOT NULL,             -- unsubscribed | bounced | complained
        source TEXT NOT NULL,             -- web | one-click | sendgrid | mailgun | postmark | resend | …
        event_id TEXT NOT NULL DEFAULT '',
        detail TEXT NOT NULL DEFAULT '',
        at TEXT NOT NULL
    );
    CREATE INDEX suppressions_email ON suppressions (email, at);
    CREATE UNIQUE INDEX suppressions_event ON suppressions (source, event_id) WHERE event_id != ''
    """,
    # 3: archived feeds (RFC 5005), fingerprints of written feed documents, pending WebSub pings
    """
    CREATE TABLE feed_entries (
        feed TEXT NOT NULL,               -- 'all' or 'tag:' + canonical tag key
        pos INTEGER NOT NULL,             -- 1, 2, … in the order reviews joined the feed
        review_seq INTEGER NOT NULL REFERENCES reviews (seq) ON DELETE CASCADE,
        PRIMARY KEY (feed, pos),
        UNIQUE (feed, review_seq)
    );
    CREATE TABLE feed_heads (
        feed TEXT PRIMARY KEY,
        last_pos INTEGER NOT NULL         -- highest position ever given; never goes down
    );
    CREATE TABLE feed_documents (
        path TEXT PRIMARY KEY,            -- under feeds.dir, without extension
        fingerprint TEXT NOT NULL
    );
    CREATE TABLE websub_pending (
        url TEXT PRIMARY KEY,             -- a changed feed URL not yet accepted by the hub
        queued_at TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT NOT NULL DEFAULT ''
    );
    """,
    # 4: which transport call a ledger row went out in, and when (replays with idempotency keys)
    """
    ALTER TABLE deliveries ADD COLUMN batch TEXT NOT NULL DEFAULT '';
    ALTER TABLE deliveries ADD COLUMN batch_at TEXT
    """,
    # 5: hash of the raw record a review was taken from (gather skips validating an unchanged record)
    """
    ALTER TABLE reviews ADD COLUMN record_hash TEXT NOT NULL DEFAULT ''
    """,
]

REVIEW_COLUMNS = ("seq, id, title, url, tags, published, updated, body, summary, repo, author, "
                  "body_html, issue_id")


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds")


def _dt(text: Optional[str]) -> Optional[datetime]:
    return datetime.fromisoformat(text) if text else None


def content_hash(review: Review) -> str:
    """SHA-256 of a review's content; equal hashes mean nothing a reader sees changed."""
    doc = {
        "id": review.id, "title": review.title, "url": review.url, "tags": list(review.tags),
        "published": review.published.isoformat(), "updated": review.updated.isoformat(),
        "body": review.body, "summary": review.summary, "repo": review.repo,
        "author": review.author,
    }
    return hashlib.sha256(json.dumps(doc, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


class Store:
    """A connection to the store file.

    Args:
        path: the SQLite file; its directory is created if missing.
        must_exist: refuse to create a new store (read-only commands).

    Raises:
        StoreError: the file cannot be opened, is not a newsletter store, or was
            written by a newer version (schema newer than this code knows).
    """

    def __init__(self, path: Path | str, must_exist: bool = False) -> None:
        self.path = Path(path)
        if must_exist and not self.path.exists():
            raise StoreError(f"{self.path}: no store yet", hint="run `newsletter gather` first")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot open store: {exc}") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open store: {exc.strerror}") from None
        self._tags: Optional[dict[str, Tag]] = None

    # --- plumbing -------------------------------------------------------------

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StoreError(f"{self.path}: store schema {version} is newer than this newsletter "
                             f"knows ({len(MIGRATIONS)})", hint="upgrade newsletter")
        for n in range(version, len(MIGRATIONS)):
            with self.transaction():
                for statement in MIGRATIONS[n].split(";\n"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {n + 1}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; rolls back on any exception. A nested call is a
        ``SAVEPOINT``: its failure rolls back only what it did."""
        if self.db.in_transaction:
            # Nested: a savepoint, so a failure undoes only the inner part.
            self._depth = getattr(self, "_depth", 0) + 1
            name = f"sp{self._depth}"
            self.db.execute(f"SAVEPOINT {name}")
            try:
                yield self.db
            except BaseException:
                self.db.execute(f"ROLLBACK TO {name}")
                self.db.execute(f"RELEASE {name}")
                self._tags = None
                raise
            finally:
                self._depth -= 1
            self.db.execute(f"RELEASE {name}")
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            self._tags = None
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- tags -----------------------------------------------------------------

    def tags(self) -> dict[str, Tag]:
        """Every tag ever seen, by key."""
        if self._tags is None:
            self._tags = {r["key"]: Tag(r["key"], r["name"], r["slug"])
                          for r in self.db.execute("SELECT key, name, slug FROM tags")}
        return self._tags

    def ensure_tag(self, name: str, now: datetime) -> Tag:
        """The tag for a display name, created (with a new unique slug) on first sight."""
        key = tag_key(name)
        tags = self.tags()
        if key in tags:
            return tags[key]
        slug = unique_slug(key, {t.slug for t in tags.values()})
        self.db.execute("INSERT INTO tags (key, name, slug, created_at) VALUES (?, ?, ?, ?)",
                        (key, name, slug, _iso(now)))
        tags[key] = Tag(key, name, slug)
        return tags[key]

    def tag_counts(self) -> list[tuple[Tag, int, Optional[datetime]]]:
        """Each tag with its number of reviews and newest ``published``, by name."""
        rows = self.db.execute(
            "SELECT t.key, count(rt.review_seq) AS n, max(rt.published_utc) AS newest "
            "FROM tags t LEFT JOIN review_tags rt ON rt.tag_key = t.key GROUP BY t.key").fetchall()
        tags = self.tags()
        out = [(tags[r["key"]], r["n"], _dt(r["newest"])) for r in rows]
        out.sort(key=lambda x: x[0].name.casefold())
        return out

    # --- reviews --------------------------------------------------------------

    def review_hashes(self) -> dict[str, str]:
        """Review id → :func:`content_hash` of what is stored."""
        return {r[0]: r[1] for r in self.db.execute("SELECT id, content_hash FROM reviews")}

    def record_hashes(self) -> dict[str, str]:
        """Review id → hash of the raw record it was last taken from (``""`` when not kept)."""
        return {r[0]: r[1] for r in self.db.execute("SELECT id, record_hash FROM reviews")}

    def set_record_hash(self, review_id: str, record_hash: str) -> None:
        """Remember the raw-record hash of a stored review whose content did not change."""
        self.db.execute("UPDATE reviews SET record_hash = ? WHERE id = ?", (record_hash, review_id))

    def upsert_review(self, review: Review, body_html: str, now: datetime,
                      digest: Optional[str] = None, record_hash: str = "") -> str:
        """Insert or update one review.

        Args:
            review, body_html: the review and its rendered body.
            now: aware time of this gather.
            digest: its :func:`content_hash` when the caller has it already.
            record_hash: hash of the raw record (lets the next gather skip validation), or ``""``.

        Returns:
            ``"new"``, ``"updated"`` (same id, changed content) or ``"unchanged"``.
        """
        digest = digest or content_hash(review)
        row = self.db.execute("SELECT seq, content_hash FROM reviews WHERE id = ?",
                              (review.id,)).fetchone()
        if row and row["content_hash"] == digest:
            return "unchanged"
        tags = [self.ensure_tag(name, now) for name in review.tags]
        values = (review.title, review.url, json.dumps([t.key for t in tags], ensure_ascii=False),
                  review.published.isoformat(), _iso(review.published),
                  review.updated.isoformat(), _iso(review.updated),
                  review.body, review.summary, review.repo, review.author, body_html, digest)
        if row:
            seq = row["seq"]
            self.db.execute(
                "UPDATE reviews SET title=?, url=?, tags=?, published=?, published_utc=?, updated=?, "
                "updated_utc=?, body=?, summary=?, repo=?, author=?, body_html=?, content_hash=?, "
                "changed_at=?, record_hash=? WHERE seq=?", values + (_iso(now), record_hash, seq))
            self.db.execute("DELETE FROM review_tags WHERE review_seq = ?", (seq,))
            outcome = "updated"
        else:
            cur = self.db.execute(
                "INSERT INTO reviews (id, title, url, tags, published, published_utc, updated, "
                "updated_utc, body, summary, repo, author, body_html, content_hash, gathered_at, "
                "changed_at, record_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (review.id,) + values + (_iso(now), _iso(now), record_hash))
            seq = cur.lastrowid
            outcome = "new"
        self.db.executemany(
            "INSERT INTO review_tags (review_seq, tag_key, published_utc) VALUES (?, ?, ?)",
            [(seq, t.key, _iso(review.published)) for t in tags])
        return outcome

    def _stored(self, rows: Iterable[sqlite3.Row]) -> list[StoredReview]:
        tags = self.tags()
        out = []
        for r in rows:
            keys = json.loads(r["tags"])
            review = Review(
                id=r["id"], title=r["title"], url=r["url"],
                tags=tuple(tags[k].name for k in keys),
                published=datetime.fromisoformat(r["published"]),
                updated=datetime.fromisoformat(r["updated"]),
                body=r["body"], summary=r["summary"], repo=r["repo"], author=r["author"])
            out.append(StoredReview(review, tuple(tags[k] for k in keys), r["body_html"],
                                    r["issue_id"]))
        return out

    def review_count(self) -> int:
        """How many reviews are stored."""
        return self.db.execute("SELECT count(*) FROM reviews").fetchone()[0]

    def latest_reviews(self, limit: int, tag: Optional[str] = None) -> list[StoredReview]:
        """The newest reviews by ``published`` (then id), all or of one tag key."""
        if tag is None:
            rows = self.db.execute(
                f"SELECT {REVIEW_COLUMNS} FROM reviews ORDER BY published_utc DESC, id LIMIT ?",
                (limit,))
        else:
            rows = self.db.execute(
                f"SELECT {', '.join('r.' + c.strip() for c in REVIEW_COLUMNS.split(','))} "
                "FROM review_tags rt JOIN reviews r ON r.seq = rt.review_seq "
                "WHERE rt.tag_key = ? ORDER BY rt.published_utc DESC, r.id LIMIT ?", (tag, limit))
        return self._stored(rows)

    def reviews_by_seq(self, seqs: list[int]) -> list[StoredReview]:
        """The reviews with these ``seq`` numbers, in the order given (unknown ones left out)."""
        found: dict[int, sqlite3.Row] = {}
        for i in range(0, len(seqs), 500):
            chunk = seqs[i:i + 500]
            for row in self.db.execute(f"SELECT {REVIEW_COLUMNS} FROM reviews WHERE seq IN "
                                       f"({','.join('?' * len(chunk))})", chunk):
                found[row["seq"]] = row
        return self._stored(found[s] for s in seqs if s in found)

    def reviews_in_issue(self, issue_id: str) -> list[StoredReview]:
        """The reviews of one issue, newest first."""
        return self._stored(self.db.execute(
            f"SELECT {REVIEW_COLUMNS} FROM reviews WHERE issue_id = ? "
            "ORDER BY published_utc DESC, id", (issue_id,)))

    def pending_reviews(self, gathered_before: datetime) -> list[StoredReview]:
        """Reviews in no issue yet, gathered before the given time, newest first."""
        return self._stored(self.db.execute(
            f"SELECT {REVIEW_COLUMNS} FROM reviews WHERE issue_id IS NULL AND gathered_at <= ? "
            "ORDER BY published_utc DESC, id", (_iso(gathered_before),)))

    # --- gathers and HTTP cache ----------------------------------------------

    def http_cache(self) -> dict[str, tuple[str, Optional[str]]]:
        """Page URL → (ETag, next URL) from the last successful read."""
        return {r["url"]: (r["etag"], r["next_url"])
                for r in self.db.execute("SELECT url, etag, next_url FROM http_cache")}

    def save_http_cache(self, entries: dict[str, tuple[str, Optional[str]]]) -> None:
        """Remember validators for the next run."""
        self.db.executemany(
            "INSERT INTO http_cache (url, etag, next_url) VALUES (?, ?, ?) "
            "ON CONFLICT (url) DO UPDATE SET etag = excluded.etag, next_url = excluded.next_url",
            [(u, e, n) for u, (e, n) in entries.items()])

    def record_gather(self, at: datetime, counts: dict[str, int]) -> None:
        """Log one gather's counts (``new``, ``updated``, ``unchanged``, ``rejected``, ``failed_sources``)."""
        self.db.execute(
            "INSERT INTO gathers (at, new, updated, unchanged, rejected, failed_sources) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (_iso(at), counts.get("new", 0), counts.get("updated", 0), counts.get("unchanged", 0),
             counts.get("rejected", 0), counts.get("failed_sources", 0)))

    def last_gather(self) -> Optional[dict]:
        """The newest gather's row as a dict, or ``None``."""
        row = self.db.execute("SELECT * FROM gathers ORDER BY id DESC LIMIT 1").fetchone()
        return dict(row) if row else None

    # --- issues -----------------------------------------------------------------

    def _issue(self, r: sqlite3.Row) -> Issue:
        return Issue(r["id"], datetime.fromisoformat(r["period_start"]),
                     datetime.fromisoformat(r["period_end"]), _dt(r["composed_at"]),
                     r["review_count"], r["status"])

    def get_issue(self, issue_id: str) -> Optional[Issue]:
        """One issue, or ``None``."""
        row = self.db.execute("SELECT * FROM issues WHERE id = ?", (issue_id,)).fetchone()
        return self._issue(row) if row else None

    def issues(self) -> list[Issue]:
        """Every issue, newest first."""
        return [self._issue(r) for r in
                self.db.execute("SELECT * FROM issues ORDER BY period_start DESC")]

    def create_issue(self, issue: Issue, review_ids: list[str], excluded_ids: list[str]) -> None:
        """Record a composed issue and mark its reviews (and those excluded by ``since``) as taken."""
        with self.transaction():
            self.db.execute(
                "INSERT INTO issues (id, period_start, period_end, composed_at, status, review_count) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (issue.id, issue.start.isoformat(), issue.end.isoformat(),
                 _iso(issue.composed_at), issue.status, issue.review_count))
            self.db.executemany("UPDATE reviews SET issue_id = ? WHERE id = ? AND issue_id IS NULL",
                                [(issue.id, rid) for rid in review_ids])
            self.db.executemany("UPDATE reviews SET issue_id = '-' WHERE id = ? AND issue_id IS NULL",
                                [(rid,) for rid in excluded_ids])

    def set_issue_status(self, issue_id: str, status: str, now: Optional[datetime] = None) -> None:
        """Move an issue to ``sending`` or ``sent`` (``sent_at`` set with ``now``)."""
        self.db.execute("UPDATE issues SET status = ?, sent_at = COALESCE(?, sent_at) WHERE id = ?",
                        (status, _iso(now) if now else None, issue_id))

    # --- subscribers -------------------------------------------------------------

    def upsert_subscriber(self, sub: Subscriber, now: datetime, reactivate: bool = False) -> str:
        """Add or change a subscriber.

        A suppressed address (unsubscribed, bounced, complained) stays suppressed
        unless ``reactivate`` is true (an explicit ``subscribers add``).

        Returns:
            ``"added"``, ``"updated"``, ``"unchanged"`` or ``"suppressed"``.
        """
        row = self.db.execute("SELECT * FROM subscribers WHERE email = ?", (sub.email,)).fetchone()
        tags = json.dumps(list(sub.tags), ensure_ascii=False)
        if row is None:
            self.db.execute(
                "INSERT INTO subscribers (email, name, tags, status, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)", (sub.email, sub.name, tags, sub.status, _iso(now), _iso(now)))
            return "added"
        if row["status"] != "active" and not reactivate:
            return "suppressed"
        if (row["name"], row["tags"], row["status"]) == (sub.name, tags, sub.status):
            return "unchanged"
        self.db.execute("UPDATE subscribers SET name = ?, tags = ?, status = ?, updated_at = ? "
                        "WHERE email = ?", (sub.name, tags, sub.status, _iso(now), sub.email))
        return "updated"

    def set_subscriber_status(self, email: str, status: str, now: datetime) -> bool:
        """Change a subscriber's status; ``False`` if the address is unknown."""
        cur = self.db.execute("UPDATE subscribers SET status = ?, updated_at = ? WHERE email = ?",
                              (status, _iso(now), email))
        return cur.rowcount > 0

    def subscribers(self, status: Optional[str] = None) -> list[Subscriber]:
        """Subscribers ordered by address, all or of one status."""
        sql = "SELECT * FROM subscribers"
        args: tuple = ()
        if status:
            sql += " WHERE status = ?"
            args = (status,)
        return [Subscriber(r["email"], r["name"], tuple(json.loads(r["tags"])), r["status"])
                for r in self.db.execute(sql + " ORDER BY email", args)]

    def subscriber_counts(self) -> dict[str, int]:
        """Subscriber count per status."""
        return {r[0]: r[1] for r in
                self.db.execute("SELECT status, count(*) FROM subscribers GROUP BY status")}

    # --- delivery ledger ----------------------------------------------------------

    def enqueue(self, issue_id: str, now: datetime) -> int:
        """Add a ``pending`` ledger row for every active subscriber not yet in the issue's ledger.

        Returns:
            how many rows were added.
        """
        cur = self.db.execute(
            "INSERT OR IGNORE INTO deliveries (issue_id, email, status, updated_at) "
            "SELECT ?, email, 'pending', ? FROM subscribers WHERE status = 'active'",
            (issue_id, _iso(now)))
        return cur.rowcount

    def deliveries(self, issue_id: str, statuses: tuple[str, ...], after: str = "",
                   limit: int = 500, batch: Optional[str] = None) -> list[tuple[Subscriber, sqlite3.Row]]:
        """A batch of ledger rows in the given statuses, ordered by address, after ``after``
        (and only those of transport call ``batch`` when given).

        Returns:
            (subscriber, ledger row) pairs; a subscriber no longer active comes with
            status other than ``active`` so the caller can skip it.
        """
        marks = ",".join("?" * len(statuses))
        rows = self.db.execute(
            f"SELECT d.*, s.name, s.tags AS stags, s.status AS sstatus FROM deliveries d "
            f"LEFT JOIN subscribers s ON s.email = d.email "
            f"WHERE d.issue_id = ? AND d.status IN ({marks}) AND d.email > ? "
            + ("AND d.batch = ? " if batch is not None else "")
            + "ORDER BY d.email LIMIT ?",
            (issue_id, *statuses, after, *((batch,) if batch is not None else ()), limit)).fetchall()
        return [(Subscriber(r["email"], r["name"] or "", tuple(json.loads(r["stags"] or "[]")),
                            r["sstatus"] or "unsubscribed"), r) for r in rows]

    def mark(self, issue_id: str, updates: Iterable[tuple[str, str, str, str]], now: datetime) -> None:
        """Set ledger rows: (email, status, provider_id, error) each; ``attempts`` grows on ``sending``."""
        self.db.executemany(
            "UPDATE deliveries SET status = ?, provider_id = CASE WHEN ? = '' THEN provider_id ELSE ? END, "
            "error = ?, attempts = attempts + (? = 'sending'), updated_at = ? "
            "WHERE issue_id = ? AND email = ?",
            [(st, pid, pid, err, st, _iso(now), issue_id, email) for email, st, pid, err in updates])

    def delivery_counts(self, issue_id: str) -> dict[str, int]:
        """Ledger rows per status for one issue."""
        return {r[0]: r[1] for r in self.db.execute(
            "SELECT status, count(*) FROM deliveries WHERE issue_id = ? GROUP BY status", (issue_id,))}

    def delivery_problems(self, issue_id: str, limit: int = 20) -> list[sqlite3.Row]:
        """Failed and unknown ledger rows of one issue, with their errors."""
        return self.db.execute(
            "SELECT email, status, error FROM deliveries WHERE issue_id = ? "
            "AND status IN ('failed', 'unknown') ORDER BY email LIMIT ?", (issue_id, limit)).fetchall()

    # --- opt-in, preferences, suppression (web app and webhooks) -------------------

    def get_subscriber(self, email: str) -> Optional[Subscriber]:
        """One subscriber by address (case-insensitive), or ``None``."""
        r = self.db.execute("SELECT * FROM subscribers WHERE email = ?", (email,)).fetchone()
        return Subscriber(r["email"], r["name"], tuple(json.loads(r["tags"])), r["status"]) if r else None

    def request_confirmation(self, email: str, name: str, tags: tuple[str, ...], now: datetime,
                             min_interval_seconds: float = 3600) -> Optional[tuple[str, Optional[str]]]:
        """Record a subscribe request and claim the right to send one confirmation email.

        At most one confirmation per address per ``min_interval_seconds`` (default one hour):
        a request inside that window changes nothing and returns ``None``. Otherwise the
        request's name and tags are kept, the pending nonce is reused (or a new one made
        if the last one was used or invalidated) and ``sent_at`` is set to ``now``.

        Returns:
            ``(nonce, previous sent_at or None)`` (pass the latter to
            :meth:`undo_confirmation_send` if the email could not be sent), or ``None``.
        """
        import secrets
        from datetime import timedelta

        with self.transaction():
            row = self.db.execute("SELECT * FROM confirmations WHERE email = ?", (email,)).fetchone()
            if row and datetime.fromisoformat(row["sent_at"]) > now - timedelta(seconds=min_interval_seconds):
                return None
            tags_json = json.dumps(list(tags), ensure_ascii=False)
            if row is None:
                nonce = secrets.token_urlsafe(12)
                self.db.execute(
                    "INSERT INTO confirmations (email, name, tags, nonce, requested_at, sent_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (email, name, tags_json, nonce, _iso(now), _iso(now)))
                return nonce, None
            nonce = row["nonce"] if row["nonce"] and not row["confirmed_at"] else secrets.token_urlsafe(12)
            self.db.execute(
                "UPDATE confirmations SET name = ?, tags = ?, nonce = ?, requested_at = ?, sent_at = ?, "
                "confirmed_at = NULL WHERE email = ?", (name, tags_json, nonce, _iso(now), _iso(now), email))
            return nonce, row["sent_at"]

    def undo_confirmation_send(self, email: str, previous_sent_at: Optional[str]) -> None:
        """Give back the hourly allowance claimed by :meth:`request_confirmation` after a failed send."""
        if previous_sent_at is None:
            self.db.execute("DELETE FROM confirmations WHERE email = ? AND confirmed_at IS NULL", (email,))
        else:
            self.db.execute("UPDATE confirmations SET sent_at = ? WHERE email = ?", (previous_sent_at, email))

    def confirm_subscription(self, email: str, nonce: str, issued: datetime, now: datetime) -> str:
        """Activate a subscription from a confirmation link (double opt-in).

        Returns:
            ``"confirmed"`` (now active with the requested tags); ``"already"`` (this link
            was used before: nothing changes, so a replay is harmless); ``"invalid"``
            (no such request, or superseded or invalidated by a later unsubscribe);
            ``"unsubscribed_since"`` (the address unsubscribed after the link was made);
            ``"suppressed"`` (bounced or complained: never mailed again).
        """
        with self.transaction():
            row = self.db.execute("SELECT * FROM confirmations WHERE email = ?", (email,)).fetchone()
            if row is None or not row["nonce"] or row["nonce"] != nonce:
                return "invalid"
            if row["confirmed_at"]:
                return "already"
            sub = self.db.execute("SELECT status, updated_at FROM subscribers WHERE email = ?",
                                  (email,)).fetchone()
            if sub and sub["status"] in ("bounced", "complained"):
                return "suppressed"
            if sub and sub["status"] == "unsubscribed" and datetime.fromisoformat(sub["updated_at"]) > issued:
                return "unsubscribed_since"
            self.upsert_subscriber(Subscriber(email, row["name"], tuple(json.loads(row["tags"])), "active"),
                                   now, reactivate=True)
            self.db.execute("UPDATE confirmations SET confirmed_at = ? WHERE email = ?", (_iso(now), email))
            return "confirmed"

    def update_preferences(self, email: str, tags: tuple[str, ...], by_email: bool, now: datetime) -> str:
        """Change followed tags and whether the email comes (``by_email=False``: feeds only = unsubscribed).

        Only turns email off: an address that is not active keeps its status (coming back
        to email goes through double opt-in). An unknown address is recorded as unsubscribed.

        Returns:
            the subscriber's status afterwards.
        """
        with self.transaction():
            sub = self.get_subscriber(email)
            if sub is None or sub.status != "active":
                status = sub.status if sub else "unsubscribed"  # never re-activated here (double opt-in)
            else:
                status = "active" if by_email else "unsubscribed"
            self.upsert_subscriber(Subscriber(sub.email if sub else email, sub.name if sub else "", tags, status),
                                   now, reactivate=True)
            if status != "active":
                self._suppressed(email, status, "preferences", "", "", now)
            return status

    def suppress(self, email: str, status: str, now: datetime, source: str, event_id: str = "",
                 detail: str = "") -> str:
        """Stop all email to an address: ``unsubscribed``, ``bounced`` or ``complained``.

        Strength order complained > bounced > unsubscribed: a weaker status never
        replaces a stronger one. An unknown address is added with the status so a later
        import cannot activate it. A pending confirmation link stops working. An event
        seen before (same ``source`` and non-empty ``event_id``) changes nothing.

        Returns:
            ``"suppressed"`` (status changed), ``"unchanged"`` or ``"duplicate"``.
        """
        strength = {"active": 0, "unsubscribed": 1, "bounced": 2, "complained": 3}
        if status not in strength or status == "active":
            raise ValueError(f"not a suppression status: {status!r}")
        with self.transaction():
            if event_id and self.db.execute("SELECT 1 FROM suppressions WHERE source = ? AND event_id = ?",
                                            (source, event_id)).fetchone():
                return "duplicate"
            self._suppressed(email, status, source, event_id, detail, now)
            sub = self.get_subscriber(email)
            if sub is None:
                self.db.execute(
                    "INSERT INTO subscribers (email, name, tags, status, created_at, updated_at) "
                    "VALUES (?, '', '[]', ?, ?, ?)", (email, status, _iso(now), _iso(now)))
                return "suppressed"
            if strength[status] <= strength.get(sub.status, 0):
                return "unchanged"
            self.set_subscriber_status(email, status, now)
            return "suppressed"

    def _suppressed(self, email: str, status: str, source: str, event_id: str, detail: str,
                    now: datetime) -> None:
        self.db.execute("UPDATE confirmations SET nonce = '' WHERE email = ? AND confirmed_at IS NULL",
                        (email,))
        self.db.execute("INSERT INTO suppressions (email, status, source, event_id, detail, at) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (email, status, source, event_id, detail[:500], _iso(now)))

    def suppression_log(self, email: Optional[str] = None) -> list[dict]:
        """Suppression events, oldest first, all or for one address."""
        sql, args = "SELECT * FROM suppressions", ()
        if email:
            sql, args = sql + " WHERE email = ?", (email,)
        return [dict(r) for r in self.db.execute(sql + " ORDER BY id", args)]

    def mark_sending(self, issue_id: str, emails: Iterable[str], batch: str, now: datetime) -> None:
        """Mark rows ``sending`` in transport call ``batch`` (time ``now``); ``attempts`` grows by one."""
        self.db.executemany(
            "UPDATE deliveries SET status = 'sending', error = '', attempts = attempts + 1, batch = ?, "
            "batch_at = ?, updated_at = ? WHERE issue_id = ? AND email = ?",
            [(batch, _iso(now), _iso(now), issue_id, e) for e in emails])

    def requeue(self, issue_id: str, statuses: tuple[str, ...], now: datetime, note: str = "") -> int:
        """Put every row in ``statuses`` back to ``pending`` (``--retry-failed``, unknown policy ``resend``).

        Returns:
            how many rows moved.
        """
        marks = ",".join("?" * len(statuses))
        cur = self.db.execute(
            f"UPDATE deliveries SET status = 'pending', batch = '', error = ?, updated_at = ? "
            f"WHERE issue_id = ? AND status IN ({marks})", (note, _iso(now), issue_id, *statuses))
        return cur.rowcount

    def unknown_batches(self, issue_id: str) -> list[tuple[str, Optional[datetime], int]]:
        """Transport calls with rows of unknown fate: (batch, when it was sent, rows), oldest first."""
        return [(r[0], _dt(r[1]), r[2]) for r in self.db.execute(
            "SELECT batch, min(batch_at), count(*) FROM deliveries WHERE issue_id = ? AND status = 'unknown' "
            "AND batch != '' GROUP BY batch ORDER BY min(batch_at), batch", (issue_id,))]
