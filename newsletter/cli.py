"""The ``newsletter`` command: parse, call the library, print. Nothing else lives here.

Exit codes (DESIGN.md): 0 success; 1 finished with failures (rejected records,
failed deliveries); 2 usage or configuration error. A user error prints one
line (``error: …``), never a traceback unless ``-v``.
"""

from __future__ import annotations

import functools
import sqlite3
import json
import logging
import sys
from pathlib import Path
from typing import Optional

import click

from . import __version__
from .config import DEFAULT_CONFIG, Config, load_config, utcnow
from .errors import ConfigError, LockError, NewsletterError

log = logging.getLogger("newsletter")


class Context:
    """What every command gets: the config path and verbosity."""

    def __init__(self, config_path: str, verbose: int, quiet: bool, log_format: str = "text") -> None:
        self.config_path, self.verbose, self.quiet = config_path, verbose, quiet
        self.log_format = log_format
        self._config: Optional[Config] = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    def say(self, text: str = "") -> None:
        if not self.quiet:
            click.echo(text)

    def err(self, level: int, text: str) -> None:
        """A line for stderr: plain text, or one JSON log record with ``--log-format json``."""
        if self.log_format == "json":
            log.log(level, text)
        else:
            click.echo(text, err=True)


def handle_errors(fn):
    """Turn library errors into one line and the right exit code."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context().find_object(Context)
        try:
            return fn(*args, **kwargs)
        except (ConfigError,) as exc:
            _fail(ctx, exc, 2)
        except LockError as exc:
            _fail(ctx, exc, 1)
        except NewsletterError as exc:
            _fail(ctx, exc, 1)
        except sqlite3.Error as exc:
            _fail(ctx, exc, 1, prefix="store: ")
        except BrokenPipeError:
            # The reader went away (e.g. `| head`): stop quietly, like other Unix tools.
            import os as _os
            _os.dup2(_os.open(_os.devnull, _os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as exc:
            _fail(ctx, exc, 1, prefix=f"{type(exc).__name__}: ")
    return wrapper


def _fail(ctx: Optional[Context], exc: BaseException, code: int, prefix: str = "") -> None:
    if ctx and ctx.log_format == "json":
        log.error(f"{prefix}{exc}", exc_info=exc if ctx.verbose else None)
        sys.exit(code)
    if ctx and ctx.verbose:
        import traceback
        traceback.print_exception(exc, file=sys.stderr)
    click.echo(f"error: {prefix}{exc}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", envvar="NEWSLETTER_CONFIG", default=DEFAULT_CONFIG,
              show_default=True, help="Configuration file (env NEWSLETTER_CONFIG).")
@click.option("-v", "--verbose", count=True, help="More detail; tracebacks on errors.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
@click.option("--log-format", type=click.Choice(["text", "json"]), envvar="NEWSLETTER_LOG_FORMAT",
              default="text", show_default=True,
              help="Log lines on stderr: text, or one JSON object per line for schedulers "
                   "(env NEWSLETTER_LOG_FORMAT).")
@click.version_option(__version__, prog_name="newsletter")
@click.pass_context
def main(ctx: click.Context, config_path: str, verbose: int, quiet: bool, log_format: str) -> None:
    """Publish tagged code reviews as per-tag Atom feeds and a weekly email."""
    from .logs import setup_logging

    setup_logging(verbose, quiet, log_format)
    ctx.obj = Context(config_path, verbose, quiet, log_format)


pass_ctx = click.make_pass_decorator(Context)


def _issue_id(ctx, param, value: Optional[str]) -> Optional[str]:
    """Check an ``--issue`` value is an existing ISO week id like 2026-W48 (usage error, exit 2, if not)."""
    if value is None:
        return None
    import re
    from datetime import date
    m = re.fullmatch(r"(\d{4})-W(\d{2})", value.strip())
    try:
        if not m or not 1970 <= int(m.group(1)) <= 2999:
            raise ValueError
        date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO week like 2026-W48") from None
    return value.strip()


def _print_gather(ctx: Context, report) -> None:
    for line in report.problems:
        ctx.err(logging.ERROR, f"rejected: {line}")
    for line in report.warnings:
        if ctx.verbose or not ctx.quiet:
            ctx.err(logging.WARNING, f"warning: {line}")
    ctx.say(f"gather: {report.new} new, {report.updated} updated, {report.unchanged} unchanged, "
            f"{report.rejected} rejected" + (f", {report.failed_sources} source(s) failed"
                                             if report.failed_sources else ""))


@main.command()
@pass_ctx
@handle_errors
def gather(ctx: Context) -> None:
    """Read every source into the store."""
    from .gather import gather as do_gather
    from .lock import RunLock
    from .store import Store

    config = ctx.config
    with RunLock(config.store_path), Store(config.store_path) as store:
        report = do_gather(config, store, utcnow())
    _print_gather(ctx, report)
    sys.exit(0 if report.ok else 1)


@main.command()
@pass_ctx
@handle_errors
def feeds(ctx: Context) -> None:
    """Write the feeds directory from the store."""
    from .feeds import build_feeds
    from .lock import RunLock
    from .store import Store

    config = ctx.config
    # must_exist: a mistyped [store] path must not publish empty feeds over real ones.
    with RunLock(config.store_path), Store(config.store_path, must_exist=True) as store:
        report = build_feeds(config, store, now=utcnow())
    ctx.say(f"feeds: {len(report.written)} written, {len(report.unchanged)} unchanged in {config.feeds.dir}")


@main.command()
@click.option("--issue", "issue_id", callback=_issue_id,
              help="Issue id like 2026-W48 (default: the next issue if reviews wait for it, else the latest).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("preview"),
              show_default=True, help="Directory for the files.")
@pass_ctx
@handle_errors
def preview(ctx: Context, issue_id: Optional[str], out_dir: Path) -> None:
    """Render an issue (HTML, text, .eml) to files without sending."""
    from .job import preview as do_preview

    for path in do_preview(ctx.config, utcnow, out_dir, issue_id):
        ctx.say(str(path))


@main.command()
@click.option("--issue", "issue_id", callback=_issue_id, help="Issue id like 2026-W48 (default: the one due now).")
@click.option("--to", "to_addr", help="Send one test copy to this address; records nothing.")
@click.option("--dry-run", is_flag=True, help="Say what would be sent; write nothing.")
@click.option("--retry-failed", is_flag=True, help="Send again to the recipients whose delivery failed.")
@click.option("--resend-unknown", is_flag=True,
              help="Send again the messages whose fate is unknown (overrides [delivery] unknown = \"skip\").")
@pass_ctx
@handle_errors
def send(ctx: Context, issue_id: Optional[str], to_addr: Optional[str], dry_run: bool,
         retry_failed: bool = False, resend_unknown: bool = False) -> None:
    """Deliver an issue (resumable and idempotent)."""
    from . import job

    config = ctx.config
    if dry_run:
        info = job.dry_run(config, utcnow, issue_id)
        click.echo(f"dry run: issue {info['issue']} ({info['status']}): {info['reviews']} reviews; "
                   f"would send {info['recipients']} message(s) via {config.transport.kind}; "
                   f"{info['already_sent']} already sent; {info['no_matching_reviews']} without matching reviews")
        return
    if to_addr:
        issue, result = job.send_test_copy(config, utcnow, to_addr, issue_id)
        if result.status != "sent":
            click.echo(f"error: test copy of {issue.id} to {to_addr} {result.status}: {result.error}", err=True)
            sys.exit(1)
        ctx.say(f"test copy of {issue.id} sent to {to_addr} ({result.provider_id})")
        return
    from .console import send_progress

    from .errors import NothingToSend

    try:
        with send_progress("sending", enabled=None if not ctx.quiet else False) as progress:
            issue, summary = job.send_issue(config, utcnow, issue_id, progress=progress,
                                            retry_failed=retry_failed,
                                            resend_unknown=True if resend_unknown else None)
    except NothingToSend as exc:
        ctx.say(str(exc))
        sys.exit(0)
    _print_delivery(ctx, config, issue.id, summary)
    sys.exit(0 if summary.ok else 1)


def _print_delivery(ctx: Context, config: Config, issue_id: str, summary) -> None:
    c, l = summary.counts, summary.ledger
    ctx.say(f"send {issue_id}: {c.get('sent', 0)} sent, {c.get('failed', 0)} failed, "
            f"{c.get('skipped', 0)} skipped, {c.get('unknown', 0)} unknown this run; "
            f"ledger: " + ", ".join(f"{k} {v}" for k, v in sorted(l.items())))
    for err, n in summary.errors.most_common(10):
        ctx.err(logging.ERROR, f"failed: {n} × {err}")
    if l.get("unknown"):
        ctx.err(logging.WARNING, f"unknown: {l['unknown']} message(s) may or may not have been delivered; "
                f"[delivery] unknown = \"{config.delivery.unknown}\" (see `newsletter status`; "
                f"`send --resend-unknown` sends them again)")
    if summary.paused:
        ctx.err(logging.WARNING, f"paused: {summary.paused}")
    if not ctx.quiet:
        from .console import print_summary

        print_summary(summary)
    if config.transport.kind == "outbox":
        ctx.say(f"messages: {Path(config.transport.options.get('dir', 'outbox'))}")


@main.command()
@pass_ctx
@handle_errors
def run(ctx: Context) -> None:
    """The scheduled job: gather → compose the due issue → feeds → send it if not yet sent."""
    from .job import run_job

    config = ctx.config
    report = run_job(config, utcnow)
    _print_gather(ctx, report.gather)
    ctx.say(f"feeds: {len(report.feeds.written)} written, {len(report.feeds.unchanged)} unchanged in {config.feeds.dir}")
    issue = report.issue
    if issue is None:
        ctx.say("issue: none due")
    elif report.delivery is None:
        ctx.say(f"issue {issue.id}: {issue.status} ({issue.review_count} reviews); nothing to send")
    else:
        _print_delivery(ctx, config, issue.id, report.delivery)
    sys.exit(0 if report.ok else 1)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
@handle_errors
def status(ctx: Context, as_json: bool) -> None:
    """Last gather, subscribers, issues and their delivery counts."""
    from .job import status as do_status

    info = do_status(ctx.config)
    if as_json:
        click.echo(json.dumps(info, ensure_ascii=False, indent=2))
        return
    g = info["last_gather"]
    click.echo(f"store: {info['store']} ({info['reviews']} reviews)")
    click.echo("last gather: " + (f"{g['at']}: {g['new']} new, {g['updated']} updated, {g['unchanged']} unchanged, "
                                  f"{g['rejected']} rejected" if g else "never"))
    click.echo("subscribers: " + (", ".join(f"{k} {v}" for k, v in sorted(info["subscribers"].items())) or "none"))
    last = info["last_issue"]
    click.echo("last issue: " + (f"{last['id']} ({last['status']}, composed {last['composed_at']})" if last else "none"))
    for i in info["issues"]:
        d = ", ".join(f"{k} {v}" for k, v in sorted(i["deliveries"].items())) or "no deliveries"
        click.echo(f"issue {i['id']}: {i['status']}, {i['reviews']} reviews; {d}")
        for p in i["problems"]:
            click.echo(f"  {p['status']}: {p['email']}: {p['error']}")
        if i["more_problems"]:
            click.echo(f"  … and {i['more_problems']} more failed or unknown (see `status --json` or the ledger)")
    if info["problems_total"]:
        click.echo(f"problems: {info['problems_total']} failed or unknown deliveries")


@main.group()
def subscribers() -> None:
    """Manage recipients."""


@subscribers.command("add")
@click.argument("email")
@click.option("--name", default=None, help="Display name (kept as it is when omitted).")
@click.option("--tags", default=None,
              help="Tags to follow, separated by , or | (empty: every tag; kept as they are when omitted).")
@click.option("--force", is_flag=True, help="Re-activate even an address that reported the list as spam.")
@pass_ctx
@handle_errors
def subscribers_add(ctx: Context, email: str, name: Optional[str], tags: Optional[str], force: bool) -> None:
    """Add a subscriber, or change one (re-activates a suppressed address)."""
    import dataclasses

    from .store import Store
    from .subscribers import make_subscriber, normalize_email

    try:
        addr = normalize_email(email)
    except ValueError as exc:
        raise click.UsageError(str(exc))
    with Store(ctx.config.store_path) as store:
        existing = {s.email.lower(): s for s in store.subscribers()}.get(addr.lower())
        try:
            sub = make_subscriber(addr, name if name is not None else (existing.name if existing else ""),
                                  (tags or "").replace(",", "|"))
        except ValueError as exc:
            raise click.UsageError(str(exc))
        if tags is None and existing:
            sub = dataclasses.replace(sub, tags=existing.tags)
        if existing and existing.status == "complained" and not force:
            click.echo(f"error: {addr} reported this list as spam; it is re-activated only with --force", err=True)
            sys.exit(1)
        unknown = [k for k in sub.tags if k not in store.tags()]
        outcome = store.upsert_subscriber(sub, utcnow(), reactivate=True)
    for k in unknown:
        click.echo(f"warning: no review has the tag {k!r} yet", err=True)
    ctx.say(f"{sub.email}: {outcome}")


@subscribers.command("remove")
@click.argument("email")
@pass_ctx
@handle_errors
def subscribers_remove(ctx: Context, email: str) -> None:
    """Unsubscribe an address (kept as suppressed so it is never mailed again)."""
    from .store import Store
    from .subscribers import normalize_email

    try:
        addr = normalize_email(email)
    except ValueError as exc:
        raise click.UsageError(str(exc))
    with Store(ctx.config.store_path) as store:
        found = store.set_subscriber_status(addr, "unsubscribed", utcnow())
    if not found:
        click.echo(f"error: {addr} is not a subscriber", err=True)
        sys.exit(1)
    ctx.say(f"{addr}: unsubscribed")


@subscribers.command("list")
@click.option("--status", type=click.Choice(["active", "unsubscribed", "bounced", "complained"]))
@pass_ctx
@handle_errors
def subscribers_list(ctx: Context, status: Optional[str]) -> None:
    """List subscribers: address, status, name, followed tags."""
    from .store import Store

    with Store(ctx.config.store_path) as store:
        names = {k: t.name for k, t in store.tags().items()}
        for s in store.subscribers(status):
            tags = ", ".join(names.get(k, k) for k in s.tags) or "*"
            click.echo(f"{s.email}\t{s.status}\t{s.name}\t{tags}")


@subscribers.command("import")
@click.argument("csv_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_ctx
@handle_errors
def subscribers_import(ctx: Context, csv_file: Path) -> None:
    """Import subscribers from CSV (email,name,tags; tags separated by |)."""
    from .store import Store
    from .subscribers import import_csv

    with Store(ctx.config.store_path) as store, csv_file.open(encoding="utf-8-sig", newline="") as fh:
        r = import_csv(store, fh, str(csv_file), utcnow())
    for line in r.problems:
        click.echo(f"rejected: {line}", err=True)
    ctx.say(f"import: {r.added} added, {r.updated} updated, {r.unchanged} unchanged, "
            f"{r.suppressed} suppressed (left unsubscribed), {r.rejected} rejected")
    sys.exit(1 if r.rejected else 0)


@subscribers.command("export")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), help="File (default: stdout).")
@pass_ctx
@handle_errors
def subscribers_export(ctx: Context, out: Optional[Path]) -> None:
    """Export subscribers as CSV."""
    from .store import Store
    from .subscribers import export_csv
    from .writer import Writer

    with Store(ctx.config.store_path) as store:
        text = export_csv(store.subscribers(), {k: t.name for k, t in store.tags().items()})
    if out:
        Writer(out.parent).write(out.name, text.encode("utf-8"))
    else:
        click.echo(text, nl=False)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@pass_ctx
@handle_errors
def serve(ctx: Context, host: str, port: int) -> None:
    """Run the web app (subscribe, confirm, preferences, unsubscribe, webhooks, feeds preview).

    For production run it under a WSGI server instead, e.g.
    gunicorn 'newsletter.web:app_from_env()'.
    """
    from werkzeug.serving import run_simple

    from .web import create_app

    app = create_app(ctx.config, clock=utcnow)
    ctx.say(f"serving {ctx.config.feeds.dir} and the subscription pages on http://{host}:{port}/ "
            f"(links point at {ctx.config.site.app_url})")
    run_simple(host, port, app, threaded=True, use_reloader=False)


if __name__ == "__main__":  # pragma: no cover
    main()
