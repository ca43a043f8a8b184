"""The weekly job end to end: gather → compose → feeds → deliver, run twice, resumable."""

import email
import os
from datetime import datetime, timezone
from email import policy

import pytest
from freezegun import freeze_time

from newsletter import job
from newsletter.config import load_config
from newsletter.models import DeliveryResult
from newsletter.store import Store
from newsletter.subscribers import make_subscriber
from newsletter.transports.memory import MemoryTransport
from tests.conftest import EXAMPLE_JSONL, make_config, review, write_jsonl

DUE = "2026-11-30T02:00:00Z"   # Monday 10:00 in Shanghai: 2026-W48 is due


def clock():
    return datetime.now(timezone.utc)


def add_subscribers(config, *subs):
    with Store(config.store_path) as store:
        for s in subs:
            store.upsert_subscriber(s, clock())


@pytest.fixture
def config(site):
    cfg = load_config(site)
    add_subscribers(cfg, make_subscriber("wang@example.org", "王芳"),
                    make_subscriber("alex@example.org", "Rivera, Alex", "ROCm"),
                    make_subscriber("sam@example.org", "Sam", "CPU"))
    return cfg


def gather_only(config):
    from newsletter.gather import gather
    with Store(config.store_path) as store:
        gather(config, store, clock())


def outbox(config):
    d = config.path.parent / "outbox"
    return sorted(d.glob("*.eml")) if d.exists() else []


@freeze_time(DUE)
def test_run_delivers_once_and_second_run_does_nothing(config):
    """The first run sends one message per recipient; the second sends nothing and rewrites no feed."""
    first = job.run_job(config, clock)
    assert first.issue.id == "2026-W48" and first.issue.status == "sent"
    assert first.delivery.counts["sent"] == 3
    files = outbox(config)
    assert len(files) == 3
    snapshot = {p: p.read_bytes() for p in config.feeds.dir.rglob("*") if p.is_file()}
    second = job.run_job(config, clock)
    assert second.delivery is None and second.feeds.written == []
    assert outbox(config) == files
    assert snapshot == {p: p.read_bytes() for p in config.feeds.dir.rglob("*") if p.is_file()}


@freeze_time(DUE)
def test_each_message_has_one_recipient_and_their_own_links(config):
    """Every message goes to one address, carries only that address and its own unsubscribe link."""
    job.run_job(config, clock)
    seen = set()
    for p in outbox(config):
        m = email.message_from_bytes(p.read_bytes(), policy=policy.default)
        to = m["To"].addresses
        assert len(to) == 1 and m["Cc"] is None and m["Bcc"] is None
        addr = to[0].addr_spec
        others = {"wang@example.org", "alex@example.org", "sam@example.org"} - {addr}
        body = p.read_bytes().decode("ascii")
        assert not any(o in body for o in others)
        seen.add(m["List-Unsubscribe"])
    assert len(seen) == 3


@freeze_time(DUE)
def test_tag_subscriber_gets_only_their_reviews(config):
    """A subscriber following only ROCm gets only ROCm reviews; the all-tags one gets all."""
    mem = MemoryTransport()
    job.run_job(config, clock, transport=mem)
    by_addr = {m.recipient: m.fields["html"] for m in mem.sent}
    assert by_addr["wang@example.org"].count("Review ") >= 6
    rocm_titles = [f"Review {n}:" for n in range(1, 7) if n % 3 == 0]
    other_titles = [f"Review {n}:" for n in range(1, 7) if n % 3 != 0]
    assert all(t in by_addr["alex@example.org"] for t in rocm_titles)
    assert not any(t in by_addr["alex@example.org"] for t in other_titles)


@freeze_time(DUE)
def test_send_resumes_after_a_failure_without_second_copies(config):
    """A run whose transport fails one recipient transiently is completed by the next send, no duplicates."""
    mem = MemoryTransport(fail=lambda r: DeliveryResult(r, "retry", error="451 try later") if r == "sam@example.org" else None)
    report = job.run_job(config, clock, transport=mem)
    assert report.delivery.ledger == {"failed": 1, "sent": 2}
    assert not report.ok
    # Later, the failed one is retried by hand (send --issue) ... only pending rows go; failed stays failed.
    mem2 = MemoryTransport()
    job.send_issue(config, clock, "2026-W48", transport=mem2)
    assert mem2.sent == []


