"""SendGrid v3 Mail Send: personalizations, substitutions, whole-request rejections."""

from __future__ import annotations

import json

import pytest

from tests.provider_fakes import FakeSendGrid, KEY, ledger, prepare, send, transport_toml


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)


def test_rejected_address_fails_alone_by_splitting(http_stub, tmp_path):
    """A 400 for one bad address: the request is split until that recipient is alone; the rest are sent."""
    fake = FakeSendGrid(http_stub)
    fake.reject = {"r0005@example.com"}
    config = prepare(tmp_path, 8, transport_toml("sendgrid", http_stub.url))
    _, summary = send(config)
    rows = ledger(config)
    assert rows["r0005@example.com"][0] == "failed" and "valid address" in rows["r0005@example.com"][2]
    assert summary.ledger == {"sent": 7, "failed": 1}
    assert len(http_stub.requests) <= 1 + 2 * 3     # log2(8) levels of halves
    assert set(fake.copies.values()) == {1}


def test_one_personalization_per_recipient_with_substitutions(http_stub, tmp_path):
    """The body is shared; each personalization has one `to`, its own headers, substitutions and custom_args."""
    FakeSendGrid(http_stub)
    config = prepare(tmp_path, 2, transport_toml("sendgrid", http_stub.url) + 'category = "weekly"\n')
    send(config)
    doc = json.loads(http_stub.requests[0][3])
    assert [c["type"] for c in doc["content"]] == ["text/plain", "text/html"]
    assert doc["categories"] == ["weekly"] and doc["reply_to"] == {"email": "maintainers@example.org"}
    p0, p1 = doc["personalizations"]
    assert p0["to"] == [{"email": "r0000@example.com", "name": "Reader 0"}]
    assert p0["headers"]["List-Unsubscribe"] != p1["headers"]["List-Unsubscribe"]
    email_key = next(k for k, v in p0["substitutions"].items() if v == "r0000@example.com")
    nonce = email_key[len("-nl-email_"):-1]
    assert len(nonce) == 16, "substitution names carry the edition's random nonce"
    assert f"-nl-greeting_{nonce}_html-" in doc["content"][1]["value"]
    assert p0["custom_args"]["message_id"].startswith("2026-W48.")


def test_editions_go_in_separate_requests(http_stub, tmp_path):
    """Subscribers following different tags get different bodies, so they go in different requests."""
    from newsletter.models import Subscriber
    from newsletter.tags import tag_key

    fake = FakeSendGrid(http_stub)
    subs = [Subscriber("a@example.com"), Subscriber("b@example.com", tags=(tag_key("CPU"),)),
            Subscriber("c@example.com")]
    config = prepare(tmp_path, 0, transport_toml("sendgrid", http_stub.url), subscribers=subs)
    send(config)
    assert sorted(fake.batch_sizes) == [1, 2]
    b = next(m for m in fake.inbox if m["to"] == "b@example.com")
    a = next(m for m in fake.inbox if m["to"] == "a@example.com")
    assert len(b["html"]) < len(a["html"])
