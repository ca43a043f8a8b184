"""Reading sources: files, directories and HTTP(S) URLs → raw records with locations.

Containers (DESIGN.md): a JSON array; a JSON object ``{"reviews": [...], "next": URL|null}``
(followed page by page over HTTP); JSON Lines (``.jsonl``/``.ndjson``); Markdown with
YAML front matter (``.md``/``.markdown``, the body is the Markdown after the front matter).

A source is read whole before anything from it is used: if any page or file of
it cannot be read, :class:`SourceError` is raised and nothing of it is taken.
A record that cannot be decoded (one bad JSON line) is not a source error: it
comes back as an :class:`Item` with ``error`` set and the rest are still read.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional
from urllib.parse import urljoin, urlsplit

import requests
import yaml
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from . import __version__
from .config import SourceConfig
from .errors import SourceError

FILE_SUFFIXES = {".json", ".jsonl", ".ndjson", ".md", ".markdown"}
MAX_PAGES = 10_000
MAX_RESPONSE_BYTES = 64 * 2**20   # one HTTP page
RETRY_AFTER_MAX = 60.0            # seconds; a longer Retry-After is cut to this


@dataclass(frozen=True)
class Item:
    """One record as found: where, what, or why it could not be decoded.

    Attributes:
        location: ``file.jsonl:3`` (line), ``file.json[3]`` (index), ``file.md`` or ``URL[3]``.
        data: the decoded value (normally a dict) or ``None`` when ``error`` is set.
        error: one-line reason the record could not be decoded, else ``""``.
    """

    location: str
    data: Any = None
    error: str = ""


@dataclass
class HttpCache:
    """Conditional-request state of one page URL (RFC 9110 §13: ``ETag``/``If-None-Match``).

    Attributes:
        etag: the page's last ``ETag`` or ``""``.
        next_url: the ``next`` link that page held (needed when it answers 304).
    """

    etag: str = ""
    next_url: Optional[str] = None


@dataclass
class SourceRead:
    """The outcome of reading one source.

    Attributes:
        items: records in source order.
        cache: page URL → :class:`HttpCache` to keep for the next run (HTTP only).
        unchanged_pages: pages that answered 304 Not Modified.
    """

    items: list[Item]
    cache: dict[str, HttpCache]
    unchanged_pages: int = 0


def read_source(src: SourceConfig, cache: Optional[dict[str, HttpCache]] = None,
                session: Optional[requests.Session] = None) -> SourceRead:
    """Read one configured source whole.

    Args:
        src: the source.
        cache: HTTP validators from the previous run, by page URL.
        session: a :class:`requests.Session` to reuse (a new one is made otherwise).

    Raises:
        SourceError: the path does not exist or cannot be read, or an HTTP page
            failed (connection, timeout, non-2xx after retries, invalid JSON).
    """
    if src.url:
        return _read_http(src, cache or {}, session)
    assert src.path is not None
    return SourceRead(items=list(_read_path(src.path)), cache={})


# --- files -------------------------------------------------------------------

def _read_path(path: Path) -> Iterator[Item]:
    if path.is_dir():
        files = sorted(
            (p for p in path.rglob("*")
             if p.is_file() and p.suffix.lower() in FILE_SUFFIXES
             and not any(part.startswith(".") for part in p.relative_to(path).parts)),
            key=lambda p: p.relative_to(path).as_posix())
        for f in files:
            yield from _read_file(f)
    elif path.is_file():
        yield from _read_file(path)
    else:
        raise SourceError(f"{path}: no such file or directory")


def _read_file(path: Path) -> Iterator[Item]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        yield _read_markdown(str(path), text)
    elif suffix in (".jsonl", ".ndjson"):
        yield from parse_json_lines(str(path), text)
    else:
        items, _next = parse_json_document(str(path), text)
        yield from items


def _read_markdown(name: str, text: str) -> Item:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return Item(name, error="no YAML front matter (the file must start with a '---' line)")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            front, body = "".join(lines[1:i]), "".join(lines[i + 1:])
            break
    else:
        return Item(name, error="front matter is not closed by a '---' line")
    try:
        data = yaml.safe_load(front)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark else ""
        return Item(name, error=f"front matter is not valid YAML{where}")
    except RecursionError:
        return Item(name, error="front matter nests too deeply")
    if not isinstance(data, dict):
        return Item(name, error="front matter must be a mapping of keys")
    data = {k: _yaml_scalar(v) for k, v in data.items()}
    body = body.strip("\n")
    if "body" in data and body.strip():
        return Item(name, error="the body is given twice: as a front-matter 'body' key and after the front matter")
    data.setdefault("body", body)
    return Item(name, data)


def _yaml_scalar(value: Any) -> Any:
    # YAML turns unquoted timestamps into date/datetime objects; the record rules want
    # RFC 3339 text (a naive one then fails the offset rule, as it should).
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    return value


def parse_json_lines(name: str, text: str) -> Iterator[Item]:
    """Records of a JSON Lines text, one :class:`Item` per non-blank line (``name:line``)."""
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{n}"
        try:
            yield Item(where, json.loads(line))
        except json.JSONDecodeError as exc:
            yield Item(where, error=f"not JSON ({exc.msg} at column {exc.colno})")
        except (ValueError, RecursionError) as exc:  # nesting too deep, integers too long
            yield Item(where, error=f"JSON the reader refuses ({type(exc).__name__}: {str(exc)[:80]})")


def parse_json_document(name: str, text: str) -> tuple[list[Item], Optional[str]]:
    """Records of a JSON array or ``{"reviews": [...], "next": ...}`` document.

    Returns:
        The items (``name[index]``) and the ``next`` URL (``None`` when absent).

    Raises:
        SourceError: the text is not JSON or not one of the two shapes.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"{name}: JSON the reader refuses ({type(exc).__name__}: {str(exc)[:80]})") from None
    next_url = None
    if isinstance(doc, dict):
        if not isinstance(doc.get("reviews"), list):
            raise SourceError(f"{name}: a JSON object must hold a 'reviews' array")
        next_url = doc.get("next")
        if next_url is not None and not isinstance(next_url, str):
            raise SourceError(f"{name}: 'next' must be a URL or null")
        doc = doc["reviews"]
    elif not isinstance(doc, list):
        raise SourceError(f"{name}: expected a JSON array or an object with 'reviews'")
    return [Item(f"{name}[{i}]", rec) for i, rec in enumerate(doc)], next_url or None


