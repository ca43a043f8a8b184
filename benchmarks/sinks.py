"""Loopback sinks for the delivery benchmarks, each run as its own process (no shared GIL).

``python benchmarks/sinks.py smtp PORT_FILE`` — an aiosmtpd server on 127.0.0.1 that
accepts every message (``250 2.0.0 Ok: queued as Q<n>``) and keeps only counts.

``python benchmarks/sinks.py http PORT_FILE`` — an HTTP/1.1 keep-alive server on
127.0.0.1 answering the provider endpoints the transports call:
``POST /email/batch`` (Postmark: 200 + one result object per message, in order) and
``POST /v3/mail/send`` (SendGrid: 202, empty body, ``X-Message-Id``); it counts
requests, messages and bytes.

The port is written to PORT_FILE once listening. On SIGTERM the process writes its
counts as JSON to ``PORT_FILE + ".stats"`` and exits.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATS = {"messages": 0, "bytes": 0, "requests": 0}


class SmtpCounter:
    """aiosmtpd handler: count and forget."""

    async def handle_DATA(self, server, session, envelope):
        STATS["messages"] += 1
        STATS["bytes"] += len(envelope.original_content or b"")
        return f"250 2.0.0 Ok: queued as Q{STATS['messages']:06d}"


def run_smtp(port_file: Path) -> None:
    from aiosmtpd.controller import Controller

    import socket

    with socket.socket() as s:  # a free port (aiosmtpd's start() cannot probe port 0)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctrl = Controller(SmtpCounter(), hostname="127.0.0.1", port=port,
                      server_kwargs={"data_size_limit": 0})
    ctrl.start()
    _serve_until_term(port_file, port, ctrl.stop)


class ProviderHandler(BaseHTTPRequestHandler):
    """Postmark batch and SendGrid mail-send endpoints, answering success."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        STATS["requests"] += 1
        STATS["bytes"] += len(body)
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/email/batch"):
            items = json.loads(body)
            STATS["messages"] += len(items)
            n = STATS["messages"] - len(items)
            out = json.dumps([{"ErrorCode": 0, "Message": "OK", "MessageID": f"pm-{n + i:06d}",
                               "SubmittedAt": "2026-11-23T09:00:00+08:00", "To": m.get("To", "")}
                              for i, m in enumerate(items)]).encode()
            self._answer(200, out, {"Content-Type": "application/json"})
        elif path.endswith("/v3/mail/send"):
            doc = json.loads(body)
            STATS["messages"] += sum(len(p.get("to", [])) for p in doc.get("personalizations", []))
            self._answer(202, b"", {"X-Message-Id": f"sg-{STATS['requests']:06d}"})
        elif path.endswith("/email"):
            STATS["messages"] += 1
            self._answer(200, json.dumps({"ErrorCode": 0, "Message": "OK",
                                          "MessageID": f"pm-{STATS['messages']:06d}"}).encode(),
                         {"Content-Type": "application/json"})
        else:
            self._answer(404, b"not found", {})

    def _answer(self, status: int, payload: bytes, headers: dict) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def run_http(port_file: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ProviderHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _serve_until_term(port_file, server.server_address[1], server.shutdown)


def _serve_until_term(port_file: Path, port: int, stop) -> None:
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(port))
    tmp.replace(port_file)
    done.wait()
    stop()
    Path(str(port_file) + ".stats").write_text(json.dumps(STATS))


if __name__ == "__main__":
    kind, port_file = sys.argv[1], Path(sys.argv[2])
    {"smtp": run_smtp, "http": run_http}[kind](port_file)
