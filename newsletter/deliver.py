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

import hashlib
import time as _time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Optional

from .config import Config
from .errors import DeliveryError
from .links import Links
from .message import build_message, parse_sender
from .models import Issue, OutgoingMessage, StoredReview, Subscriber
from .pacing import RateLimiter, backoff_delay
from .render import RenderedEmail, Renderer, greeting, personalize
from .store import Store
from .transports import Transport

Clock = Callable[[], datetime]


@dataclass
class DeliverySummary:
    """Outcome of one :func:`deliver` call.

    Attributes:
        issue_id: the issue.
        counts: this run's outcomes: ``sent``, ``failed``, ``skipped``, ``unknown``
            (fate became unknown), ``retried`` (transient, tried again), ``replayed``
            (unknown-fate messages sent again under the same idempotency key),
            ``requeued`` (failed/unknown rows put back by ``retry_failed`` or policy ``resend``).
        ledger: the ledger's counts per status after the run.
        errors: error text → how many recipients got it.
        compiles: MJML compilations in this run (one per distinct tag set).
        paused: why the run stopped early (``pause_after_failures``), or empty.
        transport: the transport's ``name``.
        calls: transport calls (batches) made.
        requests: HTTP requests made (0 for non-HTTP transports).
    """

    issue_id: str
    counts: Counter = field(default_factory=Counter)
    ledger: dict = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    compiles: int = 0
    paused: str = ""
    transport: str = ""
    calls: int = 0
    requests: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is failed or unknown in the ledger and the run was not paused."""
        return not self.ledger.get("failed") and not self.ledger.get("unknown") and not self.paused


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
        if not sub.email.rpartition("@")[0].isascii():
            raise ValueError("non-ASCII local part: the address needs SMTPUTF8 (RFC 6531), "
                             "which newsletter's messages do not use")
        edition = self.editions.for_tags(sub.tags)
        if edition is None:
            return None
        unsubscribe = self.links.unsubscribe_url(sub.email)
        values = {"greeting": greeting(self.config.site.language, sub.name),
                  "name": sub.name, "email": sub.email,
                  "unsubscribe_url": unsubscribe, "preferences_url": self.links.preferences_url(sub.email)}
        html, text = personalize(edition, values)
        e = self.config.email
        msg = build_message(
            sender=self.sender, reply_to=e.reply_to, to_name=sub.name, to_addr=sub.email,
            subject=subject_prefix + edition.subject, html=html, text=text, issue_id=self.issue.id,
            list_id=e.list_id, list_title=self.config.site.title, unsubscribe_url=unsubscribe,
            unsubscribe_mailto=e.unsubscribe_mailto, now=now, message_id_override=message_id)
        # the edition with its placeholders, for providers that send one body to many recipients
        msg.fields["template"] = {
            "key": f"{self.issue.id}|{'|'.join(sorted(sub.tags))}|{subject_prefix}",
            "subject": subject_prefix + edition.subject, "html": edition.html, "text": edition.text,
            "placeholders": dict(edition.placeholders), "nonce": edition.nonce, "values": values}
        return msg


def batch_id(issue_id: str, owners: list[str]) -> str:
    """The id of one transport call: a digest of the issue and its recipients, in order."""
    return hashlib.sha256("\n".join([issue_id, *owners]).encode()).hexdigest()[:24]


def deliver(config: Config, store: Store, issue: Issue, transport: Transport, renderer: Renderer,
            links: Links, clock: Clock, *, batch_size: Optional[int] = None, max_attempts: Optional[int] = None,
            backoff: Optional[float] = None, resend_unknown: Optional[bool] = None,
            retry_failed: bool = False, progress: Optional[Callable[[int, int], None]] = None,
            sleep: Optional[Callable[[float], None]] = None) -> DeliverySummary:
    """Deliver an issue to every active subscriber not yet served; resumable and idempotent.

    Args:
        config, store: configuration and open store.
        issue: a composed issue (status ``composed``, ``sending`` or ``sent``).
        transport: where messages go.
        renderer, links: rendering and signed links.
        clock: returns the aware current time (``Date`` headers, ledger times).
        batch_size: messages per transport call (default ``[delivery] batch_size``, else
            the transport's ``max_batch``).
        max_attempts: rounds per recipient for transient failures within this run
            (default ``[delivery] max_attempts``).
        backoff: seconds before the first retry round (default ``[delivery] backoff``);
            doubles each round, with jitter; a server's ``Retry-After`` wins when longer.
        resend_unknown: send messages of unknown fate again (default: ``[delivery] unknown
            == "resend"``). Ignored for idempotent transports, which replay instead.
        retry_failed: put every ``failed`` row back to ``pending`` first (``send --retry-failed``).
        progress: called with (done, total) after each batch.
        sleep: how to wait (seconds; default :func:`time.sleep`); tests pass a recorder.

    Returns:
        A :class:`DeliverySummary`; ``paused`` is set when ``[delivery]
        pause_after_failures`` stopped the run (the rest stays ``pending``).

    Raises:
        DeliveryError: the transport refused the whole batch (auth, quota, cannot
            connect); nothing of that batch was accepted, its rows are ``pending``
            again and the ledger keeps everything done before.
    """
    d = config.delivery
    summary = DeliverySummary(issue.id, transport=getattr(transport, "name", ""))
    reviews = store.reviews_in_issue(issue.id)
    composer = Composer(config, issue, reviews, renderer, links)
    compiles_before = renderer.compiles
    size = batch_size or d.batch_size or transport.max_batch
    max_attempts = max_attempts or d.max_attempts
    backoff = d.backoff if backoff is None else backoff
    resend = (d.unknown == "resend") if resend_unknown is None else resend_unknown
    replayable = bool(transport.idempotent)
    window = getattr(transport, "idempotency_window", None)
    limiter = RateLimiter(d.rate, sleep=sleep)
    sleep = sleep or _time.sleep
    consecutive = 0
    waits: list[float] = []
    now = clock()
    with store.transaction():
        store.enqueue(issue.id, now)
        store.set_issue_status(issue.id, "sending")
        interrupted = store.deliveries(issue.id, ("sending",), limit=1_000_000)
        if interrupted:
            store.mark(issue.id, [(s.email, "unknown", "", "fate unknown: a previous send stopped after "
                                   "handing it to the transport") for s, _ in interrupted], now)
            summary.counts["unknown"] += len(interrupted)
        if retry_failed:
            summary.counts["requeued"] += store.requeue(issue.id, ("failed",), now, "retry requested")
    total = sum(store.delivery_counts(issue.id).values())

    def fresh(at) -> bool:
        return replayable and at is not None and (window is None or (clock() - at).total_seconds() < window - 600)

    def apply_policy() -> None:
        """Unknown rows that cannot be replayed: resend or leave them for the report."""
        if not resend:
            return
        stale = [b for b, at, _ in store.unknown_batches(issue.id) if not fresh(at)]
        rows = store.deliveries(issue.id, ("unknown",), limit=1_000_000)
        moves = [(s.email, "pending", "", "resending: fate was unknown") for s, r in rows
                 if not r["batch"] or r["batch"] in stale]
        if moves:
            with store.transaction():
                store.mark(issue.id, moves, clock())
            summary.counts["requeued"] += len(moves)

    def send_rows(batch, replay: str, last: bool) -> None:
        nonlocal consecutive
        now = clock()
        outgoing: list[OutgoingMessage] = []
        owners: list[str] = []
        updates = []
        for sub, row in batch:
            if not replay and sub.status != "active":
                updates.append((sub.email, "skipped", "", f"subscriber is {sub.status}"))
                continue
            try:
                msg = composer.message(sub, now)
            except ValueError as exc:
                if replay:
                    updates.append((sub.email, "unknown", "", f"cannot rebuild for replay: {exc}"))
                    continue
                updates.append((sub.email, "failed", "", str(exc)))
                summary.errors[str(exc)] += 1
                continue
            if msg is None:
                updates.append((sub.email, "unknown" if replay else "skipped", "",
                                "cannot rebuild for replay: no review matches the followed tags now"
                                if replay else "no review matches the followed tags"))
                continue
            outgoing.append(msg)
            owners.append(sub.email)
        bid = replay or batch_id(issue.id, owners)
        with store.transaction():
            for _, st, _, _ in updates:
                summary.counts[st] += 0 if replay else 1
            store.mark(issue.id, updates, now)
            store.mark_sending(issue.id, owners, bid, now)
        if not outgoing:
            return
        limiter.acquire(len(outgoing))
        summary.calls += 1
        try:
            results = transport.send(outgoing)
        except DeliveryError:
            with store.transaction():
                back = "unknown" if replay else "pending"
                store.mark(issue.id, [(o, back, "", "not sent: the transport failed as a whole")
                                      for o in owners], clock())
            raise
        done = clock()
        final = []
        for key, res in zip(owners, results):
            if res.status == "sent":
                final.append((key, "sent", res.provider_id, res.error))
                summary.counts["sent"] += 1
                summary.counts["replayed"] += 1 if replay else 0
                consecutive = 0
                continue
            consecutive += 1
            if res.status == "unknown":
                if replayable or not resend:
                    final.append((key, "unknown", "", res.error))
                    summary.counts["unknown"] += 1
                    summary.errors[res.error] += 1
                else:
                    final.append((key, "pending", "", res.error))
                    summary.counts["retried"] += 1
            elif res.status == "retry" and res.retry_after and res.retry_after > d.retry_after_max:
                # The provider asked for a longer wait than we honour: stop this run, keep the row.
                final.append((key, "pending", "", res.error))
                summary.counts["retried"] += 1
                if not summary.paused:
                    summary.paused = (f"paused: the provider asked to wait {res.retry_after:g} s, more than "
                                      f"[delivery] retry_after_max = {d.retry_after_max:g}; "
                                      "run `newsletter send` again later to resume")
            elif res.status == "retry" and not last:
                final.append((key, "pending", "", res.error))
                summary.counts["retried"] += 1
                if res.retry_after:
                    waits.append(res.retry_after)
            else:
                err = res.error if res.status == "failed" else f"gave up after {max_attempts} attempts: {res.error}"
                final.append((key, "failed", "", err))
                summary.counts["failed"] += 1
                summary.errors[res.error] += 1
        with store.transaction():
            store.mark(issue.id, final, done)
        if d.pause_after_failures and consecutive >= d.pause_after_failures and not summary.paused:
            summary.paused = (f"paused after {consecutive} failures in a row "
                              f"([delivery] pause_after_failures = {d.pause_after_failures}); "
                              "run `newsletter send` again to resume")
        if progress:
            counts = store.delivery_counts(issue.id)
            progress(total - counts.get("pending", 0) - counts.get("sending", 0), total)

    for round_no in range(max_attempts):
        last = round_no + 1 == max_attempts
        replays = [(b, n) for b, at, n in store.unknown_batches(issue.id) if fresh(at)] if replayable else []
        if round_no:
            if not replays and not store.deliveries(issue.id, ("pending",), limit=1):
                break
            delay = backoff_delay(round_no, backoff, d.backoff_max)
            if waits:
                delay = max(delay, min(max(waits), d.retry_after_max))
            waits.clear()
            sleep(delay)
        for bid, n in replays:
            send_rows(store.deliveries(issue.id, ("unknown",), batch=bid, limit=n), bid, last)
            if summary.paused:
                break
        if not summary.paused:
            apply_policy()
        after = ""
        while not summary.paused:
            batch = store.deliveries(issue.id, ("pending",), after=after, limit=size)
            if not batch:
                break
            after = batch[-1][0].email
            send_rows(batch, "", last)
        if summary.paused:
            break
    summary.ledger = store.delivery_counts(issue.id)
    summary.compiles = renderer.compiles - compiles_before
    summary.requests = getattr(transport, "calls", 0)
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
