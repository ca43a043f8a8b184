"""The ``resend`` transport: Resend Batch Emails (``POST /emails/batch``) with ``Idempotency-Key``.

The body is a JSON array of up to 100 whole messages, one per recipient
[resend.com/docs/api-reference/emails/send-batch-emails]. Every request carries
an ``Idempotency-Key`` derived from its messages' ``Message-ID``\\ s, so the
same batch sent again (a retry after a lost answer, or a resume after a crash
within Resend's 24 h key lifetime) returns the first answer instead of sending
twice [resend.com/docs/dashboard/emails/idempotency-keys]. ``x-batch-validation:
permissive`` makes Resend send the valid messages and list the invalid ones in
``errors[{index, message}]``, so one bad recipient fails alone; ``data`` holds
the ids of the accepted ones, in request order. Errors: 409
``concurrent_idempotent_requests`` is transient; 409 ``invalid_idempotent_request``
(same key, different payload) leaves the fate ``unknown``; 429
``daily_quota_exceeded``/``monthly_quota_exceeded`` stop the run. Auth
``Authorization: Bearer <key>``.
"""

from __future__ import annotations

from typing import Sequence

import requests

from ..models import DeliveryResult, OutgoingMessage
from . import register
from .http_api import Call, HttpApiTransport, header_address, idempotency_key, sender_parts

QUOTA = ("daily_quota_exceeded", "monthly_quota_exceeded")


@register("resend")
class ResendTransport(HttpApiTransport):
    """Resend; options ``api_key_env``, ``base_url`` (default ``https://api.resend.com``), ``timeout``."""

    name = "resend"
    max_batch = 100
    idempotent = True
    idempotency_window = 24 * 3600.0
    default_base_url = "https://api.resend.com"

    def item(self, m: OutgoingMessage) -> dict:
        """One email object of the batch array."""
        f = m.fields
        name, addr = sender_parts(m)
        item = {"from": header_address(name, addr), "to": [header_address(f.get("to_name", ""), m.recipient)],
                "subject": f.get("subject", ""), "html": f.get("html", ""), "text": f.get("text", ""),
                "headers": dict(f.get("headers", {}))}
        if f.get("reply_to"):
            item["reply_to"] = f["reply_to"]
        return item

    def build(self, messages: Sequence[OutgoingMessage]) -> Call:
        """The JSON array, with ``Idempotency-Key`` and permissive batch validation."""
        key = idempotency_key(messages)
        return Call("/emails/batch", {"json": [self.item(m) for m in messages],
                                      "headers": {"Authorization": f"Bearer {self.api_key}",
                                                  "Idempotency-Key": key,
                                                  "x-batch-validation": "permissive"}}, key=key)

    def classify(self, resp: requests.Response) -> str:
        """Resend's named errors refine the status code."""
        try:
            name = str(resp.json().get("name", ""))
        except (ValueError, AttributeError):
            name = ""
        if resp.status_code == 409:
            return "transient" if name == "concurrent_idempotent_requests" else "unknown"
        if resp.status_code == 429 and name in QUOTA:
            return "auth"
        return super().classify(resp)

    def parse(self, messages: Sequence[OutgoingMessage], resp: requests.Response) -> list[DeliveryResult]:
        """``data`` ids go to the messages not listed in ``errors``, in order."""
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return [DeliveryResult(m.recipient, "unknown", error="resend: 200 without data") for m in messages]
        errors = {}
        for e in body.get("errors") or []:
            if isinstance(e, dict) and isinstance(e.get("index"), int):
                errors[e["index"]] = " ".join(str(e.get("message", "")).split())[:250]
        ids = iter(body["data"])
        out = []
        for i, m in enumerate(messages):
            if i in errors:
                out.append(DeliveryResult(m.recipient, "failed", error=f"resend: {errors[i]}"))
                continue
            item = next(ids, None)
            if item is None:
                out.append(DeliveryResult(m.recipient, "unknown", error="resend: no id for this message"))
            else:
                out.append(DeliveryResult(m.recipient, "sent", provider_id=str(item.get("id", ""))))
        return out
