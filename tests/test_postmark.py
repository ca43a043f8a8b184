"""Postmark /email/batch: per-message results inside a 200 answer."""

from __future__ import annotations

import pytest

from tests.provider_fakes import FakePostmark, KEY, ledger, prepare, send, transport_toml


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)


def test_partly_failed_batch_records_each_outcome(http_stub, tmp_path):
    """A 200 answer with ErrorCode 406 for one message: that recipient is failed, the others sent with their ids."""
    fake = FakePostmark(http_stub)
    fake.inactive = {"r0001@example.com"}
    config = prepare(tmp_path, 4, transport_toml("postmark", http_stub.url))
    _, summary = send(config)
    rows = ledger(config)
    assert rows["r0001@example.com"][0] == "failed" and "ErrorCode 406" in rows["r0001@example.com"][2]
    assert {e: r[0] for e, r in rows.items() if e != "r0001@example.com"} == {
        "r0000@example.com": "sent", "r0002@example.com": "sent", "r0003@example.com": "sent"}
    assert rows["r0002@example.com"][1].startswith("pm-")
    assert len(http_stub.requests) == 1 and summary.counts["failed"] == 1


def test_per_message_rate_limit_is_retried_alone(http_stub, tmp_path):
    """ErrorCode 429 inside a 200 answer: only that message is sent again, in the next round."""
    fake = FakePostmark(http_stub)
    fake.busy = {"r0002@example.com"}
    config = prepare(tmp_path, 3, transport_toml("postmark", http_stub.url))
    _, summary = send(config)
    assert summary.ledger == {"sent": 3} and fake.batch_sizes == [3, 1]
    assert set(fake.copies.values()) == {1}


def test_payload_follows_postmark_schema(http_stub, tmp_path):
    """From/To/Subject/HtmlBody/TextBody/Headers/Metadata/MessageStream as Postmark documents them."""
    import json

    FakePostmark(http_stub)
    config = prepare(tmp_path, 1, transport_toml("postmark", http_stub.url) + 'message_stream = "news"\n')
    send(config)
    item = json.loads(http_stub.requests[0][3])[0]
    assert item["MessageStream"] == "news" and item["From"] == "Widget Reviews <reviews@example.org>"
    assert item["To"] == "Reader 0 <r0000@example.com>" and item["ReplyTo"] == "maintainers@example.org"
    assert {h["Name"] for h in item["Headers"]} == {"List-Id", "List-Unsubscribe", "List-Unsubscribe-Post"}
    assert item["Metadata"]["message_id"].startswith("2026-W48.")
