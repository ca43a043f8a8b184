"""Rendering the email: Jinja2 (autoescape on) → MJML (mjml-python / MRML) → HTML, plus its text twin.

The only module that imports ``mjml``. Templates are looked up first in
``[site] templates`` (if set) and then in the package's ``templates/``; copy a
packaged template into your directory to change it.

The MJML is compiled once per (issue, set of followed tags). Per-recipient parts
(name, unsubscribe and preferences links) are left as placeholder tokens which
:func:`personalize` fills in afterwards, HTML-escaped for the HTML part.
The template context holds plain data only, never config objects or the environment.
"""

from __future__ import annotations

import html
import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Optional, Sequence

import jinja2
import mjml

from .config import Config
from .errors import RenderError
from .markup import excerpt, plain_text
from .models import Issue, StoredReview

PACKAGE_TEMPLATES = Path(__file__).parent / "templates"

# Per-recipient variables. Each Renderer spells their placeholders with a random
# nonce (plain ASCII letters and digits: they pass Jinja escaping and MJML
# unchanged), so no review text can contain one and have it filled with a
# recipient's address or signed links.
PLACEHOLDER_NAMES = ("greeting", "name", "email", "unsubscribe_url", "preferences_url")

LABELS = {
    "en": {
        "reviews": "reviews", "review": "review", "view_in_browser": "View in browser", "read_more": "Read more",
        "open_pr": "Open the pull request", "more_in_browser": "{n} more reviews: view this issue in your browser",
        "feeds": "Feeds", "opml": "OPML of every tag", "unsubscribe": "Unsubscribe",
        "preferences": "Choose tags", "followed": "You follow: {tags}", "all_tags": "every tag",
        "why": "You receive this because you subscribed to {title}.", "hello": "Hello {name},",
        "hello_anonymous": "Hello,",
        "subscribe_feed": "Subscribe to this tag's feed", "issue_archive": "Issues",
        "tags": "Tags", "entries": "entries", "all_reviews": "All reviews",
        "subscribe_email": "Subscribe by email",
    },
    "zh": {
        "reviews": "篇评审", "review": "篇评审", "view_in_browser": "在浏览器中查看", "read_more": "阅读全文",
        "open_pr": "打开该 PR", "more_in_browser": "还有 {n} 篇评审：在浏览器中查看本期",
        "feeds": "订阅源", "opml": "全部标签的 OPML", "unsubscribe": "退订",
        "preferences": "选择标签", "followed": "你关注的标签：{tags}", "all_tags": "全部标签",
        "why": "你收到此邮件是因为你订阅了 {title}。", "hello": "{name}，你好：",
        "hello_anonymous": "你好：",
        "subscribe_feed": "订阅该标签的 Atom 源", "issue_archive": "往期",
        "tags": "标签", "entries": "篇", "all_reviews": "全部评审",
        "subscribe_email": "邮件订阅",
    },
}


def labels_for(language: str) -> dict[str, str]:
    """UI words for a BCP 47 language tag (by primary subtag), English when unknown."""
    return LABELS.get(language.split("-")[0].lower(), LABELS["en"])


@dataclass(frozen=True)
class RenderedEmail:
    """One compiled email for one set of followed tags, still with placeholders.

    Attributes:
        subject: one line.
        html: full HTML document (UTF-8 when encoded).
        text: plain-text twin.
        review_count: reviews shown (all of them, even in excerpt mode).
        mode: ``full``, ``excerpt`` or ``truncated`` (only the first ones fit under the size cap).
        placeholders: variable name → the token standing for it in ``html`` and ``text``.
        nonce: the random part of those tokens (also used to name provider-side variables).
    """

    subject: str
    html: str
    text: str
    review_count: int
    mode: str = "full"
    placeholders: dict = field(default_factory=dict, compare=False)
    nonce: str = ""


