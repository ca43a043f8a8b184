"""Fake mail providers on the loopback ``http_stub``: each checks requests against the provider's
documented schema (method, path, auth, fields, batch caps), delivers per recipient into ``inbox``,
and injects faults queued in ``faults``.

Faults (one is taken per request, in order):
``("status", code, headers, body)`` answer without delivering; ``("slow", seconds)`` deliver,
then answer late; ``("drop",)`` deliver, then close the connection without an answer;
``("drop-before",)`` close without delivering.
"""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib
import io
import json
import re
import socket
import threading
import time
from collections import Counter
from email.header import decode_header, make_header
from email.utils import getaddresses, parseaddr

KEY = "test-api-key-123"


def decoded(value: str) -> str:
    """An RFC 2047 header value decoded to text."""
    return str(make_header(decode_header(value)))


class FakeProvider:
    """Base: routing, auth, fault injection and the per-recipient inbox."""

    path = "/"
    cap = 0

    def __init__(self, stub):
        self.stub = stub
        self.inbox: list[dict] = []          # one dict per delivered message: to, name, subject, html, text, headers
        self.problems: list[str] = []        # schema violations seen
        self.faults: list[tuple] = []
        self.batch_sizes: list[int] = []
        self.lock = threading.Lock()
        self.on_request = None               # optional hook(fake, n_request) called before answering
        stub.routes[("POST", self.path)] = self.route

    @property
    def copies(self) -> Counter:
        return Counter(m["to"] for m in self.inbox)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def route(self, handler, body: bytes):
        with self.lock:
            fault = self.faults.pop(0) if self.faults else None
        if fault and fault[0] == "status":
            return fault[1], fault[2], fault[3]
        if fault and fault[0] == "drop-before":
            return self._drop(handler)
        if fault and fault[0] == "drip":
            return self._drip(handler, fault[1], fault[2])
        try:
            status, headers, payload = self.handle(handler, body)
        except Exception as exc:  # a schema violation
            self.problem(f"{type(exc).__name__}: {exc}")
            return 400, {}, {"message": f"bad request: {exc}"}
        if self.on_request:
            self.on_request(self, len(self.batch_sizes))
        if fault and fault[0] == "slow":
            time.sleep(fault[1])
        if fault and fault[0] == "drop":
            return self._drop(handler)
        return status, headers, payload

    @staticmethod
    def _drip(handler, interval: float, seconds: float):
        """Answer 200 one byte every ``interval`` seconds for ``seconds``, then hang up."""
        try:
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            handler.wfile.flush()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(interval)
        except OSError:
            pass
        return FakeProvider._drop(handler)

    @staticmethod
    def _drop(handler):
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        handler.close_connection = True
        handler.wfile = io.BytesIO()   # the answer goes nowhere
        return 200, {}, b""

    def deliver(self, **msg) -> None:
        with self.lock:
            self.inbox.append(msg)

    def handle(self, handler, body: bytes):  # pragma: no cover - abstract
        raise NotImplementedError


def _check(cond: bool, text: str) -> None:
    if not cond:
        raise AssertionError(text)


class FakeSendGrid(FakeProvider):
    """SendGrid v3 Mail Send: personalizations with substitutions; whole-request 400 on a rejected address."""

    path = "/v3/mail/send"
    cap = 1000
    RESERVED = {"x-sg-id", "x-sg-eid", "received", "dkim-signature", "content-type",
                "content-transfer-encoding", "to", "from", "subject", "reply-to", "cc", "bcc"}

    def __init__(self, stub):
        super().__init__(stub)
        self.reject: set[str] = set()

    def handle(self, handler, body):
        _check(handler.headers.get("Authorization") == f"Bearer {KEY}", "Authorization: Bearer <key>")
        _check(handler.headers.get("Content-Type", "").startswith("application/json"), "JSON body")
        doc = json.loads(body)
        _check(isinstance(doc.get("from"), dict) and "@" in doc["from"]["email"], "from.email")
        _check(doc["from"].get("name", "").isascii(), "no Unicode in from")
        types = [c["type"] for c in doc["content"]]
        _check(types == ["text/plain", "text/html"], f"content order {types}")
        ps = doc["personalizations"]
        _check(1 <= len(ps) <= 1000, f"{len(ps)} personalizations")
        tos = [t["email"] for p in ps for t in p["to"] + p.get("cc", []) + p.get("bcc", [])]
        _check(len(tos) <= 1000, "≤ 1000 recipients")
        _check(len(tos) == len(set(t.lower() for t in tos)), "each address once")
        self.batch_sizes.append(len(ps))
        bad = [t for t in tos if t in self.reject]
        if bad:
            return 400, {}, {"errors": [{"message": f"Does not contain a valid address: {bad[0]}",
                                         "field": "personalizations.0.to", "help": None}]}
        for p in ps:
            _check(len(p["to"]) == 1, "one recipient per personalization")
            to = p["to"][0]
            _check(not any(c in to.get("name", "") for c in ",;"), "no , or ; in to.name")
            for k, v in p.get("headers", {}).items():
                _check(k.lower() not in self.RESERVED and isinstance(v, str), f"header {k}")
            subs = p.get("substitutions", {})
            _check(len(json.dumps(subs).encode()) <= 10_000, "substitutions ≤ 10,000 bytes")
            text, html = doc["content"][0]["value"], doc["content"][1]["value"]
            for k, v in subs.items():
                text, html = text.replace(k, v), html.replace(k, v)
            self.deliver(to=to["email"], name=decoded(to.get("name", "")), subject=doc["subject"], html=html,
                         text=text, headers=p.get("headers", {}))
        return 202, {"X-Message-Id": f"sg{len(self.batch_sizes)}"}, b""


