"""The feeds directory: valid Atom, stable ids, byte-identical rebuilds, OPML, index;
archived feeds (RFC 5005), JSON Feed twins, stylesheet, tag registry, WebSub."""

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from xml.etree import ElementTree as ET

import feedparser
import pytest
from lxml import etree

from newsletter.config import load_config
from newsletter.feeds import build_feeds, entry_id
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
    """A subscription document holds the newest max_entries to 2·max_entries−1 reviews, newest first."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(n, tags=["x"]) for n in range(1, 15)])
    config, _ = build(make_config(tmp_path).parent / "newsletter.toml")
    (tmp_path / "newsletter.toml").write_text(
        (tmp_path / "newsletter.toml").read_text().replace("max_entries = 50", "max_entries = 5"))
    config, _ = build(tmp_path / "newsletter.toml")
    parsed = feedparser.parse((config.feeds.dir / "all.atom").read_bytes())
    published = [e.published for e in parsed.entries]
    # 14 reviews, 5 per page: page 1 is archived, the subscription document keeps the newest 9.
    assert len(published) == 9 and published == sorted(published, reverse=True)


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


# === archived feeds, JSON Feed, stylesheet, registry, WebSub ==============================

BASE = "https://reviews.example.org/"
FH = "{http://purl.org/syndication/history/1.0}"
VALIDATOR = Path("/work/tools/validate-feed")


class Site:
    """A config on disk with a JSONL source; ``build()`` gathers then writes the feeds."""

    def __init__(self, root: Path, records: list, feeds: str = "max_entries = 10", extra: str = ""):
        self.root = root
        self.records = {r["id"]: r for r in records}
        self.feeds_conf, self.extra = feeds, extra
        self.write()

    def write(self) -> None:
        write_jsonl(self.root / "reviews.jsonl", list(self.records.values()))
        path = make_config(self.root, feeds=self.feeds_conf)
        text = path.read_text(encoding="utf-8").replace("max_entries = 50\n", "")
        path.write_text(text + "\n" + self.extra + "\n", encoding="utf-8")
        self.config = load_config(path)

    def add(self, *records) -> None:
        for r in records:
            self.records[r["id"]] = r
        self.write()

    def build(self):
        with Store(self.config.store_path) as store:
            gather(self.config, store, NOW)
            return build_feeds(self.config, store, now=NOW)

    @property
    def out(self) -> Path:
        return self.config.feeds.dir

    def local(self, url: str) -> Path:
        assert url.startswith(BASE), url
        return self.out / url[len(BASE):]

    def snapshot(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.out)): p.read_bytes() for p in sorted(self.out.rglob("*")) if p.is_file()}


def tag_of(n: int) -> list[str]:
    return [["ROCm", "性能"], ["CUDA Graph"], ["性能", "CPU"]][n % 3]


@pytest.fixture
def big(tmp_path) -> Site:
    """130 reviews, max_entries = 10: 12 archive pages for ``all``."""
    site = Site(tmp_path, [review(n) for n in range(1, 131)])
    site.build()
    return site


def links(root, rel: str) -> list[str]:
    return [l.get("href") for l in root.findall(f"{ATOM}link") if l.get("rel") == rel]


def walk(site: Site, start: str) -> list[tuple[str, etree._Element]]:
    """Follow prev-archive from a subscription document; (path, root) of each document."""
    docs, url, seen = [], BASE + start, set()
    while url:
        assert url not in seen, f"prev-archive loop at {url}"
        seen.add(url)
        root = etree.parse(str(site.local(url))).getroot()
        docs.append((url, root))
        prev = links(root, "prev-archive")
        url = prev[0] if prev else None
    return docs


def expected_ids(site: Site, tag: str | None) -> set[str]:
    return {entry_id(BASE, r["id"]) for r in site.records.values() if tag is None or tag in r["tags"]}


FEEDS = [("all.atom", None), ("tags/rocm.atom", "ROCm"), ("tags/cuda-graph.atom", "CUDA Graph"),
         ("tags/cpu.atom", "CPU"), ("tags/xn--w8tw44e.atom", "性能")]


# --- archives (RFC 5005) ----------------------------------------------------------

def test_every_atom_document_parses_without_errors(big):
    """Every Atom document, subscription or archive, is well-formed Atom (feedparser bozo == 0)."""
    docs = sorted(big.out.rglob("*.atom"))
    assert len(docs) > 20
    for path in docs:
        parsed = feedparser.parse(path.read_bytes())
        assert parsed.bozo == 0, (path, parsed.get("bozo_exception"))
        assert parsed.version == "atom10"


@pytest.mark.parametrize("start,tag", FEEDS)
def test_walking_prev_archive_recovers_every_review_exactly_once(big, start, tag):
    """A reader following prev-archive from a subscription document gets each review of the tag once."""
    ids = [e.findtext(f"{ATOM}id") for _, root in walk(big, start) for e in root.findall(f"{ATOM}entry")]
    assert len(ids) == len(set(ids))
    assert set(ids) == expected_ids(big, tag)


def test_archive_pages_are_full_and_the_subscription_document_holds_n_to_2n_minus_1(big):
    """Archive pages hold exactly max_entries; the subscription document between n and 2n-1."""
    docs = walk(big, "all.atom")
    assert [u for u, _ in docs] == [BASE + "all.atom"] + [f"{BASE}archive/{k}.atom" for k in range(12, 0, -1)]
    sub = docs[0][1]
    assert 10 <= len(sub.findall(f"{ATOM}entry")) <= 19
    assert sub.find(f"{FH}archive") is None
    for url, root in docs[1:]:
        assert len(root.findall(f"{ATOM}entry")) == 10
        assert root.find(f"{FH}archive") is not None
        assert links(root, "current") == [BASE + "all.atom"]
        assert links(root, "self") == [url]
    # next-archive goes forward; the newest page's successor is the subscription document.
    assert links(docs[1][1], "next-archive") == [BASE + "all.atom"]
    assert links(docs[2][1], "next-archive") == [BASE + "archive/12.atom"]
    assert links(docs[-1][1], "prev-archive") == []
    # One logical feed, one id.
    assert {root.findtext(f"{ATOM}id") for _, root in docs} == {sub.findtext(f"{ATOM}id")}


def test_archive_pages_are_chronological_on_a_first_build(big):
    """On a first build the oldest reviews sit on page 1: page dates never overlap."""
    def dates(name):
        root = etree.parse(str(big.out / name)).getroot()
        return [e.findtext(f"{ATOM}published") for e in root.findall(f"{ATOM}entry")]
    p1, p2 = dates("archive/1.atom"), dates("archive/2.atom")
    key = lambda s: datetime.fromisoformat(s)
    assert max(map(key, p1)) <= min(map(key, p2))


def test_rerun_with_no_changes_writes_nothing(big):
    """A second build with nothing new writes no file and leaves every byte and mtime as it was."""
    before = big.snapshot()
    mtimes = {p: p.stat().st_mtime_ns for p in big.out.rglob("*")}
    report = big.build()
    assert report.written == []
    assert big.snapshot() == before
    assert {p: p.stat().st_mtime_ns for p in big.out.rglob("*")} == mtimes


def test_new_reviews_never_shift_sealed_archive_pages(big):
    """New reviews (even one published long ago) leave every sealed archive page's bytes alone."""
    before = big.snapshot()
    old = review(500, published="2020-01-01T00:00:00+00:00")  # a backfilled review goes to the newest end
    big.add(old, *(review(n) for n in range(131, 140)))
    report = big.build()
    after = big.snapshot()
    written = {str(p.relative_to(big.out)) for p in report.written}
    # 140 reviews: page 13 sealed; page 12 only gains its next-archive link; pages 1..11 untouched.
    assert "archive/13.atom" in written and "archive/12.atom" in written
    for k in range(1, 12):
        assert after[f"archive/{k}.atom"] == before[f"archive/{k}.atom"]
        assert after[f"archive/{k}.json"] == before[f"archive/{k}.json"]
    assert after["archive/12.json"] == before["archive/12.json"]
    ids = [e.findtext(f"{ATOM}id") for _, r in walk(big, "all.atom") for e in r.findall(f"{ATOM}entry")]
    assert sorted(ids) == sorted(expected_ids(big, None))
    assert entry_id(BASE, old["id"]) in {e.findtext(f"{ATOM}id") for e in
                                         etree.parse(str(big.out / "all.atom")).getroot().findall(f"{ATOM}entry")}


