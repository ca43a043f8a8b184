"""WebSub publish pings: queued in the store, sent one URL per POST, kept for the next run on failure."""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from urllib.parse import parse_qs

import pytest

from newsletter.config import load_config
from newsletter.errors import ConfigError
from newsletter.store import Store
from newsletter.websub import publish

from tests.conftest import make_config

NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)


def sent(stub) -> list[str]:
    return [parse_qs(body.decode())["hub.url"][0] for _m, _p, _h, body in stub.requests]


def test_accepted_pings_leave_the_queue(tmp_path, http_stub):
    """Each changed URL is POSTed as hub.mode=publish; a 2xx answer removes it from the queue."""
    http_stub.routes[("POST", "/hub")] = lambda h, body: (204, {}, b"")
    with Store(tmp_path / "s.db") as store:
        report = publish(http_stub.url + "/hub", store, ["https://e.org/b.atom", "https://e.org/a.atom"], NOW)
        assert report.pinged == ["https://e.org/a.atom", "https://e.org/b.atom"] and report.pending == []
        _m, _p, headers, body = http_stub.requests[0]
        assert parse_qs(body.decode()) == {"hub.mode": ["publish"], "hub.url": ["https://e.org/a.atom"]}
        assert headers["Content-Type"] == "application/x-www-form-urlencoded"
        assert store.db.execute("SELECT count(*) FROM websub_pending").fetchone()[0] == 0


def test_a_refused_ping_is_logged_kept_and_sent_next_time(tmp_path, http_stub, caplog):
    """A non-2xx answer is a warning, not an error; the URL is retried by the next publish."""
    status = [500]
    http_stub.routes[("POST", "/hub")] = lambda h, body: (status[0], {}, b"")
    with Store(tmp_path / "s.db") as store:
        report = publish(http_stub.url + "/hub", store, ["https://e.org/a.atom"], NOW)
        assert report.pending == ["https://e.org/a.atom"] and report.pinged == []
        assert "will retry next run" in caplog.text and "HTTP 500" in caplog.text
        row = store.db.execute("SELECT attempts, last_error FROM websub_pending").fetchone()
        assert row[0] == 1 and "500" in row[1]
        status[0] = 200
        http_stub.requests.clear()
        report = publish(http_stub.url + "/hub", store, [], NOW)
        assert report.pinged == ["https://e.org/a.atom"] and sent(http_stub) == ["https://e.org/a.atom"]


def test_an_unreachable_hub_stops_the_round_and_keeps_everything(tmp_path):
    """A connection failure does not raise; that URL and the rest stay queued."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Store(tmp_path / "s.db") as store:
        report = publish(f"http://127.0.0.1:{port}/hub", store, ["https://e.org/a", "https://e.org/b"], NOW)
        assert report.pending == ["https://e.org/a", "https://e.org/b"]
        attempts = dict(store.db.execute("SELECT url, attempts FROM websub_pending").fetchall())
        assert attempts == {"https://e.org/a": 1, "https://e.org/b": 0}


def test_without_a_hub_nothing_is_queued(tmp_path):
    """No websub_hub configured: no queue, no request."""
    with Store(tmp_path / "s.db") as store:
        assert publish("", store, ["https://e.org/a"], NOW).pinged == []
        assert store.db.execute("SELECT count(*) FROM websub_pending").fetchone()[0] == 0


def test_websub_hub_must_be_an_absolute_http_url(tmp_path):
    """[feeds] websub_hub that is not an http(s) URL is a configuration error naming the key."""
    with pytest.raises(ConfigError, match=r"\[feeds\] websub_hub must be an absolute http\(s\) URL"):
        load_config(make_config(tmp_path, feeds='websub_hub = "hub.example.org"'))
    assert load_config(make_config(tmp_path, feeds='websub_hub = "https://hub.example/"')).feeds.websub_hub \
        == "https://hub.example/"