class FakeMailgun(FakeProvider):
    """Mailgun messages API: multipart form, repeated ``to`` plus ``recipient-variables``."""

    domain = "mg.example.org"
    path = f"/v3/{domain}/messages"
    cap = 1000

    def __init__(self, stub):
        super().__init__(stub)
        self.reject: set[str] = set()

    def handle(self, handler, body):
        auth = handler.headers.get("Authorization", "")
        _check(auth == "Basic " + base64.b64encode(f"api:{KEY}".encode()).decode(), "Basic api:<key>")
        ctype = handler.headers.get("Content-Type", "")
        _check(ctype.startswith("multipart/form-data"), "multipart/form-data")
        msg = email.message_from_bytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body,
                                       policy=email.policy.HTTP)
        form: list[tuple[str, str]] = []
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            form.append((name, part.get_payload(decode=True).decode("utf-8")))
        one = {k: v for k, v in form}
        tos = [v for k, v in form if k == "to"]
        _check(1 <= len(tos) <= 1000, f"{len(tos)} recipients")
        for k in ("from", "subject", "html", "text", "recipient-variables"):
            _check(k in one, f"field {k}")
        opts = sum(len(k) + len(v.encode()) for k, v in form if k[:2] in ("o:", "h:", "v:", "t:"))
        _check(opts <= 16_000, "o:/h:/v: options ≤ 16 kB")
        rv = json.loads(one["recipient-variables"])
        self.batch_sizes.append(len(tos))
        addrs = [parseaddr(t)[1] for t in tos]
        _check(sorted(rv) == sorted(addrs), "recipient-variables keyed by every plain address")
        bad = [a for a in addrs if a in self.reject]
        if bad:
            return 400, {}, {"message": f"to parameter is not a valid address: {bad[0]}"}
        headers = {k[2:]: v for k, v in form if k.startswith("h:")}
        for t, a in zip(tos, addrs):
            def sub(text):
                return re.sub(r"%recipient\.([A-Za-z0-9_]+)%", lambda m: str(rv[a].get(m.group(1), "")), text)
            self.deliver(to=a, name=decoded(getaddresses([t])[0][0]), subject=sub(one["subject"]),
                         html=sub(one["html"]), text=sub(one["text"]),
                         headers={k: sub(v) for k, v in headers.items()})
        return 200, {}, {"id": f"<{len(self.batch_sizes)}.batch@{self.domain}>", "message": "Queued. Thank you."}


class FakePostmark(FakeProvider):
    """Postmark /email/batch: array in, array out (200 even when some fail)."""

    path = "/email/batch"
    cap = 500

    def __init__(self, stub):
        super().__init__(stub)
        self.inactive: set[str] = set()
        self.busy: set[str] = set()     # answer ErrorCode 429 for these (once)

    def handle(self, handler, body):
        _check(handler.headers.get("X-Postmark-Server-Token") == KEY, "X-Postmark-Server-Token")
        _check(handler.headers.get("Accept") == "application/json", "Accept: application/json")
        _check(len(body) <= 50_000_000, "≤ 50 MB")
        items = json.loads(body)
        _check(isinstance(items, list) and 1 <= len(items) <= 500, f"{len(items)} messages")
        self.batch_sizes.append(len(items))
        out = []
        for it in items:
            for k in ("From", "To", "Subject", "MessageStream"):
                _check(isinstance(it.get(k), str) and it[k], f"field {k}")
            _check("HtmlBody" in it or "TextBody" in it, "a body")
            _check(isinstance(it.get("Headers", []), list)
                   and all(set(h) == {"Name", "Value"} for h in it.get("Headers", [])), "Headers [{Name, Value}]")
            rcpts = getaddresses([it["To"]])
            _check(len(rcpts) == 1, "one recipient per message")
            name, addr = rcpts[0]
            if addr in self.inactive:
                out.append({"ErrorCode": 406, "Message": "You tried to send to a recipient that has been "
                                                         "marked as inactive."})
                continue
            if addr in self.busy:
                self.busy.discard(addr)
                out.append({"ErrorCode": 429, "Message": "Rate limit exceeded."})
                continue
            self.deliver(to=addr, name=decoded(name), subject=it["Subject"], html=it.get("HtmlBody", ""),
                         text=it.get("TextBody", ""), headers={h["Name"]: h["Value"] for h in it["Headers"]})
            out.append({"ErrorCode": 0, "Message": "OK", "MessageID": f"pm-{len(self.inbox)}",
                        "SubmittedAt": "2026-11-30T10:00:00+08:00", "To": it["To"]})
        return 200, {}, out


