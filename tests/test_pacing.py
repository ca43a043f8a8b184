"""Backoff with jitter and reading the servers' wait requests."""

from __future__ import annotations

from datetime import datetime, timezone

from newsletter.pacing import backoff_delay, rate_limit_exhausted, retry_after_seconds

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)


def test_backoff_doubles_with_jitter_and_cap():
    """Retry n waits between half and all of base·2^(n-1), never above the cap."""
    assert [backoff_delay(n, 1.0, rand=lambda: 1.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert [backoff_delay(n, 1.0, rand=lambda: 0.0) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert backoff_delay(20, 1.0, cap=60, rand=lambda: 1.0) == 60
    assert backoff_delay(3, 0.0) == 0.0
    assert len({backoff_delay(2, 1.0) for _ in range(20)}) > 1


def test_retry_after_forms():
    """Retry-After as seconds or HTTP-date; Resend ratelimit-reset seconds; SendGrid X-RateLimit-Reset epoch."""
    assert retry_after_seconds({"Retry-After": "7"}, NOW) == 7
    assert retry_after_seconds({"retry-after": "Mon, 30 Nov 2026 02:00:30 GMT"}, NOW) == 30
    assert retry_after_seconds({"ratelimit-reset": "2"}, NOW) == 2
    assert retry_after_seconds({"X-RateLimit-Reset": str(int(NOW.timestamp()) + 12)}, NOW) == 12
    assert retry_after_seconds({"Retry-After": "soon"}, NOW) is None
    assert retry_after_seconds({}, NOW) is None


def test_rate_limit_exhausted():
    """Only a remaining count of zero means wait before the next request."""
    assert rate_limit_exhausted({"ratelimit-remaining": "0"})
    assert not rate_limit_exhausted({"ratelimit-remaining": "3"})
    assert not rate_limit_exhausted({})
