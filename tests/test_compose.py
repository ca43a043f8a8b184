"""Issues: ISO-week periods in the site's time zone, due times, DST, first run and reruns."""

from datetime import datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from freezegun import freeze_time

from newsletter.compose import compose, due_issue, issue_id_for, period
from newsletter.config import SendAt, load_config
from newsletter.gather import gather
from newsletter.store import Store
from tests.conftest import make_config, review, write_jsonl

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")
MON_9 = SendAt(0, time(9, 0))


def utc(*args):
    return datetime(*args, tzinfo=timezone.utc)


@pytest.mark.parametrize("now, expected", [
    # Monday 2026-11-30 09:00 Shanghai = 01:00 UTC: week 48 becomes due exactly then.
    (utc(2026, 11, 30, 1, 0), ("2026-W48", datetime(2026, 11, 30, 9, 0, tzinfo=SHANGHAI))),
    (utc(2026, 11, 30, 0, 59), ("2026-W47", datetime(2026, 11, 23, 9, 0, tzinfo=SHANGHAI))),
    # Sunday 23:30 UTC is already Monday 07:30 in Shanghai: not yet 09:00.
    (utc(2026, 11, 29, 23, 30), ("2026-W47", datetime(2026, 11, 23, 9, 0, tzinfo=SHANGHAI))),
    # ISO year boundary: 2027-01-04 is Monday of 2027-W01, so it sends 2026-W53.
    (utc(2027, 1, 4, 2, 0), ("2026-W53", datetime(2027, 1, 4, 9, 0, tzinfo=SHANGHAI))),
])
def test_due_issue_at_week_boundaries(now, expected):
    """The issue of a week is due at send_at (local) on the Monday after it, not a minute before."""
    issue_id, due = due_issue(now, MON_9, SHANGHAI)
    assert (issue_id, due) == expected


def test_dst_weeks_in_berlin():
    """Across the spring-forward and fall-back weeks, periods start at local midnight and due times at local 09:00."""
    start, end = period("2026-W13", BERLIN)  # 2026-03-29: clocks go forward
    assert (start.hour, end.hour) == (0, 0)
    assert end - start == timedelta(days=7)               # wall-clock days
    assert end.astimezone(timezone.utc) - start.astimezone(timezone.utc) == timedelta(hours=167)
    start, end = period("2026-W43", BERLIN)  # 2026-10-25: clocks go back
    assert end.astimezone(timezone.utc) - start.astimezone(timezone.utc) == timedelta(hours=169)
    # Monday after spring-forward: 09:00 CEST = 07:00 UTC
    assert due_issue(utc(2026, 3, 30, 7, 0), MON_9, BERLIN)[0] == "2026-W13"
    assert due_issue(utc(2026, 3, 30, 6, 59), MON_9, BERLIN)[0] == "2026-W12"
    # Monday after fall-back: 09:00 CET = 08:00 UTC
    assert due_issue(utc(2026, 10, 26, 8, 0), MON_9, BERLIN)[0] == "2026-W43"
    assert due_issue(utc(2026, 10, 26, 7, 59), MON_9, BERLIN)[0] == "2026-W42"


def test_issue_id_format():
    """Issue ids are ISO week ids with two-digit weeks."""
    assert issue_id_for(datetime(2026, 1, 1).date()) == "2026-W01"
    assert issue_id_for(datetime(2021, 1, 3).date()) == "2020-W53"


def _store(tmp_path, email=""):
    config = load_config(make_config(tmp_path, email=email))
    return config, Store(config.store_path)


def test_each_review_is_in_exactly_one_issue(tmp_path):
    """Reviews go into the first issue composed after they were gathered, never into a second."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1), review(2)])
    config, store = _store(tmp_path)
    with freeze_time("2026-11-24T02:00:00Z"):
        gather(config, store, datetime.now(timezone.utc))
        first = compose(config, store, datetime.now(timezone.utc))
    write_jsonl(tmp_path / "reviews.jsonl", [review(1), review(2), review(3)])
    with freeze_time("2026-12-01T02:00:00Z"):
        gather(config, store, datetime.now(timezone.utc))
        second = compose(config, store, datetime.now(timezone.utc))
    assert (first.id, first.review_count) == ("2026-W47", 2)
    assert (second.id, second.review_count) == ("2026-W48", 1)
    assert [r.review.id for r in store.reviews_in_issue("2026-W48")] == ["acme/widgets#3"]


def test_compose_twice_returns_the_same_issue(tmp_path):
    """Composing the due issue again (a rerun) does not take new reviews into it."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    config, store = _store(tmp_path)
    with freeze_time("2026-11-24T02:00:00Z"):
        now = datetime.now(timezone.utc)
        gather(config, store, now)
        a = compose(config, store, now)
        write_jsonl(tmp_path / "reviews.jsonl", [review(1), review(2)])
        gather(config, store, now + timedelta(minutes=5))
        b = compose(config, store, now + timedelta(minutes=10))
    assert a.id == b.id and b.review_count == 1


def test_since_keeps_first_run_from_mailing_the_archive(tmp_path):
    """Reviews published before email.since are never put in an issue."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, published="2025-01-01T00:00:00Z"), review(2)])
    config, store = _store(tmp_path, email="since = 2026-11-01")
    with freeze_time("2026-11-24T02:00:00Z"):
        now = datetime.now(timezone.utc)
        gather(config, store, now)
        issue = compose(config, store, now)
    assert issue.review_count == 1
    assert store.pending_reviews(now) == []


def test_empty_week_is_recorded_once(tmp_path):
    """With skip_empty, a week without reviews gives an 'empty' issue that is not composed again."""
    write_jsonl(tmp_path / "reviews.jsonl", [])
    config, store = _store(tmp_path)
    with freeze_time("2026-11-24T02:00:00Z"):
        now = datetime.now(timezone.utc)
        issue = compose(config, store, now)
        again = compose(config, store, now)
    assert issue.status == "empty" and again.status == "empty"
