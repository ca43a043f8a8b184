"""The SMTP transport against real aiosmtpd servers: TLS, AUTH, transient and permanent replies, dropped connections."""

from __future__ import annotations

import asyncio
import email
import email.policy
import socket
import threading
import time
from collections import Counter

import pytest

from newsletter.errors import DeliveryError
from newsletter.models import Subscriber
from provider_fakes import ledger, prepare, send


class Behaving:
    """An aiosmtpd handler whose replies are chosen per recipient.

    ``rcpt[addr]`` is a list of replies used one per attempt (then ``250``);
    ``drop_after_data`` holds recipients whose DATA is taken and then the connection
    is closed without a reply; ``close_after_reply`` closes right after answering 250.
    """

    def __init__(self):
        self.messages: list[tuple[list, bytes]] = []
        self.rcpt: dict[str, list[str]] = {}
        self.drop_after_data: set[str] = set()
        self.close_after_reply: set[str] = set()

    @property
    def copies(self) -> Counter:
        return Counter(r for rcpts, _ in self.messages for r in rcpts)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        replies = self.rcpt.get(address)
        if replies:
            return replies.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((list(envelope.rcpt_tos), envelope.original_content))
        if set(envelope.rcpt_tos) & self.drop_after_data:
            server.transport.abort()
            return "250 never seen"
        if set(envelope.rcpt_tos) & self.close_after_reply:
            asyncio.get_running_loop().call_later(0.02, server.transport.close)
        return f"250 2.0.0 Ok: queued as Q{len(self.messages):05d}"


@pytest.fixture
def server():
    from aiosmtpd.controller import Controller

    from conftest import free_port

    handler = Behaving()
    handler.port = free_port()
    ctrl = Controller(handler, hostname="127.0.0.1", port=handler.port)
    ctrl.start()
    yield handler
    ctrl.stop()


def smtp_toml(port: int, timeout: float = 3) -> str:
    return f'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\ntimeout = {timeout}\n'


def test_starttls_and_auth_delivers_one_copy_each(smtp_tls_sink, tmp_path, monkeypatch):
    """Through STARTTLS (test CA) and AUTH every subscriber gets exactly one copy, addressed to them alone."""
    monkeypatch.setenv("SMTP_PW", "s3cret")
    t = (f'kind = "smtp"\nhost = "127.0.0.1"\nport = {smtp_tls_sink.port}\nsecurity = "starttls"\n'
         f'username = "reviews"\npassword_env = "SMTP_PW"\ncafile = "{smtp_tls_sink.cafile}"\ntimeout = 5\n')
    config = prepare(tmp_path, 4, t)
    _, summary = send(config)
    assert summary.ledger == {"sent": 4}
    assert sorted(r for _, rcpts, _ in smtp_tls_sink.messages for r in rcpts) == [f"r000{i}@example.com" for i in range(4)]
    assert all(len(rcpts) == 1 for _, rcpts, _ in smtp_tls_sink.messages)
    assert all(v[1].startswith("2.0.0 Ok: queued as Q") for v in ledger(config).values())


def test_display_names_are_encoded_and_addresses_plain(server, tmp_path):
    """Names with commas, quotes and Chinese are RFC 2047/quoted in To; the IDNA domain is the envelope address."""
    subs = [Subscriber("doe@example.com", "Doe, John"), Subscriber("q@example.com", 'Ann "Q" Lee'),
            Subscriber("zhang@例子.测试", "张三")]
    config = prepare(tmp_path, 0, smtp_toml(server.port), subscribers=subs)
    send(config)
    got = {}
    for rcpts, data in server.messages:
        raw_to = [line for line in data.split(b"\r\n") if line.startswith(b"To:")][0].decode("ascii")
        msg = email.message_from_bytes(data, policy=email.policy.default)
        got[rcpts[0]] = (raw_to, msg["To"].addresses[0].display_name, msg["To"].addresses[0].addr_spec)
    assert got["doe@example.com"] == ('To: "Doe, John" <doe@example.com>', "Doe, John", "doe@example.com")
    assert got["q@example.com"][1:] == ('Ann "Q" Lee', "q@example.com")
    raw, name, addr = got["zhang@xn--fsqu00a.xn--0zwm56d"]
    assert "=?utf-8?" in raw and raw.endswith("<zhang@xn--fsqu00a.xn--0zwm56d>") and name == "张三"


