"""SMTP delivery against a real aiosmtpd server on loopback."""

import email
import socket
import threading
import time
from datetime import datetime, timezone
from email import policy

import pytest

from newsletter import job
from newsletter.config import load_config
from newsletter.errors import DeliveryError
from newsletter.store import Store
from newsletter.subscribers import make_subscriber
from newsletter.transports import make_transport
from tests.conftest import make_config, review, write_jsonl



def clock():
    # A fixed clock rather than freezegun: the aiosmtpd server thread needs real time.
    return datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)


def smtp_config(tmp_path, sink, extra=""):
    write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 4)])
    transport = f'kind = "smtp"\nhost = "{sink.host}"\nport = {sink.port}\ntimeout = 5\n{extra}'
    config = load_config(make_config(tmp_path, transport=transport))
    with Store(config.store_path) as store:
        for i in range(5):
            store.upsert_subscriber(make_subscriber(f"r{i}@example.org", f"读者 {i}"), clock())
    return config


def test_plain_smtp_delivers_one_message_per_recipient(tmp_path, smtp_sink):
    """Each subscriber gets one message with only their address in the envelope and the To header."""
    config = smtp_config(tmp_path, smtp_sink, 'security = "none"')
    report = job.run_job(config, clock)
    assert report.delivery.counts["sent"] == 5
    assert sorted(r[0] for _, r, _ in smtp_sink.messages) == [f"r{i}@example.org" for i in range(5)]
    for mail_from, rcpts, data in smtp_sink.messages:
        assert mail_from == "reviews@example.org" and len(rcpts) == 1
        m = email.message_from_bytes(data, policy=policy.default)
        assert m["To"].addresses[0].addr_spec == rcpts[0]
    with Store(config.store_path) as store:
        ids = [r["provider_id"] for _, r in store.deliveries("2026-W48", ("sent",))]
    assert all("queued as" in i for i in ids)


def test_starttls_and_auth(tmp_path, smtp_tls_sink, monkeypatch):
    """STARTTLS with a verified certificate and AUTH with the password from the environment."""
    monkeypatch.setenv("SMTP_PW", "s3cret")
    config = smtp_config(tmp_path, smtp_tls_sink,
                         f'security = "starttls"\nusername = "reviews"\npassword_env = "SMTP_PW"\ncafile = "{smtp_tls_sink.cafile}"')
    report = job.run_job(config, clock)
    assert report.delivery.counts["sent"] == 5 and len(smtp_tls_sink.messages) == 5


def test_wrong_password_is_a_delivery_error_without_secret(tmp_path, smtp_tls_sink, monkeypatch):
    """A refused AUTH fails the send with one line that does not contain the password."""
    monkeypatch.setenv("SMTP_PW", "wrong-pw-123")
    config = smtp_config(tmp_path, smtp_tls_sink,
                         f'username = "reviews"\npassword_env = "SMTP_PW"\ncafile = "{smtp_tls_sink.cafile}"')
    with pytest.raises(DeliveryError, match="authentication refused") as exc:
        job.run_job(config, clock)
    assert "wrong-pw-123" not in str(exc.value)


def test_permanent_rejection_fails_one_recipient_alone(tmp_path, smtp_sink):
    """A 550 for one recipient marks only that one failed; the others are sent."""
    smtp_sink.refuse["r2@example.org"] = "550 5.1.1 no such user"
    config = smtp_config(tmp_path, smtp_sink, 'security = "none"')
    report = job.run_job(config, clock)
    assert report.delivery.ledger == {"failed": 1, "sent": 4}
    assert "550" in next(iter(report.delivery.errors))


def test_server_that_never_greets_fails_within_timeout(tmp_path):
    """A server that accepts the connection but never says 220 fails after the timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    config = load_config(make_config(tmp_path, transport=f'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\ntimeout = 1'))
    transport = make_transport(config)
    start = time.monotonic()
    with pytest.raises(DeliveryError, match="cannot connect"):
        transport._ensure()
    assert time.monotonic() - start < 5
    srv.close()


def test_one_connection_for_many_messages(tmp_path, smtp_sink):
    """All messages of a send go over one SMTP connection."""
    connections = []

    class Counting:
        pass

    config = smtp_config(tmp_path, smtp_sink, 'security = "none"')
    transport = make_transport(config)
    original = transport._connect

    def counting_connect():
        connections.append(1)
        return original()

    transport._connect = counting_connect
    job.run_job(config, clock, transport=transport)
    transport.close()
    assert len(connections) == 1 and len(smtp_sink.messages) == 5
