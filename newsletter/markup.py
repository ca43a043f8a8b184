"""Review bodies: GitHub-flavoured Markdown → sanitized HTML, and plain-text excerpts.

Rendered once per body at gather time and kept in the store; feeds, the email
and the archive pages all use the stored HTML.

- Markdown: cmark-gfm (GitHub's own implementation) with the GFM extensions
  table, strikethrough, autolink, tagfilter and tasklist.
- Sanitizing: nh3 (Ammonia) with its default allow-list; ``javascript:`` and
  other unsafe schemes are dropped, scripts removed, ``rel="noopener noreferrer"``
  added to links.
- Relative links and images resolve against the review's ``url`` (RFC 3986 §5).
"""

from __future__ import annotations

import html
import re

import cmarkgfm
import nh3
from cmarkgfm.cmark import Options

# Characters XML 1.0 §2.2 forbids, which no feed may carry.
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_BLOCK_TAGS = re.compile(r"</?(?:p|div|li|ul|ol|br|h[1-6]|pre|blockquote|tr|td|th|table|hr)\b[^>]*>", re.I)
_TAGS = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def strip_xml_forbidden(text: str) -> tuple[str, int]:
    """Remove characters XML 1.0 cannot carry; returns the text and how many went."""
    cleaned, count = XML_FORBIDDEN.subn("", text)
    return cleaned, count


MAX_DEPTH = 100
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)[^>]*?(/?)>")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


def nesting_depth(fragment: str) -> int:
    """The deepest element nesting in an HTML fragment (unclosed tags count as open)."""
    depth = deepest = 0
    for m in _TAG.finditer(fragment):
        closing, name, selfclosing = m.group(1), m.group(2).lower(), m.group(3)
        if name in _VOID or selfclosing:
            continue
        if closing:
            depth = max(0, depth - 1)
        else:
            depth += 1
            deepest = max(deepest, depth)
    return deepest


def render_markdown(body: str, base_url: str) -> str:
    """Render one review body to sanitized HTML.

    Args:
        body: GitHub-flavoured Markdown (any size; raw HTML in it is sanitized).
        base_url: absolute URL relative links resolve against (the review's ``url``).

    Returns:
        An HTML fragment safe to embed in a page, a feed or an email; ``""`` for
        an empty body.

    Raises:
        ValueError: the body nests more than :data:`MAX_DEPTH` elements deep (lists,
            quotes or raw HTML): such input crashes email renderers and makes
            sanitizing quadratic, and no review needs it.
    """
    if not body.strip():
        return ""
    raw = cmarkgfm.github_flavored_markdown_to_html(
        body, options=Options.CMARK_OPT_UNSAFE | Options.CMARK_OPT_VALIDATE_UTF8)
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise ValueError(f"body nests {depth} levels deep (at most {MAX_DEPTH})")
    return nh3.clean(
        raw,
        url_relative=("rewrite_with_base", base_url),
        clean_content_tags={"script", "style"},
        strip_comments=True,
    ).strip()


def plain_text(fragment: str) -> str:
    """Text content of an HTML fragment, white space collapsed (for excerpts)."""
    text = _TAGS.sub("", _BLOCK_TAGS.sub(" ", fragment))
    return _SPACE.sub(" ", html.unescape(text)).strip()


def excerpt(fragment: str, limit: int = 280) -> str:
    """At most ``limit`` characters of the fragment's text, cut at a space when possible, with '…'."""
    text = plain_text(fragment)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"