def test_451_is_retried_and_550_fails_alone(server, tmp_path):
    """A 451 at RCPT is tried again in the next round; a 550 fails that recipient only."""
    server.rcpt = {"r0001@example.com": ["451 4.7.1 greylisted, try later"],
                   "r0002@example.com": ["550 5.1.1 no such user"] * 5}
    config = prepare(tmp_path, 4, smtp_toml(server.port))
    _, summary = send(config)
    rows = ledger(config)
    assert rows["r0001@example.com"][0] == "sent" and rows["r0002@example.com"][0] == "failed"
    assert "550 5.1.1 no such user" in rows["r0002@example.com"][2]
    assert summary.counts["retried"] == 1 and summary.ledger == {"sent": 3, "failed": 1}
    assert set(server.copies.values()) == {1}


@pytest.mark.parametrize("reply", ["421 4.3.2 shutting down", "454 4.7.0 TLS not available"])
def test_4xx_codes_are_transient(server, tmp_path, reply):
    """421 and 454 are retried like 451."""
    server.rcpt = {"r0000@example.com": [reply]}
    config = prepare(tmp_path, 2, smtp_toml(server.port))
    _, summary = send(config)
    assert summary.ledger == {"sent": 2} and summary.counts["retried"] == 1


def test_drop_after_data_counts_as_sent(server, tmp_path):
    """A server that takes the message and drops the connection without a reply: sent, never sent again."""
    server.drop_after_data = {"r0001@example.com"}
    config = prepare(tmp_path, 3, smtp_toml(server.port))
    _, summary = send(config)
    rows = ledger(config)
    assert summary.ledger == {"sent": 3} and "counted as sent" in rows["r0001@example.com"][2]
    assert server.copies == Counter({f"r000{i}@example.com": 1 for i in range(3)})
    send(config)
    assert len(server.messages) == 3


def test_close_after_250_reconnects_for_the_next_message(server, tmp_path):
    """A server that answers 250 and then hangs up: the next message goes over a new connection."""
    server.close_after_reply = {"r0000@example.com", "r0002@example.com"}
    config = prepare(tmp_path, 4, smtp_toml(server.port))
    _, summary = send(config)
    assert summary.ledger == {"sent": 4} and set(server.copies.values()) == {1}


def test_server_that_never_greets_fails_within_the_timeout(tmp_path):
    """A listener that accepts and says nothing: the send fails within the timeout, rows stay pending."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    held = []
    threading.Thread(target=lambda: held.append(lsock.accept()), daemon=True).start()
    config = prepare(tmp_path, 2, smtp_toml(lsock.getsockname()[1], timeout=0.5))
    t0 = time.monotonic()
    with pytest.raises(DeliveryError, match="cannot connect"):
        send(config)
    assert time.monotonic() - t0 < 2.0
    assert {v[0] for v in ledger(config).values()} == {"pending"}
    lsock.close()


def test_non_ascii_local_part_fails_alone(server, tmp_path):
    """An address with a non-ASCII local part fails with a reason; the others are sent."""
    subs = [Subscriber("a@example.com"), Subscriber("用户@example.com"), Subscriber("b@example.com")]
    config = prepare(tmp_path, 0, smtp_toml(server.port), subscribers=subs)
    send(config)
    rows = ledger(config)
    assert rows["用户@example.com"][0] == "failed" and "SMTPUTF8" in rows["用户@example.com"][2]
    assert sorted(server.copies) == ["a@example.com", "b@example.com"]