def test_review_update_changes_only_the_archive_pages_holding_it(big):
    """Updating one archived review rewrites only the page holding it in each of its feeds."""
    r = review(6, body="A **revised** review.", updated="2026-11-29T10:00:00+08:00")
    big.add(r)
    report = big.build()
    written = sorted(str(p.relative_to(big.out)) for p in report.written)
    holding = []
    for start, tag in FEEDS:
        if tag is not None and tag not in r["tags"]:
            continue
        for url, root in walk(big, start):
            if entry_id(BASE, r["id"]) in {e.findtext(f"{ATOM}id") for e in root.findall(f"{ATOM}entry")}:
                path = url[len(BASE):]
                holding += [path, path[:-len("atom")] + "json"]
    assert written == sorted(holding)
    assert all("/archive/" in p or p.startswith("archive/") for p in written)


def test_review_losing_a_tag_leaves_that_feed_and_the_tag_keeps_its_feed(tmp_path):
    """A review re-tagged away from a tag drops out of its feed; the emptied tag's feed still exists."""
    site = Site(tmp_path, [review(1, tags=["Legacy", "ROCm"]), review(2, tags=["ROCm"])], feeds="max_entries = 10")
    site.build()
    site.add(review(1, tags=["ROCm"]))
    site.build()
    legacy = feedparser.parse((site.out / "tags/legacy.atom").read_bytes())
    assert legacy.bozo == 0 and legacy.entries == []
    assert json.loads((site.out / "tags/legacy.json").read_text())["items"] == []
    rocm = feedparser.parse((site.out / "tags/rocm.atom").read_bytes())
    assert len(rocm.entries) == 2


