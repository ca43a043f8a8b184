"""WebSub publishing: tell the hub which feeds changed (https://www.w3.org/TR/websub/).

WebSub leaves the publisher→hub call to each hub; the common form, which
Google's hub and most others accept (PubSubHubbub 0.3/0.4), is an HTTP POST of
``application/x-www-form-urlencoded`` ``hub.mode=publish`` and ``hub.url=<feed
URL>``, answered with a 2xx. We send one POST per changed feed URL (some hubs
take only one ``hub.url`` per request).

Changed URLs are first queued in the store (``websub_pending``), then sent;
each accepted one leaves the queue. A refused ping (non-2xx) or an unreachable
hub is logged as a warning and stays queued for the next run; after a
connection failure the rest of the queue waits too. Pinging never raises: a hub
that is down never fails the job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Optional

import requests

from . import __version__
from .store import Store

log = logging.getLogger(__name__)

TIMEOUT = 10.0  # seconds per ping


@dataclass
class PingReport:
    """What :func:`publish` did: URLs the hub accepted, and URLs still queued."""

    pinged: list = field(default_factory=list)
    pending: list = field(default_factory=list)


def _short(exc: requests.RequestException) -> str:
    """``ConnectionError: [Errno 111] Connection refused`` rather than urllib3's whole chain."""
    reason = exc.args[0] if exc.args else exc
    reason = getattr(reason, "reason", reason)
    return f"{type(exc).__name__}: {str(reason).rsplit(': ', 1)[-1]}"


def publish(hub: str, store: Store, changed: Iterable[str], now: datetime,
            session: Optional[requests.Session] = None) -> PingReport:
    """Queue ``changed`` feed URLs and ping ``hub`` for everything queued.

    Args:
        hub: the hub URL (``[feeds] websub_hub``); empty: nothing is queued or sent.
        store: holds the queue of URLs not yet accepted.
        changed: absolute URLs of feed documents whose bytes changed in this run.
        now: aware time, recorded when a URL is queued.
        session: a ``requests`` session to reuse (tests, keep-alive).

    Returns:
        A :class:`PingReport`. Never raises for HTTP or network trouble.
    """
    report = PingReport()
    if not hub:
        return report
    at = now.astimezone(timezone.utc).isoformat(timespec="seconds")
    with store.transaction():
        store.db.executemany(
            "INSERT INTO websub_pending (url, queued_at) VALUES (?, ?) ON CONFLICT (url) DO NOTHING",
            [(u, at) for u in sorted(set(changed))])
    queued = [r[0] for r in store.db.execute("SELECT url FROM websub_pending ORDER BY url")]
    if not queued:
        return report
    own = session is None
    session = session or requests.Session()
    try:
        for i, url in enumerate(queued):
            error = ""
            try:
                resp = session.post(hub, data={"hub.mode": "publish", "hub.url": url}, timeout=TIMEOUT,
                                    headers={"User-Agent": f"newsletter/{__version__}"})
                if 200 <= resp.status_code < 300:
                    store.db.execute("DELETE FROM websub_pending WHERE url = ?", (url,))
                    report.pinged.append(url)
                    continue
                error = f"HTTP {resp.status_code} {resp.reason}".strip()
                stop = False
            except requests.RequestException as exc:
                error = _short(exc)
                stop = True
            store.db.execute("UPDATE websub_pending SET attempts = attempts + 1, last_error = ? WHERE url = ?",
                             (error[:500], url))
            log.warning("WebSub hub %s did not take the ping for %s (%s); will retry next run", hub, url, error)
            report.pending.append(url)
            if stop:
                report.pending.extend(queued[i + 1:])
                break
    finally:
        if own:
            session.close()
    return report
