"""The feeds directory: valid Atom, stable ids, byte-identical rebuilds, OPML, index."""

import os
from datetime import datetime, timezone
from xml.etree import ElementTree as ET

import feedparser
import pytest

from newsletter.config import load_config
from newsletter.feeds import build_feeds
from newsletter.gather import gather
from newsletter.store import Store
from tests.conftest import EXAMPLE_JSONL, make_config, review, write_jsonl

ATOM = "{http://www.w3.org/2005/Atom}"
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def build(cfg_path):
    config = load_config(cfg_path)
    with Store(config.store_path) as store:
        gather(config, store, NOW)
        report = build_feeds(config, store)
    return config, report


@pytest.fixture
def example(tmp_path):
    """The bundled example reviews, gathered and built."""
    cfg = make_config(tmp_path, sources=f'path = "{EXAMPLE_JSONL}"')
    return build(cfg)


def atom_files(config):
    return sorted(config.feeds.dir.rglob("*.atom"))


def test_every_feed_parses_without_bozo(example):
    """feedparser reads every generated feed with bozo == 0."""
    config, _ = example
    files = atom_files(config)
    assert len(files) >= 10
    for f in files:
        parsed = feedparser.parse(f.read_bytes())
        assert parsed.bozo == 0, (f, parsed.get("bozo_exception"))
        assert parsed.version == "atom10"


def test_feed_structure(example):
    """Each feed has absolute self/alternate links, xml:lang, categories per tag, html content and updated = newest entry."""
    config, _ = example
    base = config.site.base_url
    for f in atom_files(config):
        root = ET.parse(f).getroot()
        rel = f.relative_to(config.feeds.dir).as_posix()
        links = {l.get("rel"): l.get("href") for l in root.findall(f"{ATOM}link")}
        assert links["self"] == base + rel
        assert links["alternate"].startswith(base)
        assert root.get("{http://www.w3.org/XML/1998/namespace}lang") == "zh-CN"
        entries = root.findall(f"{ATOM}entry")
        assert entries, rel
        newest = max(e.find(f"{ATOM}updated").text for e in entries)
        assert root.find(f"{ATOM}updated").text == newest
        for e in entries:
            assert e.find(f"{ATOM}content").get("type") == "html"
            assert e.find(f"{ATOM}id").text.startswith("urn:uuid:")
            assert e.findall(f"{ATOM}category")


def test_entry_ids_same_across_feeds_and_unique_within(example):
    """A review has one entry id in every feed it is in, and no feed repeats an id."""
    config, _ = example
    ids_by_title = {}
    for f in atom_files(config):
        entries = ET.parse(f).getroot().findall(f"{ATOM}entry")
        ids = [e.find(f"{ATOM}id").text for e in entries]
        assert len(ids) == len(set(ids))
        for e in entries:
            ids_by_title.setdefault(e.find(f"{ATOM}title").text, set()).add(e.find(f"{ATOM}id").text)
    assert all(len(v) == 1 for v in ids_by_title.values())
    assert len(ids_by_title) == 8


def test_rebuild_with_nothing_new_is_byte_identical_and_touches_nothing(example):
    """A second build writes no file and changes no byte or mtime."""
    config, first = example
    before = {p: (p.read_bytes(), os.stat(p).st_mtime_ns) for p in config.feeds.dir.rglob("*") if p.is_file()}
    with Store(config.store_path) as store:
        report = build_feeds(config, store)
    after = {p: (p.read_bytes(), os.stat(p).st_mtime_ns) for p in config.feeds.dir.rglob("*") if p.is_file()}
    assert report.written == [] and before == after and first.written


def test_no_temporary_files_left(example):
    """Atomic writes leave no temporary files behind."""
    config, _ = example
    assert not [p for p in config.feeds.dir.rglob(".tmp-*")]


def test_max_entries_and_order(tmp_path):
    """A feed holds the newest max_entries reviews, newest first."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(n, tags=["x"]) for n in range(1, 15)])
    config, _ = build(make_config(tmp_path).parent / "newsletter.toml")
    (tmp_path / "newsletter.toml").write_text(
        (tmp_path / "newsletter.toml").read_text().replace("max_entries = 50", "max_entries = 5"))
    config, _ = build(tmp_path / "newsletter.toml")
    parsed = feedparser.parse((config.feeds.dir / "all.atom").read_bytes())
    published = [e.published for e in parsed.entries]
    assert len(published) == 5 and published == sorted(published, reverse=True)


def test_update_changes_entry_and_feed_updated(tmp_path):
    """An updated review changes its entry's updated and the feed's updated."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, tags=["x"])])
    cfg = make_config(tmp_path)
    config, _ = build(cfg)
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, tags=["x"], title="改", updated="2026-12-01T00:00:00Z")])
    config, report = build(cfg)
    parsed = feedparser.parse((config.feeds.dir / "tags" / "x.atom").read_bytes())
    assert parsed.entries[0].title == "改" and parsed.feed.updated.startswith("2026-12-01")
    assert config.feeds.dir / "tags" / "x.atom" in report.written


def test_opml_lists_every_tag_feed(example):
    """feeds.opml is OPML 2.0 with one outline per tag feed plus the all feed."""
    config, _ = example
    root = ET.parse(config.feeds.dir / "feeds.opml").getroot()
    assert root.tag == "opml" and root.get("version") == "2.0"
    urls = {o.get("xmlUrl") for o in root.iter("outline")}
    expected = {config.site.base_url + p.relative_to(config.feeds.dir).as_posix() for p in atom_files(config)}
    assert urls == expected


def test_index_has_autodiscovery_and_counts(example):
    """index.html links every feed with rel=alternate and shows tag counts."""
    config, _ = example
    html = (config.feeds.dir / "index.html").read_text(encoding="utf-8")
    assert html.count('rel="alternate" type="application/atom+xml"') == len(atom_files(config))
    assert '<html lang="zh-CN">' in html and "注意力" in html


def test_hostile_content_is_escaped_in_feeds(tmp_path):
    """Script in a body and markup in a title never reach a feed as live markup."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, title="<b>x</b> & y", body="x <script>alert(1)</script>\n\n[a](javascript:alert(2)) <img src=y onerror=alert(3)>")])
    config, _ = build(make_config(tmp_path))
    parsed = feedparser.parse((config.feeds.dir / "all.atom").read_bytes())
    assert parsed.bozo == 0
    content = parsed.entries[0].content[0].value
    assert "<script" not in content and "javascript:" not in content and "onerror" not in content
    assert parsed.entries[0].title == "<b>x</b> & y"
