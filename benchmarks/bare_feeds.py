"""The bare baseline for the full feeds build: json → cmarkgfm → nh3 → feedgen, nothing else.

Reads a JSON Lines file of reviews and writes ``all.atom`` and one ``tags/<slug>.atom``
per tag (newest 50 entries each, content = sanitized HTML) — the same documents the
``newsletter`` build writes, without a store, validation, change detection or
atomic writes. Single process. Usage::

    python benchmarks/bare_feeds.py REVIEWS.jsonl OUT_DIR [BASE_URL]
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import cmarkgfm
import nh3
from cmarkgfm.cmark import Options
from feedgen.feed import FeedGenerator


def slug(name: str) -> str:
    text = unicodedata.normalize("NFKD", name.casefold()).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "tag-" + name.encode().hex()[:12]


def main(src: str, out: str, base: str = "https://reviews.example.org/", limit: int = 50) -> int:
    out_dir = Path(out)
    (out_dir / "tags").mkdir(parents=True, exist_ok=True)
    reviews = []
    with open(src, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            html = cmarkgfm.github_flavored_markdown_to_html(r["body"], options=Options.CMARK_OPT_UNSAFE)
            r["html"] = nh3.clean(html, url_relative=("rewrite_with_base", r["url"]))
            r["published"] = datetime.fromisoformat(r["published"])
            reviews.append(r)
    reviews.sort(key=lambda r: r["published"], reverse=True)
    by_tag = defaultdict(list)
    for r in reviews:
        for t in r["tags"]:
            by_tag[t].append(r)
    feeds = {"all.atom": ("All", reviews[:limit])}
    taken: set[str] = set()
    for t, rs in by_tag.items():
        s, n = slug(t), 1
        while s in taken:
            n += 1
            s = f"{slug(t)}-{n}"
        taken.add(s)
        feeds[f"tags/{s}.atom"] = (t, rs[:limit])
    for rel, (title, rs) in feeds.items():
        fg = FeedGenerator()
        fg.id(base + rel)
        fg.title(title)
        fg.link(href=base + rel, rel="self")
        fg.updated(rs[0]["published"])
        for r in rs:
            fe = fg.add_entry(order="append")
            fe.id(base + "review/" + r["id"])
            fe.title(r["title"])
            fe.link(href=r["url"])
            fe.published(r["published"])
            fe.updated(r["published"])
            for t in r["tags"]:
                fe.category(term=t)
            fe.content(r["html"], type="html")
        (out_dir / rel).write_bytes(fg.atom_str(pretty=True))
    print(f"{len(reviews)} reviews, {len(feeds)} feeds")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
