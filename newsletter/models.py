"""Plain data objects passed between the pipeline's stages.

All datetimes are timezone-aware; stored and compared in UTC, shown in
``site.timezone``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Optional


@dataclass(frozen=True)
class Tag:
    """A tag as readers see it.

    Attributes:
        key: normalised identity (NFKC + casefold), e.g. ``"rocm"``; tags that
            differ only in case or Unicode width share one key.
        name: display name, the first spelling ever seen, e.g. ``"ROCm"``.
        slug: ASCII file-name part of its feed, stable once assigned.
    """

    key: str
    name: str
    slug: str


@dataclass(frozen=True)
class Review:
    """One review of one pull request (the review record of DESIGN.md).

    Attributes:
        id: stable unique id, e.g. ``"vllm-project/vllm#46123"``.
        title: one line, any language.
        url: absolute http(s) URL of the reviewed pull request.
        tags: display names, at least one, de-duplicated by tag key, in input order.
        published: aware datetime the review was written.
        updated: aware datetime of the last change (defaults to ``published``).
        body: GitHub-flavoured Markdown, possibly empty.
        summary: one-sentence plain-text verdict, possibly empty.
        repo: ``owner/name`` or empty.
        author: reviewer's display name or empty.
    """

    id: str
    title: str
    url: str
    tags: tuple[str, ...]
    published: datetime
    updated: datetime
    body: str = ""
    summary: str = ""
    repo: str = ""
    author: str = ""


@dataclass(frozen=True)
class StoredReview:
    """A review as kept in the store, with its rendered HTML and tag objects.

    Attributes:
        review: the record.
        tags: its :class:`Tag` objects, in the review's order.
        body_html: sanitized HTML of ``review.body`` (rendered once, at gather).
        issue_id: the issue it was mailed in, ``None`` while not yet in one.
    """

    review: Review
    tags: tuple[Tag, ...]
    body_html: str
    issue_id: Optional[str] = None


@dataclass(frozen=True)
class Subscriber:
    """A recipient of the email.

    Attributes:
        email: the address as given (local part kept, domain lower-cased).
        name: display name or empty.
        tags: tag keys followed; empty means every tag.
        status: ``active``, ``unsubscribed``, ``bounced`` or ``complained``.
    """

    email: str
    name: str = ""
    tags: tuple[str, ...] = ()
    status: str = "active"


@dataclass(frozen=True)
class Issue:
    """One edition of the email.

    Attributes:
        id: ISO week id like ``"2026-W48"``.
        start: aware datetime, Monday 00:00 of the week in ``site.timezone``.
        end: aware datetime, the following Monday 00:00 (exclusive).
        composed_at: aware UTC datetime it was composed, ``None`` for a preview.
        review_count: reviews in it.
        status: ``composed``, ``sending``, ``sent`` or ``empty``.
    """

    id: str
    start: datetime
    end: datetime
    composed_at: Optional[datetime] = None
    review_count: int = 0
    status: str = "composed"


class OutgoingMessage:
    """One message for one recipient, ready for a transport.

    Args:
        recipient: the bare address it goes to (ledger key).
        data: the whole RFC 5322 message (CRLF line endings) as bytes, or a callable
            returning them: built on first use, so transports that send ``fields`` as
            JSON (HTTP providers) never pay for MIME they do not read.
        message_id: its ``Message-ID`` without angle brackets.
        sender: the envelope sender (bare address).
        fields: the same message as parts, for HTTP providers that take JSON:
            ``from``, ``to``, ``subject``, ``html``, ``text`` and ``headers``
            (a dict of extra headers such as ``List-Unsubscribe``).
    """

    __slots__ = ("recipient", "_data", "message_id", "sender", "fields")

    def __init__(self, recipient: str, data: "bytes | Callable[[], bytes]", message_id: str, sender: str,
                 fields: Optional[dict] = None) -> None:
        self.recipient, self._data, self.message_id, self.sender = recipient, data, message_id, sender
        self.fields = fields if fields is not None else {}

    @property
    def data(self) -> bytes:
        """The RFC 5322 bytes (built once, on first access)."""
        if callable(self._data):
            self._data = self._data()
        return self._data

    def __repr__(self) -> str:
        return f"OutgoingMessage(recipient={self.recipient!r}, message_id={self.message_id!r})"


@dataclass(frozen=True)
class DeliveryResult:
    """What a transport did with one message.

    Attributes:
        recipient: the bare address.
        status: ``sent`` (accepted by the next hop), ``failed`` (permanent),
            ``retry`` (transient and certainly not accepted; the send loop tries again
            later) or ``unknown`` (the request went out but no answer came back: it
            may have been accepted; ``[delivery] unknown`` decides).
        provider_id: the id the provider or server gave, if any.
        error: one line saying why (for ``sent`` an optional note).
        retry_after: seconds the server asked to wait before a retry, if it said.
    """

    recipient: str
    status: str
    provider_id: str = ""
    error: str = ""
    retry_after: Optional[float] = None
