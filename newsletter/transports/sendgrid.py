"""The ``sendgrid`` transport: SendGrid v3 Mail Send (``POST /v3/mail/send``).

One request carries one shared body and up to 1,000 ``personalizations``
(SendGrid caps a request at 1,000 personalizations and 1,000 recipients in all),
one per recipient, so nobody sees another address [twilio.com/docs/sendgrid
…/personalizations]. The per-recipient parts of the body (name, unsubscribe and
preferences links) are SendGrid ``substitutions`` (≤ 10,000 bytes each);
``List-Unsubscribe`` is a per-personalization header (allowed: it is not among the
headers SendGrid reserves). ``content`` lists ``text/plain`` before ``text/html``
(SendGrid rejects the other order). Messages of different editions go in
different requests. ``Authorization: Bearer <key>``; success is ``202`` with the
request id in ``X-Message-Id``; errors are ``{"errors": [{"message": …}]}``.
SendGrid has no idempotency key, so a request whose answer was lost is ``unknown``.
"""

from __future__ import annotations

from typing import Sequence

import requests

from ..models import DeliveryResult, OutgoingMessage
from . import register
from .http_api import Call, HttpApiTransport, ascii_name, sender_parts, template_of

RESERVED = {"x-sg-id", "x-sg-eid", "received", "dkim-signature", "content-type",
            "content-transfer-encoding", "to", "from", "subject", "reply-to", "cc", "bcc"}


def _token(var: str) -> str:
    return f"-nl-{var}-"


@register("sendgrid")
class SendGridTransport(HttpApiTransport):
    """SendGrid v3; options ``api_key_env``, ``base_url`` (default ``https://api.sendgrid.com``;
    EU subusers ``https://api.eu.sendgrid.com``), ``timeout``, ``category`` (optional)."""

    name = "sendgrid"
    max_batch = 1000
    default_base_url = "https://api.sendgrid.com"

    def groups(self, messages: Sequence[OutgoingMessage]) -> list[list[int]]:
        """One request per edition, ≤ 1,000 recipients each."""
        return self.groups_by_template(messages, _token)

    def build(self, messages: Sequence[OutgoingMessage]) -> Call:
        """The Mail Send body: shared ``from``/``subject``/``content``, a personalization per recipient."""
        first = messages[0]
        t = template_of(first, _token)
        name, addr = sender_parts(first)
        body: dict = {
            "from": {"email": addr, **({"name": ascii_name(name)} if name else {})},
            "subject": t.subject,
            "content": [{"type": "text/plain", "value": t.text}, {"type": "text/html", "value": t.html}],
            "personalizations": [],
        }
        if first.fields.get("reply_to"):
            body["reply_to"] = {"email": parseaddr_email(first.fields["reply_to"])}
        category = self.config.transport.options.get("category")
        if isinstance(category, str) and category:
            body["categories"] = [category]
        for m in messages:
            mt = template_of(m, _token)
            to = {"email": m.recipient}
            if m.fields.get("to_name"):
                to["name"] = ascii_name(m.fields["to_name"])
            p: dict = {"to": [to],
                       "headers": {k: v for k, v in m.fields.get("headers", {}).items()
                                   if k.lower() not in RESERVED},
                       "custom_args": {"message_id": m.message_id}}
            if mt.values:
                p["substitutions"] = {_token(k): v for k, v in mt.values.items()}
            body["personalizations"].append(p)
        return Call("/v3/mail/send", {"json": body, "headers": {"Authorization": f"Bearer {self.api_key}"}})

    def parse(self, messages: Sequence[OutgoingMessage], resp: requests.Response) -> list[DeliveryResult]:
        """``202``: every personalization accepted; the provider id is ``X-Message-Id``."""
        mid = resp.headers.get("X-Message-Id", "")
        return [DeliveryResult(m.recipient, "sent", provider_id=mid) for m in messages]


def parseaddr_email(value: str) -> str:
    """The bare address of ``Name <addr>`` or ``addr``."""
    from email.utils import parseaddr

    return parseaddr(value)[1] or value
