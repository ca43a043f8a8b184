"""What readers receive end to end: per-tag subscriptions and suppression, through the web app and a real run."""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone
from urllib.parse import urlsplit

from freezegun import freeze_time

from newsletter import job
from newsletter.config import load_config
from newsletter.store import Store
from newsletter.subscribers import import_csv, make_subscriber
from newsletter.transports.memory import MemoryTransport
from newsletter.web import create_app
from tests.conftest import make_config, review, write_jsonl

DUE = "2026-11-30T02:00:00Z"        # Monday 10:00 Shanghai: 2026-W48 is due
NEXT_DUE = "2026-12-07T02:00:00Z"   # 2026-W49


def clock():
    return datetime.now(timezone.utc)


def local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def subscribe_via_web(client, mem, email, tags=None):
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/subscribe").text).group(1)
    data = {"csrf": token, "email": email}
    if tags:
        data.update(tag=tags)
    assert client.post("/subscribe", data=data).status_code == 200
    link = re.search(r"https://\S+/confirm\?t=\S+", mem.sent[-1].fields["text"]).group(0)
    assert client.post(local(link)).status_code == 200


def titles(msg) -> set[str]:
    return set(re.findall(r"Review \d+", msg.fields["text"]))


@freeze_time("2026-11-20T04:00:00Z")
def _setup(tmp_path):
    write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 7)])
    config = load_config(make_config(tmp_path))
    with Store(config.store_path) as st:
        from newsletter.gather import gather
        gather(config, st, clock())
    return config


def test_reader_following_only_rocm_gets_only_rocm_reviews(tmp_path):
    """Subscribed through the web with only ROCm, a reader's issue holds just the ROCm reviews, with all their tags."""
    config = _setup(tmp_path)
    mail = MemoryTransport()
    with freeze_time("2026-11-20T05:00:00Z"):
        client = create_app(config, clock=clock, transport_factory=lambda: mail).test_client()
        subscribe_via_web(client, mail, "rocm@example.org", ["rocm"])
        subscribe_via_web(client, mail, "all@example.org")
        subscribe_via_web(client, mail, "cuda@example.org", ["cuda graph"])
    weekly = MemoryTransport()
    with freeze_time(DUE):
        report = job.run_job(config, clock, transport=weekly)
    assert report.delivery.counts["sent"] == 3
    by = {m.recipient: m for m in weekly.sent}
    # review(n) tags cycle: n % 3 == 0 → ROCm, 性能; 1 → CUDA Graph; 2 → 性能, CPU
    assert titles(by["rocm@example.org"]) == {"Review 3", "Review 6"}
    assert titles(by["cuda@example.org"]) == {"Review 1", "Review 4"}
    assert titles(by["all@example.org"]) == {f"Review {n}" for n in range(1, 7)}
    rocm_html = by["rocm@example.org"].fields["html"]
    assert "#ROCm" in rocm_html and "#性能" in rocm_html and "#CPU" not in rocm_html
    assert "Review 1" not in rocm_html and "Review 2" not in rocm_html
    assert report.delivery.compiles == 3  # one MJML compile per distinct tag set


def test_suppressed_addresses_never_receive_anything_again(tmp_path, monkeypatch):
    """Unsubscribed (one-click), bounced and complained (webhooks) addresses get no issue, even after a re-import."""
    import base64
    import hashlib
    import hmac
    import json

    monkeypatch.setenv("NEWSLETTER_MAILGUN_SIGNING_KEY", "mg-key")
    config = _setup(tmp_path)
    addrs = ["stay@example.org", "unsub@example.org", "bounce@example.org", "spam@example.org"]
    with Store(config.store_path) as st:
        for a in addrs:
            st.upsert_subscriber(make_subscriber(a), clock())
    links = job.links_for(config)
    with freeze_time("2026-11-25T00:00:00Z"):
        client = create_app(config, clock=clock).test_client(use_cookies=False)
        assert client.post(local(links.unsubscribe_url("unsub@example.org")),
                           data={"List-Unsubscribe": "One-Click"}).status_code == 200
        for n, (addr, event) in enumerate([("bounce@example.org", {"event": "failed", "severity": "permanent"}),
                                           ("spam@example.org", {"event": "complained"})]):
            ts, token = str(int(clock().timestamp())), f"t{n}"
            sig = hmac.new(b"mg-key", (ts + token).encode(), hashlib.sha256).hexdigest()
            body = {"signature": {"timestamp": ts, "token": token, "signature": sig},
                    "event-data": {**event, "recipient": addr, "id": f"id{n}"}}
            assert client.post("/webhooks/mailgun", data=json.dumps(body)).status_code == 200
    weekly = MemoryTransport()
    with freeze_time(DUE):
        report = job.run_job(config, clock, transport=weekly)
    assert [m.recipient for m in weekly.sent] == ["stay@example.org"]
    assert report.delivery.ledger.get("sent") == 1
    # the maintainer imports the old list again; a new week's reviews arrive
    with freeze_time("2026-12-01T00:00:00Z"):
        with Store(config.store_path) as st:
            r = import_csv(st, io.StringIO("email,name,tags\n" + "".join(f"{a},,\n" for a in addrs)), "old.csv", clock())
        assert r.suppressed == 3
        write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 7)] +
                    [review(20, published="2026-11-30T10:00:00+08:00")])
    weekly2 = MemoryTransport()
    with freeze_time(NEXT_DUE):
        report = job.run_job(config, clock, transport=weekly2)
    assert report.issue.id == "2026-W49"
    assert [m.recipient for m in weekly2.sent] == ["stay@example.org"]
    with Store(config.store_path) as st:
        statuses = {s.email: s.status for s in st.subscribers()}
    assert statuses == {"stay@example.org": "active", "unsub@example.org": "unsubscribed",
                        "bounce@example.org": "bounced", "spam@example.org": "complained"}


def test_address_that_bounces_mid_issue_is_skipped(tmp_path):
    """A recipient suppressed after the ledger was filled but before their batch is skipped, not sent."""
    config = _setup(tmp_path)
    with Store(config.store_path) as st:
        for a in ("a@example.org", "b@example.org"):
            st.upsert_subscriber(make_subscriber(a), clock())
    sent = MemoryTransport()

    class BounceB(MemoryTransport):
        max_batch = 1  # one recipient per batch: a@ goes first, then b@

        def send(self, messages):
            with Store(config.store_path) as st:
                st.suppress("b@example.org", "bounced", clock(), "test")
            return sent.send(messages)

    with freeze_time(DUE):
        report = job.run_job(config, clock, transport=BounceB())
    assert [m.recipient for m in sent.sent] == ["a@example.org"]
    assert report.delivery.ledger == {"sent": 1, "skipped": 1}
