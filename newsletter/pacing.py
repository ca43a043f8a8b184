"""Pacing for delivery: send rate, retry backoff with jitter, and server-requested waits.

- :class:`RateLimiter` spaces messages so no more than ``rate`` per second leave
  (a batch of *n* messages uses *n* slots).
- :func:`backoff_delay` is "full jitter" exponential backoff: a random delay in
  ``[base·2^(attempt-1)/2, base·2^(attempt-1)]``, capped at ``cap`` seconds.
- :func:`retry_after_seconds` reads ``Retry-After`` (RFC 9110 §10.2.3: delay-seconds
  or an HTTP-date) and the providers' rate-limit headers (Resend
  ``ratelimit-reset`` = seconds; SendGrid ``X-RateLimit-Reset`` = epoch seconds).

Every function takes the clock and the sleep function as arguments so tests can
run without waiting.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Callable, Mapping, Optional

Sleep = Callable[[float], None]
Monotonic = Callable[[], float]


def backoff_delay(attempt: int, base: float, cap: float = 60.0,
                  rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = first retry).

    Exponential (``base · 2^(attempt-1)``) with jitter in its upper half, so
    many senders do not retry in step; never more than ``cap``.

    Args:
        attempt: 1 for the first retry, 2 for the second, …
        base: seconds for the first retry (``[delivery] backoff``).
        cap: the most to wait (``[delivery] backoff_max``).
        rand: a uniform [0, 1) source (tests pass a fixed one).
    """
    if base <= 0:
        return 0.0
    full = min(cap, base * (2 ** max(0, attempt - 1)))
    return full / 2 + rand() * full / 2


def retry_after_seconds(headers: Mapping[str, str], now: Optional[datetime] = None) -> Optional[float]:
    """How long the server asked us to wait, in seconds, or ``None`` if it did not say.

    Reads, in order: ``Retry-After`` (seconds or HTTP-date, RFC 9110 §10.2.3),
    ``ratelimit-reset`` (Resend: seconds until the window resets) and
    ``X-RateLimit-Reset`` (SendGrid: Unix time of the reset). Header names are
    matched case-insensitively.

    Args:
        headers: response headers.
        now: aware current time for HTTP-dates and epoch values (default: the clock).
    """
    low = {k.lower(): v for k, v in headers.items()}
    now = now or datetime.now(timezone.utc)
    value = low.get("retry-after")
    if value is not None:
        value = value.strip()
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return max(0.0, (when - now).total_seconds())
    value = low.get("ratelimit-reset")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
    value = low.get("x-ratelimit-reset")
    if value is not None:
        try:
            reset = float(value)
        except ValueError:
            return None
        # an epoch (SendGrid) or, from other servers, a small number of seconds
        return max(0.0, reset - now.timestamp()) if reset > 1e9 else max(0.0, reset)
    return None


def rate_limit_exhausted(headers: Mapping[str, str]) -> bool:
    """True when the response says no requests are left in the window (``ratelimit-remaining: 0``)."""
    low = {k.lower(): v for k, v in headers.items()}
    for name in ("ratelimit-remaining", "x-ratelimit-remaining"):
        if name in low:
            try:
                return float(low[name]) <= 0
            except ValueError:
                return False
    return False


class RateLimiter:
    """At most ``rate`` messages per second (0 = no limit).

    Args:
        rate: messages per second.
        sleep, monotonic: injectable for tests.
    """

    def __init__(self, rate: float, sleep: Optional[Sleep] = None, monotonic: Optional[Monotonic] = None) -> None:
        self.rate, self._sleep, self._monotonic = rate, sleep, monotonic
        self.next_free: Optional[float] = None

    def sleep(self, seconds: float) -> None:
        """Wait (the injected function, else :func:`time.sleep`)."""
        (self._sleep or time.sleep)(seconds)

    def monotonic(self) -> float:
        """Now on a monotonic clock, seconds."""
        return (self._monotonic or time.monotonic)()

    def acquire(self, n: int = 1) -> float:
        """Wait until ``n`` messages may leave; returns the seconds waited."""
        if self.rate <= 0 or n <= 0:
            return 0.0
        now = self.monotonic()
        if self.next_free is None or self.next_free < now:
            self.next_free = now
        wait = self.next_free - now
        if wait > 0:
            self.sleep(wait)
        self.next_free += n / self.rate
        return wait
