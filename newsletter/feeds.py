"""The feeds directory: Atom per tag and for everything, OPML, the index page, issue archives.

Atom 1.0 (RFC 4287) with feedgen:
- feed and entry ids are ``urn:uuid`` (RFC 4122 version 5) of the absolute
  feed URL and of ``site.base_url`` + review id: stable across runs and machines;
  one review has one entry id in every feed it appears in;
- ``rel="self"`` and ``rel="alternate"`` links are absolute, from ``site.base_url``;
- ``xml:lang`` from ``site.language``; one ``category`` per tag;
- ``content type="html"``: the review's sanitized HTML (rendered once at gather);
- the feed's ``updated`` is its newest entry's ``updated``;
- entries: the newest ``feeds.max_entries`` by ``published``.
OPML 2.0 lists every tag feed. Everything is written through :class:`~newsletter.writer.Writer`.
"""

from __future__ import annotations

import html
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional
from xml.etree import ElementTree as ET

from feedgen.feed import FeedGenerator

from . import __version__
from .config import Config
from .models import StoredReview, Tag
from .render import Renderer
from .store import Store
from .writer import Writer

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def entry_id(base_url: str, review_id: str) -> str:
    """The Atom entry id of a review: ``urn:uuid:`` + UUID5(URL namespace, base_url + 'review/' + id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{base_url}review/{review_id}").urn


def feed_id(url: str) -> str:
    """The Atom feed id for a feed URL."""
    return uuid.uuid5(uuid.NAMESPACE_URL, url).urn


@dataclass(frozen=True)
class FeedSpec:
    """One feed to write: its path under the feeds directory, title and entries."""

    relpath: str
    title: str
    subtitle: str
    reviews: tuple[StoredReview, ...]
    tag: Optional[Tag] = None


@dataclass
class FeedsReport:
    """What :func:`build_feeds` did: files written and left unchanged (paths)."""

    written: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)


def atom_document(config: Config, spec: FeedSpec) -> bytes:
    """Serialize one feed to Atom bytes (UTF-8, XML declaration, pretty-printed)."""
    site, base = config.site, config.site.base_url
    url = base + spec.relpath
    fg = FeedGenerator()
    fg.id(feed_id(url))
    fg.title(spec.title)
    if spec.subtitle:
        fg.subtitle(spec.subtitle)
    fg.link(href=url, rel="self", type="application/atom+xml")
    fg.link(href=base + "index.html", rel="alternate", type="text/html")
    fg.language(site.language)
    fg.author({"name": site.author})
    fg.generator("newsletter", version=__version__)
    newest = max((r.review.updated for r in spec.reviews), default=EPOCH)
    fg.updated(newest)
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
        for t in stored.tags:
            fe.category(term=t.name, label=t.name, scheme=f"{base}tags/{t.slug}.atom")
        if r.summary:
            fe.summary(r.summary)
        content = stored.body_html or (f"<p>{_escape(r.summary)}</p>" if r.summary else "")
        if content:
            fe.content(content, type="html")
        elif not r.summary:
            fe.summary(r.title)
    return fg.atom_str(pretty=True)


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def opml_document(config: Config, tags: list[tuple[Tag, int, Optional[datetime]]],
                  include_all: bool = True) -> bytes:
    """OPML 2.0 (http://opml.org/spec2.opml) listing the all-reviews feed (unless ``include_all``
    is false, e.g. for a reader's chosen tags) and the feed of each given tag."""
    base = config.site.base_url
    root = ET.Element("opml", version="2.0")
    head = ET.SubElement(root, "head")
    ET.SubElement(head, "title").text = config.site.title
    body = ET.SubElement(root, "body")
    if include_all:
        ET.SubElement(body, "outline", type="rss", text=config.site.title, title=config.site.title,
                      xmlUrl=base + "all.atom", htmlUrl=base + "index.html")
    for tag, _count, _newest in tags:
        title = f"{config.site.title} — {tag.name}"
        ET.SubElement(body, "outline", type="rss", text=title, title=title,
                      xmlUrl=f"{base}tags/{tag.slug}.atom", htmlUrl=base + "index.html")
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def plan_feeds(config: Config, store: Store) -> list[FeedSpec]:
    """Every feed document's content, computed before anything is written."""
    n = config.feeds.max_entries
    site = config.site
    specs = [FeedSpec("all.atom", site.title, site.description, tuple(store.latest_reviews(n)))]
    for tag in sorted(store.tags().values(), key=lambda t: t.slug):
        specs.append(FeedSpec(f"tags/{tag.slug}.atom", f"{site.title} — {tag.name}", site.description,
                              tuple(store.latest_reviews(n, tag.key)), tag))
    return specs


def build_feeds(config: Config, store: Store, renderer: Optional[Renderer] = None) -> FeedsReport:
    """Write the whole feeds directory from the store.

    Writes ``all.atom``, ``tags/<slug>.atom``, ``feeds.opml``, ``index.html`` and
    ``issues/<id>.html`` for every non-empty composed issue. Files whose bytes did
    not change are left alone.

    Raises:
        OSError: the directory cannot be written (files already replaced stay whole).
        RenderError: a page template failed.
    """
    renderer = renderer or Renderer(config)
    writer = Writer(config.feeds.dir)
    for spec in plan_feeds(config, store):
        writer.write(spec.relpath, atom_document(config, spec))
    tags = store.tag_counts()
    writer.write("feeds.opml", opml_document(config, tags))
    issues = [i for i in store.issues() if i.status != "empty" and i.review_count]
    for issue in issues:
        rendered = renderer.render_issue(issue, store.reviews_in_issue(issue.id), archive=True)
        writer.write(f"issues/{issue.id}.html", rendered.html.encode("utf-8"))
    tz = config.site.tz
    page = renderer.render_page(
        "index.html.j2",
        tags=[{"name": t.name, "slug": t.slug, "count": c, "feed_url": f"{config.site.base_url}tags/{t.slug}.atom",
               "newest": newest.astimezone(tz).strftime("%Y-%m-%d") if newest else ""}
              for t, c, newest in tags],
        total=store.review_count(),
        issues=[{"id": i.id, "period": renderer.period_label(i), "count": i.review_count,
                 "url": f"{config.site.base_url}issues/{i.id}.html", "status": i.status} for i in issues],
    )
    writer.write("index.html", page.encode("utf-8"))
    return FeedsReport(writer.written, writer.unchanged)
