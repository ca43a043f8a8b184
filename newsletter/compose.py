"""Issues: which period is due, and which reviews go in it.

Rules (DESIGN.md, "Issues"):
- A period is an ISO 8601 week (Monday 00:00 to the next Monday 00:00) in
  ``site.timezone``; its issue id is ``YYYY-Www`` (ISO week-numbering year).
  Local wall-clock arithmetic with :mod:`zoneinfo` keeps weeks right across
  daylight-saving changes (a week may be 167 or 169 hours long).
- The issue of a week is due at the first ``email.send_at`` moment at or after
  the week's end: with the default ``MON 09:00`` the issue of week 48 goes out
  on Monday 09:00 of week 49. Only the latest due issue is composed; if a
  scheduled run was missed, the next one carries every review not yet mailed.
- Every review is in exactly one issue: the first composed after the review
  was gathered. Reviews published before ``email.since`` are never mailed.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Optional
from zoneinfo import ZoneInfo

from .config import Config, SendAt
from .errors import NewsletterError
from .models import Issue, StoredReview
from .store import Store


def week_start(day: date) -> date:
    """The Monday of ``day``'s ISO week."""
    return day - timedelta(days=day.weekday())


def issue_id_for(day: date) -> str:
    """``2026-W48`` for any day of that ISO week."""
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def period(issue_id: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """Start and end (exclusive) of an issue's week, aware, local midnight in ``tz``.

    Raises:
        NewsletterError: ``issue_id`` is not of the form ``YYYY-Www``.
    """
    try:
        year, week = issue_id.split("-W")
        monday = date.fromisocalendar(int(year), int(week), 1)
    except ValueError:
        raise NewsletterError(f"issue id {issue_id!r} is not of the form 2026-W48") from None
    start = datetime.combine(monday, time(0), tz)
    end = datetime.combine(monday + timedelta(days=7), time(0), tz)
    return start, end


def make_issue(issue_id: str, tz: ZoneInfo, composed_at: Optional[datetime] = None,
               review_count: int = 0, status: str = "composed") -> Issue:
    """An :class:`Issue` for an id, with its local period."""
    start, end = period(issue_id, tz)
    return Issue(issue_id, start, end, composed_at, review_count, status)


def send_time(week_monday: date, send_at: SendAt, tz: ZoneInfo) -> datetime:
    """The ``send_at`` moment in the week starting on ``week_monday``, aware, local."""
    return datetime.combine(week_monday + timedelta(days=send_at.weekday), send_at.at, tz)


def due_issue(now: datetime, send_at: SendAt, tz: ZoneInfo) -> tuple[str, datetime]:
    """The latest issue whose send time has come.

    Args:
        now: aware current time.
        send_at: the weekly send moment (local to ``tz``).
        tz: ``site.timezone``.

    Returns:
        ``(issue_id, due_at)``: the issue id of the completed week and the aware
        local moment it became due (``due_at <= now``).
    """
    local = now.astimezone(tz)
    monday = week_start(local.date())
    due = send_time(monday, send_at, tz)
    if due > local:
        monday -= timedelta(days=7)
        due = send_time(monday, send_at, tz)
    # Exactly one Monday 00:00 lies in (due - 7 days, due]: the end of the week now due.
    return issue_id_for(week_start(due.date()) - timedelta(days=7)), due


def next_due(now: datetime, send_at: SendAt, tz: ZoneInfo) -> datetime:
    """The next ``send_at`` moment strictly after ``now`` (aware, local)."""
    local = now.astimezone(tz)
    monday = week_start(local.date())
    due = send_time(monday, send_at, tz)
    if due <= local:
        due = send_time(monday + timedelta(days=7), send_at, tz)
    return due


def select_reviews(pending: list[StoredReview], since: Optional[datetime]) -> tuple[list[StoredReview], list[StoredReview]]:
    """Split pending reviews into (to mail, never to mail because published before ``since``)."""
    if since is None:
        return pending, []
    keep = [r for r in pending if r.review.published >= since]
    old = [r for r in pending if r.review.published < since]
    return keep, old


def compose(config: Config, store: Store, now: datetime, issue_id: Optional[str] = None) -> Optional[Issue]:
    """Compose (or return the already composed) issue.

    Args:
        config: the configuration.
        store: the open store.
        now: aware current time; reviews gathered up to it are taken.
        issue_id: the issue to compose; default: the latest due (:func:`due_issue`).

    Returns:
        The :class:`Issue` (status ``composed``, ``sending``, ``sent`` or ``empty``).
        A new empty issue with ``email.skip_empty`` is recorded with status ``empty``
        so that it is not composed again.
    """
    tz = config.site.tz
    if issue_id is None:
        issue_id, _ = due_issue(now, config.email.send_at, tz)
    existing = store.get_issue(issue_id)
    if existing:
        return existing
    keep, old = select_reviews(store.pending_reviews(now), config.email.since)
    status = "empty" if (not keep and config.email.skip_empty) else "composed"
    issue = make_issue(issue_id, tz, now, len(keep), status)
    store.create_issue(issue, [r.review.id for r in keep], [r.review.id for r in old])
    return issue


def preview_reviews(config: Config, store: Store, now: datetime, issue_id: Optional[str]) -> tuple[Issue, list[StoredReview]]:
    """An issue and its reviews for preview or a test copy, without composing anything.

    With ``issue_id``: that issue if composed; if it is the due or the next issue,
    the reviews waiting for it. Without: the next issue to be composed when
    reviews are waiting, else the latest composed issue with reviews.

    Raises:
        NewsletterError: the id names a past issue that was never composed, or there
            is nothing at all to show.
    """
    tz = config.site.tz
    due_id, _ = due_issue(now, config.email.send_at, tz)
    upcoming = issue_id_for(week_start(next_due(now, config.email.send_at, tz).date()) - timedelta(days=7))
    waiting_id = due_id if not store.get_issue(due_id) else upcoming
    if issue_id:
        existing = store.get_issue(issue_id)
        if existing:
            return existing, store.reviews_in_issue(issue_id)
        if issue_id not in (due_id, upcoming):
            raise NewsletterError(f"issue {issue_id} was never composed",
                                  hint=f"the issue due now is {due_id}")
        keep, _ = select_reviews(store.pending_reviews(now), config.email.since)
        return make_issue(issue_id, tz, None, len(keep)), keep
    keep, _ = select_reviews(store.pending_reviews(now), config.email.since)
    if keep:
        return make_issue(waiting_id, tz, None, len(keep)), keep
    for issue in store.issues():
        if issue.review_count:
            return issue, store.reviews_in_issue(issue.id)
    raise NewsletterError("no reviews to show: nothing gathered yet", hint="run `newsletter gather` first")
