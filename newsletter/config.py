"""Configuration: one TOML file plus secrets from the environment → a frozen :class:`Config`.

Defaults live in one place (the dataclasses below); the user's file is merged
over them; relative paths resolve against the directory of the config file.
Secrets never live in the file: it names the environment variables that hold
them (``password_env``, ``api_key_env``, ``token_env``, ``secret_key_env``).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ConfigError
from .tag_registry import TagsConfig, parse_tags_table

DEFAULT_CONFIG = "newsletter.toml"
WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


@dataclass(frozen=True)
class SiteConfig:
    """``[site]``: who publishes and where the feeds directory is served.

    Attributes:
        title: shown in feeds, subject lines and pages.
        base_url: absolute URL, always ending in ``/``, at which ``feeds.dir`` is served.
        language: BCP 47 tag, e.g. ``"zh-CN"``; feeds' ``xml:lang`` and ``<html lang>``.
        timezone: IANA zone name; issues are periods in this zone.
        author: feed-level Atom author name (defaults to ``title``).
        description: feed subtitle and page intro, possibly empty.
        secret_key_env: environment variable holding the signing key for links.
        templates: optional directory whose templates override the packaged ones.
        app_url: absolute URL, ending in ``/``, at which ``newsletter serve`` (the
            web app: subscribe, confirm, preferences, unsubscribe) is reachable;
            defaults to ``base_url`` (feeds may sit on static hosting elsewhere).
    """

    title: str
    base_url: str
    language: str = "en"
    timezone: str = "UTC"
    author: str = ""
    description: str = ""
    secret_key_env: str = "NEWSLETTER_SECRET_KEY"
    templates: Optional[Path] = None
    app_url: str = ""

    @property
    def tz(self) -> ZoneInfo:
        """The :class:`zoneinfo.ZoneInfo` for ``timezone``."""
        return ZoneInfo(self.timezone)


@dataclass(frozen=True)
class SourceConfig:
    """One ``[[sources]]`` entry: exactly one of ``path`` and ``url``.

    Attributes:
        path: a file or directory (read recursively, sorted), resolved.
        url: an ``http(s)://`` URL returning a JSON array, a paginated
            ``{"reviews": [...], "next": ...}`` object, or JSON Lines.
        token_env: environment variable holding a bearer token for ``url``.
        timeout: seconds per HTTP request.
        retries: retries of a failed HTTP request (with exponential backoff).
        max_seconds: the most one HTTP source may take, all pages and retries included.
    """

    path: Optional[Path] = None
    url: Optional[str] = None
    token_env: Optional[str] = None
    timeout: float = 30.0
    retries: int = 3
    max_seconds: float = 300.0

    @property
    def name(self) -> str:
        """How messages name this source: its path or URL."""
        return self.url if self.url else str(self.path)


@dataclass(frozen=True)
class FeedsConfig:
    """``[feeds]``: where and how large.

    Attributes:
        dir: output directory, resolved.
        max_entries: entries per feed document (newest first); archive pages
            hold exactly this many (see :mod:`newsletter.feed_archive`).
        websub_hub: WebSub hub URL (https://www.w3.org/TR/websub/) or empty;
            advertised in every feed and pinged for changed feeds.
    """

    dir: Path
    max_entries: int = 50
    websub_hub: str = ""


@dataclass(frozen=True)
class SendAt:
    """A weekly send time, local to ``site.timezone``: ``weekday`` 0=Monday."""

    weekday: int = 0
    at: time = time(9, 0)


@dataclass(frozen=True)
class EmailConfig:
    """``[email]``: the weekly issue.

    Attributes:
        sender: the ``From`` header, e.g. ``"Reviews <reviews@example.org>"``.
        reply_to: ``Reply-To`` address or empty.
        send_at: when the weekly issue becomes due.
        skip_empty: no reviews, no issue.
        since: aware datetime; reviews published before it are never mailed
            (keeps a first run from mailing an old archive). ``None``: no limit.
        list_id: the ``List-Id`` (RFC 2919) identifier, e.g. ``"weekly.reviews.example.org"``.
        unsubscribe_mailto: address for the ``mailto:`` ``List-Unsubscribe`` form, or empty.
        max_html_bytes: above this the email shows excerpts (Gmail clips at 102 KB).
    """

    sender: str = ""
    reply_to: str = ""
    send_at: SendAt = SendAt()
    skip_empty: bool = True
    since: Optional[datetime] = None
    list_id: str = ""
    unsubscribe_mailto: str = ""
    max_html_bytes: int = 100_000


@dataclass(frozen=True)
class TransportConfig:
    """``[transport]``: ``kind`` picks the transport; the other keys are its options.

    Attributes:
        kind: a name registered in :mod:`newsletter.transports`.
        options: the table's other keys, paths already resolved for ``dir``.
    """

    kind: str = "outbox"
    options: dict = field(default_factory=dict)


UNKNOWN_POLICIES = ("skip", "resend")


@dataclass(frozen=True)
class DeliveryConfig:
    """``[delivery]``: pacing, retries and what to do with messages of unknown fate.

    Attributes:
        rate: messages per second at most; ``0`` = as fast as the transport goes.
        max_attempts: tries per request or recipient for transient failures
            (429, 5xx, timeouts, connection resets, SMTP 4xx) within one run.
        backoff: seconds before the first retry; doubles each retry, with jitter.
        backoff_max: the longest wait between retries, seconds (a server's
            ``Retry-After`` longer than this is still honoured up to ``retry_after_max``).
        retry_after_max: the longest ``Retry-After`` honoured, seconds; a longer
            one makes the request count as failed-transient for this run.
        pause_after_failures: stop the run cleanly after this many failures in a
            row (the rest stays pending for the next ``send``); ``0`` = never.
        unknown: ``"skip"`` (default: leave messages whose fate is unknown as
            ``unknown`` and report them; never risk a second copy) or ``"resend"``
            (send them again; a recipient may get two copies). Transports with an
            idempotency key (``resend``, ``outbox``) replay instead, so neither applies.
        batch_size: messages per transport call; ``0`` = the transport's documented cap.
    """

    rate: float = 0.0
    max_attempts: int = 3
    backoff: float = 1.0
    backoff_max: float = 60.0
    retry_after_max: float = 300.0
    pause_after_failures: int = 10
    unknown: str = "skip"
    batch_size: int = 0


@dataclass(frozen=True)
class WebhooksConfig:
    """``[webhooks]``: names of the environment variables holding each provider's webhook secret.

    A provider whose variable is unset has its ``/webhooks/<provider>`` endpoint switched off.

    Attributes:
        sendgrid_key_env: SendGrid "Signed Event Webhook" verification key (base64 DER or PEM, ECDSA P-256).
        mailgun_key_env: Mailgun HTTP webhook signing key (HMAC-SHA256).
        postmark_auth_env: ``user:password`` that Postmark sends as HTTP basic auth (Postmark does not sign).
        resend_secret_env: Resend (Svix) endpoint secret ``whsec_<base64>``.
        max_age: seconds a signed timestamp may differ from now (replay window).
    """

    sendgrid_key_env: str = "NEWSLETTER_SENDGRID_WEBHOOK_KEY"
    mailgun_key_env: str = "NEWSLETTER_MAILGUN_SIGNING_KEY"
    postmark_auth_env: str = "NEWSLETTER_POSTMARK_WEBHOOK_AUTH"
    resend_secret_env: str = "NEWSLETTER_RESEND_WEBHOOK_SECRET"
    max_age: int = 300


@dataclass(frozen=True)
class Config:
    """The whole configuration.

    Attributes:
        path: the file it came from (for messages).
        site, sources, store_path, feeds, email, transport: see each class.
        tags: the ``[tags]`` registry (aliases, display names, descriptions).
    """

    path: Path
    site: SiteConfig
    sources: tuple[SourceConfig, ...]
    store_path: Path
    feeds: FeedsConfig
    email: EmailConfig
    transport: TransportConfig
    webhooks: WebhooksConfig = WebhooksConfig()
    tags: TagsConfig = TagsConfig()
    delivery: DeliveryConfig = DeliveryConfig()

    def secret(self, env_name: str, what: str) -> str:
        """Read a secret from the environment.

        Args:
            env_name: the variable's name, as the config gives it.
            what: the config key that named it, for the error message.

        Raises:
            ConfigError: the variable is unset or empty (the value is never shown).
        """
        value = os.environ.get(env_name, "")
        if not value:
            raise ConfigError(
                f"{self.path}: {what} names environment variable {env_name}, which is not set"
            )
        return value


class _Table:
    """Typed reads from one TOML table, with errors naming file and key."""

    def __init__(self, file: Path, name: str, data: Any, known: set[str], open_keys: bool = False):
        self.file, self.name = file, name
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{file}: [{name}] must be a table")
        self.data = data
        if not open_keys:
            unknown = sorted(set(data) - known)
            if unknown:
                raise ConfigError(f"{file}: [{name}] unknown key {unknown[0]!r}",
                                  hint=f"known keys: {', '.join(sorted(known))}")

    def where(self, key: str) -> str:
        return f"{self.file}: [{self.name}] {key}"

    def str(self, key: str, default: Optional[str] = None, required: bool = False) -> Optional[str]:
        if key not in self.data:
            if required:
                raise ConfigError(f"{self.where(key)} is required")
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise ConfigError(f"{self.where(key)} must be a string, got {type(value).__name__}")
        if required and not value.strip():
            raise ConfigError(f"{self.where(key)} must not be empty")
        if re.search(r"[\r\n\u2028\u2029\x85]", value):
            raise ConfigError(f"{self.where(key)} must be one line")
        return value

    def int(self, key: str, default: int, minimum: int = 0) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{self.where(key)} must be a whole number ≥ {minimum}, got {value!r}")
        return value

    def float(self, key: str, default: float, minimum: float = 0.0) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise ConfigError(f"{self.where(key)} must be a number ≥ {minimum}, got {value!r}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where(key)} must be true or false, got {value!r}")
        return value


def _path(base: Path, raw: str) -> Path:
    p = Path(os.path.expanduser(raw))
    return p if p.is_absolute() else (base / p)


def parse_send_at(raw: str, where: str) -> SendAt:
    """Parse ``"MON 09:00"`` (day name, 24-hour local time).

    Raises:
        ConfigError: not of that form.
    """
    m = re.fullmatch(r"\s*([A-Za-z]{3})[A-Za-z]*\s+(\d{1,2}):(\d{2})\s*", raw)
    if not m or m.group(1).upper() not in WEEKDAYS or int(m.group(2)) > 23 or int(m.group(3)) > 59:
        raise ConfigError(f"{where} must look like 'MON 09:00', got {raw!r}")
    return SendAt(WEEKDAYS.index(m.group(1).upper()), time(int(m.group(2)), int(m.group(3))))


def _since(value: Any, where: str, tz: ZoneInfo) -> Optional[datetime]:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=tz)
    if isinstance(value, date):
        return datetime.combine(value, time(0), tz)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"{where} must be a date like 2026-11-01, got {value!r}") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=tz)
    raise ConfigError(f"{where} must be a date like 2026-11-01, got {value!r}")


def load_config(path: str | os.PathLike) -> Config:
    """Read and validate a config file.

    Args:
        path: the TOML file. Relative paths inside it resolve against its directory.

    Returns:
        A frozen :class:`Config`.

    Raises:
        ConfigError: the file is missing, is not TOML, or a key is missing or wrong;
            the message names the file and the key.
    """
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{file}: config file not found",
                          hint="pass --config PATH or set NEWSLETTER_CONFIG") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read config: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    base = file.resolve().parent

    top_known = {"site", "sources", "store", "feeds", "email", "transport", "webhooks", "tags", "delivery"}
    unknown = sorted(set(raw) - top_known)
    if unknown:
        raise ConfigError(f"{file}: unknown table [{unknown[0]}]")

    s = _Table(file, "site", raw.get("site"),
               {"title", "base_url", "language", "timezone", "author", "description",
                "secret_key_env", "templates", "app_url"})
    if "site" not in raw:
        raise ConfigError(f"{file}: [site] table is required")
    base_url = s.str("base_url", required=True)
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{s.where('base_url')} must be an absolute http(s) URL, got {base_url!r}")
    if not base_url.endswith("/"):
        base_url += "/"
    tz_name = s.str("timezone", "UTC")
    try:
        tz = ZoneInfo(tz_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{s.where('timezone')}: unknown time zone {tz_name!r}") from None
    title = s.str("title", required=True)
    templates = s.str("templates")
    app_url = s.str("app_url", "") or base_url
    app_parts = urlsplit(app_url)
    if app_parts.scheme not in ("http", "https") or not app_parts.netloc:
        raise ConfigError(f"{s.where('app_url')} must be an absolute http(s) URL, got {app_url!r}")
    if not app_url.endswith("/"):
        app_url += "/"
    site = SiteConfig(
        title=title,
        base_url=base_url,
        language=s.str("language", "en"),
        timezone=tz_name,
        author=s.str("author", "") or title,
        description=s.str("description", ""),
        secret_key_env=s.str("secret_key_env", "NEWSLETTER_SECRET_KEY"),
        templates=_path(base, templates) if templates else None,
        app_url=app_url,
    )

    raw_sources = raw.get("sources", [])
    if not isinstance(raw_sources, list):
        raise ConfigError(f"{file}: sources must be an array of tables ([[sources]])")
    sources = []
    for i, item in enumerate(raw_sources):
        t = _Table(file, f"sources.{i}", item, {"path", "url", "token_env", "timeout", "retries", "max_seconds"})
        p, u = t.str("path"), t.str("url")
        if bool(p) == bool(u):
            raise ConfigError(f"{file}: [[sources]] #{i + 1} needs exactly one of path or url")
        if u and urlsplit(u).scheme not in ("http", "https"):
            raise ConfigError(f"{t.where('url')} must be an http(s) URL, got {u!r}")
        sources.append(SourceConfig(
            path=_path(base, p) if p else None, url=u, token_env=t.str("token_env"),
            timeout=t.float("timeout", 30.0, 0.1), retries=t.int("retries", 3),
            max_seconds=t.float("max_seconds", 300.0, 1.0)))

    st = _Table(file, "store", raw.get("store"), {"path"})
    fd = _Table(file, "feeds", raw.get("feeds"), {"dir", "max_entries", "websub_hub"})
    hub = fd.str("websub_hub", "")
    if hub and (urlsplit(hub).scheme not in ("http", "https") or not urlsplit(hub).netloc):
        raise ConfigError(f"{fd.where('websub_hub')} must be an absolute http(s) URL, got {hub!r}")
    feeds = FeedsConfig(dir=_path(base, fd.str("dir", "feeds")),
                        max_entries=fd.int("max_entries", 50, 1), websub_hub=hub)
    tags = parse_tags_table(file, raw.get("tags"))

    e = _Table(file, "email", raw.get("email"),
               {"from", "reply_to", "send_at", "skip_empty", "since", "list_id",
                "unsubscribe_mailto", "max_html_bytes"})
    list_id = e.str("list_id", "") or f"weekly.{parts.hostname}"
    email = EmailConfig(
        sender=e.str("from", ""),
        reply_to=e.str("reply_to", ""),
        send_at=parse_send_at(e.str("send_at", "MON 09:00"), e.where("send_at")),
        skip_empty=e.bool("skip_empty", True),
        since=_since(e.data.get("since"), e.where("since"), tz),
        list_id=list_id,
        unsubscribe_mailto=e.str("unsubscribe_mailto", ""),
        max_html_bytes=e.int("max_html_bytes", 100_000, 10_000),
    )

    tr = _Table(file, "transport", raw.get("transport"), set(), open_keys=True)
    kind = tr.str("kind", "outbox")
    options = {k: v for k, v in tr.data.items() if k != "kind"}
    if isinstance(options.get("dir"), str):
        options["dir"] = _path(base, options["dir"])
    for key in ("key_path", "dkim_key_path", "certfile"):
        if isinstance(options.get(key), str):
            options[key] = _path(base, options[key])

    wh = _Table(file, "webhooks", raw.get("webhooks"),
                {"sendgrid_key_env", "mailgun_key_env", "postmark_auth_env", "resend_secret_env", "max_age"})
    d = WebhooksConfig()
    webhooks = WebhooksConfig(
        sendgrid_key_env=wh.str("sendgrid_key_env", d.sendgrid_key_env),
        mailgun_key_env=wh.str("mailgun_key_env", d.mailgun_key_env),
        postmark_auth_env=wh.str("postmark_auth_env", d.postmark_auth_env),
        resend_secret_env=wh.str("resend_secret_env", d.resend_secret_env),
        max_age=wh.int("max_age", d.max_age, 1),
    )
    dl = _Table(file, "delivery", raw.get("delivery"),
                {"rate", "max_attempts", "backoff", "backoff_max", "retry_after_max",
                 "pause_after_failures", "unknown", "batch_size"})
    policy = dl.str("unknown", "skip")
    if policy not in UNKNOWN_POLICIES:
        raise ConfigError(f"{dl.where('unknown')} must be one of {', '.join(UNKNOWN_POLICIES)}, got {policy!r}")
    delivery = DeliveryConfig(
        rate=dl.float("rate", 0.0), max_attempts=dl.int("max_attempts", 3, 1),
        backoff=dl.float("backoff", 1.0), backoff_max=dl.float("backoff_max", 60.0),
        retry_after_max=dl.float("retry_after_max", 300.0),
        pause_after_failures=dl.int("pause_after_failures", 10), unknown=policy,
        batch_size=dl.int("batch_size", 0))

    return Config(
        path=file,
        site=site,
        sources=tuple(sources),
        store_path=_path(base, st.str("path", "state/newsletter.db")),
        feeds=feeds,
        email=email,
        transport=TransportConfig(kind=kind, options=options),
        webhooks=webhooks,
        tags=tags,
        delivery=delivery,
    )


def utcnow() -> datetime:
    """The current time, aware, in UTC (only the CLI calls this)."""
    return datetime.now(timezone.utc)
