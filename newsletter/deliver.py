"""The send loop: ledger, batching, per-tag editions, retries.

For one issue:
1. Every active subscriber gets a ``pending`` row in the delivery ledger (once).
2. Rows left ``sending`` by a run that died are the messages whose fate is
   unknown: they become ``unknown``; with ``[delivery] unknown = "resend"``
   (default for idempotent transports such as ``outbox``) they go back to ``pending``.
3. Pending rows are taken in batches ordered by address (the checkpoint is
   the last address of the batch). A subscriber no longer active, or whose
   followed tags match no review of the issue, is ``skipped``.
4. Before a batch goes to the transport its rows are marked ``sending`` and
   committed; afterwards each row becomes ``sent`` (with the provider's id),
   ``failed`` (permanent) or ``pending`` again (transient; retried in this run
   up to ``max_attempts`` times, then ``failed``).
The email is compiled once per distinct set of followed tags.
"""

from __future__ import annotations

import time as _time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Optional

from .config import Config
from .links import Links
from .message import build_message, parse_sender
from .models import Issue, OutgoingMessage, StoredReview, Subscriber
from .render import RenderedEmail, Renderer, greeting, personalize
from .store import Store
from .transports import Transport

Clock = Callable[[], datetime]


@dataclass
class DeliverySummary:
    """Outcome of one :func:`deliver` call.

    Attributes:
        issue_id: the issue.
        counts: this run's outcomes: ``sent``, ``failed``, ``skipped``, ``unknown``, ``retried``.
        ledger: the ledger's counts per status after the run.
        errors: error text → how many recipients got it.
        compiles: MJML compilations in this run (one per distinct tag set).
    """

    issue_id: str
    counts: Counter = field(default_factory=Counter)
    ledger: dict = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    compiles: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is failed or unknown in the ledger."""
        return not self.ledger.get("failed") and not self.ledger.get("unknown")


class Editions:
    """Compiled emails of one issue, one per distinct set of followed tags (compiled on first use)."""

    def __init__(self, renderer: Renderer, issue: Issue, reviews: list[StoredReview]) -> None:
        self.renderer, self.issue, self.reviews = renderer, issue, reviews
        self.cache: dict[frozenset, Optional[RenderedEmail]] = {}

    def for_tags(self, followed: Iterable[str]) -> Optional[RenderedEmail]:
        """The edition for these tag keys (empty: every tag); ``None`` when no review matches."""
        key = frozenset(followed)
        if key not in self.cache:
            if key:
                chosen = [r for r in self.reviews if any(t.key in key for t in r.tags)]
                names = sorted({t.name for r in self.reviews for t in r.tags if t.key in key}
                               | {k for k in key if not any(t.key == k for r in self.reviews for t in r.tags)})
            else:
                chosen, names = self.reviews, []
            self.cache[key] = self.renderer.render_issue(self.issue, chosen, names) if chosen else None
        return self.cache[key]


class Composer:
    """Builds each recipient's message for one issue.

    Args:
        config: the configuration.
        issue, reviews: the issue and all its reviews.
        renderer: the template renderer.
        links: signed-link builder.
    """

    def __init__(self, config: Config, issue: Issue, reviews: list[StoredReview],
                 renderer: Renderer, links: Links) -> None:
        self.config, self.issue, self.links = config, issue, links
        self.sender = parse_sender(config.email.sender)
        self.editions = Editions(renderer, issue, reviews)

    def message(self, sub: Subscriber, now: datetime, subject_prefix: str = "",
                message_id: Optional[str] = None) -> Optional[OutgoingMessage]:
        """The subscriber's message, or ``None`` when none of the issue's reviews matches their tags.

        Raises:
            ValueError: the address cannot be written (invalid internationalised domain).
        """
        edition = self.editions.for_tags(sub.tags)
        if edition is None:
            return None
        unsubscribe = self.links.unsubscribe_url(sub.email)
        html, text = personalize(edition, {
            "greeting": greeting(self.config.site.language, sub.name),
            "name": sub.name, "email": sub.email,
            "unsubscribe_url": unsubscribe, "preferences_url": self.links.preferences_url(sub.email)})
        e = self.config.email
        return build_message(
            sender=self.sender, reply_to=e.reply_to, to_name=sub.name, to_addr=sub.email,
            subject=subject_prefix + edition.subject, html=html, text=text, issue_id=self.issue.id,
            list_id=e.list_id, list_title=self.config.site.title, unsubscribe_url=unsubscribe,
            unsubscribe_mailto=e.unsubscribe_mailto, now=now, message_id_override=message_id)


def deliver(config: Config, store: Store, issue: Issue, transport: Transport, renderer: Renderer,
            links: Links, clock: Clock, *, batch_size: Optional[int] = None, max_attempts: int = 3,
            backoff: float = 1.0, resend_unknown: Optional[bool] = None,
            progress: Optional[Callable[[int, int], None]] = None) -> DeliverySummary:
    """Deliver an issue to every active subscriber not yet served; resumable and idempotent.

    Args:
        config, store: configuration and open store.
        issue: a composed issue (status ``composed``, ``sending`` or ``sent``).
        transport: where messages go.
        renderer, links: rendering and signed links.
        clock: returns the aware current time (``Date`` headers, ledger times).
        batch_size: messages per transport call (default: the transport's ``max_batch``).
        max_attempts: attempts per recipient for transient failures within this run.
        backoff: seconds before the first retry round; doubles each round.
        resend_unknown: resend messages whose fate is unknown after a crash
            (default: only when the transport is idempotent).
        progress: called with (done, total) after each batch.

    Returns:
        A :class:`DeliverySummary`.

    Raises:
        DeliveryError: the transport failed as a whole; the ledger keeps what was done
            and the rows of the failed batch are ``unknown`` for the next run.
    """
    summary = DeliverySummary(issue.id)
    reviews = store.reviews_in_issue(issue.id)
    composer = Composer(config, issue, reviews, renderer, links)
    compiles_before = renderer.compiles
    size = batch_size or transport.max_batch
    if resend_unknown is None:
        resend_unknown = transport.idempotent
    now = clock()
    with store.transaction():
        store.enqueue(issue.id, now)
        store.set_issue_status(issue.id, "sending")
        interrupted = store.deliveries(issue.id, ("sending",), limit=1_000_000)
        if interrupted:
            status = "pending" if resend_unknown else "unknown"
            store.mark(issue.id, [(s.email, status, "", "fate unknown: the previous send stopped mid-batch")
                                  for s, _ in interrupted], now)
            summary.counts["unknown"] += 0 if resend_unknown else len(interrupted)
    total = sum(store.delivery_counts(issue.id).values())
    for round_no in range(max_attempts):
        if round_no:
            if not store.deliveries(issue.id, ("pending",), limit=1):
                break
            _time.sleep(backoff * (2 ** (round_no - 1)))
        after = ""
        while True:
            batch = store.deliveries(issue.id, ("pending",), after=after, limit=size)
            if not batch:
                break
            after = batch[-1][0].email
            now = clock()
            outgoing: list[OutgoingMessage] = []
            owners: list[str] = []  # ledger address of each outgoing message
            updates = []
            for sub, row in batch:
                if sub.status != "active":
                    updates.append((sub.email, "skipped", "", f"subscriber is {sub.status}"))
                    continue
                try:
                    msg = composer.message(sub, now)
                except ValueError as exc:
                    updates.append((sub.email, "failed", "", str(exc)))
                    summary.errors[str(exc)] += 1
                    continue
                if msg is None:
                    updates.append((sub.email, "skipped", "", "no review matches the followed tags"))
                    continue
                outgoing.append(msg)
                owners.append(sub.email)
            with store.transaction():
                for email, st, _, _ in updates:
                    summary.counts[st] += 1
                store.mark(issue.id, updates, now)
                store.mark(issue.id, [(owner, "sending", "", "") for owner in owners], now)
            if not outgoing:
                continue
            results = transport.send(outgoing)
            done = clock()
            final = []
            for key, res in zip(owners, results):
                if res.status == "sent":
                    final.append((key, "sent", res.provider_id, ""))
                    summary.counts["sent"] += 1
                elif res.status == "retry" and round_no + 1 < max_attempts:
                    final.append((key, "pending", "", res.error))
                    summary.counts["retried"] += 1
                else:
                    final.append((key, "failed", "", res.error))
                    summary.counts["failed"] += 1
                    summary.errors[res.error] += 1
            with store.transaction():
                store.mark(issue.id, final, done)
            if progress:
                counts = store.delivery_counts(issue.id)
                progress(total - counts.get("pending", 0), total)
    summary.ledger = store.delivery_counts(issue.id)
    summary.compiles = renderer.compiles - compiles_before
    if not summary.ledger.get("pending") and not summary.ledger.get("sending"):
        store.set_issue_status(issue.id, "sent", clock())
    return summary


def send_test(config: Config, store: Store, issue: Issue, reviews: list[StoredReview], address: str,
              transport: Transport, renderer: Renderer, links: Links, now: datetime):
    """Send one test copy of the every-tag edition to ``address``; records nothing.

    Returns:
        The transport's :class:`~newsletter.models.DeliveryResult`.
    """
    composer = Composer(config, issue, reviews, renderer, links)
    import uuid
    test_id = f"test-{issue.id}.{uuid.uuid4().hex[:16]}@{composer.sender.domain or 'localhost'}"
    msg = composer.message(Subscriber(address, ""), now, subject_prefix="[TEST] ", message_id=test_id)
    if msg is None:
        raise ValueError("the issue has no reviews")
    return transport.send([msg])[0]