class Renderer:
    """Renders issues and pages from templates for one configuration.

    Args:
        config: the configuration (only plain values from it reach templates).

    Attributes:
        compiles: how many times MJML was compiled (for benchmarks and tests).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        loaders: list[jinja2.BaseLoader] = []
        if config.site.templates:
            loaders.append(jinja2.FileSystemLoader(str(config.site.templates)))
        loaders.append(jinja2.FileSystemLoader(str(PACKAGE_TEMPLATES)))
        self.env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            autoescape=jinja2.select_autoescape(
                enabled_extensions=("html", "mjml", "xml", "html.j2", "mjml.j2", "xml.j2"),
                default_for_string=True, default=False),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        self.env.filters["excerpt"] = excerpt
        self.compiles = 0
        self.nonce = secrets.token_hex(8)
        self.placeholders = {k: f"NLPH{self.nonce}{k.replace('_', '')}NLPH" for k in PLACEHOLDER_NAMES}

    @cached_property
    def site(self) -> dict:
        """The site as plain data for templates."""
        s, base = self.config.site, self.config.site.base_url
        return {"title": s.title, "base_url": base, "language": s.language,
                "description": s.description, "index_url": base + "index.html",
                "opml_url": base + "feeds.opml", "all_url": base + "all.atom",
                "subscribe_url": (s.app_url or base) + "subscribe"}

    def template(self, name: str) -> jinja2.Template:
        """A template by name, user directory first.

        Raises:
            RenderError: missing or syntactically wrong template.
        """
        try:
            return self.env.get_template(name)
        except jinja2.TemplateSyntaxError as exc:
            raise RenderError(f"{exc.filename or name}:{exc.lineno}: template error: {exc.message}") from None
        except jinja2.TemplateNotFound:
            raise RenderError(f"template {name!r} not found") from None

    def render_page(self, name: str, **context) -> str:
        """Render a page template with the site and labels added to ``context``."""
        try:
            return self.template(name).render(site=self.site, labels=labels_for(self.config.site.language),
                                              **context)
        except jinja2.TemplateError as exc:
            raise RenderError(f"{name}: {exc}") from None

    # --- issues -----------------------------------------------------------------

    def period_label(self, issue: Issue) -> str:
        """``2026-11-23 – 2026-11-29``: the issue's week, first and last day, local."""
        last = issue.end - timedelta(days=1)
        return f"{issue.start:%Y-%m-%d} – {last:%Y-%m-%d}"

    def issue_context(self, issue: Issue, reviews: Sequence[StoredReview],
                      followed: Sequence[str], mode: str, shown: Optional[int] = None,
                      archive: bool = False) -> dict:
        """The template context of one issue: plain dicts and strings only."""
        base = self.config.site.base_url
        tags = {t.key: t for r in reviews for t in r.tags}
        names = [tags[k].name if k in tags else k for k in followed]
        items = []
        for i, r in enumerate(reviews[: shown if shown is not None else len(reviews)]):
            rv = r.review
            items.append({
                "anchor": f"r{i + 1}", "id": rv.id, "title": rv.title, "url": rv.url,
                "summary": rv.summary if not _repeats(rv.summary, r.body_html) else "", "repo": rv.repo, "author": rv.author,
                "published": rv.published.astimezone(self.config.site.tz).strftime("%Y-%m-%d"),
                "body_html": r.body_html, "body_text": rv.body, "excerpt": excerpt(r.body_html or rv.summary),
                "tags": [{"name": t.name, "feed_url": f"{base}tags/{t.slug}.atom"} for t in r.tags],
            })
        archive_url = f"{base}issues/{issue.id}.html"
        return {
            "site": self.site, "labels": labels_for(self.config.site.language),
            "issue": {"id": issue.id, "period": self.period_label(issue), "count": len(reviews),
                      "archive_url": archive_url},
            "reviews": items, "hidden_count": len(reviews) - len(items), "mode": mode,
            "followed": names, "archive": archive,
            "recipient": dict(self.placeholders),
        }

    def subject(self, issue: Issue, count: int) -> str:
        """The subject line: site title, period and count (template ``subject.txt.j2``), one line."""
        text = self.template("subject.txt.j2").render(
            site=self.site, labels=labels_for(self.config.site.language),
            issue={"id": issue.id, "period": self.period_label(issue), "count": count})
        return " ".join(text.split())

    def compile_mjml(self, source: str) -> str:
        """MJML → HTML.

        Raises:
            RenderError: MRML refused the document.
        """
        self.compiles += 1
        try:
            # fonts={}: no web-font <link> (no request to a font host; CJK needs system fonts anyway)
            return mjml.mjml2html(source, disable_comments=True, fonts={})
        except Exception as exc:  # MRML raises its own error types
            raise RenderError(f"MJML compile failed: {exc}") from None

    def render_issue(self, issue: Issue, reviews: Sequence[StoredReview],
                     followed: Sequence[str] = (), archive: bool = False) -> RenderedEmail:
        """Render one issue for one set of followed tags.

        Args:
            issue: the edition.
            reviews: its reviews (already filtered for ``followed``), newest first.
            followed: display names of followed tags; empty means every tag.
            archive: render the public "view in browser" page (no per-recipient links).

        Returns:
            A :class:`RenderedEmail` whose HTML is at most ``email.max_html_bytes``
            bytes when possible: bodies become excerpts, then only the first
            reviews are shown with a link to the rest.

        Raises:
            RenderError: a template or the MJML compile failed.
        """
        limit = self.config.email.max_html_bytes
        mode, shown = "full", len(reviews)
        # The full email holds every body verbatim: when the bodies alone pass the limit, the
        # full compile cannot fit, so go straight to excerpts (one MJML compile, not two).
        bodies = sum(len(r.body_html.encode()) for r in reviews)
        html_out = None if (bodies > limit and not archive) else \
            self._html(issue, reviews, followed, "full", None, archive)
        if not archive and (html_out is None or len(html_out.encode()) > limit):
            mode = "excerpt"
            html_out = self._html(issue, reviews, followed, mode, None, archive)
            if len(html_out.encode()) > limit:
                mode = "truncated"
                # The most reviews that fit: the size grows about linearly with the count, so
                # interpolate between a count that fits and one that does not (2–4 compiles,
                # where bisection over 100 reviews takes 8).
                best = self._html(issue, reviews, followed, mode, 1, archive)
                lo, lo_size = 1, len(best.encode())
                hi, hi_size = len(reviews), len(html_out.encode())   # excerpts of all: too big
                while hi - lo > 1:
                    per = max(1.0, (hi_size - lo_size) / (hi - lo))
                    guess = min(hi - 1, max(lo + 1, lo + int((limit - lo_size) / per)))
                    candidate = self._html(issue, reviews, followed, mode, guess, archive)
                    size = len(candidate.encode())
                    if size <= limit:
                        lo, lo_size, best = guess, size, candidate
                    else:
                        hi, hi_size = guess, size
                html_out, shown = best, lo
        ctx = self.issue_context(issue, reviews, followed, mode, shown, archive)
        try:
            text = self.template("email.txt.j2").render(**ctx)
        except jinja2.TemplateError as exc:
            raise RenderError(f"email.txt.j2: {exc}") from None
        return RenderedEmail(self.subject(issue, len(reviews)), html_out, text, len(reviews), mode,
                             dict(self.placeholders), self.nonce)

    def _html(self, issue, reviews, followed, mode, shown, archive) -> str:
        ctx = self.issue_context(issue, reviews, followed, mode, shown, archive)
        try:
            source = self.template("email.mjml.j2").render(**ctx)
        except jinja2.TemplateError as exc:
            raise RenderError(f"email.mjml.j2: {exc}") from None
        return self.compile_mjml(source)


