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


# --- faults: transient and permanent replies, dropped connections, silent servers ---------------

import asyncio  # noqa: E402
from collections import Counter  # noqa: E402

from newsletter.models import Subscriber  # noqa: E402
from tests.provider_fakes import ledger, prepare, send  # noqa: E402


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
def behaving_server():
    from aiosmtpd.controller import Controller

    from tests.conftest import free_port

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


def test_display_names_are_encoded_and_addresses_plain(behaving_server, tmp_path):
    """Names with commas, quotes and Chinese are RFC 2047/quoted in To; the IDNA domain is the envelope address."""
    subs = [Subscriber("doe@example.com", "Doe, John"), Subscriber("q@example.com", 'Ann "Q" Lee'),
            Subscriber("zhang@例子.测试", "张三")]
    config = prepare(tmp_path, 0, smtp_toml(behaving_server.port), subscribers=subs)
    send(config)
    got = {}
    for rcpts, data in behaving_server.messages:
        raw_to = [line for line in data.split(b"\r\n") if line.startswith(b"To:")][0].decode("ascii")
        msg = email.message_from_bytes(data, policy=email.policy.default)
        got[rcpts[0]] = (raw_to, msg["To"].addresses[0].display_name, msg["To"].addresses[0].addr_spec)
    assert got["doe@example.com"] == ('To: "Doe, John" <doe@example.com>', "Doe, John", "doe@example.com")
    assert got["q@example.com"][1:] == ('Ann "Q" Lee', "q@example.com")
    raw, name, addr = got["zhang@xn--fsqu00a.xn--0zwm56d"]
    assert "=?utf-8?" in raw and raw.endswith("<zhang@xn--fsqu00a.xn--0zwm56d>") and name == "张三"


def test_451_is_retried_and_550_fails_alone(behaving_server, tmp_path):
    """A 451 at RCPT is tried again in the next round; a 550 fails that recipient only."""
    behaving_server.rcpt = {"r0001@example.com": ["451 4.7.1 greylisted, try later"],
                   "r0002@example.com": ["550 5.1.1 no such user"] * 5}
    config = prepare(tmp_path, 4, smtp_toml(behaving_server.port))
    _, summary = send(config)
    rows = ledger(config)
    assert rows["r0001@example.com"][0] == "sent" and rows["r0002@example.com"][0] == "failed"
    assert "550 5.1.1 no such user" in rows["r0002@example.com"][2]
    assert summary.counts["retried"] == 1 and summary.ledger == {"sent": 3, "failed": 1}
    assert set(behaving_server.copies.values()) == {1}


@pytest.mark.parametrize("reply", ["421 4.3.2 shutting down", "454 4.7.0 TLS not available"])
def test_4xx_codes_are_transient(behaving_server, tmp_path, reply):
    """421 and 454 are retried like 451."""
    behaving_server.rcpt = {"r0000@example.com": [reply]}
    config = prepare(tmp_path, 2, smtp_toml(behaving_server.port))
    _, summary = send(config)
    assert summary.ledger == {"sent": 2} and summary.counts["retried"] == 1


def test_drop_after_data_counts_as_sent(behaving_server, tmp_path):
    """A server that takes the message and drops the connection without a reply: sent, never sent again."""
    behaving_server.drop_after_data = {"r0001@example.com"}
    config = prepare(tmp_path, 3, smtp_toml(behaving_server.port))
    _, summary = send(config)
    rows = ledger(config)
    assert summary.ledger == {"sent": 3} and "counted as sent" in rows["r0001@example.com"][2]
    assert behaving_server.copies == Counter({f"r000{i}@example.com": 1 for i in range(3)})
    send(config)
    assert len(behaving_server.messages) == 3


def test_close_after_250_reconnects_for_the_next_message(behaving_server, tmp_path):
    """A server that answers 250 and then hangs up: the next message goes over a new connection."""
    behaving_server.close_after_reply = {"r0000@example.com", "r0002@example.com"}
    config = prepare(tmp_path, 4, smtp_toml(behaving_server.port))
    _, summary = send(config)
    assert summary.ledger == {"sent": 4} and set(behaving_server.copies.values()) == {1}


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


def test_non_ascii_local_part_fails_alone(behaving_server, tmp_path):
    """An address with a non-ASCII local part fails with a reason; the others are sent."""
    subs = [Subscriber("a@example.com"), Subscriber("用户@example.com"), Subscriber("b@example.com")]
    config = prepare(tmp_path, 0, smtp_toml(behaving_server.port), subscribers=subs)
    send(config)
    rows = ledger(config)
    assert rows["用户@example.com"][0] == "failed" and "SMTPUTF8" in rows["用户@example.com"][2]
    assert sorted(behaving_server.copies) == ["a@example.com", "b@example.com"]


def test_server_that_drips_greeting_lines_fails_within_timeout(tmp_path):
    """A server sending '220-' continuation lines for ever is cut off at the timeout, not waited on."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def drip():
        conn, _ = srv.accept()
        while not stop.is_set():
            try:
                conn.sendall(b"220-still here\r\n")
            except OSError:
                break
            stop.wait(0.3)
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    config = load_config(make_config(tmp_path, transport=f'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\ntimeout = 1'))
    transport = make_transport(config)
    start = time.monotonic()
    with pytest.raises(DeliveryError, match="cannot connect"):
        transport._ensure()
    assert time.monotonic() - start < 3
    stop.set()
    srv.close()


def test_server_that_comes_up_late_is_retried(tmp_path):
    """A refused connection is retried with backoff; the send goes through once the server listens."""
    from aiosmtpd.controller import Controller
    from tests.conftest import SmtpSink, _Handler, free_port

    port = free_port()
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    cfg = make_config(tmp_path, transport=f'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\ntimeout = 2')
    cfg.write_text(cfg.read_text() + "\n[delivery]\nbackoff = 0.5\nmax_attempts = 4\n")
    config = load_config(cfg)
    sink = SmtpSink("127.0.0.1", port)
    ctrl = Controller(_Handler(sink), hostname="127.0.0.1", port=port)
    threading.Timer(0.3, ctrl.start).start()
    try:
        transport = make_transport(config)
        transport._ensure()
        transport.close()
    finally:
        time.sleep(0.1)
        ctrl.stop()


def test_refused_connection_gives_up_after_max_attempts(tmp_path):
    """Nobody listening: the send stops with one 'cannot connect' line after max_attempts tries."""
    from tests.conftest import free_port

    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    cfg = make_config(tmp_path, transport=f'kind = "smtp"\nhost = "127.0.0.1"\nport = {free_port()}\nsecurity = "none"\ntimeout = 1')
    cfg.write_text(cfg.read_text() + "\n[delivery]\nbackoff = 0.05\nmax_attempts = 2\n")
    transport = make_transport(load_config(cfg))
    with pytest.raises(DeliveryError, match="cannot connect"):
        transport._ensure()
