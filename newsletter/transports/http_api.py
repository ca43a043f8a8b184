"""Shared machinery of the HTTP mail-provider transports (sendgrid, mailgun, postmark, resend).

One :class:`requests.Session` per transport (keep-alive). A provider subclass
says how to split a batch into requests (:meth:`HttpApiTransport.requests_for`),
how to write one request (:meth:`~HttpApiTransport.build`) and how to read a
successful answer (:meth:`~HttpApiTransport.parse`). This module decides what
a failure means, the same way for every provider:

=====================================  ==============================================
what happened                          outcome
=====================================  ==============================================
connection refused / connect timeout   not sent: retried with backoff, then ``retry``
429, 5xx, Resend 409 concurrent        not accepted: retried, waiting ``Retry-After``
                                       (or the rate-limit reset) when given, else
                                       exponential backoff with jitter; then ``retry``
read timeout, connection dropped       maybe accepted: idempotent providers (an
after the request went out             ``Idempotency-Key``) retry the same request;
                                       the others answer ``unknown`` for each message
401, 403, quota exhausted              :class:`DeliveryError`: nothing was accepted,
                                       the run stops (check the key / account)
400, 413, 422 (whole request refused)  split the request in halves until the bad
                                       message is alone; that one is ``failed``
=====================================  ==============================================

Addresses: display names are written per RFC 5322/2047 (quoted when they hold
specials such as commas or quotes, encoded words when not ASCII) with the
address plain; domains are already IDNA (see :mod:`newsletter.message`). None
of the four providers documents internationalised local parts (RFC 6531), so a
recipient with a non-ASCII local part fails alone before any request.
"""

from __future__ import annotations

import hashlib
import html as _html
import secrets
import time
from dataclasses import dataclass, field
from email.header import Header
from email.utils import formataddr, parseaddr
from typing import Any, Callable, Optional, Sequence

import requests
import urllib3

from .. import __version__
from ..config import Config
from ..errors import DeliveryError
from ..models import DeliveryResult, OutgoingMessage
from ..pacing import backoff_delay, rate_limit_exhausted, retry_after_seconds
from . import option

USER_AGENT = f"newsletter/{__version__} (+requests)"


def _sleep(seconds: float) -> None:
    """How transports wait (looked up at call time so tests can record waits instead)."""
    time.sleep(seconds)


@dataclass
class Template:
    """A message body shared by a group of recipients, with per-recipient tokens.

    Attributes:
        key: equal keys mean the same subject, bodies, sender and headers but the tokens.
        subject, html, text: the shared parts; ``html`` holds ``html_tokens`` and
            ``text`` holds ``text_tokens`` (token → variable name).
        values: per-recipient variables (``name`` → value); HTML variables end in ``_html``
            and are already escaped.
        nonce: random part of every variable name of this template (unguessable by content).
    """

    key: str
    subject: str
    html: str
    text: str
    values: dict = field(default_factory=dict)
    nonce: str = ""


def template_of(m: OutgoingMessage, token: Callable[[str], str]) -> Template:
    """The message as a shared template plus its own values.

    ``token(var)`` gives the provider's placeholder for a variable (SendGrid
    ``-var-``, Mailgun ``%recipient.var%``). A message composed without a
    template (``fields["template"]`` missing) becomes a template of its own.
    """
    f = m.fields
    t = f.get("template")
    if not t:
        return Template(key="msg:" + m.message_id, subject=f.get("subject", ""),
                        html=f.get("html", ""), text=f.get("text", ""), nonce=secrets.token_hex(8))
    html_t, text_t = t["html"], t["text"]
    nonce = t["nonce"]
    values: dict[str, str] = {}
    for var, placeholder in t["placeholders"].items():
        # Variable names carry the edition's random nonce: the provider substitutes
        # them anywhere in the body, so review text must not be able to spell one.
        name = f"{var}_{nonce}"
        raw = t["values"].get(var, "")
        html_t = html_t.replace(placeholder, token(name + "_html"))
        text_t = text_t.replace(placeholder, token(name))
        values[name] = raw
        values[name + "_html"] = _html.escape(raw, quote=True)
    extra = "\x00".join(f"{k}:{v}" for k, v in sorted(f.get("headers", {}).items())
                        if k.lower() not in ("list-unsubscribe",))
    key = hashlib.sha256("\x00".join([t["key"], f.get("from", ""), f.get("reply_to", ""), extra])
                         .encode()).hexdigest()
    return Template(key=key, subject=t["subject"], html=html_t, text=text_t, values=values, nonce=nonce)


