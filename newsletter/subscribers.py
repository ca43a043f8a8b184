"""Subscriber management: validation, CSV import and export.

CSV columns (DESIGN.md): ``email,name,tags`` with tags separated by ``|``
(empty = every tag). Addresses are checked for shape (RFC 5322 addr-spec,
one ``@``, no white space or line breaks); the domain is lower-cased.
Importing never reactivates a suppressed (unsubscribed, bounced, complained) address.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable, TextIO

from .errors import SourceError
from .models import Subscriber
from .store import Store
from .tags import clean_tag_name, tag_key

_ADDR = re.compile(r"[^@\s\"(),:;<>\[\\\]]+@[^@\s\"(),:;<>\[\\\]]+\.[^@\s\"(),:;<>\[\\\]]+")
_BREAKS = re.compile("[\r\n\u2028\u2029\x85\x0b\x0c\x00-\x1f\x7f]")


_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


def normalize_email(raw: str) -> str:
    """Trim an address, check it the way sending will, and write its domain as IDNA A-labels.

    The local part must be an RFC 5322 dot-atom or quoted string (a non-ASCII one,
    RFC 6531, is kept: it fails alone at send unless the path supports SMTPUTF8);
    the domain must be a host name (RFC 1123 labels) or an internationalised
    domain that converts to IDNA A-labels (RFC 5891).

    Raises:
        ValueError: not a plausible single address, naming why.
    """
    from email.errors import HeaderParseError, NonASCIILocalPartDefect
    from email.headerregistry import Address

    addr = raw.strip()
    if _BREAKS.search(addr) or not _ADDR.fullmatch(addr) or len(addr) > 254:
        raise ValueError(f"{raw!r} is not an email address")
    local, _, domain = addr.rpartition("@")
    try:
        ascii_domain = domain.lower().encode("idna").decode("ascii")
        for label in ascii_domain.split("."):
            if label.startswith("xn--"):
                label.encode("ascii").decode("idna")
    except UnicodeError:
        raise ValueError(f"{raw!r}: the domain is not a valid (internationalised) domain name") from None
    labels = ascii_domain.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(x) for x in labels) or labels[-1].isdigit():
        raise ValueError(f"{raw!r}: the domain is not a valid host name")
    if local.isascii():
        try:
            Address(addr_spec=f"{local}@{ascii_domain}")
        except (HeaderParseError, NonASCIILocalPartDefect, ValueError, IndexError) as exc:
            raise ValueError(f"{raw!r}: the local part is not valid ({exc})") from None
    # Stored with the domain in IDNA form (which also folds full-width and other look-alike
    # spellings, RFC 3491 nameprep): one mailbox is one row, for the rate limit and suppression.
    return f"{local}@{ascii_domain}"


def parse_tags(raw: str, sep: str = "|") -> tuple[str, ...]:
    """Tag keys from ``"ROCm|性能"`` (or a comma list with ``sep=","``), de-duplicated, in order."""
    keys: list[str] = []
    for part in raw.split(sep):
        name = clean_tag_name(part)
        if name and tag_key(name) not in keys:
            keys.append(tag_key(name))
    return tuple(keys)


def make_subscriber(email: str, name: str = "", tags: str = "", sep: str = "|") -> Subscriber:
    """A validated :class:`Subscriber`.

    Raises:
        ValueError: bad address, or a name with line breaks or control characters.
    """
    if _BREAKS.search(name):
        raise ValueError("name must be one line without control characters")
    return Subscriber(normalize_email(email), " ".join(name.split()), parse_tags(tags, sep))


@dataclass
class ImportReport:
    """Counts of an import and one line per rejected row."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    suppressed: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)


def import_csv(store: Store, fh: TextIO, source: str, now: datetime) -> ImportReport:
    """Import subscribers from CSV with a header row holding at least ``email``.

    Args:
        store: the open store.
        fh: the text stream.
        source: name for messages (file path).
        now: aware time for the rows' timestamps.

    Returns:
        An :class:`ImportReport`; bad rows are reported (``source:line: reason``) and skipped.

    Raises:
        SourceError: the file is not UTF-8 or not CSV past some line; nothing is imported.
    """
    report = ImportReport()
    reader = csv.DictReader(fh)
    try:
        fieldnames = reader.fieldnames
    except (csv.Error, UnicodeDecodeError) as exc:
        raise SourceError(f"{source}: cannot read CSV ({type(exc).__name__}: {str(exc)[:100]}); "
                          "nothing was imported") from None
    if not fieldnames or "email" not in [(f or "").strip().lower() for f in fieldnames]:
        report.rejected += 1
        report.problems.append(f"{source}:1: the header must name an 'email' column")
        return report
    with store.transaction():
        rows = iter(reader)
        while True:
            try:
                row = next(rows)
            except StopIteration:
                break
            except (csv.Error, UnicodeDecodeError) as exc:
                # The rest of the file cannot be trusted: import none of it.
                raise SourceError(f"{source}:{reader.line_num + 1}: cannot read CSV "
                                  f"({type(exc).__name__}: {str(exc)[:100]}); nothing was imported") from None
            line = reader.line_num
            row = {(k or "").strip().lower(): (v if isinstance(v, str) else "") for k, v in row.items()}
            try:
                sub = make_subscriber(row.get("email", ""), row.get("name", ""), row.get("tags", ""))
            except ValueError as exc:
                report.rejected += 1
                report.problems.append(f"{source}:{line}: {exc}")
                continue
            outcome = store.upsert_subscriber(sub, now)
            setattr(report, outcome, getattr(report, outcome) + 1)
    return report


def spreadsheet_safe(cell: str) -> str:
    """A cell a spreadsheet will not run as a formula: a leading ``= + - @``, tab or CR gets a ``'``
    (OWASP "CSV Injection")."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


def export_csv(subs: Iterable[Subscriber], tag_names: dict[str, str]) -> str:
    """CSV text (``email,name,tags,status``) of the given subscribers, tags by display name;
    cells are made :func:`spreadsheet_safe`."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["email", "name", "tags", "status"])
    for s in subs:
        row = [s.email, s.name, "|".join(tag_names.get(k, k) for k in s.tags), s.status]
        w.writerow([spreadsheet_safe(c) for c in row])
    return out.getvalue()
