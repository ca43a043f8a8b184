"""The feeds directory: Atom and JSON Feed per tag and for everything, archives, OPML, index, issue pages.

Layout under ``feeds.dir`` (URLs are ``site.base_url`` + path)::

    all.atom  all.json                     subscription documents of every review
    archive/<k>.atom  archive/<k>.json     archive pages of ``all`` (1 = oldest)
    tags/<slug>.atom  tags/<slug>.json     one feed per canonical tag
    tags/<slug>/archive/<k>.atom|.json     its archive pages
    feed.xsl                               shows any Atom document as a page in a browser
    feeds.opml  index.html  issues/<id>.html
    _redirects  redirects.map              renamed tags' old URLs → new ones (Netlify/nginx)

Atom 1.0 (RFC 4287) with feedgen:

- one logical feed has one ``id`` in its subscription document and in all its
  archive pages: ``urn:uuid`` (RFC 4122 v5) of the subscription document's URL;
  entry ids are ``urn:uuid`` of ``site.base_url`` + ``review/`` + review id, the
  same in every feed and in the JSON twins;
- archived feeds per RFC 5005 section 4 (layout in :mod:`newsletter.feed_archive`):
  the subscription document links ``prev-archive`` to the newest archive page;
  each archive page carries ``<fh:archive/>`` and links ``current``,
  ``prev-archive`` (older; not on page 1) and ``next-archive`` (newer). The
  newest page's ``next-archive`` is the subscription document until the next
  page is sealed; then it points to that page. This one link change is the
  only change an archive page ever sees, unless a review on it is updated
  (RFC 5005 asks that an archive's set of entries not change; it never does);
- ``rel="self"``, ``alternate`` (index page, and the JSON twin) and, with
  ``feeds.websub_hub``, ``rel="hub"`` (subscription documents only) are absolute;
- ``xml:lang``; one ``category`` per canonical tag; ``content type="html"``;
  the document's ``updated`` is its newest entry's ``updated``;
- an ``<?xml-stylesheet?>`` processing instruction (relative ``href`` to
  ``feed.xsl``) right after the XML declaration, so a browser shows a page
  explaining the feed; feed readers ignore it.

A run renders only documents whose fingerprint (entries, links, config)
changed or whose file is missing, and the writer touches only files whose
bytes changed; the WebSub hub is pinged for the changed subscription documents.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import posixpath
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional
from urllib.parse import urlsplit
from xml.etree import ElementTree as ET

from feedgen.ext.base import BaseExtension
from feedgen.feed import FeedGenerator

from . import __version__, feed_archive, websub
from .config import Config
from .feed_archive import ALL, FeedState, archive_count
from .jsonfeed import MEDIA_TYPE as JSON_TYPE, json_feed, json_item
from .models import StoredReview, Tag
from .render import PACKAGE_TEMPLATES, Renderer
from .store import Store
from .tag_registry import MovedTag, TagFeed, TagRegistry
from .writer import Writer

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
FH_NS = "http://purl.org/syndication/history/1.0"
ATOM_TYPE = "application/atom+xml"
STYLESHEET = "feed.xsl"
LAYOUT_VERSION = "2"  # bump when documents are shaped differently: every one is re-rendered

LABELS = {
    "en": {
        "moved_title": "This feed moved to “{name}”",
        "moved_body": "The tag “{old}” is now “{name}”. Subscribe to {url} to keep receiving its reviews.",
        "xsl_intro": "This is a web feed. Copy its address into your feed reader to follow new reviews.",
        "xsl_archive": "This is an archive page of the feed: it holds older entries only.",
        "xsl_current": "Current feed", "xsl_older": "Older entries", "xsl_newer": "Newer entries",
        "xsl_address": "Feed address", "xsl_json": "JSON Feed", "xsl_index": "All feeds",
        "xsl_entries": "Entries", "description": "Description", "last_review": "Last review",
        "renamed": "Renamed tags", "subscribe": "Subscribe",
    },
    "zh": {
        "moved_title": "本订阅源已迁至“{name}”",
        "moved_body": "标签“{old}”现名为“{name}”。请订阅 {url} 继续接收该标签的评审。",
        "xsl_intro": "这是一个订阅源（Web feed）。把本页地址复制到 RSS 阅读器中即可关注新的评审。",
        "xsl_archive": "这是订阅源的归档页，只包含较早的条目。",
        "xsl_current": "当前订阅源", "xsl_older": "更早的条目", "xsl_newer": "较新的条目",
        "xsl_address": "订阅地址", "xsl_json": "JSON Feed", "xsl_index": "全部订阅源",
        "xsl_entries": "条目", "description": "说明", "last_review": "最近评审",
        "renamed": "已改名的标签", "subscribe": "订阅",
    },
}


def feed_labels(language: str) -> dict[str, str]:
    """Feed-page words for a BCP 47 language tag (by primary subtag), English when unknown."""
    return LABELS.get(language.split("-")[0].lower(), LABELS["en"])


def entry_id(base_url: str, review_id: str) -> str:
    """The Atom entry id of a review: ``urn:uuid:`` + UUID5(URL namespace, base_url + 'review/' + id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{base_url}review/{review_id}").urn


def feed_id(url: str) -> str:
    """The Atom feed id for a feed URL."""
    return uuid.uuid5(uuid.NAMESPACE_URL, url).urn


class _ArchiveMarker(BaseExtension):
    """feedgen extension adding RFC 5005's ``<fh:archive/>`` to the feed element."""

    def extend_ns(self):
        return {"fh": FH_NS}

    def extend_atom(self, feed):
        from lxml import etree
        # After the last link, before the entries (Atom allows any order; this keeps it readable).
        marker = etree.Element(f"{{{FH_NS}}}archive")
        first_entry = feed.find("{http://www.w3.org/2005/Atom}entry")
        if first_entry is not None:
            first_entry.addprevious(marker)
        else:
            feed.append(marker)
        return feed


@dataclass(frozen=True)
class Feed:
    """One logical feed: every review of a tag (or of all), over its documents.

    Attributes:
        key: ``"all"`` or ``"tag:" + canonical tag key`` (see :mod:`newsletter.feed_archive`).
        stem: path of the subscription document without extension (``all``, ``tags/<slug>``).
        title: feed title; subtitle: feed subtitle (tag description or site description).
        tag: the canonical tag, ``None`` for ``all``.
    """

    key: str
    stem: str
    title: str
    subtitle: str
    tag: Optional[TagFeed] = None

    def path(self, page: int, ext: str) -> str:
        """Relative path of a document: page 0 is the subscription document, ``k ≥ 1`` archive page k."""
        if page == 0:
            return f"{self.stem}.{ext}"
        folder = "archive" if self.key == ALL else f"{self.stem}/archive"
        return f"{folder}/{page}.{ext}"


@dataclass(frozen=True)
class FeedSpec:
    """One feed document (and its JSON twin) to write.

    Attributes:
        feed: the logical feed.
        page: 0 for the subscription document, ``k ≥ 1`` for archive page k (1 = oldest).
        archives: how many archive pages the feed has now.
        reviews: the entries, newest position first.
    """

    feed: Feed
    page: int
    archives: int
    reviews: tuple[StoredReview, ...]

    @property
    def relpath(self) -> str:
        """The Atom document's path under the feeds directory."""
        return self.feed.path(self.page, "atom")


@dataclass
class FeedsReport:
    """What :func:`build_feeds` did.

    Attributes:
        written: paths whose bytes changed; unchanged: paths left alone (same bytes,
            or not rendered because nothing in them changed).
        pinged: feed URLs the WebSub hub accepted; ping_pending: URLs queued for the next run.
    """

    written: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    pinged: list = field(default_factory=list)
    ping_pending: list = field(default_factory=list)


def stylesheet_href(relpath: str) -> str:
    """The relative URL of ``feed.xsl`` from a document at ``relpath`` (``tags/x.atom`` → ``../feed.xsl``)."""
    return posixpath.relpath(STYLESHEET, posixpath.dirname(relpath) or ".")


def with_stylesheet(xml: bytes, href: str) -> bytes:
    """Insert ``<?xml-stylesheet type="text/xsl" href=…?>`` right after the XML declaration."""
    end = xml.index(b"?>") + 2 if xml.startswith(b"<?xml ") else 0
    pi = f'<?xml-stylesheet type="text/xsl" href="{html.escape(href)}"?>'.encode("utf-8")
    return xml[:end] + (b"\n" if end else b"") + pi + (b"" if end else b"\n") + xml[end:]


def _categories(registry: Optional[TagRegistry], tags: tuple[Tag, ...]) -> list[tuple[str, str]]:
    """(display name, slug) of a review's canonical tags."""
    if registry is None:
        return [(t.name, t.slug) for t in tags]
    return [(f.name, f.tag.slug) for f in registry.categories(tags)]


def _content(stored: StoredReview) -> str:
    r = stored.review
    return stored.body_html or (f"<p>{html.escape(r.summary, quote=False)}</p>" if r.summary else "")


def atom_document(config: Config, spec: FeedSpec, registry: Optional[TagRegistry] = None) -> bytes:
    """Serialize one feed document to Atom bytes (UTF-8, XML declaration, stylesheet PI, pretty-printed).

    Links per RFC 5005 section 4 (see the module docstring); the hub link only in
    subscription documents.
    """
    site, base = config.site, config.site.base_url
    feed = spec.feed
    url = base + spec.relpath
    current = base + feed.path(0, "atom")
    fg = FeedGenerator()
    fg.id(feed_id(current))
    fg.title(feed.title)
    if feed.subtitle:
        fg.subtitle(feed.subtitle)
    fg.link(href=url, rel="self", type=ATOM_TYPE)
    fg.link(href=base + "index.html", rel="alternate", type="text/html")
    fg.link(href=base + feed.path(spec.page, "json"), rel="alternate", type=JSON_TYPE)
    if spec.page == 0:
        if config.feeds.websub_hub:
            fg.link(href=config.feeds.websub_hub, rel="hub")
        if spec.archives:
            fg.link(href=base + feed.path(spec.archives, "atom"), rel="prev-archive", type=ATOM_TYPE)
    else:
        fg.link(href=current, rel="current", type=ATOM_TYPE)
        if spec.page > 1:
            fg.link(href=base + feed.path(spec.page - 1, "atom"), rel="prev-archive", type=ATOM_TYPE)
        # The newest archive page's successor is, for now, the subscription document.
        newer = feed.path(spec.page + 1, "atom") if spec.page < spec.archives else feed.path(0, "atom")
        fg.link(href=base + newer, rel="next-archive", type=ATOM_TYPE)
        fg.register_extension("fh", _ArchiveMarker, None, atom=True, rss=False)
    fg.language(site.language)
    fg.author({"name": site.author})
    fg.generator("newsletter", version=__version__)
    fg.updated(max((r.review.updated for r in spec.reviews), default=EPOCH))
    for stored in spec.reviews:
        r = stored.review
        fe = fg.add_entry(order="append")
        fe.id(entry_id(base, r.id))
        fe.title(r.title)
        fe.link(href=r.url, rel="alternate", type="text/html")
        fe.published(r.published)
        fe.updated(r.updated)
        if r.author:
            fe.author({"name": r.author})
        for name, slug in _categories(registry, stored.tags):
            fe.category(term=name, label=name, scheme=f"{base}tags/{slug}.atom")
        if r.summary:
            fe.summary(r.summary)
        content = _content(stored)
        if content:
            fe.content(content, type="html")
        elif not r.summary:
            fe.summary(r.title)
    return with_stylesheet(fg.atom_str(pretty=True), stylesheet_href(spec.relpath))


def json_document(config: Config, spec: FeedSpec, registry: Optional[TagRegistry] = None) -> bytes:
    """The JSON Feed 1.1 twin of :func:`atom_document`: same entries, ids and dates."""
    site, base = config.site, config.site.base_url
    feed = spec.feed
    items = []
    for stored in spec.reviews:
        r = stored.review
        items.append(json_item(
            id=entry_id(base, r.id), url=r.url, title=r.title, content_html=_content(stored),
            summary=r.summary, published=r.published.isoformat(), modified=r.updated.isoformat(),
            author=r.author, tags=tuple(name for name, _ in _categories(registry, stored.tags))))
    older = spec.archives if spec.page == 0 else spec.page - 1
    return json_feed(
        title=feed.title, home_page_url=base + "index.html", feed_url=base + feed.path(spec.page, "json"),
        items=items, description=feed.subtitle, language=site.language, author=site.author,
        next_url=base + feed.path(older, "json") if older else None,
        hub=config.feeds.websub_hub if spec.page == 0 else "")


def moved_documents(config: Config, moved: MovedTag, updated: datetime) -> tuple[bytes, bytes]:
    """The old feed of a renamed tag: Atom and JSON, each with one entry pointing to the new feed.

    ``updated`` (the old tag's newest review ``updated``) dates the entry, so the
    documents stay byte-identical from run to run.
    """
    site, base = config.site, config.site.base_url
    words = feed_labels(site.language)
    old_stem, new_stem = f"tags/{moved.old.slug}", f"tags/{moved.new.tag.slug}"
    old_url, new_url = base + old_stem + ".atom", base + new_stem + ".atom"
    title = f"{site.title} — {moved.old.name}"
    entry_title = words["moved_title"].format(name=moved.new.name)
    text = words["moved_body"].format(old=moved.old.name, name=moved.new.name, url=new_url)
    body = "<p>" + html.escape(text, quote=False).replace(
        html.escape(new_url), f'<a href="{html.escape(new_url)}">{html.escape(new_url)}</a>') + "</p>"
    eid = uuid.uuid5(uuid.NAMESPACE_URL, f"{old_url}#moved-to:{new_url}").urn

    fg = FeedGenerator()
    fg.id(feed_id(old_url))
    fg.title(title)
    fg.link(href=old_url, rel="self", type=ATOM_TYPE)
    fg.link(href=base + "index.html", rel="alternate", type="text/html")
    fg.link(href=base + old_stem + ".json", rel="alternate", type=JSON_TYPE)
    if config.feeds.websub_hub:
        fg.link(href=config.feeds.websub_hub, rel="hub")
    fg.language(site.language)
    fg.author({"name": site.author})
    fg.generator("newsletter", version=__version__)
    fg.updated(updated)
    fe = fg.add_entry()
    fe.id(eid)
    fe.title(entry_title)
    fe.link(href=new_url, rel="alternate", type=ATOM_TYPE)
    fe.published(updated)
    fe.updated(updated)
    fe.summary(text)
    fe.content(body, type="html")
    atom = with_stylesheet(fg.atom_str(pretty=True), stylesheet_href(old_stem + ".atom"))
    js = json_feed(
        title=title, home_page_url=base + "index.html", feed_url=base + old_stem + ".json",
        language=site.language, author=site.author, hub=config.feeds.websub_hub, expired=True,
        items=[json_item(id=eid, url=base + new_stem + ".json", external_url=new_url, title=entry_title,
                         content_html=body, summary=text, published=updated.isoformat(),
                         modified=updated.isoformat())])
    return atom, js


def opml_document(config: Config, tags: list[tuple[Tag, int, Optional[datetime]]],
                  include_all: bool = True, registry: Optional[TagRegistry] = None) -> bytes:
    """OPML 2.0 (http://opml.org/spec2.opml): the all-reviews feed (unless ``include_all`` is
    false, e.g. for a reader's chosen tags) and the feed of each given tag.

    Args:
        tags: ``(tag, count, newest)`` as :meth:`Store.tag_counts` gives them; only the tag is used.
        registry: when given, each tag is shown as its canonical tag (display name,
            slug, description as ``description``), each canonical tag once.
    """
    base = config.site.base_url
    root = ET.Element("opml", version="2.0")
    head = ET.SubElement(root, "head")
    ET.SubElement(head, "title").text = config.site.title
    body = ET.SubElement(root, "body")
    if include_all:
        ET.SubElement(body, "outline", type="rss", text=config.site.title, title=config.site.title,
                      xmlUrl=base + "all.atom", htmlUrl=base + "index.html")
    seen = set()
    for tag, _count, _newest in tags:
        name, slug, description = tag.name, tag.slug, ""
        if registry is not None:
            tf = registry.feed_for(tag.key)
            if tf is not None:
                name, slug, description = tf.name, tf.tag.slug, tf.description
        if slug in seen:
            continue
        seen.add(slug)
        title = f"{config.site.title} — {name}"
        attrs = {"type": "rss", "text": title, "title": title, "xmlUrl": f"{base}tags/{slug}.atom",
                 "htmlUrl": base + "index.html"}
        if description:
            attrs["description"] = description
        ET.SubElement(body, "outline", attrs)
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def redirect_files(config: Config, moved: list[MovedTag]) -> tuple[bytes, bytes]:
    """``_redirects`` (Netlify / Cloudflare Pages: ``from to 301``) and ``redirects.map``
    (an nginx ``map`` include: ``from to;``) sending a renamed tag's old feed URLs to the new ones.

    Paths are absolute on the host, with ``site.base_url``'s path as prefix.
    """
    prefix = urlsplit(config.site.base_url).path or "/"
    pairs = []
    for m in moved:
        for ext in ("atom", "json"):
            pairs.append((f"{prefix}tags/{m.old.slug}.{ext}", f"{prefix}tags/{m.new.tag.slug}.{ext}"))
    head = "# Renamed tags: old feed URL → new feed URL (written by `newsletter feeds`).\n"
    netlify = head + "".join(f"{a} {b} 301\n" for a, b in pairs)
    nginx = (head + "# nginx: map $uri $feed_moved { include redirects.map; }  then\n"
             "#        if ($feed_moved) { return 301 $feed_moved; }\n"
             + "".join(f"{a} {b};\n" for a, b in pairs))
    return netlify.encode("utf-8"), nginx.encode("utf-8")


def plan_feeds(config: Config, registry: TagRegistry) -> list[Feed]:
    """Every logical feed: ``all`` first, then each canonical tag by slug."""
    site = config.site
    feeds = [Feed(ALL, "all", site.title, site.description)]
    for tf in registry.feeds:
        feeds.append(Feed(tf.feed_key, f"tags/{tf.tag.slug}", f"{site.title} — {tf.name}",
                          tf.description or site.description, tf))
    return feeds


def _issue_pages_fingerprint(config: Config) -> str:
    """SHA-256 of what shapes an issue page besides its reviews: site settings, the renderer
    and markup code, and every template (package and ``site.templates``)."""
    from . import markup, render

    s = config.site
    h = hashlib.sha256(json.dumps([__version__, s.title, s.base_url, s.language, s.timezone, s.author,
                                   s.description, str(s.templates)], ensure_ascii=False).encode())
    for path in (render.__file__, markup.__file__):
        with open(path, "rb") as fh:
            h.update(fh.read())
    for d in (PACKAGE_TEMPLATES, s.templates):
        if d and os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                full = os.path.join(d, name)
                if os.path.isfile(full):
                    with open(full, "rb") as fh:
                        h.update(name.encode() + b"\0" + fh.read())
    return h.hexdigest()


def _config_fingerprint(config: Config, registry: TagRegistry) -> str:
    s = config.site
    doc = [LAYOUT_VERSION, __version__, s.title, s.base_url, s.language, s.author, s.description,
           config.feeds.max_entries, config.feeds.websub_hub, registry.fingerprint]
    return hashlib.sha256(json.dumps(doc, ensure_ascii=False).encode()).hexdigest()


def build_feeds(config: Config, store: Store, renderer: Optional[Renderer] = None,
                now: Optional[datetime] = None) -> FeedsReport:
    """Write the whole feeds directory from the store, then ping the WebSub hub.

    Args:
        config: the configuration.
        store: the store; its feed positions and document fingerprints are updated.
        renderer: page renderer (one is made when ``None``).
        now: aware current time (tags created for alias targets, WebSub queue); defaults to the clock.

    Writes the documents listed in the module docstring; documents whose
    fingerprint is unchanged and whose files exist are not even rendered, and
    files whose bytes did not change are left alone.

    Raises:
        OSError: the directory cannot be written (files already replaced stay whole).
        RenderError: a page template failed.
        StoreError: the store is unusable.
    """
    renderer = renderer or Renderer(config)
    now = now or datetime.now(timezone.utc)
    base, per_page = config.site.base_url, config.feeds.max_entries
    writer = Writer(config.feeds.dir)
    writer.sweep()
    report = FeedsReport()
    with store.transaction():
        registry = TagRegistry(config.tags, store.tags(), lambda name: store.ensure_tag(name, now))
        feed_archive.sync_entries(store, registry.feed_keys())
    feeds = plan_feeds(config, registry)
    states = feed_archive.feed_states(store)
    digests = feed_archive.page_digests(store, per_page, states)
    known = feed_archive.document_fingerprints(store)
    config_fp = _config_fingerprint(config, registry)
    fresh: dict[str, str] = {}
    changed_urls: list[str] = []

    # Documents are rendered here and written by a few threads: each file is fsync'ed before its
    # rename, and concurrent fsyncs share journal commits instead of queueing one by one.
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="feeds-write")
    pending: list = []
    try:
        for feed in feeds:
            archives = archive_count(states.get(feed.key, FeedState()).last_pos, per_page)
            for page in [*range(1, archives + 1), 0]:  # archive pages before the document linking them
                links = archives if page == 0 else int(page < archives)
                fp = hashlib.sha256(json.dumps(
                    [config_fp, feed.title, feed.subtitle, page, links, digests.get((feed.key, page), "")],
                    ensure_ascii=False).encode()).hexdigest()
                stem = feed.path(page, "")[:-1]
                paths = [feed.path(page, "atom"), feed.path(page, "json")]
                if known.get(stem) == fp and all((writer.root / p).exists() for p in paths):
                    report.unchanged.extend(writer.root / p for p in paths)
                    continue
                spec = FeedSpec(feed, page, archives,
                                tuple(feed_archive.page_reviews(store, feed.key, page, archives, per_page)))
                for p, data in zip(paths, (atom_document(config, spec, registry), json_document(config, spec, registry))):
                    pending.append((pool.submit(writer.write, p, data), base + p if page == 0 else None))
                fresh[stem] = fp
    finally:
        pool.shutdown(wait=True)
    for future, url in pending:   # in submission order; re-raises the first failed write
        if future.result() and url:
            changed_urls.append(url)

    for m in registry.moved:
        newest = store.db.execute(
            "SELECT max(r.updated_utc) FROM review_tags rt JOIN reviews r ON r.seq = rt.review_seq "
            "WHERE rt.tag_key = ?", (m.old.key,)).fetchone()[0]
        atom, js = moved_documents(config, m, datetime.fromisoformat(newest) if newest else EPOCH)
        for p, data in ((f"tags/{m.old.slug}.atom", atom), (f"tags/{m.old.slug}.json", js)):
            if writer.write(p, data):
                changed_urls.append(base + p)
        fresh[f"tags/{m.old.slug}"] = "moved"  # never matches a feed fingerprint
    netlify, nginx = redirect_files(config, registry.moved)
    writer.write("_redirects", netlify)
    writer.write("redirects.map", nginx)

    tag_rows = []
    for feed in feeds[1:]:
        st = states.get(feed.key, FeedState())
        tag_rows.append({
            "name": feed.tag.name, "slug": feed.tag.tag.slug, "description": feed.tag.description,
            "count": st.count, "newest": st.newest.astimezone(config.site.tz).strftime("%Y-%m-%d") if st.newest else "",
            "feed_url": base + feed.path(0, "atom"), "json_url": base + feed.path(0, "json")})
    tag_rows.sort(key=lambda t: (t["name"].casefold(), t["slug"]))
    by_name = sorted(registry.feeds, key=lambda f: (f.name.casefold(), f.tag.slug))
    writer.write("feeds.opml", opml_document(config, [(f.tag, 0, None) for f in by_name], registry=registry))
    words = feed_labels(config.site.language)
    writer.write(STYLESHEET, renderer.render_page("feed.xsl.j2", words=words).encode("utf-8"))

    issues = [i for i in store.issues() if i.status != "empty" and i.review_count]
    pages_fp = _issue_pages_fingerprint(config)
    for issue in issues:
        # An issue page costs an MJML compile: redo it only when its reviews, the templates,
        # the renderer or the site changed (years of weekly issues stay cheap).
        reviews = store.reviews_in_issue(issue.id)
        fp = hashlib.sha256(json.dumps(
            [pages_fp, issue.id, issue.review_count, issue.start.isoformat(), issue.end.isoformat(),
             [[r.review.id, r.review.title, r.review.url, r.review.summary, r.review.repo, r.review.author,
               r.review.published.isoformat(), r.body_html, [[t.name, t.slug] for t in r.tags]]
              for r in reviews]], ensure_ascii=False).encode()).hexdigest()
        stem = f"issues/{issue.id}"
        if known.get(stem) == fp and (writer.root / f"{stem}.html").exists():
            report.unchanged.append(writer.root / f"{stem}.html")
            continue
        rendered = renderer.render_issue(issue, reviews, archive=True)
        writer.write(f"{stem}.html", rendered.html.encode("utf-8"))
        fresh[stem] = fp
    page = renderer.render_page(
        "index.html.j2", words=words, tags=tag_rows,
        total=states.get(ALL, FeedState()).count, all_json_url=base + "all.json",
        moved=[{"old": m.old.name, "name": m.new.name, "feed_url": base + f"tags/{m.new.tag.slug}.atom"}
               for m in registry.moved],
        issues=[{"id": i.id, "period": renderer.period_label(i), "count": i.review_count,
                 "url": f"{base}issues/{i.id}.html", "status": i.status} for i in issues],
    )
    writer.write("index.html", page.encode("utf-8"))
    feed_archive.save_fingerprints(store, fresh)

    report.written = writer.written
    report.unchanged = writer.unchanged + report.unchanged
    pings = websub.publish(config.feeds.websub_hub, store, changed_urls, now)
    report.pinged, report.ping_pending = pings.pinged, pings.pending
    return report
