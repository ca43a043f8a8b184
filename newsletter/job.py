"""The maintainer's operations as library calls (the CLI only parses and prints).

``run_job`` is the scheduled job: gather → compose the due issue (if its send
time has come and it was not composed yet) → feeds (including the issue's
"view in browser" page, so it exists before the email links to it) → deliver
the issue if it is not fully sent. Running it again does nothing new.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional

from .compose import compose, due_issue, preview_reviews
from .config import Config
from .deliver import DeliverySummary, deliver, send_test
from .errors import NewsletterError, NothingToSend
from .feeds import FeedsReport, build_feeds
from .gather import GatherReport, gather
from .links import Links
from .lock import RunLock
from .message import parse_sender
from .models import Issue
from .render import Renderer
from .store import Store
from .transports import Transport, make_transport
from .writer import Writer

Clock = Callable[[], datetime]
log = logging.getLogger("newsletter.job")


def links_for(config: Config) -> Links:
    """Signed links with the key from ``[site] secret_key_env``.

    Raises:
        ConfigError: the variable is not set.
    """
    return Links(config, config.secret(config.site.secret_key_env, "[site] secret_key_env"))


@dataclass
class JobReport:
    """What :func:`run_job` did; ``issue`` and ``delivery`` are ``None`` when nothing was due or sent."""

    gather: GatherReport
    feeds: FeedsReport
    issue: Optional[Issue] = None
    delivery: Optional[DeliverySummary] = None
    due_at: Optional[datetime] = None

    @property
    def ok(self) -> bool:
        """True when nothing was rejected and nothing failed."""
        return self.gather.ok and (self.delivery is None or self.delivery.ok)


def run_job(config: Config, clock: Clock, transport: Optional[Transport] = None,
            progress=None) -> JobReport:
    """The scheduled weekly job (safe to start every hour).

    Args:
        config: the configuration.
        clock: returns the aware current time.
        transport: override the configured transport (tests).
        progress: passed to :func:`~newsletter.deliver.deliver`.

    Raises:
        LockError: another run holds the lock.
        ConfigError, DeliveryError, RenderError, StoreError: as their names say.
    """
    with RunLock(config.store_path), Store(config.store_path) as store:
        now = clock()
        log.info("run started (store %s)", config.store_path)
        g = gather(config, store, now)
        log.info("gather: %(new)d new, %(updated)d updated, %(unchanged)d unchanged, %(rejected)d rejected, "
                 "%(failed_sources)d source(s) failed", g.counts())
        issue_id, due_at = due_issue(now, config.email.send_at, config.site.tz)
        issue = store.get_issue(issue_id)
        links = None
        if issue is None:
            parse_sender(config.email.sender)  # fail before composing if From is wrong
            links = links_for(config)
            issue = compose(config, store, now, issue_id)
        renderer = Renderer(config)
        f = build_feeds(config, store, renderer, now)
        log.info("feeds: %d written, %d unchanged", len(f.written), len(f.unchanged))
        log.info("issue %s (due %s): %s, %d reviews", issue.id, due_at.isoformat(), issue.status,
                 issue.review_count)
        summary = None
        if issue.status in ("composed", "sending"):
            links = links or links_for(config)
            own = transport is None
            transport = transport or make_transport(config)
            try:
                summary = deliver(config, store, issue, transport, renderer, links, clock,
                                  progress=progress)
            finally:
                if own:
                    transport.close()
            issue = store.get_issue(issue.id)
            _log_delivery(issue.id, summary)
        return JobReport(g, f, issue, summary, due_at)


def _log_delivery(issue_id: str, summary: DeliverySummary) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.counts.items())) or "nothing to do"
    ledger = ", ".join(f"{k} {v}" for k, v in sorted(summary.ledger.items()))
    level = logging.INFO if summary.ok else logging.WARNING
    log.log(level, "send %s: %s this run; ledger: %s", issue_id, counts, ledger)
    for err, n in summary.errors.most_common(10):
        log.warning("send %s: %d × %s", issue_id, n, err)


def send_issue(config: Config, clock: Clock, issue_id: Optional[str] = None,
               transport: Optional[Transport] = None, progress=None, retry_failed: bool = False,
               resend_unknown: Optional[bool] = None) -> tuple[Issue, DeliverySummary]:
    """Deliver an issue by hand: the given one or the due one (composed if needed); resumable.

    ``retry_failed`` puts the issue's failed recipients back in the queue first;
    ``resend_unknown`` overrides ``[delivery] unknown`` for this run.

    Raises:
        NewsletterError: the issue does not exist (and is not the due one).
        NothingToSend: the issue is empty.
    """
    with RunLock(config.store_path), Store(config.store_path) as store:
        now = clock()
        links = links_for(config)
        parse_sender(config.email.sender)
        issue = store.get_issue(issue_id) if issue_id else None
        if issue is None:
            due_id, _ = due_issue(now, config.email.send_at, config.site.tz)
            if issue_id and issue_id != due_id:
                raise NewsletterError(f"issue {issue_id} was never composed",
                                      hint=f"the issue due now is {due_id}")
            issue = compose(config, store, now, due_id)
        if issue.status == "empty":
            raise NothingToSend(f"issue {issue.id} has no reviews; nothing to send")
        renderer = Renderer(config)
        build_feeds(config, store, renderer, now)
        own = transport is None
        transport = transport or make_transport(config)
        try:
            summary = deliver(config, store, issue, transport, renderer, links, clock, progress=progress,
                              retry_failed=retry_failed, resend_unknown=resend_unknown)
        finally:
            if own:
                transport.close()
        _log_delivery(issue.id, summary)
        return store.get_issue(issue.id), summary


def send_test_copy(config: Config, clock: Clock, address: str, issue_id: Optional[str] = None,
                   transport: Optional[Transport] = None):
    """Send one copy of an issue (or of the upcoming one) to ``address``; records nothing.

    Returns:
        ``(issue, DeliveryResult)``.

    Raises:
        NewsletterError: the issue has no reviews.
    """
    from .subscribers import normalize_email

    try:
        address = normalize_email(address)
    except ValueError as exc:
        raise NewsletterError(f"--to: {exc}") from None
    with Store(config.store_path) as store:
        now = clock()
        issue, reviews = preview_reviews(config, store, now, issue_id)
        if not reviews:
            raise NewsletterError(f"issue {issue.id} has no reviews; nothing to send",
                                  hint="pass --issue with a composed issue; `newsletter status` lists them")
        own = transport is None
        transport = transport or make_transport(config)
        try:
            result = send_test(config, store, issue, reviews, address, transport, Renderer(config),
                               links_for(config), now)
        finally:
            if own:
                transport.close()
        return issue, result


def dry_run(config: Config, clock: Clock, issue_id: Optional[str] = None) -> dict:
    """What ``send`` would do, writing nothing: the issue, its reviews and recipients per tag set."""
    with Store(config.store_path, must_exist=True) as store:
        now = clock()
        due_id, _ = due_issue(now, config.email.send_at, config.site.tz)
        issue_id = issue_id or due_id
        if store.get_issue(issue_id) is None and issue_id != due_id:
            raise NewsletterError(f"issue {issue_id} was never composed", hint=f"the issue due now is {due_id}")
        issue, reviews = preview_reviews(config, store, now, issue_id)
        counts = store.delivery_counts(issue.id)
        subs = store.subscribers("active")
        sent = counts.get("sent", 0)
        would = 0
        skipped = 0
        for s in subs:
            if not reviews:
                skipped += 1
            elif not s.tags or any(t.key in s.tags for r in reviews for t in r.tags):
                would += 1
            else:
                skipped += 1
        return {"issue": issue.id, "status": issue.status if issue.composed_at else "not composed",
                "reviews": len(reviews), "recipients": would - min(sent, would),
                "already_sent": sent, "no_matching_reviews": skipped}


def preview(config: Config, clock: Clock, out_dir: Path, issue_id: Optional[str] = None) -> list[Path]:
    """Render an issue (composed or upcoming) to ``out_dir``: ``<id>.html``, ``<id>.txt``, ``<id>.eml``.

    The preview uses an example recipient and unsigned placeholder links when no
    signing key is set. Writes nothing to the store.

    Returns:
        The written paths.
    """
    from .deliver import Composer
    from .models import Subscriber
    import os

    with Store(config.store_path) as store:
        now = clock()
        issue, reviews = preview_reviews(config, store, now, issue_id)
        if not reviews:
            raise NewsletterError(f"issue {issue.id} has no reviews to preview",
                                  hint="pass --issue with a composed issue; `newsletter status` lists them")
        key = os.environ.get(config.site.secret_key_env) or "preview-only-key"
        composer = Composer(config, issue, reviews, Renderer(config), Links(config, key))
        msg = composer.message(Subscriber("reader@example.org", "Reader"), now)
        assert msg is not None
        writer = Writer(out_dir)
        writer.write(f"{issue.id}.html", msg.fields["html"].encode("utf-8"))
        writer.write(f"{issue.id}.txt", msg.fields["text"].encode("utf-8"))
        writer.write(f"{issue.id}.eml", msg.data)
        return [out_dir / f"{issue.id}.{ext}" for ext in ("html", "txt", "eml")]


def status(config: Config) -> dict:
    """Last gather, subscriber counts, the last issue and every issue with its delivery counts.

    Returns:
        ``{"store", "reviews", "last_gather" (row dict or None), "subscribers" (status → n),
        "last_issue" (the newest issue's entry or None), "issues": [{"id", "status", "reviews",
        "deliveries" (status → n), "problems" (up to 20 failed/unknown rows: email, status,
        error), "more_problems" (how many more)}], "problems_total"}`` — ``problems_total``
        counts every ``failed`` and ``unknown`` ledger row of every issue.
    """
    with Store(config.store_path, must_exist=True) as store:
        issues = []
        for i in store.issues():
            counts = store.delivery_counts(i.id)
            problems = [dict(r) for r in store.delivery_problems(i.id)]
            bad = counts.get("failed", 0) + counts.get("unknown", 0)
            issues.append({"id": i.id, "status": i.status, "reviews": i.review_count,
                           "composed_at": i.composed_at.isoformat() if i.composed_at else None,
                           "deliveries": counts, "problems": problems,
                           "more_problems": max(0, bad - len(problems))})
        return {"store": str(config.store_path), "reviews": store.review_count(),
                "last_gather": store.last_gather(), "subscribers": store.subscriber_counts(),
                "last_issue": issues[0] if issues else None, "issues": issues,
                "problems_total": sum(i["deliveries"].get("failed", 0) + i["deliveries"].get("unknown", 0)
                                      for i in issues)}