# --- JSON Feed 1.1 ----------------------------------------------------------------

def check_json_feed(doc: dict) -> None:
    """The JSON Feed 1.1 rules a reader relies on (https://jsonfeed.org/version/1.1)."""
    assert doc["version"] == "https://jsonfeed.org/version/1.1"
    assert isinstance(doc["title"], str) and doc["title"]
    assert isinstance(doc["items"], list)
    for key in ("home_page_url", "feed_url", "next_url"):
        if key in doc:
            assert doc[key].startswith("https://")
    for item in doc["items"]:
        assert isinstance(item["id"], str) and item["id"]
        assert isinstance(item.get("content_html") or item.get("content_text"), str)
        for key in ("date_published", "date_modified"):
            if key in item:
                assert datetime.fromisoformat(item[key]).tzinfo is not None
        for a in item.get("authors", []):
            assert set(a) & {"name", "url", "avatar"}
        assert isinstance(item.get("tags", []), list)


def test_every_atom_document_has_a_json_feed_twin_with_same_entries(big):
    """Each X.atom has X.json: valid JSON Feed 1.1 with the same ids and dates in the same order."""
    atoms = sorted(big.out.rglob("*.atom"))
    for path in atoms:
        doc = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        check_json_feed(doc)
        atom = feedparser.parse(path.read_bytes())
        assert [i["id"] for i in doc["items"]] == [e.id for e in atom.entries]
        assert [datetime.fromisoformat(i["date_published"]) for i in doc["items"]] == \
               [datetime.fromisoformat(e.published) for e in atom.entries]
        assert [datetime.fromisoformat(i["date_modified"]) for i in doc["items"]] == \
               [datetime.fromisoformat(e.updated) for e in atom.entries]
        assert doc["feed_url"] == BASE + str(path.relative_to(big.out).with_suffix(".json"))


@pytest.mark.parametrize("start,tag", FEEDS)
def test_following_json_next_url_recovers_every_item_once(big, start, tag):
    """JSON Feed pagination (next_url) from the subscription document reaches every review once."""
    url, ids = BASE + start[:-len("atom")] + "json", []
    while url:
        doc = json.loads(big.local(url).read_text(encoding="utf-8"))
        ids += [i["id"] for i in doc["items"]]
        url = doc.get("next_url")
    assert len(ids) == len(set(ids)) and set(ids) == expected_ids(big, tag)


# --- browsers --------------------------------------------------------------------

def test_every_atom_document_points_to_the_stylesheet_which_renders_a_page(big):
    """Each Atom document has an xml-stylesheet PI to feed.xsl; the XSLT turns a feed into an HTML page."""
    for path in big.out.rglob("*.atom"):
        data = path.read_bytes()
        head = data.split(b"<feed", 1)[0]
        assert head.startswith(b"<?xml version=")
        pi = etree.parse(str(path)).getroot().getprevious()
        assert pi is not None and pi.target == "xml-stylesheet"
        assert (path.parent / pi.get("href")).resolve() == (big.out / "feed.xsl").resolve()
    transform = etree.XSLT(etree.parse(str(big.out / "feed.xsl")))
    page = str(transform(etree.parse(str(big.out / "archive/3.atom"))))
    assert "<h1>Widget 评审周报</h1>" in page
    assert "订阅源" in page and "归档页" in page           # what it is (zh-CN site), and that it is an archive
    assert 'href="https://reviews.example.org/archive/2.atom"' in page
    assert "Review " in page
    assert '<a href="https://github.com/acme/widgets/pull/' in page  # entry titles link to the pull request


# --- index, OPML ------------------------------------------------------------------

