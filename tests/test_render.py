"""Rendering the email: MJML once per tag set, lang, size cap, placeholders, escaping."""

from datetime import datetime, timezone

from newsletter.compose import make_issue
from newsletter.config import load_config
from newsletter.gather import gather
from newsletter.render import Renderer, personalize
from newsletter.store import Store
from tests.conftest import make_config, review, write_jsonl

NOW = datetime(2026, 11, 25, tzinfo=timezone.utc)


def setup(tmp_path, records, email=""):
    write_jsonl(tmp_path / "reviews.jsonl", records)
    config = load_config(make_config(tmp_path, email=email))
    store = Store(config.store_path)
    gather(config, store, NOW)
    issue = make_issue("2026-W48", config.site.tz, NOW, len(records))
    return config, store, issue, store.latest_reviews(10_000)


def test_html_lang_subject_and_chips(tmp_path):
    """<html lang> comes from site.language; subject has title, period and count; chips link to tag feeds."""
    config, store, issue, reviews = setup(tmp_path, [review(n) for n in range(1, 4)])
    out = Renderer(config).render_issue(issue, reviews)
    assert out.html.startswith("<!doctype html><html lang=\"zh-CN\"")
    assert out.subject == "Widget 评审周报 · 2026-11-23 – 2026-11-29 · 3 篇评审"
    assert "https://reviews.example.org/tags/rocm.atom" in out.html
    assert "https://reviews.example.org/feeds.opml" in out.html
    assert out.mode == "full" and "<strong>Bold</strong>" in out.html


def test_placeholders_are_filled_and_escaped(tmp_path):
    """Per-recipient values replace every placeholder; HTML gets them escaped."""
    config, store, issue, reviews = setup(tmp_path, [review(1)])
    out = Renderer(config).render_issue(issue, reviews)
    html, text = personalize(out, {"greeting": "Hi <Tom & Jerry>", "name": "<Tom & Jerry>", "email": "t@example.org",
                                   "unsubscribe_url": "https://x.org/u?t=a&b", "preferences_url": "https://x.org/p"})
    for token in out.placeholders.values():
        assert token not in html and token not in text
    assert "Hi &lt;Tom &amp; Jerry&gt;" in html and "Hi <Tom & Jerry>" in text
    assert "https://x.org/u?t=a&amp;b" in html and "https://x.org/u?t=a&b" in text


def test_title_markup_is_escaped(tmp_path):
    """A title with markup is shown as text in the email."""
    config, store, issue, reviews = setup(tmp_path, [review(1, title="<img src=x onerror=alert(1)>")])
    out = Renderer(config).render_issue(issue, reviews)
    assert "<img src=x" not in out.html and "&lt;img src=x" in out.html


def test_big_issue_stays_under_gmail_clipping(tmp_path):
    """An issue whose full bodies exceed 102 KB becomes excerpts with read-more links, under the cap."""
    body = "这是一段很长的评审。" * 1500 + "\n\n**end**"
    config, store, issue, reviews = setup(tmp_path, [review(n, body=body) for n in range(1, 8)])
    out = Renderer(config).render_issue(issue, reviews)
    assert len(out.html.encode()) <= 100_000
    assert out.mode == "excerpt"
    assert out.html.count("issues/2026-W48.html#r") == 7


def test_huge_issue_is_truncated_with_link_to_rest(tmp_path):
    """When even excerpts are too big, the first reviews are shown and the rest linked."""
    config, store, issue, reviews = setup(tmp_path, [review(n, title="标题" * 100) for n in range(1, 400)])
    out = Renderer(config).render_issue(issue, reviews)
    assert len(out.html.encode()) <= 100_000 and out.mode == "truncated"
    assert "issues/2026-W48.html" in out.html


