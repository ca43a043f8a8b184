"""Shared test fixtures: a config on disk, a real SMTP server (aiosmtpd) and a real HTTP server on loopback."""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_JSONL = ROOT / "examples" / "vllm-reviews.jsonl"
SECRET = "test-signing-key"


def review(n: int, **over) -> dict:
    """A valid review record number ``n`` (published 2026-11-1x, tags cycle)."""
    rec = {
        "id": f"acme/widgets#{n}",
        "title": f"Review {n}: 改进 widget 缓存",
        "url": f"https://github.com/acme/widgets/pull/{n}",
        "tags": [["ROCm", "性能"], ["CUDA Graph"], ["性能", "CPU"]][n % 3],
        "published": f"2026-11-{10 + n % 15:02d}T10:00:00+08:00",
        "body": f"**Bold** review {n} with `code` and a [link](/files).",
        "summary": f"Verdict {n}.",
        "repo": "acme/widgets",
    }
    rec.update(over)
    return rec


def write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def make_config(dirpath: Path, *, sources: str = 'path = "reviews.jsonl"', transport: str = "",
                email: str = "", site: str = "", feeds: str = "") -> Path:
    """Write a ``newsletter.toml`` in ``dirpath`` and return its path."""
    transport = transport or 'kind = "outbox"\ndir = "outbox"'
    text = f"""
[site]
title = "Widget 评审周报"
base_url = "https://reviews.example.org/"
language = "zh-CN"
timezone = "Asia/Shanghai"
secret_key_env = "NEWSLETTER_TEST_SECRET"
{site}

[[sources]]
{sources}

[store]
path = "state/newsletter.db"

[feeds]
dir = "feeds"
max_entries = 50
{feeds}

[email]
from = "Widget Reviews <reviews@example.org>"
reply_to = "maintainers@example.org"
send_at = "MON 09:00"
unsubscribe_mailto = "unsubscribe@example.org"
{email}

[transport]
{transport}
"""
    path = dirpath / "newsletter.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _secret(monkeypatch):
    monkeypatch.setenv("NEWSLETTER_TEST_SECRET", SECRET)


@pytest.fixture
def site(tmp_path) -> Path:
    """A directory with ``reviews.jsonl`` (6 reviews) and a ``newsletter.toml`` using the outbox."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 7)])
    return make_config(tmp_path)


# --- SMTP -------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SmtpSink:
    """A running aiosmtpd server and what it received."""

    host: str
    port: int
    messages: list = field(default_factory=list)   # (mail_from, rcpt_tos, data bytes)
    cafile: Optional[str] = None
    refuse: dict = field(default_factory=dict)      # address -> "451 ..." / "550 ..."


class _Handler:
    def __init__(self, sink: SmtpSink):
        self.sink = sink

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.sink.refuse:
            return self.sink.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.sink.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content))
        return f"250 2.0.0 Ok: queued as Q{len(self.sink.messages):05d}"


@pytest.fixture
def smtp_sink():
    """Plain SMTP (no TLS, no AUTH) on 127.0.0.1."""
    from aiosmtpd.controller import Controller

    sink = SmtpSink("127.0.0.1", free_port())
    ctrl = Controller(_Handler(sink), hostname="127.0.0.1", port=sink.port)
    ctrl.start()
    yield sink
    ctrl.stop()


@pytest.fixture
def smtp_tls_sink(tmp_path):
    """SMTP with STARTTLS (certificate made by trustme) and AUTH (user ``reviews``, password ``s3cret``)."""
    import trustme
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"reviews" and auth_data.password == b"s3cret"
        return AuthResult(success=ok, handled=False)

    sink = SmtpSink("127.0.0.1", free_port(), cafile=str(cafile))
    ctrl = Controller(_Handler(sink), hostname="127.0.0.1", port=sink.port, tls_context=server_ctx,
                      require_starttls=True, auth_required=True, authenticator=authenticator,
                      auth_exclude_mechanism=["LOGIN"])
    ctrl.start()
    yield sink
    ctrl.stop()


# --- HTTP -------------------------------------------------------------------------

Route = Callable[[BaseHTTPRequestHandler, bytes], tuple]  # -> (status, headers dict, body bytes)


@dataclass
class HttpStub:
    """A running HTTP server: ``routes[(method, path)]`` answers; ``requests`` records what came."""

    url: str
    routes: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)   # (method, path, headers dict, body bytes)


@pytest.fixture
def http_stub():
    """An HTTP/1.1 server on 127.0.0.1; unknown routes answer 404."""
    stub = HttpStub("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            stub.requests.append((self.command, self.path, dict(self.headers), body))
            path = self.path.split("?")[0]
            route = stub.routes.get((self.command, path)) or stub.routes.get((self.command, self.path))
            if route is None:
                status, headers, payload = 404, {}, b"not found"
            else:
                status, headers, payload = route(self, body)
            if isinstance(payload, (dict, list)):
                payload = json.dumps(payload, ensure_ascii=False).encode()
                headers = {"Content-Type": "application/json", **headers}
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_HEAD = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield stub
    server.shutdown()
    server.server_close()
