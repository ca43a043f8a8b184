"""The ``mailgun`` transport: Mailgun Messages API (``POST /v3/<domain>/messages``, multipart form).

Batch sending: ``to`` repeated once per recipient (≤ 1,000 per request) plus
``recipient-variables``, a JSON object keyed by bare address; with it Mailgun
sends each recipient their own copy and nobody sees the other addresses
[documentation.mailgun.com …/sending-messages/batch-sending]. The per-recipient
parts of the body are ``%recipient.<var>%`` placeholders, and so is the
``h:List-Unsubscribe`` header (the way django-anymail does per-recipient headers;
Mailgun's own pages do not say so for headers). Messages of different
editions go in different requests. HTTP Basic auth, user ``api``. Success is
``200 {"id": "<…>", "message": "Queued. Thank you."}``: the one id is shared by
the whole batch. Region: ``base_url`` ``https://api.mailgun.net`` (US) or
``https://api.eu.mailgun.net`` (EU), or ``region = "eu"``. Mailgun has no
idempotency key, so a request whose answer was lost is ``unknown``.
"""

from __future__ import annotations

import json
from typing import Sequence

import requests

from ..errors import ConfigError
from ..models import DeliveryResult, OutgoingMessage
from . import option, register
from .http_api import Call, HttpApiTransport, header_address, sender_parts, template_of

REGIONS = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}


def _token(var: str) -> str:
    return f"%recipient.{var}%"


@register("mailgun")
class MailgunTransport(HttpApiTransport):
    """Mailgun; options ``api_key_env``, ``domain`` (required: the sending domain), ``region``
    (``us`` default, or ``eu``), ``base_url`` (overrides ``region``), ``timeout``, ``tag`` (optional)."""

    name = "mailgun"
    max_batch = 1000

    def __init__(self, config, **kw) -> None:
        region = option(config, "region", str, "us")
        if region not in REGIONS:
            raise ConfigError(f"{config.path}: [transport] region must be us or eu, got {region!r}")
        self.default_base_url = REGIONS[region]
        super().__init__(config, **kw)
        self.domain = option(config, "domain", str, required=True)

    def groups(self, messages: Sequence[OutgoingMessage]) -> list[list[int]]:
        """One request per edition, ≤ 1,000 recipients each."""
        return self.groups_by_template(messages, _token)

    def build(self, messages: Sequence[OutgoingMessage]) -> Call:
        """The form: shared parts, ``to`` per recipient, ``recipient-variables``, ``h:`` headers."""
        first = messages[0]
        t = template_of(first, _token)
        name, addr = sender_parts(first)
        fields: list[tuple[str, str]] = [("from", header_address(name, addr)), ("subject", t.subject),
                                         ("text", t.text), ("html", t.html)]
        variables: dict[str, dict] = {}
        for m in messages:
            fields.append(("to", header_address(m.fields.get("to_name", ""), m.recipient)))
            mt = template_of(m, _token)
            values = dict(mt.values)
            values[f"list_unsubscribe_{t.nonce}"] = m.fields.get("headers", {}).get("List-Unsubscribe", "")
            values[f"message_id_{t.nonce}"] = m.message_id
            variables[m.recipient] = values
        fields.append(("recipient-variables", json.dumps(variables, ensure_ascii=False)))
        if first.fields.get("reply_to"):
            fields.append(("h:Reply-To", first.fields["reply_to"]))
        for k, v in first.fields.get("headers", {}).items():
            if k.lower() == "list-unsubscribe":
                fields.append(("h:List-Unsubscribe", _token(f"list_unsubscribe_{t.nonce}")))
            else:
                fields.append((f"h:{k}", v))
        tag = self.config.transport.options.get("tag")
        if isinstance(tag, str) and tag:
            fields.append(("o:tag", tag))
        files = [(k, (None, v.encode("utf-8"))) for k, v in fields]
        return Call(f"/v3/{self.domain}/messages", {"files": files, "auth": ("api", self.api_key)})

    def parse(self, messages: Sequence[OutgoingMessage], resp: requests.Response) -> list[DeliveryResult]:
        """``200``: queued for every recipient; the provider id is the batch's ``id``."""
        try:
            mid = str(resp.json().get("id", ""))
        except (ValueError, AttributeError):
            mid = ""
        return [DeliveryResult(m.recipient, "sent", provider_id=mid) for m in messages]