def test_text_part_is_the_markdown(tmp_path):
    """The text part carries the review's Markdown and URLs, no HTML tags."""
    config, store, issue, reviews = setup(tmp_path, [review(1)])
    out = Renderer(config).render_issue(issue, reviews)
    assert "**Bold** review 1" in out.text and "https://github.com/acme/widgets/pull/1" in out.text
    assert "<p>" not in out.text


def test_summary_repeating_the_body_opening_is_shown_once(tmp_path):
    """When the body starts with the summary sentence, the email shows that sentence once."""
    config, store, issue, reviews = setup(tmp_path, [review(1, summary="值得精读。", body="值得精读。其余内容。")])
    out = Renderer(config).render_issue(issue, reviews)
    assert out.html.count("值得精读") == 1 and out.text.count("值得精读") == 1


def test_no_web_fonts_are_loaded(tmp_path):
    """The email loads no web font from a third-party host."""
    config, store, issue, reviews = setup(tmp_path, [review(1)])
    assert "fonts.googleapis.com" not in Renderer(config).render_issue(issue, reviews).html


def test_review_text_cannot_spell_a_placeholder(tmp_path):
    """Placeholders are random per renderer, so review text never gets a recipient's address or links."""
    config, store, issue, reviews = setup(tmp_path, [review(1)])
    old = Renderer(config).render_issue(issue, reviews)
    token = old.placeholders["email"]
    config, store, issue, reviews = setup(tmp_path / "b", [review(2, title=token, body=f"[x](https://evil.example/?e={token})")])
    out = Renderer(config).render_issue(issue, reviews)
    assert token not in out.placeholders.values()
    html, text = personalize(out, {"email": "victim@example.org", "unsubscribe_url": "https://u/secret"})
    assert "victim@example.org" not in html and "victim@example.org" not in text


def test_oversized_edition_compiles_mjml_once(tmp_path):
    """When the bodies alone pass the size cap the email goes straight to excerpts: one MJML compile."""
    body = "这是一段很长的评审。" * 1500
    config, store, issue, reviews = setup(tmp_path, [review(n, body=body) for n in range(1, 8)])
    renderer = Renderer(config)
    out = renderer.render_issue(issue, reviews)
    assert out.mode == "excerpt" and renderer.compiles == 1


def test_personalize_fills_every_placeholder_in_one_pass(tmp_path):
    """Every placeholder is replaced, HTML-escaped in HTML and verbatim in text, and a value that
    looks like another placeholder is not expanded again."""
    config, store, issue, reviews = setup(tmp_path, [review(1)])
    out = Renderer(config).render_issue(issue, reviews)
    ph = out.placeholders
    from dataclasses import replace
    tokens = " ".join(ph[k] for k in ("name", "email", "unsubscribe_url", "preferences_url"))
    rendered = replace(out, html=f"<p>{tokens}</p>", text=tokens)
    html, text = personalize(rendered, {"name": "<b>" + ph["email"], "email": "a@x.org",
                                        "unsubscribe_url": "https://u?a=1&b=2", "preferences_url": "https://p"})
    assert html == "<p>&lt;b&gt;" + ph["email"] + " a@x.org https://u?a=1&amp;b=2 https://p</p>"
    assert text == "<b>" + ph["email"] + " a@x.org https://u?a=1&b=2 https://p"

def test_truncation_finds_the_most_reviews_that_fit_in_few_compiles(tmp_path):
    """A truncated issue shows as many reviews as fit under the cap (one more would not), in a handful of compiles."""
    config, store, issue, reviews = setup(tmp_path, [review(n, title="标题" * 100) for n in range(1, 400)])
    renderer = Renderer(config)
    out = renderer.render_issue(issue, reviews)
    shown = out.html.count("issues/2026-W48.html#r")
    assert out.mode == "truncated" and len(out.html.encode()) <= 100_000
    bigger = renderer._html(issue, reviews, [], "truncated", shown + 1, False)
    assert len(bigger.encode()) > 100_000
    assert renderer.compiles <= 8   # bisection needed 11 here