@freeze_time(DUE)
def test_interrupted_send_resumes_where_it_stopped(config):
    """Rows left 'sending' by a killed run are resent on an idempotent transport (outbox), the rest untouched."""
    job.run_job(config, clock)
    with Store(config.store_path) as store:
        store.mark("2026-W48", [("sam@example.org", "sending", "", "")], clock())
        store.set_issue_status("2026-W48", "sending")
    before = len(outbox(config))
    issue, summary = job.send_issue(config, clock, "2026-W48")
    assert summary.counts["sent"] == 1 and issue.status == "sent"
    assert len(outbox(config)) == before  # same Message-ID, same file: still one copy


@freeze_time(DUE)
def test_test_copy_records_nothing(config):
    """send --to delivers one copy and leaves the ledger and issues untouched."""
    gather_only(config)
    mem = MemoryTransport()
    issue, result = job.send_test_copy(config, clock, "me@example.org", transport=mem)
    assert result.status == "sent" and len(mem.sent) == 1
    assert mem.sent[0].fields["subject"].startswith("[TEST] ")
    with Store(config.store_path) as store:
        assert store.issues() == [] and store.delivery_counts(issue.id) == {}


@freeze_time(DUE)
def test_dry_run_writes_nothing(config):
    """send --dry-run reports what would go out and changes no file."""
    job.run_job(config, clock, transport=MemoryTransport())  # creates the store
    before = {p: p.stat().st_mtime_ns for p in config.path.parent.rglob("*") if p.is_file()}
    info = job.dry_run(config, clock)
    after = {p: p.stat().st_mtime_ns for p in config.path.parent.rglob("*") if p.is_file()}
    assert before == after
    assert info["issue"] == "2026-W48"


@freeze_time(DUE)
def test_preview_writes_html_text_eml(config, tmp_path):
    """preview renders the upcoming issue to three files without composing it."""
    gather_only(config)
    paths = job.preview(config, clock, tmp_path / "pv")
    assert [p.suffix for p in paths] == [".html", ".txt", ".eml"] and all(p.exists() for p in paths)
    with Store(config.store_path) as store:
        assert store.issues() == []


@freeze_time(DUE)
def test_archive_page_has_no_personal_data(config):
    """The 'view in browser' page is written and carries no recipient address or signed link."""
    job.run_job(config, clock)
    page = (config.feeds.dir / "issues" / "2026-W48.html").read_text(encoding="utf-8")
    assert "Review 1:" in page and "@example.org" not in page and "unsubscribe?t=" not in page
    assert "issues/2026-W48.html" in (config.feeds.dir / "index.html").read_text(encoding="utf-8")


@freeze_time(DUE)
def test_missing_secret_is_a_config_error(config, monkeypatch):
    """Without the signing key in the environment, the job stops with a ConfigError naming the variable."""
    from newsletter.errors import ConfigError
    monkeypatch.delenv("NEWSLETTER_TEST_SECRET")
    with pytest.raises(ConfigError, match="NEWSLETTER_TEST_SECRET"):
        job.run_job(config, clock, transport=MemoryTransport())


@freeze_time(DUE)
def test_test_copy_never_reuses_the_real_message_id(config):
    """A test copy to a subscriber's address has its own Message-ID, so it never replaces their real message."""
    mem = MemoryTransport()
    job.run_job(config, clock, transport=mem)
    real = {m.recipient: m.message_id for m in mem.sent}
    test = MemoryTransport()
    job.send_test_copy(config, clock, "wang@example.org", issue_id="2026-W48", transport=test)
    assert test.sent[0].message_id != real["wang@example.org"]
    assert test.sent[0].message_id.startswith("test-2026-W48.")


@freeze_time(DUE)
def test_status_shows_last_gather_last_issue_counts_and_failures(config):
    """status: last gather, the last issue, delivery counts per status and every failed address with its error."""
    mem = MemoryTransport(fail=lambda r: DeliveryResult(r, "failed", error="550 no such user") if r == "sam@example.org" else None)
    job.run_job(config, clock, transport=mem)
    info = job.status(config)
    assert info["last_gather"]["new"] == 6
    assert info["last_issue"]["id"] == "2026-W48" and info["last_issue"]["deliveries"] == {"failed": 1, "sent": 2}
    assert info["last_issue"]["problems"] == [{"email": "sam@example.org", "status": "failed", "error": "550 no such user"}]
    assert info["problems_total"] == 1 and info["last_issue"]["more_problems"] == 0
