"""JSON Feed 1.1 documents (https://jsonfeed.org/version/1.1), the twins of the Atom ones.

Each Atom document ``X.atom`` has ``X.json`` beside it with the same entries in
the same order, the same ids (``urn:uuid:…``) and the same dates (RFC 3339).
JSON Feed has no archive link relations; its pagination link ``next_url`` ("the
next n items") points from the subscription document to the newest archive
page and from each archive page to the one before it, so following
``next_url`` reaches every item once — and an archive page's JSON never
changes when a newer page appears.

Serialisation is deterministic (key order fixed, compact separators — the C encoder, UTF-8,
trailing newline) so an unchanged feed has unchanged bytes.
"""

from __future__ import annotations

import json
from typing import Optional

VERSION = "https://jsonfeed.org/version/1.1"
MEDIA_TYPE = "application/feed+json"


def json_item(*, id: str, url: str, title: str, content_html: str, content_text: str = "",
              summary: str = "", published: str, modified: str, author: str = "",
              tags: tuple[str, ...] = (), external_url: str = "") -> dict:
    """One item. ``content_html`` wins; ``content_text`` is used when it is empty (one is required).

    Dates are RFC 3339 strings (``datetime.isoformat()`` of aware datetimes).
    """
    item: dict = {"id": id, "url": url}
    if external_url:
        item["external_url"] = external_url
    item["title"] = title
    if content_html:
        item["content_html"] = content_html
    else:
        item["content_text"] = content_text or summary or title
    if summary:
        item["summary"] = summary
    item["date_published"] = published
    item["date_modified"] = modified
    if author:
        item["authors"] = [{"name": author}]
    if tags:
        item["tags"] = list(tags)
    return item


def json_feed(*, title: str, home_page_url: str, feed_url: str, items: list[dict],
              description: str = "", language: str = "", author: str = "",
              next_url: Optional[str] = None, hub: str = "", expired: bool = False,
              user_comment: str = "") -> bytes:
    """A JSON Feed 1.1 document as UTF-8 bytes.

    Args:
        hub: a WebSub hub URL, listed in ``hubs`` (type ``WebSub``) when set.
        next_url: the page with the preceding (older) items, if any.
        expired: the feed will never update again (a moved tag's old feed).
    """
    doc: dict = {"version": VERSION, "title": title}
    if user_comment:
        doc["user_comment"] = user_comment
    doc["home_page_url"] = home_page_url
    doc["feed_url"] = feed_url
    if description:
        doc["description"] = description
    if next_url:
        doc["next_url"] = next_url
    if language:
        doc["language"] = language
    if author:
        doc["authors"] = [{"name": author}]
    if hub:
        doc["hubs"] = [{"type": "WebSub", "url": hub}]
    if expired:
        doc["expired"] = True
    doc["items"] = items
    return (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
