"""JSON Feed 1.1 documents: required fields, optional ones only when set, stable bytes."""

from __future__ import annotations

import json

from newsletter.jsonfeed import VERSION, json_feed, json_item


def item(**over):
    args = dict(id="urn:uuid:1", url="https://example.org/pr/1", title="T", content_html="<p>x</p>",
                published="2026-11-20T10:00:00+08:00", modified="2026-11-20T10:00:00+08:00")
    args.update(over)
    return json_item(**args)


def test_a_feed_has_the_required_fields_and_omits_unset_optional_ones():
    """version, title and items are always there; next_url, hubs and expired only when given."""
    doc = json.loads(json_feed(title="Reviews", home_page_url="https://e.org/", feed_url="https://e.org/all.json",
                               items=[item()]))
    assert doc["version"] == VERSION == "https://jsonfeed.org/version/1.1"
    assert doc["title"] == "Reviews" and len(doc["items"]) == 1
    assert not {"next_url", "hubs", "expired", "description", "authors"} & set(doc)


def test_optional_fields_follow_the_spec_shapes():
    """hubs is a list of {type, url}; authors a list of {name}; next_url a string."""
    doc = json.loads(json_feed(title="R", home_page_url="https://e.org/", feed_url="https://e.org/a.json",
                               items=[], hub="https://hub.example/", author="Ann", next_url="https://e.org/1.json",
                               expired=True, language="zh-CN", description="D"))
    assert doc["hubs"] == [{"type": "WebSub", "url": "https://hub.example/"}]
    assert doc["authors"] == [{"name": "Ann"}] and doc["next_url"] == "https://e.org/1.json"
    assert doc["expired"] is True and doc["language"] == "zh-CN"


def test_an_item_without_html_gets_content_text():
    """Every item carries content_html or content_text (the spec requires one of them)."""
    assert item()["content_html"] == "<p>x</p>" and "content_text" not in item()
    assert item(content_html="", summary="Verdict")["content_text"] == "Verdict"
    assert item(content_html="")["content_text"] == "T"


def test_serialisation_is_byte_stable_and_utf8():
    """The same feed serialises to the same UTF-8 bytes, non-ASCII kept as is, ending in a newline."""
    a = json_feed(title="性能", home_page_url="https://e.org/", feed_url="https://e.org/a.json", items=[item()])
    b = json_feed(title="性能", home_page_url="https://e.org/", feed_url="https://e.org/a.json", items=[item()])
    assert a == b and "性能".encode() in a and a.endswith(b"\n")
