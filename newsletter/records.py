"""Validation of one review record (DESIGN.md, "Review record") → :class:`Review`.

Rules and where they come from:
- ``published``/``updated``: RFC 3339 §5.6 date-time *with* an offset (``Z`` or ``±hh:mm``).
- ``url``: absolute ``http``/``https`` URL (RFC 3986); anything else, ``javascript:``
  or relative included, is refused.
- ``title``, ``summary``, ``author``, ``tags``, ``id``: one line, no characters XML 1.0
  forbids (they end up in Atom documents and mail headers).
- ``body``: XML-forbidden characters are removed (reported as a warning), the rest kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from .errors import RecordError
from .markup import XML_FORBIDDEN, strip_xml_forbidden
from .models import Review
from .tags import clean_tag_name, tag_key

KNOWN_KEYS = {"id", "title", "url", "tags", "published", "updated", "body", "summary",
              "repo", "author"}
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_LINE_BREAKS = re.compile("[\r\n\u2028\u2029\x85\x0b\x0c]")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
MAX_ID = 500
MAX_TITLE = 1000
MAX_BODY = 1_000_000  # characters; larger bodies are refused, not truncated
MAX_TAGS = 50
MIN_YEAR, MAX_YEAR = 1970, 2999  # dates outside are typos, and break local-time arithmetic


@dataclass(frozen=True)
class Checked:
    """A valid review and the warnings raised while checking it (one line each)."""

    review: Review
    warnings: tuple[str, ...] = ()


def _one_line(data: dict, key: str, required: bool, limit: int = 10_000) -> str:
    value = data.get(key)
    if value is None:
        if required:
            raise RecordError(f"missing required key {key!r}")
        return ""
    if not isinstance(value, str):
        raise RecordError(f"{key} must be a string, got {type(value).__name__}")
    _check_unicode(value, key)
    if _LINE_BREAKS.search(value):
        raise RecordError(f"{key} must be one line (contains a line break)")
    if XML_FORBIDDEN.search(value):
        bad = XML_FORBIDDEN.search(value).group()
        raise RecordError(f"{key} contains control character U+{ord(bad):04X}")
    value = value.strip()
    if required and not value:
        raise RecordError(f"{key} must not be empty")
    if len(value) > limit:
        raise RecordError(f"{key} is longer than {limit} characters")
    return value


def _check_unicode(value: str, key: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(f"{key} contains an unpaired surrogate (not valid Unicode text)") from None


def parse_datetime(value: Any, key: str) -> datetime:
    """Parse an RFC 3339 date-time that carries an offset.

    Raises:
        RecordError: not a string, not RFC 3339, or without an offset.
    """
    if not isinstance(value, str):
        raise RecordError(f"{key} must be an RFC 3339 date-time string, got {type(value).__name__}")
    text = value.strip()
    if not _RFC3339.fullmatch(text):
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?", text):
            raise RecordError(f"{key} {value!r} has no UTC offset (RFC 3339 needs Z or ±hh:mm)")
        raise RecordError(f"{key} {value!r} is not an RFC 3339 date-time")
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise RecordError(f"{key} {value!r}: {exc}") from None
    try:
        utc_year = parsed.astimezone(timezone.utc).year
    except OverflowError:
        utc_year = 0
    if not MIN_YEAR <= utc_year <= MAX_YEAR or not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise RecordError(f"{key} {value!r} is outside the years {MIN_YEAR}–{MAX_YEAR}")
    return parsed


def check_record(data: Any) -> Checked:
    """Validate one decoded record.

    Args:
        data: what the container held (should be a JSON object / front-matter mapping).

    Returns:
        :class:`Checked` with the :class:`Review` and any warnings.

    Raises:
        RecordError: the first rule it breaks, as one line without the source name.
    """
    if not isinstance(data, dict):
        raise RecordError(f"record must be an object, got {type(data).__name__}")
    warnings: list[str] = []
    rid = _one_line(data, "id", True, MAX_ID)
    title = _one_line(data, "title", True, MAX_TITLE)
    url = _one_line(data, "url", True, 2000)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 — raises ValueError for a port out of range
    except ValueError as exc:
        raise RecordError(f"url {url!r} is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise RecordError(f"url {url!r} is not an absolute http(s) URL")
    if any(c.isspace() for c in url) or any(c in url for c in '"<>\\^`{|}'):
        raise RecordError(f"url {url!r} contains white space or characters URLs may not hold")
    if parts.username is not None or parts.password is not None:
        raise RecordError(f"url {url!r} carries credentials (user:password@); publish it without them")

    raw_tags = data.get("tags")
    if raw_tags is None:
        raise RecordError("missing required key 'tags'")
    if not isinstance(raw_tags, list):
        raise RecordError("tags must be a list of strings")
    if len(raw_tags) > MAX_TAGS:
        raise RecordError(f"tags has {len(raw_tags)} entries (at most {MAX_TAGS})")
    tags: list[str] = []
    seen: set[str] = set()
    for i, t in enumerate(raw_tags):
        if not isinstance(t, str):
            raise RecordError(f"tags[{i}] must be a string")
        _check_unicode(t, f"tags[{i}]")
        if _LINE_BREAKS.search(t) or XML_FORBIDDEN.search(t):
            raise RecordError(f"tags[{i}] {t!r} must be one line of text")
        name = clean_tag_name(t)
        if not name:
            continue
        if len(name) > 100:
            raise RecordError(f"tags[{i}] is longer than 100 characters")
        key = tag_key(name)
        if key in seen:
            warnings.append(f"tag {name!r} repeats another tag of this review (same after case/width folding)")
            continue
        seen.add(key)
        tags.append(name)
    if not tags:
        raise RecordError("tags must hold at least one non-empty tag")

    if data.get("published") is None:
        raise RecordError("missing required key 'published'")
    published = parse_datetime(data["published"], "published")
    updated = parse_datetime(data["updated"], "updated") if data.get("updated") is not None else published

    body = data.get("body")
    if body is None:
        body = ""
    if not isinstance(body, str):
        raise RecordError(f"body must be a string, got {type(body).__name__}")
    _check_unicode(body, "body")
    if len(body) > MAX_BODY:
        raise RecordError(f"body is longer than {MAX_BODY} characters")
    body, removed = strip_xml_forbidden(body)
    if removed:
        warnings.append(f"body: removed {removed} control character(s) XML cannot carry")

    summary = _one_line(data, "summary", False, 2000)
    repo = _one_line(data, "repo", False, 200)
    if repo and not _REPO.fullmatch(repo):
        raise RecordError(f"repo {repo!r} is not of the form owner/name")
    author = _one_line(data, "author", False, 200)
    unknown = sorted(str(k) for k in set(data) - KNOWN_KEYS)
    if unknown:
        warnings.append(f"ignored unknown key(s): {', '.join(map(str, unknown))}")
    return Checked(
        Review(id=rid, title=title, url=url, tags=tuple(tags), published=published,
               updated=updated, body=body, summary=summary, repo=repo, author=author),
        tuple(warnings))