def test_index_is_valid_html5_with_tags_counts_dates_and_autodiscovery(big):
    """index.html parses as HTML5 without errors, fits a phone, and lists each tag's Atom and JSON feeds."""
    html5lib = pytest.importorskip("html5lib")
    text = (big.out / "index.html").read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
    doc = html5lib.parse(text, namespaceHTMLElements=False)
    assert doc.find(".//meta[@name='viewport']") is not None
    alts = [(l.get("type"), l.get("href")) for l in doc.iter("link") if l.get("rel") == "alternate"]
    assert ("application/atom+xml", BASE + "tags/rocm.atom") in alts
    assert ("application/feed+json", BASE + "tags/rocm.json") in alts
    assert ("application/feed+json", BASE + "all.json") in alts
    row = doc.find(".//tr[@id='tag-rocm']")
    cells = ["".join(td.itertext()).strip() for td in row.findall("td")]
    assert cells[0] == "ROCm" and cells[2] == "43" and cells[3] == "2026-11-22"  # newest ROCm review: day 10 + 12
    assert BASE + "feeds.opml" in text
    assert "@media (max-width" in text


# --- tag registry -----------------------------------------------------------------

REGISTRY = """
[tags.aliases]
"AMD" = "ROCm"
"cuda graph" = "CUDA Graphs"

[tags.names]
"性能" = "Performance 性能"

[tags.descriptions]
"ROCm" = "AMD GPUs: HIP kernels & ROCm builds."
"""


def test_aliases_fold_tags_and_a_renamed_tags_old_feed_points_to_the_new_one(tmp_path):
    """An alias folds a spelling into its tag; a tag that had a feed keeps it, with one entry pointing on."""
    records = [review(n) for n in range(1, 13)] + [review(20, tags=["AMD"])]
    site = Site(tmp_path, records)
    site.build()
    assert (site.out / "tags/amd.atom").exists() and (site.out / "tags/cuda-graph.atom").exists()
    site.extra = REGISTRY
    site.write()
    report = site.build()

    rocm = feedparser.parse((site.out / "tags/rocm.atom").read_bytes())
    assert entry_id(BASE, "acme/widgets#20") in {e.id for e in rocm.entries}
    assert rocm.feed.subtitle == "AMD GPUs: HIP kernels & ROCm builds."
    for old, new in (("amd", "rocm"), ("cuda-graph", "cuda-graphs")):
        moved = feedparser.parse((site.out / f"tags/{old}.atom").read_bytes())
        assert moved.bozo == 0 and len(moved.entries) == 1
        assert moved.entries[0].link == f"{BASE}tags/{new}.atom"
        js = json.loads((site.out / f"tags/{old}.json").read_text(encoding="utf-8"))
        check_json_feed(js)
        assert js["expired"] is True and js["items"][0]["external_url"] == f"{BASE}tags/{new}.atom"
    graphs = feedparser.parse((site.out / "tags/cuda-graphs.atom").read_bytes())
    assert graphs.feed.title == "Widget 评审周报 — CUDA Graphs" and len(graphs.entries) == 4
    redirects = (site.out / "_redirects").read_text(encoding="utf-8")
    assert "/tags/amd.atom /tags/rocm.atom 301\n" in redirects
    assert "/tags/cuda-graph.json /tags/cuda-graphs.json 301\n" in redirects
    assert "/tags/amd.atom /tags/rocm.atom;\n" in (site.out / "redirects.map").read_text(encoding="utf-8")
    index = (site.out / "index.html").read_text(encoding="utf-8")
    assert "Performance 性能" in index and "AMD GPUs: HIP kernels &amp; ROCm builds." in index
    assert "tags/amd.atom" not in index.split("<main>")[0]  # moved feeds are not advertised
    # Categories use the canonical display names.
    entry = next(e for e in rocm.entries if e.id == entry_id(BASE, "acme/widgets#3"))
    assert {t.term for t in entry.tags} == {"ROCm", "Performance 性能"}
    assert report.written  # and a second build is quiet again
    assert site.build().written == []


# --- WebSub -------------------------------------------------------------------------

