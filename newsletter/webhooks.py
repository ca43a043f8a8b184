"""Bounce and complaint webhooks of mail providers → the suppression list.

``POST /webhooks/<provider>`` (served by :mod:`newsletter.web`) hands the raw
request to :func:`handle`, which checks the provider's proof of origin and turns
the payload into :class:`Event` objects; the caller suppresses each address
(``Store.suppress``). A provider is switched on by setting the environment
variable named in ``[webhooks]`` (see :class:`~newsletter.config.WebhooksConfig`).

Proof of origin, per provider (sources in /work/notes/providers.md):

- **SendGrid** Event Webhook: ECDSA (P-256) signature, base64 ASN.1 DER, in
  ``X-Twilio-Email-Event-Webhook-Signature`` over SHA-256(timestamp + raw body),
  timestamp in ``X-Twilio-Email-Event-Webhook-Timestamp``; the verification key is
  SendGrid's ``public_key`` (base64 DER, or PEM). Body: a JSON array of events.
- **Mailgun**: ``signature = hex(HMAC-SHA256(signing key, timestamp + token))`` inside
  the JSON body's ``signature`` object; the event in ``event-data``.
- **Postmark** signs nothing: the webhook URL carries HTTP basic auth
  (``https://user:pass@host/webhooks/postmark``); the variable holds ``user:pass``.
- **Resend** (Svix): ``svix-signature`` holds space-separated ``v1,<base64>``
  HMAC-SHA256 over ``"{svix-id}.{svix-timestamp}.{raw body}"`` with the key
  ``base64decode(secret without "whsec_")``.

Timestamps (SendGrid, Mailgun, Resend) more than ``[webhooks] max_age`` seconds
(default 300, the Svix library's tolerance) away from now are refused as replays.
Events that do not suppress (deliveries, opens, soft bounces) are ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping, Optional

from .config import Config


@dataclass(frozen=True)
class Event:
    """One suppression from a provider.

    Attributes:
        email: the recipient address.
        status: ``bounced``, ``complained`` or ``unsubscribed``.
        event_id: the provider's id for the event (dedupe key), possibly empty.
        detail: a short reason for the log.
    """

    email: str
    status: str
    event_id: str = ""
    detail: str = ""


class WebhookRefused(Exception):
    """The request is not accepted.

    Attributes:
        status: HTTP status to answer: 400 malformed, 401 bad or missing proof of origin,
            404 provider unknown or not configured.
        message: one line for the response body (never contains the secret).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


Headers = Mapping[str, str]


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise WebhookRefused(400, "body is not JSON") from None


def _fresh(timestamp: str, now: datetime, max_age: int) -> None:
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        raise WebhookRefused(401, "missing or malformed timestamp") from None
    if abs(now.timestamp() - ts) > max_age:
        raise WebhookRefused(401, "timestamp outside the accepted window (replay?)")


# --- SendGrid --------------------------------------------------------------------------

def sendgrid_public_key(text: str):
    """Load SendGrid's verification key: PEM, or the bare base64 DER that SendGrid shows.

    Raises:
        ValueError: not an EC public key.
    """
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key

    text = text.strip()
    if "BEGIN PUBLIC KEY" in text:
        key = load_pem_public_key(text.encode())
    else:
        try:
            key = load_der_public_key(base64.b64decode(text, validate=False))
        except binascii.Error:
            raise ValueError("not base64") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("not an elliptic-curve public key")
    return key