class FakeResend(FakeProvider):
    """Resend /emails/batch with Idempotency-Key replay and permissive validation."""

    path = "/emails/batch"
    cap = 100

    def __init__(self, stub):
        super().__init__(stub)
        self.invalid: set[str] = set()
        self.keys: dict[str, tuple[str, tuple]] = {}
        self.replays = 0
        self.rate_headers: dict = {}

    def handle(self, handler, body):
        _check(handler.headers.get("Authorization") == f"Bearer {KEY}", "Authorization: Bearer <key>")
        key = handler.headers.get("Idempotency-Key", "")
        _check(0 < len(key) <= 256, "Idempotency-Key ≤ 256 chars")
        mode = handler.headers.get("x-batch-validation", "strict")
        items = json.loads(body)
        _check(isinstance(items, list) and 1 <= len(items) <= 100, f"{len(items)} emails")
        digest = hashlib.sha256(body).hexdigest()
        with self.lock:
            if key in self.keys:
                if self.keys[key][0] != digest:
                    return 409, {}, {"statusCode": 409, "name": "invalid_idempotent_request",
                                     "message": "Same idempotency key used with a different request payload."}
                self.replays += 1
                return self.keys[key][1]
        self.batch_sizes.append(len(items))
        data, errors = [], []
        for i, it in enumerate(items):
            for k in ("from", "subject", "html"):
                _check(isinstance(it.get(k), str) and it[k], f"field {k}")
            _check(isinstance(it["to"], list) and len(it["to"]) == 1, "one recipient per email")
            _check(all(isinstance(v, str) for v in it.get("headers", {}).values()), "headers str → str")
            name, addr = getaddresses(it["to"])[0]
            if addr in self.invalid:
                if mode != "permissive":
                    return 422, {}, {"statusCode": 422, "name": "validation_error", "message": "invalid to"}
                errors.append({"index": i, "message": f"emails.{i}: Invalid `to` field."})
                continue
            self.deliver(to=addr, name=decoded(name), subject=it["subject"], html=it["html"],
                         text=it.get("text", ""), headers=it.get("headers", {}))
            data.append({"id": f"re-{len(self.inbox)}"})
        answer = (200, dict(self.rate_headers), {"data": data, **({"errors": errors} if errors else {})})
        with self.lock:
            self.keys[key] = (digest, answer)
        return answer


FAKES = {"sendgrid": FakeSendGrid, "mailgun": FakeMailgun, "postmark": FakePostmark, "resend": FakeResend}


def transport_toml(kind: str, url: str, *, timeout: float = 2.0) -> str:
    """The ``[transport]`` table for a fake provider at ``url``."""
    extra = f'domain = "{FakeMailgun.domain}"\n' if kind == "mailgun" else ""
    return (f'kind = "{kind}"\napi_key_env = "NEWSLETTER_TEST_API_KEY"\nbase_url = "{url}"\n'
            f"timeout = {timeout}\n{extra}")


# --- a site with many subscribers, sent through the library ---------------------------------

from datetime import datetime, timezone  # noqa: E402

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)   # Monday 10:00 in Asia/Shanghai: 2026-W48 is due
FAST = "\n[delivery]\nbackoff = 0.01\nbackoff_max = 0.05\n"


def prepare(tmp_path, n: int, transport: str, delivery: str = "", subscribers=None):
    """A config with 6 reviews gathered and ``n`` subscribers ``r0000@example.com``…; returns the Config."""
    from tests.conftest import make_config, review, write_jsonl
    from newsletter.config import load_config
    from newsletter.gather import gather
    from newsletter.models import Subscriber
    from newsletter.store import Store

    write_jsonl(tmp_path / "reviews.jsonl", [review(i) for i in range(1, 7)])
    path = make_config(tmp_path, transport=transport + FAST + delivery)
    config = load_config(path)
    subs = subscribers if subscribers is not None else [Subscriber(f"r{i:04d}@example.com", f"Reader {i}")
                                                        for i in range(n)]
    with Store(config.store_path) as store:
        gather(config, store, NOW)
        with store.transaction():
            for s in subs:
                store.upsert_subscriber(s, NOW)
    return config


def send(config, **kw):
    """``send_issue`` at :data:`NOW`; returns (issue, summary)."""
    from newsletter.job import send_issue

    return send_issue(config, lambda: NOW, **kw)


def ledger(config) -> dict:
    """email → (status, provider_id, error) for the due issue."""
    from newsletter.store import Store

    with Store(config.store_path) as store:
        return {r["email"]: (r["status"], r["provider_id"], r["error"])
                for r in store.db.execute("SELECT * FROM deliveries")}
