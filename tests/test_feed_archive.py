"""Archive layout (RFC 5005 §4): stable positions per feed and fixed-size pages cut from them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from newsletter.feed_archive import (ALL, archive_count, feed_states, page_bounds, page_digests, page_of,
                                     page_reviews, sync_entries)
from newsletter.markup import render_markdown
from newsletter.records import check_record
from newsletter.store import Store

from tests.conftest import review

NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)


def put(store: Store, *records) -> None:
    with store.transaction():
        for rec in records:
            r = check_record(rec).review
            store.upsert_review(r, render_markdown(r.body, r.url), NOW)


def sync(store: Store) -> None:
    sync_entries(store, {k: "tag:" + k for k in store.tags()})


def positions(store: Store, feed: str) -> list[str]:
    return [r[0] for r in store.db.execute(
        "SELECT r.id FROM feed_entries fe JOIN reviews r ON r.seq = fe.review_seq WHERE fe.feed = ? "
        "ORDER BY fe.pos", (feed,))]


@pytest.mark.parametrize("last,n,archives", [(0, 10, 0), (9, 10, 0), (19, 10, 0), (20, 10, 1), (29, 10, 1),
                                             (30, 10, 2), (130, 10, 12), (1, 1, 0), (2, 1, 1)])
def test_archive_count_leaves_n_to_2n_minus_1_for_the_subscription_document(last, n, archives):
    """Pages are sealed only while the subscription document keeps at least n positions."""
    assert archive_count(last, n) == archives
    if last >= n:
        lo, _ = page_bounds(0, archives, n)
        assert n <= last - lo + 1 <= 2 * n - 1


def test_page_of_and_page_bounds_agree():
    """Every position lies within the bounds of the page it belongs to; pages hold n positions each."""
    for pos in range(1, 131):
        page = page_of(pos, 12, 10)
        lo, hi = page_bounds(page, 12, 10)
        assert lo <= pos <= hi
    assert page_bounds(3, 12, 10) == (21, 30)
    assert page_of(121, 12, 10) == 0 and page_of(120, 12, 10) == 12


def test_first_sync_numbers_reviews_by_publication_then_later_arrivals_append(tmp_path):
    """A first build is chronological; a review arriving later goes to the end even if published earlier."""
    with Store(tmp_path / "s.db") as store:
        put(store, review(3, tags=["A"]), review(1, tags=["A"]), review(2, tags=["A", "B"]))
        sync(store)
        assert positions(store, "tag:a") == ["acme/widgets#1", "acme/widgets#2", "acme/widgets#3"]
        put(store, review(9, tags=["A"], published="2001-01-01T00:00:00Z"))
        sync(store)
        assert positions(store, "tag:a")[-1] == "acme/widgets#9"
        assert positions(store, "tag:b") == ["acme/widgets#2"]
        assert len(positions(store, ALL)) == 4


def test_a_review_leaving_a_feed_frees_its_position_but_positions_never_go_back(tmp_path):
    """Removing a tag drops the review from that feed only; the feed's highest position stays."""
    with Store(tmp_path / "s.db") as store:
        put(store, *(review(n, tags=["A"]) for n in range(1, 5)))
        sync(store)
        put(store, review(4, tags=["B"]))
        sync(store)
        assert positions(store, "tag:a") == [f"acme/widgets#{n}" for n in (1, 2, 3)]
        states = feed_states(store)
        assert states["tag:a"].last_pos == 4 and states["tag:a"].count == 3
        put(store, review(5, tags=["A"]))
        sync(store)
        assert store.db.execute("SELECT pos FROM feed_entries fe JOIN reviews r ON r.seq = fe.review_seq "
                                "WHERE feed = 'tag:a' AND r.id = 'acme/widgets#5'").fetchone()[0] == 5


def test_an_alias_map_sends_several_stored_tags_to_one_feed_once(tmp_path):
    """Two stored tags mapped to one feed give each review one position there."""
    with Store(tmp_path / "s.db") as store:
        put(store, review(1, tags=["AMD", "ROCm"]), review(2, tags=["AMD"]))
        sync_entries(store, {"amd": "tag:rocm", "rocm": "tag:rocm"})
        assert positions(store, "tag:rocm") == ["acme/widgets#1", "acme/widgets#2"]
        assert positions(store, "tag:amd") == []


def test_page_digests_change_only_for_the_page_whose_review_changed(tmp_path):
    """Updating one review changes the digest of its page and of no other page."""
    with Store(tmp_path / "s.db") as store:
        at = "2026-11-01T00:{:02d}:00Z".format
        put(store, *(review(n, tags=["A"], published=at(n)) for n in range(1, 31)))
        sync(store)
        before = page_digests(store, 10, feed_states(store))
        put(store, review(5, tags=["A"], published=at(5), summary="changed"))
        sync(store)
        after = page_digests(store, 10, feed_states(store))
        assert {k for k in after if after[k] != before[k]} == {(ALL, 1), ("tag:a", 1)}
        assert [s.review.id for s in page_reviews(store, "tag:a", 1, 2, 10)] == \
               [f"acme/widgets#{n}" for n in range(10, 0, -1)]