def verify_sendgrid(headers: Headers, body: bytes, secret: str, now: datetime, max_age: int) -> None:
    """Check SendGrid's ECDSA signature (``cryptography``).

    Raises:
        WebhookRefused: 401 when the signature or timestamp is missing, stale or wrong.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    sig = headers.get("X-Twilio-Email-Event-Webhook-Signature") or ""
    ts = headers.get("X-Twilio-Email-Event-Webhook-Timestamp") or ""
    if not sig or not ts:
        raise WebhookRefused(401, "missing SendGrid signature headers")
    _fresh(ts, now, max_age)
    try:
        key = sendgrid_public_key(secret)
    except ValueError:
        raise WebhookRefused(500, "the configured SendGrid verification key is not a valid EC public key") from None
    try:
        key.verify(base64.b64decode(sig), ts.encode() + body, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, binascii.Error, ValueError):
        raise WebhookRefused(401, "bad SendGrid signature") from None


_SENDGRID_DROPPED = {"bounced address": "bounced", "spam reporting address": "complained",
                     "unsubscribed address": "unsubscribed"}


def events_sendgrid(headers: Headers, body: bytes) -> list[Event]:
    """Events from a SendGrid Event Webhook array: ``bounce`` (not ``type: blocked``) → bounced,
    ``spamreport`` → complained, ``unsubscribe``/``group_unsubscribe`` → unsubscribed,
    ``dropped`` for a suppressed address → that suppression."""
    data = _json(body)
    if not isinstance(data, list):
        raise WebhookRefused(400, "SendGrid posts a JSON array of events")
    out = []
    for ev in data:
        if not isinstance(ev, dict) or not isinstance(ev.get("email"), str):
            continue
        kind, status = ev.get("event"), None
        if kind == "bounce" and ev.get("type", "bounce") != "blocked":
            status = "bounced"
        elif kind == "spamreport":
            status = "complained"
        elif kind in ("unsubscribe", "group_unsubscribe"):
            status = "unsubscribed"
        elif kind == "dropped":
            status = _SENDGRID_DROPPED.get(str(ev.get("reason", "")).strip().lower())
        if status:
            out.append(Event(ev["email"], status, str(ev.get("sg_event_id", "")),
                             f"{kind}: {ev.get('reason', '')}".strip(": ")))
    return out


# --- Mailgun ---------------------------------------------------------------------------

def verify_mailgun(headers: Headers, body: bytes, secret: str, now: datetime, max_age: int) -> None:
    """Check Mailgun's ``signature`` object: hex HMAC-SHA256(signing key, timestamp + token).

    Raises:
        WebhookRefused: 400 malformed, 401 wrong or stale.
    """
    data = _json(body)
    sig = data.get("signature") if isinstance(data, dict) else None
    if not isinstance(sig, dict):
        raise WebhookRefused(401, "missing Mailgun signature object")
    ts, token, given = (str(sig.get(k, "")) for k in ("timestamp", "token", "signature"))
    _fresh(ts, now, max_age)
    want = hmac.new(secret.encode(), (ts + token).encode(), hashlib.sha256).hexdigest()
    if not given or not hmac.compare_digest(want, given):
        raise WebhookRefused(401, "bad Mailgun signature")


def events_mailgun(headers: Headers, body: bytes) -> list[Event]:
    """Events from a Mailgun webhook: ``failed`` with ``severity: permanent`` → bounced,
    ``complained`` → complained, ``unsubscribed`` → unsubscribed."""
    data = _json(body)
    ev = data.get("event-data")
    if not isinstance(ev, dict) or not isinstance(ev.get("recipient"), str):
        return []
    # The signature covers only timestamp + token, not the event: the token is the event's
    # id here, so a captured signature cannot be replayed with another recipient (Mailgun
    # advises caching tokens to refuse reuse).
    token = str((data.get("signature") or {}).get("token", ""))
    kind = ev.get("event")
    status = {"complained": "complained", "unsubscribed": "unsubscribed"}.get(kind)
    if kind == "failed" and ev.get("severity") == "permanent":
        status = "bounced"
    if not status:
        return []
    return [Event(ev["recipient"], status, "token:" + token if token else str(ev.get("id", "")),
                  f"{kind}: {ev.get('reason', '')}".strip(": "))]


# --- Postmark --------------------------------------------------------------------------

def verify_postmark(headers: Headers, body: bytes, secret: str, now: datetime, max_age: int) -> None:
    """Check HTTP basic auth against ``user:password`` (Postmark signs nothing).

    Raises:
        WebhookRefused: 401 missing or wrong credentials.
    """
    auth = headers.get("Authorization") or ""
    scheme, _, value = auth.partition(" ")
    if scheme.lower() != "basic" or not value:
        raise WebhookRefused(401, "Postmark webhook needs basic auth")
    try:
        given = base64.b64decode(value.strip(), validate=True)
    except binascii.Error:
        raise WebhookRefused(401, "malformed basic auth") from None
    if not hmac.compare_digest(given, secret.encode()):
        raise WebhookRefused(401, "wrong Postmark webhook credentials")


_POSTMARK_HARD = {"HardBounce", "BadEmailAddress", "ManuallyDeactivated"}
_POSTMARK_REASON = {"HardBounce": "bounced", "SpamComplaint": "complained", "ManualSuppression": "unsubscribed"}


def events_postmark(headers: Headers, body: bytes) -> list[Event]:
    """Events from one Postmark webhook object: ``Bounce`` of a hard type (or leaving the
    address ``Inactive``) → bounced; ``SpamComplaint`` → complained;
    ``SubscriptionChange`` with ``SuppressSending`` → by ``SuppressionReason``."""
    ev = _json(body)
    if not isinstance(ev, dict):
        raise WebhookRefused(400, "Postmark posts one JSON object")
    record, btype = ev.get("RecordType"), ev.get("Type")
    email = ev.get("Email") or ev.get("Recipient")
    if not isinstance(email, str):
        return []
    status = None
    if record == "SpamComplaint" or btype == "SpamComplaint":
        status = "complained"
    elif record == "Bounce" and (btype in _POSTMARK_HARD or ev.get("Inactive") is True):
        status = "bounced"
    elif record == "SubscriptionChange" and ev.get("SuppressSending") is True:
        status = _POSTMARK_REASON.get(ev.get("SuppressionReason"), "unsubscribed")
    if not status:
        return []
    eid = str(ev.get("ID") or f"{record}:{ev.get('MessageID', '')}:{email}")
    return [Event(email, status, eid, f"{record}: {btype or ev.get('SuppressionReason') or ''}".strip(": "))]


# --- Resend (Svix) ---------------------------------------------------------------------

def verify_resend(headers: Headers, body: bytes, secret: str, now: datetime, max_age: int) -> None:
    """Check a Svix signature: any ``v1,<base64>`` of HMAC-SHA256(key, ``id.timestamp.body``).

    Raises:
        WebhookRefused: 401 missing, stale or wrong; 500 when the configured secret is not base64.
    """
    sid, ts, sigs = (headers.get(h) or "" for h in ("svix-id", "svix-timestamp", "svix-signature"))
    if not sid or not ts or not sigs:
        raise WebhookRefused(401, "missing Svix signature headers")
    _fresh(ts, now, max_age)
    raw = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    try:
        key = base64.b64decode(raw, validate=True)
    except binascii.Error:
        raise WebhookRefused(500, "the configured Resend webhook secret is not whsec_<base64>") from None
    want = base64.b64encode(hmac.new(key, f"{sid}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
    for entry in sigs.split():
        version, _, value = entry.partition(",")
        if version == "v1" and hmac.compare_digest(value, want):
            return
    raise WebhookRefused(401, "bad Svix signature")


def events_resend(headers: Headers, body: bytes) -> list[Event]:
    """Events from a Resend webhook: ``email.bounced`` → bounced, ``email.complained`` → complained
    (every address in ``data.to``)."""
    ev = _json(body)
    if not isinstance(ev, dict):
        raise WebhookRefused(400, "Resend posts one JSON object")
    status = {"email.bounced": "bounced", "email.complained": "complained"}.get(ev.get("type"))
    data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
    to = data.get("to")
    to = [to] if isinstance(to, str) else (to if isinstance(to, list) else [])
    if not status:
        return []
    sid = headers.get("svix-id") or str(data.get("email_id", ""))
    bounce = data.get("bounce") if isinstance(data.get("bounce"), dict) else {}
    detail = f"{ev.get('type')}: {bounce.get('message', '')}".strip(": ")
    return [Event(addr, status, f"{sid}:{addr}" if sid else "", detail) for addr in to if isinstance(addr, str)]


@dataclass(frozen=True)
class Provider:
    """How one provider proves origin and shapes its events."""

    env_attr: str
    verify: Callable[[Headers, bytes, str, datetime, int], None]
    events: Callable[[Headers, bytes], list[Event]]


PROVIDERS: dict[str, Provider] = {
    "sendgrid": Provider("sendgrid_key_env", verify_sendgrid, events_sendgrid),
    "mailgun": Provider("mailgun_key_env", verify_mailgun, events_mailgun),
    "postmark": Provider("postmark_auth_env", verify_postmark, events_postmark),
    "resend": Provider("resend_secret_env", verify_resend, events_resend),
}


def handle(config: Config, provider: str, headers: Headers, body: bytes, now: datetime,
           environ: Optional[Mapping[str, str]] = None) -> list[Event]:
    """Verify one webhook request and return its suppression events.

    Args:
        config: the configuration (``[webhooks]`` names the secrets' variables).
        provider: ``sendgrid``, ``mailgun``, ``postmark`` or ``resend``.
        headers: request headers (case-insensitive mapping).
        body: the raw request body, exactly as received.
        now: aware current time (timestamp window).
        environ: where secrets are read (default ``os.environ``).

    Raises:
        WebhookRefused: unknown or unconfigured provider (404), bad proof (401), malformed body (400).
    """
    p = PROVIDERS.get(provider)
    if p is None:
        raise WebhookRefused(404, f"unknown provider {provider!r}")
    env_name = getattr(config.webhooks, p.env_attr)
    secret = (environ if environ is not None else os.environ).get(env_name, "")
    if not secret:
        # Same answer as an unknown provider: outsiders learn nothing about the configuration.
        raise WebhookRefused(404, f"unknown provider {provider!r}")
    p.verify(headers, body, secret, now, config.webhooks.max_age)
    return p.events(headers, body)
