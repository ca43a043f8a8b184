"""Building one RFC 5322 message per recipient.

- ``multipart/alternative``: ``text/plain`` then ``text/html``, both UTF-8,
  transfer-encoded 7-bit-safe (RFC 2045): ``7bit`` when the part is ASCII with
  lines of at most 998 octets, otherwise ``base64`` in lines of 76 characters (§6.8).
- Header lines are folded at 78 characters where they can be (RFC 5322 §2.1.1).
- Headers that are the same for every recipient (``From``, ``Subject``,
  ``List-Id`` …) are folded and encoded once by the standard library's SMTP
  policy and reused; the parts are encoded with :mod:`binascii`. One message
  costs well under a millisecond, so 50,000 recipients cost seconds, not minutes.
- Non-ASCII display names and subjects are RFC 2047 encoded words; addresses stay plain;
  internationalised domains are written as IDNA (RFC 5891) A-labels.
- ``List-Id`` (RFC 2919), ``List-Unsubscribe`` (RFC 2369) with https and mailto,
  ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` (RFC 8058).
- ``Message-ID`` is derived from the issue and the recipient, so a copy sent
  again after a crash carries the same id (receivers can de-duplicate).
- Every header value built from data has CR, LF and other line separators
  replaced by spaces, so no input can add a header.
"""

from __future__ import annotations

import binascii
import hashlib
import random
import re
from datetime import datetime
from functools import lru_cache
from email import policy
from email.header import Header
from email.headerregistry import Address
from email.utils import format_datetime, parseaddr
from typing import Optional

from .errors import ConfigError
from .models import OutgoingMessage

POLICY = policy.SMTP.clone(cte_type="7bit")
_BREAKS = re.compile("[\r\n\u2028\u2029\x85\x0b\x0c\x00-\x08\x0e-\x1f]+")


def one_line(value: str) -> str:
    """``value`` with every line break and control character replaced by one space, and
    ``=?`` broken with a WORD JOINER (U+2060) so the ``email`` package never decodes data as
    an RFC 2047 encoded word (one could carry a raw CR LF and so a header of its own)."""
    return _BREAKS.sub(" ", value).strip().replace("=?", "=\u2060?")


def idna_address(addr: str) -> str:
    """``local@domain`` with the domain in IDNA A-label form (``例子.测试`` → ``xn--fsqu00a.xn--0zwm56d``).

    Raises:
        ValueError: the address has no ``@`` or the domain is not valid IDNA.
    """
    local, at, domain = addr.rpartition("@")
    if not at or not local or not domain:
        raise ValueError(f"{addr!r} is not an address")
    try:
        ascii_domain = domain.encode("idna").decode("ascii") if not domain.isascii() else domain
    except UnicodeError:
        raise ValueError(f"domain of {addr!r} is not a valid internationalised domain") from None
    return f"{local}@{ascii_domain.lower()}"


def make_address(name: str, addr: str) -> Address:
    """An :class:`Address` with a one-line display name and an IDNA domain."""
    return Address(display_name=one_line(name), addr_spec=idna_address(addr))


def parse_sender(value: str, where: str = "[email] from") -> Address:
    """Parse ``"Name <addr>"`` from the config.

    Raises:
        ConfigError: empty or not an address.
    """
    name, addr = parseaddr(value)
    if not addr or "@" not in addr:
        raise ConfigError(f"{where}: {value!r} is not an email address")
    try:
        return make_address(name, addr)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def message_id(issue_id: str, recipient: str, domain: str) -> str:
    """``<issue>.<16 hex of SHA-256(recipient)>@<domain>`` without brackets; stable for a pair."""
    digest = hashlib.sha256(recipient.lower().encode()).hexdigest()[:16]
    return f"{issue_id}.{digest}@{domain}"


@lru_cache(maxsize=64)
def list_id_header(title: str, list_id: str) -> str:
    """``List-Id`` value: the title as phrase (RFC 2047 if needed) and ``<list_id>``."""
    title = one_line(title).replace('"', "'")
    phrase = f'"{title}"' if title.isascii() else Header(title, "utf-8").encode()
    return f"{phrase} <{list_id}>"