def _repeats(summary: str, body_html: str) -> bool:
    """True when the body already opens with the summary (then the email shows it once)."""
    head = summary.strip().rstrip("。.!！ ")
    return bool(head) and plain_text(body_html)[: len(summary) + 10].find(head) != -1


def greeting(language: str, name: str) -> str:
    """The salutation line for a recipient (``labels.hello`` with the name, or without one)."""
    labels = labels_for(language)
    return labels["hello"].format(name=name) if name else labels["hello_anonymous"]


@lru_cache(maxsize=64)
def _placeholder_pattern(tokens: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(re.escape(t) for t in tokens))


def personalize(rendered: RenderedEmail, values: dict[str, str]) -> tuple[str, str]:
    """Fill the per-recipient placeholders.

    Args:
        rendered: the compiled email.
        values: ``greeting``, ``name``, ``email``, ``unsubscribe_url``, ``preferences_url`` → text.

    Returns:
        ``(html, text)``; values are HTML-escaped in the HTML part.
    """
    by_token = {token: values.get(key, "") for key, token in rendered.placeholders.items()}
    if not by_token:
        return rendered.html, rendered.text
    escaped = {token: html.escape(value, quote=True) for token, value in by_token.items()}
    # One pass over each part (not one per placeholder): this runs once per recipient.
    pattern = _placeholder_pattern(tuple(by_token))
    html_out = pattern.sub(lambda m: escaped[m.group()], rendered.html)
    text_out = pattern.sub(lambda m: by_token[m.group()], rendered.text)
    return html_out, text_out
