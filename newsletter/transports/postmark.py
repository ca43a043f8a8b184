"""The ``postmark`` transport: Postmark Email Batch (``POST /email/batch``).

The body is a JSON array of whole messages, one per recipient, ≤ 500 messages
and ≤ 50 MB per request [postmarkapp.com/developer/user-guide/send-email-with-api/batch-emails].
Postmark answers ``200`` even when some messages fail: the answer is an array
in request order, each with ``ErrorCode`` (0 = accepted, with ``MessageID``).
Results are matched by index. ErrorCode 429 (rate limit) and 100 (maintenance)
are transient; the others (300 invalid request, 406 inactive recipient, …) are
permanent for that recipient. Auth header ``X-Postmark-Server-Token``.
``message_stream`` (default ``broadcast``) picks the stream. Postmark has no
idempotency key, so a request whose answer was lost is ``unknown``.
"""

from __future__ import annotations

import json
from typing import Sequence

import requests

from ..models import DeliveryResult, OutgoingMessage
from . import option, register
from .http_api import Call, HttpApiTransport, header_address, sender_parts

MAX_REQUEST_BYTES = 50 * 1000 * 1000
TRANSIENT_CODES = {100, 429}


@register("postmark")
class PostmarkTransport(HttpApiTransport):
    """Postmark; options ``api_key_env`` (the server token), ``base_url`` (default
    ``https://api.postmarkapp.com``), ``message_stream`` (default ``broadcast``), ``tag``, ``timeout``."""

    name = "postmark"
    max_batch = 500
    default_base_url = "https://api.postmarkapp.com"

    def __init__(self, config, **kw) -> None:
        super().__init__(config, **kw)
        self.stream = option(config, "message_stream", str, "broadcast")
        self.tag = option(config, "tag", str, "")

    def item(self, m: OutgoingMessage) -> dict:
        """One message object of the batch array."""
        f = m.fields
        name, addr = sender_parts(m)
        item = {"From": header_address(name, addr), "To": header_address(f.get("to_name", ""), m.recipient),
                "Subject": f.get("subject", ""), "HtmlBody": f.get("html", ""), "TextBody": f.get("text", ""),
                "Headers": [{"Name": k, "Value": v} for k, v in f.get("headers", {}).items()],
                "Metadata": {"message_id": m.message_id}, "MessageStream": self.stream}
        if f.get("reply_to"):
            item["ReplyTo"] = f["reply_to"]
        if self.tag:
            item["Tag"] = self.tag
        return item

    def groups(self, messages: Sequence[OutgoingMessage]) -> list[list[int]]:
        """Runs of ≤ 500 messages whose JSON stays under 50 MB."""
        out: list[list[int]] = []
        cur: list[int] = []
        size = 2
        for i, m in enumerate(messages):
            n = len(json.dumps(self.item(m), ensure_ascii=False).encode()) + 1
            if cur and (len(cur) >= self.max_batch or size + n > MAX_REQUEST_BYTES):
                out.append(cur)
                cur, size = [], 2
            cur.append(i)
            size += n
        if cur:
            out.append(cur)
        return out

    def build(self, messages: Sequence[OutgoingMessage]) -> Call:
        """The JSON array, with the server token header."""
        return Call("/email/batch", {"json": [self.item(m) for m in messages],
                                     "headers": {"X-Postmark-Server-Token": self.api_key,
                                                 "Accept": "application/json"}})

    def parse(self, messages: Sequence[OutgoingMessage], resp: requests.Response) -> list[DeliveryResult]:
        """Per-message results by array index; a missing item is ``unknown``."""
        try:
            items = resp.json()
        except ValueError:
            items = None
        if not isinstance(items, list):
            return [DeliveryResult(m.recipient, "unknown", error="postmark: 200 without a result array")
                    for m in messages]
        out = []
        for i, m in enumerate(messages):
            it = items[i] if i < len(items) and isinstance(items[i], dict) else None
            if it is None:
                out.append(DeliveryResult(m.recipient, "unknown", error="postmark: no result for this message"))
                continue
            code = it.get("ErrorCode", -1)
            if code == 0:
                out.append(DeliveryResult(m.recipient, "sent", provider_id=str(it.get("MessageID", ""))))
            else:
                text = f"postmark: ErrorCode {code}: {' '.join(str(it.get('Message', '')).split())}"[:300]
                out.append(DeliveryResult(m.recipient, "retry" if code in TRANSIENT_CODES else "failed",
                                          error=text))
        return out