# --- HTTP ----------------------------------------------------------------------

class _CappedRetry(Retry):
    """urllib3 ``Retry`` that waits at most :data:`RETRY_AFTER_MAX` seconds for a ``Retry-After``."""

    def get_retry_after(self, response):  # noqa: D102 — urllib3 hook
        value = super().get_retry_after(response)
        return None if value is None else min(value, RETRY_AFTER_MAX)


def make_session(retries: int) -> requests.Session:
    """A session retrying connection errors, 429 and 5xx with exponential backoff, honouring
    ``Retry-After`` (RFC 9110 §10.2.3) up to :data:`RETRY_AFTER_MAX` seconds."""
    session = requests.Session()
    retry = _CappedRetry(total=retries, connect=retries, read=retries, status=retries,
                         backoff_factor=0.5, backoff_max=30, status_forcelist=(429, 500, 502, 503, 504),
                         allowed_methods=frozenset({"GET"}), respect_retry_after_header=True,
                         raise_on_status=False)
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = f"newsletter/{__version__}"
    return session


def _origin(url: str) -> tuple:
    parts = urlsplit(url)
    return (parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)


def _body(url: str, resp: requests.Response, deadline: float) -> str:
    """The response body as text: at most MAX_RESPONSE_BYTES, before the deadline, strictly decoded."""
    chunks, size = [], 0
    for chunk in resp.iter_content(65536):
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise SourceError(f"{url}: response larger than {MAX_RESPONSE_BYTES // 2**20} MiB")
        if time.monotonic() > deadline:
            raise SourceError(f"{url}: source took longer than its max_seconds")
        chunks.append(chunk)
    data = b"".join(chunks)
    charset = resp.encoding if "charset" in resp.headers.get("Content-Type", "").lower() else "utf-8"
    try:
        return data.decode(charset or "utf-8")
    except (UnicodeDecodeError, LookupError) as exc:
        raise SourceError(f"{url}: body is not valid {charset} text ({exc.__class__.__name__})") from None


def _read_http(src: SourceConfig, cache: dict[str, HttpCache],
               session: Optional[requests.Session]) -> SourceRead:
    own = session is None
    session = session or make_session(src.retries)
    headers = {"Accept": "application/json, application/x-ndjson;q=0.9, */*;q=0.1"}
    if src.token_env:
        token = os.environ.get(src.token_env, "")
        if not token:
            raise SourceError(f"{src.url}: token_env names {src.token_env}, which is not set")
        headers["Authorization"] = f"Bearer {token}"
    items: list[Item] = []
    new_cache: dict[str, HttpCache] = {}
    unchanged = 0
    url: Optional[str] = src.url
    origin = _origin(src.url)
    seen: set[str] = set()
    deadline = time.monotonic() + src.max_seconds
    try:
        while url:
            if url in seen or len(seen) >= MAX_PAGES:
                raise SourceError(f"{src.url}: pagination loops at {url}")
            if _origin(url) != origin:
                # The token and the trust go to the configured origin only (no SSRF, no downgrade).
                raise SourceError(f"{src.url}: 'next' link {url} leaves the source's origin")
            if time.monotonic() > deadline:
                raise SourceError(f"{src.url}: source took longer than its max_seconds ({src.max_seconds:g} s)")
            seen.add(url)
            page_headers = dict(headers)
            old = cache.get(url)
            if old and old.etag:
                page_headers["If-None-Match"] = old.etag
            try:
                resp = session.get(url, headers=page_headers, timeout=src.timeout, stream=True)
            except requests.Timeout:
                raise SourceError(f"{url}: timed out after {src.timeout:g} s") from None
            except requests.RequestException as exc:
                raise SourceError(f"{url}: cannot connect ({type(exc).__name__})") from None
            with resp:
                if resp.status_code == 304 and old:
                    unchanged += 1
                    new_cache[url] = old
                    url = urljoin(url, old.next_url) if old.next_url else None
                    continue
                if resp.status_code != 200:
                    raise SourceError(f"{url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
                try:
                    text = _body(url, resp, deadline)
                except requests.RequestException as exc:
                    raise SourceError(f"{url}: connection failed while reading ({type(exc).__name__})") from None
                ctype = resp.headers.get("Content-Type", "")
                etag = resp.headers.get("ETag", "")
            if "ndjson" in ctype or "jsonl" in ctype or url.split("?")[0].endswith((".jsonl", ".ndjson")):
                page_items, next_url = list(parse_json_lines(url, text)), None
            else:
                page_items, next_url = parse_json_document(url, text)
            items.extend(page_items)
            new_cache[url] = HttpCache(etag, next_url)
            url = urljoin(url, next_url) if next_url else None
    finally:
        if own:
            session.close()
    return SourceRead(items=items, cache=new_cache, unchanged_pages=unchanged)