def build_message(*, sender: Address, reply_to: str, to_name: str, to_addr: str, subject: str,
                  html: str, text: str, issue_id: str, list_id: str, list_title: str,
                  unsubscribe_url: str, unsubscribe_mailto: str, now: datetime,
                  extra_headers: Optional[dict[str, str]] = None,
                  message_id_override: Optional[str] = None) -> OutgoingMessage:
    """One personalised message.

    Args:
        sender: the ``From`` address.
        reply_to: ``Reply-To`` or ``""``.
        to_name, to_addr: the recipient.
        subject: one line (line breaks are replaced anyway).
        html, text: the personalised bodies.
        issue_id: the issue (goes into ``Message-ID``).
        list_id, list_title: for ``List-Id``.
        unsubscribe_url: https one-click link; ``unsubscribe_mailto``: address or ``""``.
        now: aware ``Date``.
        extra_headers: more headers, values made one line.
        message_id_override: use this ``Message-ID`` (no brackets) instead of the derived one
            (test copies must never share the real message's id).

    Returns:
        An :class:`OutgoingMessage` with the CRLF bytes and the same content as fields.

    Raises:
        ValueError: the recipient address cannot be written (bad domain).
    """
    to = make_address(to_name, to_addr)
    mid = message_id_override or message_id(issue_id, to.addr_spec, sender.domain or "localhost")
    headers = {"List-Id": list_id_header(list_title, list_id)}
    unsub = [f"<{unsubscribe_url}>"]
    if unsubscribe_mailto:
        unsub.append(f"<mailto:{unsubscribe_mailto}?subject=unsubscribe>")
    headers["List-Unsubscribe"] = ", ".join(unsub)
    headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    for k, v in (extra_headers or {}).items():
        headers[one_line(k)] = one_line(v)
    head = [_shared_field("From", str(sender)), _to_field(to)]
    if reply_to:
        head.append(_shared_field("Reply-To", one_line(reply_to)))
    head += [_shared_field("Subject", one_line(subject)), _date_field(now), _field("Message-ID", f"<{mid}>")]
    for k, v in headers.items():
        head.append(_field(k, v) if k == "List-Unsubscribe" else _shared_field(k, v))
    return OutgoingMessage(
        recipient=to.addr_spec, data=lambda: _assemble(head, text, html), message_id=mid, sender=sender.addr_spec,
        fields={"from": str(sender), "to": str(to), "to_addr": to.addr_spec, "to_name": to.display_name,
                "subject": one_line(subject), "html": html, "text": text,
                "reply_to": one_line(reply_to), "headers": headers, "message_id": mid})


# --- fast assembly ---------------------------------------------------------------------------

_FOLD_AT = 78     # RFC 5322 §2.1.1: lines SHOULD be at most 78 characters
_MAX_LINE = 998   # … and MUST be at most 998


@lru_cache(maxsize=1024)
def _shared_field(name: str, value: str) -> bytes:
    """A header the same for many recipients, folded and RFC 2047-encoded by the stdlib SMTP policy (cached)."""
    return _fold(name, value)


def _fold(name: str, value: str) -> bytes:
    name, parsed = POLICY.header_store_parse(name, value)
    return POLICY.fold_binary(name, parsed)


def _field(name: str, value: str) -> bytes:
    """A per-recipient header: as is when ASCII and short, a fold at ``", "`` for long
    ``List-Unsubscribe``, else folded and encoded by the policy (``To`` with a non-ASCII name)."""
    if value.isascii():
        if len(name) + 2 + len(value) <= _FOLD_AT:
            return f"{name}: {value}\r\n".encode("ascii")
        if name == "List-Unsubscribe" and all(len(p) < _MAX_LINE - 20 for p in value.split(", ")):
            folded = ",\r\n ".join(value.split(", "))
            return f"{name}: {folded}\r\n".encode("ascii")
    return _fold(name, value)


def _to_field(to: Address) -> bytes:
    """``To``: as is when ASCII (``Address`` quotes specials); a non-ASCII display name as RFC 2047
    encoded words (UTF-8, ``B``), folded between words at 76 characters; the address stays plain."""
    if to.display_name and not to.display_name.isascii():
        words = Header(to.display_name, "utf-8", header_name="To").encode(linesep="\r\n")
        line = f"To: {words} <{to.addr_spec}>\r\n"
        if line.isascii() and max(map(len, line.split("\r\n"))) <= _MAX_LINE:
            return line.encode("ascii")
    return _field("To", str(to))


@lru_cache(maxsize=64)
def _date_field(now: datetime) -> bytes:
    return f"Date: {format_datetime(now)}\r\n".encode("ascii")


def _part(subtype: str, text: str) -> tuple[bytes, bytes]:
    """One ``text/*`` part's headers and body: CRLF line ends, ``7bit`` or ``base64``."""
    data = text.encode("utf-8")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    body = data.replace(b"\n", b"\r\n")
    if not body.endswith(b"\r\n"):
        body += b"\r\n"
    if body.isascii() and max(map(len, body.split(b"\r\n"))) <= _MAX_LINE:
        cte = b"7bit"
    else:
        cte = b"base64"
        b64 = binascii.b2a_base64(body, newline=False)
        body = b"\r\n".join([b64[i:i + 76] for i in range(0, len(b64), 76)]) + b"\r\n"
    head = (b"Content-Type: text/" + subtype.encode("ascii") + b'; charset="utf-8"\r\n'
            b"Content-Transfer-Encoding: " + cte + b"\r\n")
    return head, body


def _assemble(head: list[bytes], text: str, html: str) -> bytes:
    """The whole ``multipart/alternative`` message (RFC 2046 §5.1.4): text part, then HTML part."""
    parts = [_part("plain", text), _part("html", html)]
    while True:
        boundary = f"==============={random.randrange(10 ** 18, 10 ** 19)}==".encode("ascii")
        if not any(boundary in body for _h, body in parts):
            break
    out = head + [b"MIME-Version: 1.0\r\n",
                  b'Content-Type: multipart/alternative;\r\n boundary="' + boundary + b'"\r\n', b"\r\n"]
    for part_head, body in parts:
        out += [b"--", boundary, b"\r\n", part_head, b"\r\n", body]
    out += [b"--", boundary, b"--\r\n"]
    return b"".join(out)