def test_websub_pings_exactly_the_changed_feeds_and_nothing_on_a_quiet_rerun(tmp_path, http_stub):
    """The hub gets hub.mode=publish for each changed subscription document, then nothing on a rerun."""
    from urllib.parse import parse_qs

    http_stub.routes[("POST", "/hub")] = lambda h, body: (204, {}, b"")
    hub = http_stub.url + "/hub"
    site = Site(tmp_path, [review(n) for n in range(1, 31)], feeds=f'max_entries = 10\nwebsub_hub = "{hub}"')
    report = site.build()
    sent = [parse_qs(body.decode()) for _m, _p, _h, body in http_stub.requests]
    assert all(s["hub.mode"] == ["publish"] for s in sent)
    urls = sorted(s["hub.url"][0] for s in sent)
    subs = sorted(BASE + p for p in ("all.atom", "all.json", "tags/rocm.atom", "tags/rocm.json",
                                     "tags/cuda-graph.atom", "tags/cuda-graph.json", "tags/cpu.atom",
                                     "tags/cpu.json", "tags/xn--w8tw44e.atom", "tags/xn--w8tw44e.json"))
    assert urls == subs == sorted(report.pinged)
    hub_links = links(etree.parse(str(site.out / "all.atom")).getroot(), "hub")
    assert hub_links == [hub]
    assert links(etree.parse(str(site.out / "archive/1.atom")).getroot(), "hub") == []
    assert json.loads((site.out / "all.json").read_text())["hubs"] == [{"type": "WebSub", "url": hub}]

    http_stub.requests.clear()
    assert site.build().written == [] and http_stub.requests == []

    site.add(review(31, tags=["CPU"]))
    site.build()
    urls = sorted(parse_qs(b.decode())["hub.url"][0] for *_x, b in http_stub.requests)
    assert urls == [BASE + "all.atom", BASE + "all.json", BASE + "tags/cpu.atom", BASE + "tags/cpu.json"]


def test_a_failed_ping_never_fails_the_build_and_is_retried_next_run(tmp_path, http_stub):
    """A hub answering 503 leaves the build successful and the URLs queued; the next run sends them."""
    answers = [503]
    http_stub.routes[("POST", "/hub")] = lambda h, body: (answers[0], {}, b"")
    site = Site(tmp_path, [review(1, tags=["CPU"])],
                feeds=f'max_entries = 10\nwebsub_hub = "{http_stub.url}/hub"')
    report = site.build()
    assert report.pinged == [] and sorted(report.ping_pending) == sorted(
        BASE + p for p in ("all.atom", "all.json", "tags/cpu.atom", "tags/cpu.json"))
    answers[0] = 202
    http_stub.requests.clear()
    report = site.build()
    assert report.written == [] and sorted(report.pinged) == sorted(
        BASE + p for p in ("all.atom", "all.json", "tags/cpu.atom", "tags/cpu.json"))
    http_stub.requests.clear()
    assert site.build().pinged == [] and http_stub.requests == []


# --- the W3C validator (offline copy, when this machine has it) ---------------------

@pytest.mark.skipif(not VALIDATOR.exists(), reason="W3C feed validator not installed here")
def test_w3c_feed_validator_reports_no_error_or_warning(tmp_path):
    """The W3C Feed Validation Service finds no error and no warning in subscription, archive and moved feeds."""
    # Distinct times: the validator warns (DuplicateUpdated) about entries updated at the same second.
    records = [review(n, published=f"2026-11-{10 + n % 15:02d}T10:{n:02d}:00+08:00") for n in range(1, 26)]
    records.append(review(40, tags=["AMD"], published="2026-11-28T08:00:00+08:00"))
    site = Site(tmp_path, records, feeds="max_entries = 5")
    site.build()
    site.extra = REGISTRY
    site.write()
    site.build()
    files = sorted(str(p) for p in site.out.rglob("*.atom"))
    assert any("/archive/" in f for f in files) and any(f.endswith("/amd.atom") for f in files)
    proc = subprocess.run([str(VALIDATOR), *files], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_issue_page_is_compiled_once_until_something_it_shows_changes(tmp_path):
    """An issue's "view in browser" page is not recompiled by later builds; editing a template redoes it."""
    from newsletter.compose import compose
    from newsletter.render import Renderer

    write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 4)])
    tpl = tmp_path / "tpl"
    tpl.mkdir()
    config = load_config(make_config(tmp_path, site=f'templates = "{tpl}"'))
    with Store(config.store_path) as store:
        gather(config, store, NOW)
        compose(config, store, datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc), "2026-W48")
        counts = []
        for step in range(3):
            if step == 2:   # a user template now overrides the packaged one
                pkg = Path(__import__("newsletter.render", fromlist=["x"]).PACKAGE_TEMPLATES)
                (tpl / "email.mjml.j2").write_text((pkg / "email.mjml.j2").read_text() + "\n")
            renderer = Renderer(config)
            report = build_feeds(config, store, renderer)
            counts.append(renderer.compiles)
    page = config.feeds.dir / "issues" / "2026-W48.html"
    assert page.exists() and counts == [1, 0, 1]
    assert page in report.unchanged   # same bytes after the recompile: left alone
