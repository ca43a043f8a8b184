"""Double opt-in: the confirmation email a subscribe request sends.

The email is transactional (one message to one requester), so it carries no
``List-Unsubscribe``; it holds one signed link (see :meth:`Links.confirm_url`)
that expires after ``max_age`` hours. Bodies come from ``confirm_email.mjml.j2``
and ``confirm_email.txt.j2`` (user-overridable like every template).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime

import jinja2

from .config import Config
from .errors import RenderError
from .message import POLICY, make_address, one_line, parse_sender
from .models import OutgoingMessage
from .render import Renderer


def confirmation_message(config: Config, renderer: Renderer, labels: dict[str, str], *, to_addr: str,
                         to_name: str, confirm_url: str, hours: int, now: datetime) -> OutgoingMessage:
    """The confirmation email for one subscribe request.

    Args:
        config: the configuration (``[email] from`` and ``reply_to``, site title).
        renderer: template renderer (MJML compile).
        labels: UI words (web labels merged over :func:`~newsletter.render.labels_for`).
        to_addr, to_name: the requester.
        confirm_url: the signed link.
        hours: how long the link works (shown to the reader).
        now: aware ``Date``.

    Raises:
        ConfigError: ``[email] from`` is not an address.
        RenderError: a template failed.
        ValueError: the address cannot be written (bad internationalised domain).
    """
    sender = parse_sender(config.email.sender)
    ctx = {"site": renderer.site, "labels": labels, "confirm_url": confirm_url, "hours": hours,
           "email": to_addr}
    try:
        html = renderer.compile_mjml(renderer.template("confirm_email.mjml.j2").render(**ctx))
        text = renderer.template("confirm_email.txt.j2").render(**ctx)
    except jinja2.TemplateError as exc:
        raise RenderError(f"confirm_email: {exc}") from None
    subject = one_line(labels["confirm_subject"].format(title=config.site.title))
    to = make_address(to_name, to_addr)
    digest = hashlib.sha256(f"{to.addr_spec.lower()} {now.isoformat()}".encode()).hexdigest()[:20]
    mid = f"confirm.{digest}@{sender.domain or 'localhost'}"
    msg = EmailMessage(policy=POLICY)
    msg["From"] = sender
    msg["To"] = to
    if config.email.reply_to:
        msg["Reply-To"] = one_line(config.email.reply_to)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = f"<{mid}>"
    msg["Auto-Submitted"] = "auto-replied"  # RFC 3834: a reply to the web request, not bulk mail
    msg.set_content(text, subtype="plain", charset="utf-8")
    msg.add_alternative(html, subtype="html", charset="utf-8")
    return OutgoingMessage(
        recipient=to.addr_spec, data=msg.as_bytes(policy=POLICY), message_id=mid, sender=sender.addr_spec,
        fields={"from": str(sender), "to": str(to), "to_addr": to.addr_spec, "to_name": to.display_name,
                "subject": subject, "html": html, "text": text, "reply_to": one_line(config.email.reply_to),
                "headers": {"Auto-Submitted": "auto-replied"}, "message_id": mid})
