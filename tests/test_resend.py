"""Resend /emails/batch: idempotency keys, permissive validation, rate-limit headers, quotas."""

from __future__ import annotations

import pytest

from newsletter.errors import DeliveryError
from tests.provider_fakes import FakeResend, KEY, ledger, prepare, send, transport_toml


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)


def test_invalid_recipient_fails_alone(http_stub, tmp_path):
    """With permissive validation one invalid email fails alone and the ids go to the right recipients."""
    fake = FakeResend(http_stub)
    fake.invalid = {"r0001@example.com"}
    config = prepare(tmp_path, 3, transport_toml("resend", http_stub.url))
    send(config)
    rows = ledger(config)
    assert rows["r0001@example.com"][0] == "failed" and "Invalid `to`" in rows["r0001@example.com"][2]
    assert rows["r0000@example.com"][:2] == ("sent", "re-1") and rows["r0002@example.com"][:2] == ("sent", "re-2")
    assert http_stub.requests[0][2]["x-batch-validation"] == "permissive"


def test_same_batch_same_key(http_stub, tmp_path):
    """The Idempotency-Key is derived from the batch's messages: the same batch always gets the same key."""
    from newsletter.transports.http_api import idempotency_key
    from newsletter.models import OutgoingMessage

    a = [OutgoingMessage("a@x.org", b"", "m1@x", "s@x"), OutgoingMessage("b@x.org", b"", "m2@x", "s@x")]
    assert idempotency_key(a) == idempotency_key(list(a)) != idempotency_key(a[:1])
    assert len(idempotency_key(a)) <= 256


def test_rate_limit_headers_delay_the_next_request(http_stub, tmp_path, monkeypatch):
    """`ratelimit-remaining: 0` with `ratelimit-reset: 2` makes the next request wait 2 s."""
    from newsletter.transports import http_api

    waits = []
    monkeypatch.setattr(http_api, "_sleep", waits.append)
    fake = FakeResend(http_stub)
    fake.rate_headers = {"ratelimit-limit": "2", "ratelimit-remaining": "0", "ratelimit-reset": "2"}
    config = prepare(tmp_path, 150, transport_toml("resend", http_stub.url))
    _, summary = send(config)
    assert summary.ledger == {"sent": 150} and len(waits) == 1 and 0 < waits[0] <= 2.0


def test_quota_exhausted_stops_the_run(http_stub, tmp_path):
    """429 daily_quota_exceeded is not retried: the run stops, nothing is marked failed."""
    fake = FakeResend(http_stub)
    fake.faults = [("status", 429, {}, {"statusCode": 429, "name": "daily_quota_exceeded",
                                        "message": "You have reached your daily email sending quota."})]
    config = prepare(tmp_path, 2, transport_toml("resend", http_stub.url))
    with pytest.raises(DeliveryError, match="daily email sending quota"):
        send(config)
    assert len(http_stub.requests) == 1 and {v[0] for v in ledger(config).values()} == {"pending"}


def test_changed_payload_under_same_key_is_unknown(http_stub, tmp_path):
    """409 invalid_idempotent_request (same key, other payload) leaves the fate unknown, reported."""
    fake = FakeResend(http_stub)
    fake.faults = [("status", 409, {}, {"statusCode": 409, "name": "invalid_idempotent_request",
                                        "message": "Same idempotency key used with a different request payload."})]
    config = prepare(tmp_path, 2, transport_toml("resend", http_stub.url), delivery="max_attempts = 1\n")
    _, summary = send(config)
    assert summary.ledger == {"unknown": 2} and "different request payload" in summary.errors.most_common(1)[0][0]


def test_unknown_batch_is_replayed_with_its_key_on_the_next_run(http_stub, tmp_path):
    """A batch whose answer was lost is replayed by the next run under the same key: one copy each."""
    fake = FakeResend(http_stub)
    fake.faults = [("drop",)]
    config = prepare(tmp_path, 3, transport_toml("resend", http_stub.url),
                     delivery="max_attempts = 1\n")
    _, first = send(config)
    assert first.ledger == {"unknown": 3}
    _, second = send(config)
    assert second.ledger == {"sent": 3} and second.counts["replayed"] == 3
    assert set(fake.copies.values()) == {1} and fake.replays == 1
    assert len({r[2]["Idempotency-Key"] for r in http_stub.requests}) == 1