def header_address(name: str, addr: str) -> str:
    """``Name <addr>`` as an ASCII header value: specials quoted, non-ASCII names as RFC 2047 words."""
    return formataddr((name, addr), charset="utf-8")


def ascii_name(name: str) -> str:
    """A display name safe where a provider forbids ``,``/``;`` or non-ASCII (RFC 2047 encoded word if needed)."""
    if name.isascii() and not any(c in name for c in ',;"'):
        return name
    return Header(name, "utf-8").encode()


def sender_parts(m: OutgoingMessage) -> tuple[str, str]:
    """(display name, address) of the ``From``."""
    name, addr = parseaddr(m.fields.get("from", ""))
    return name, addr or m.sender


@dataclass
class Call:
    """One HTTP request to make: ``requests.Session.request`` keyword arguments plus its path."""

    path: str
    kwargs: dict
    key: str = ""        # idempotency key sent with it, if any


class HttpApiTransport:
    """Base class of the HTTP provider transports.

    Options (``[transport]``): ``api_key_env`` (required; the variable holding the
    key), ``base_url`` (the provider's API root; tests point it at a loopback
    server), ``timeout`` (seconds per request, default 30).
    ``[delivery]``: ``max_attempts``, ``backoff``, ``backoff_max``, ``retry_after_max``.

    Attributes:
        calls: HTTP requests made (for reports and tests).

    Raises:
        ConfigError: missing option or unset key variable.
    """

    name = "http"
    max_batch = 100
    idempotent = False
    idempotency_window: Optional[float] = None   # seconds a provider keeps idempotency keys
    default_base_url = ""

    def __init__(self, config: Config, sleep: Optional[Callable[[float], None]] = None) -> None:
        self.config = config
        self.base_url = option(config, "base_url", str, self.default_base_url).rstrip("/")
        env = option(config, "api_key_env", str, required=True)
        self.api_key = config.secret(env, "[transport] api_key_env")
        self.timeout = float(option(config, "timeout", (int, float), 30))
        d = config.delivery
        self.max_attempts, self.backoff = d.max_attempts, d.backoff
        self.backoff_max, self.retry_after_max = d.backoff_max, d.retry_after_max
        self._sleep = sleep
        self.session = requests.Session()
        self.session.headers["User-Agent"] = USER_AGENT
        self.not_before = 0.0   # time.monotonic() before which no request may start (rate-limit reset)
        self.calls = 0

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (the injected sleep, else :func:`_sleep`)."""
        (self._sleep or _sleep)(seconds)

    # --- provider hooks -----------------------------------------------------------------

    def groups(self, messages: Sequence[OutgoingMessage]) -> list[list[int]]:
        """Indexes of ``messages`` per request (default: runs of ``max_batch``)."""
        idx = list(range(len(messages)))
        return [idx[i:i + self.max_batch] for i in range(0, len(idx), self.max_batch)]

    def groups_by_template(self, messages: Sequence[OutgoingMessage],
                           token: Callable[[str], str]) -> list[list[int]]:
        """For providers that send one shared body per request: one request per edition
        (equal :func:`template_of` keys), at most ``max_batch`` recipients each."""
        by_key: dict[str, list[int]] = {}
        for i, m in enumerate(messages):
            by_key.setdefault(template_of(m, token).key, []).append(i)
        out = []
        for idx in by_key.values():
            out += [idx[j:j + self.max_batch] for j in range(0, len(idx), self.max_batch)]
        return out

    def build(self, messages: Sequence[OutgoingMessage]) -> Call:  # pragma: no cover - abstract
        """The request sending these messages."""
        raise NotImplementedError

    def parse(self, messages: Sequence[OutgoingMessage], resp: requests.Response) -> list[DeliveryResult]:
        """Per-message results of a 2xx answer (default: all sent, no id)."""
        return [DeliveryResult(m.recipient, "sent") for m in messages]

    def classify(self, resp: requests.Response) -> str:
        """``"transient"``, ``"auth"``, ``"split"`` or ``"permanent"`` for a non-2xx answer."""
        code = resp.status_code
        if code == 429 or code >= 500:
            return "transient"
        if code in (401, 403):
            return "auth"
        if code in (400, 413, 422):
            return "split"
        return "permanent"

    def accepts(self, m: OutgoingMessage) -> Optional[str]:
        """Why this recipient cannot go through this provider, or ``None``."""
        local = m.recipient.rpartition("@")[0]
        if not local.isascii():
            return f"non-ASCII local part: {self.name} does not document internationalised addresses (RFC 6531)"
        return None

    # --- the send loop ------------------------------------------------------------------

    def send(self, messages: Sequence[OutgoingMessage]) -> list[DeliveryResult]:
        """Send a batch in as few requests as the provider's caps allow; one result per message, in order.

        Raises:
            DeliveryError: the key was refused or the account cannot send; no
                message of the batch was accepted.
        """
        results: list[Optional[DeliveryResult]] = [None] * len(messages)
        ok: list[int] = []
        for i, m in enumerate(messages):
            why = self.accepts(m)
            if why:
                results[i] = DeliveryResult(m.recipient, "failed", error=why)
            else:
                ok.append(i)
        todo = [messages[i] for i in ok]
        done_any = False
        for group in self.groups(todo):
            try:
                out = self._send_group([todo[i] for i in group])
            except DeliveryError:
                if not done_any:
                    raise
                out = [DeliveryResult(todo[i].recipient, "retry", error="the run stopped: provider refused "
                                      "a later request of this batch") for i in group]
            done_any = True
            for i, r in zip(group, out):
                results[ok[i]] = r
        return [r for r in results if r is not None]

    def _send_group(self, msgs: list[OutgoingMessage]) -> list[DeliveryResult]:
        call = self.build(msgs)
        url = self.base_url + call.path
        last_error, retry_after, maybe_sent = "", None, False
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                delay = retry_after if retry_after is not None else backoff_delay(
                    attempt - 1, self.backoff, self.backoff_max)
                self.sleep(delay)
            wait = self.not_before - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            retry_after = None
            self.calls += 1
            try:
                resp = self.session.post(url, timeout=self.timeout, stream=True, **call.kwargs)
                _read_within(resp, time.monotonic() + self.timeout)
            except requests.exceptions.ConnectTimeout:
                last_error = f"{self.name}: connect timed out after {self.timeout:g} s"
                continue
            except requests.exceptions.ReadTimeout:
                last_error = f"{self.name}: no answer within {self.timeout:g} s"
                if self.idempotent and call.key:
                    maybe_sent = True
                    continue
                return self._unknown(msgs, last_error)
            except requests.exceptions.ConnectionError as exc:
                if _never_sent(exc):
                    last_error = f"{self.name}: cannot connect: {_root(exc)}"
                    continue
                last_error = f"{self.name}: connection lost before the answer: {_root(exc)}"
                if self.idempotent and call.key:
                    maybe_sent = True
                    continue
                return self._unknown(msgs, last_error)
            except requests.exceptions.RequestException as exc:
                raise DeliveryError(f"{self.name} {url}: {exc}") from None
            if rate_limit_exhausted(resp.headers):
                reset = retry_after_seconds(resp.headers) or 1.0
                self.not_before = time.monotonic() + min(reset, self.retry_after_max)
            if 200 <= resp.status_code < 300:
                try:
                    return self.parse(msgs, resp)
                except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                    # Accepted, but the answer is not the documented shape: fate unknown.
                    return self._unknown(msgs, f"{self.name}: HTTP {resp.status_code} with an answer of "
                                               f"unexpected shape ({type(exc).__name__})")
            kind = self.classify(resp)
            detail = self.redact(_error_text(resp))
            last_error = f"{self.name}: HTTP {resp.status_code}: {detail}"
            if kind == "transient":
                retry_after = retry_after_seconds(resp.headers)
                if retry_after is not None and retry_after > self.retry_after_max:
                    return [DeliveryResult(m.recipient, "retry", error=last_error, retry_after=retry_after)
                            for m in msgs]
                continue
            if kind == "unknown":
                return self._unknown(msgs, last_error)
            if kind == "auth":
                raise DeliveryError(f"{self.name} {self.base_url}: HTTP {resp.status_code}: {detail}",
                                    hint="check the API key variable named by [transport] api_key_env "
                                         "and the sender's domain/account")
            if kind == "split" and len(msgs) > 1:
                half = len(msgs) // 2
                return self._send_group(msgs[:half]) + self._send_group(msgs[half:])
            return [DeliveryResult(m.recipient, "failed", error=last_error) for m in msgs]
        if maybe_sent:   # an earlier try may have been accepted: replay it later under the same key
            return self._unknown(msgs, last_error)
        return [DeliveryResult(m.recipient, "retry", error=last_error, retry_after=retry_after) for m in msgs]

    def redact(self, text: str) -> str:
        """Provider text with the API key blanked out (some echo the request's credentials)."""
        return text.replace(self.api_key, "[api key]") if self.api_key else text

    def _unknown(self, msgs: Sequence[OutgoingMessage], error: str) -> list[DeliveryResult]:
        return [DeliveryResult(m.recipient, "unknown", error=error) for m in msgs]

    def close(self) -> None:
        """Close the session's connections."""
        self.session.close()


def _read_within(resp: requests.Response, deadline: float, limit: int = 16 * 2**20) -> None:
    """Read the answer's body by ``deadline`` (``time.monotonic()``), at most ``limit`` bytes.

    ``timeout`` bounds each read only, so a provider dripping bytes could hold a send
    for ever. The body is kept on the response, so ``resp.json()`` works afterwards.

    Raises:
        requests.exceptions.ReadTimeout: the deadline passed or the body is too large.
    """
    chunks, size = [], 0
    try:
        while True:
            try:
                # read1: whatever one socket read brings (read(n) would wait for n bytes)
                chunk = resp.raw.read1(65536, decode_content=True)
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError, OSError) as exc:
                raise requests.exceptions.ConnectionError(f"connection lost while reading the answer: {exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if time.monotonic() > deadline or size > limit:
                raise requests.exceptions.ReadTimeout("answer not complete by the deadline")
    finally:
        resp._content = b"".join(chunks)  # requests' own cache of the body
        resp._content_consumed = True
        resp.close()


def idempotency_key(messages: Sequence[OutgoingMessage], prefix: str = "newsletter") -> str:
    """A key that is the same whenever the same messages are sent again in the same order (≤ 256 chars)."""
    digest = hashlib.sha256("\n".join(m.message_id for m in messages).encode()).hexdigest()
    return f"{prefix}-{digest[:48]}"


def _root(exc: BaseException) -> str:
    seen = exc
    while seen.__cause__ or seen.__context__ or (seen.args and isinstance(seen.args[0], BaseException)):
        nxt = seen.__cause__ or seen.__context__ or seen.args[0]
        if nxt is seen:
            break
        seen = nxt
    text = str(seen) or type(seen).__name__
    return text.splitlines()[0][:200]


def _never_sent(exc: requests.exceptions.ConnectionError) -> bool:
    """True when the error happened while connecting, so the request never left."""
    import urllib3.exceptions as u

    chain: list[Any] = []
    cur: Any = exc
    for _ in range(8):
        if cur is None:
            break
        chain.append(cur)
        nxt = getattr(cur, "reason", None) or cur.__cause__ or cur.__context__
        if nxt is None and cur.args and isinstance(cur.args[0], BaseException):
            nxt = cur.args[0]
        cur = nxt
    return any(isinstance(c, (u.NewConnectionError, u.ConnectTimeoutError, ConnectionRefusedError))
               for c in chain)


def _error_text(resp: requests.Response) -> str:
    """One line from a provider's error body (JSON ``message``/``Message``/``errors``) or the status text."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    text = ""
    if isinstance(body, dict):
        if isinstance(body.get("errors"), list) and body["errors"]:
            first = body["errors"][0]
            text = first.get("message", "") if isinstance(first, dict) else str(first)
        text = text or str(body.get("message") or body.get("Message") or body.get("name") or "")
    if not text:
        text = (resp.text or resp.reason or "").strip()
    return " ".join(text.split())[:200]
