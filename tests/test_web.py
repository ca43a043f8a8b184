"""The web app (newsletter.web) through Flask's test client: every endpoint, tokens, CSRF, rate limit."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import html5lib
import pytest

from tests.conftest import make_config, review, write_jsonl
from newsletter.config import load_config
from newsletter.errors import ConfigError
from newsletter.gather import gather
from newsletter.job import links_for
from newsletter.models import DeliveryResult, Subscriber
from newsletter.store import Store
from newsletter.transports.memory import MemoryTransport
from newsletter.web import CSRF_COOKIE, create_app

START = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw) -> None:
        self.now += timedelta(**kw)


class Env:
    def __init__(self, tmp_path, fail=None):
        write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 7)])
        self.config = load_config(make_config(tmp_path))
        self.clock = Clock(START)
        with Store(self.config.store_path) as st:
            gather(self.config, st, START)
        self.mem = MemoryTransport(fail=fail)
        self.app = create_app(self.config, clock=self.clock, transport_factory=lambda: self.mem)
        self.client = self.app.test_client()
        self.links = links_for(self.config)

    def store(self) -> Store:
        return Store(self.config.store_path)

    def sub(self, email):
        with self.store() as st:
            return st.get_subscriber(email)

    def add(self, email, tags=(), status="active"):
        with self.store() as st:
            st.upsert_subscriber(Subscriber(email, "", tuple(tags), status), START, reactivate=True)

    def csrf(self, path):
        r = self.client.get(path)
        assert r.status_code == 200
        return re.search(r'name="csrf" value="([^"]+)"', r.text).group(1)

    def subscribe(self, email, tags=None, name=""):
        data = {"csrf": self.csrf("/subscribe"), "email": email, "name": name}
        if tags is not None:
            data.update(tag=list(tags))
        return self.client.post("/subscribe", data=data)

    def confirm_path(self, i=-1):
        url = re.search(r"https://\S+/confirm\?t=\S+", self.mem.sent[i].fields["text"]).group(0)
        parts = urlsplit(url)
        return f"/confirm?{parts.query}"


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def assert_html5(text: str) -> None:
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)


# --- subscribe ----------------------------------------------------------------------------

def test_subscribe_form_lists_every_tag_and_is_valid_html5(env):
    """The subscribe page is valid HTML5 in the site's language, lists the store's tags and sets the CSRF cookie."""
    r = env.client.get("/subscribe")
    assert r.status_code == 200
    assert_html5(r.text)
    assert '<html lang="zh-CN">' in r.text and 'name="viewport"' in r.text
    for name in ("ROCm", "性能", "CUDA Graph", "CPU"):
        assert f"> {name} <" in r.text
    assert CSRF_COOKIE in r.headers["Set-Cookie"] and "HttpOnly" in r.headers["Set-Cookie"]
    assert r.headers["Referrer-Policy"] == "no-referrer"
    assert r.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]


def test_subscribe_sends_one_confirmation_and_does_not_subscribe_yet(env):
    """A subscribe request mails a signed confirmation link; the address is not active until confirmed."""
    r = env.subscribe("Reader@Example.ORG", tags=["rocm"], name="Reader")
    assert r.status_code == 200 and "Reader@example.org" in r.text
    assert len(env.mem.sent) == 1
    msg = env.mem.sent[0]
    assert msg.recipient == "Reader@example.org"
    assert "/confirm?t=" in msg.fields["text"] and "List-Unsubscribe" not in msg.data.decode()
    assert b"Auto-Submitted: auto-replied" in msg.data
    assert env.sub("Reader@example.org") is None


def test_subscribe_without_csrf_token_or_cookie_is_refused(env):
    """A cross-site POST (no token, or a token without its cookie) sends nothing."""
    r = env.client.post("/subscribe", data={"email": "a@example.org"})
    assert r.status_code == 400
    token = env.csrf("/subscribe")
    other = env.app.test_client()  # no cookie
    r = other.post("/subscribe", data={"csrf": token, "email": "a@example.org"})
    assert r.status_code == 400
    r = env.client.post("/subscribe", data={"csrf": token[:-2] + "xx", "email": "a@example.org"})
    assert r.status_code == 400
    assert env.mem.sent == []


def test_csrf_token_expires(env):
    """A form left open longer than 12 hours must be reloaded."""
    token = env.csrf("/subscribe")
    env.clock.advance(hours=13)
    r = env.client.post("/subscribe", data={"csrf": token, "email": "a@example.org"})
    assert r.status_code == 400 and env.mem.sent == []


def test_subscribe_rejects_a_bad_address(env):
    """An address with no domain gets the form back with a message and no email."""
    r = env.subscribe("not-an-address")
    assert r.status_code == 400 and "这不是一个邮箱地址" in r.text
    assert env.mem.sent == []


def test_a_flood_of_requests_sends_one_confirmation_per_hour(env):
    """Twenty requests for one address within an hour send one email; the next hour allows one more."""
    for _ in range(20):
        assert env.subscribe("victim@example.org").status_code == 200
        env.clock.advance(minutes=2)
    assert len(env.mem.sent) == 1
    env.clock.advance(minutes=21)
    env.subscribe("victim@example.org")
    assert len(env.mem.sent) == 2
    env.subscribe("other@example.org")
    assert len(env.mem.sent) == 3


def test_rate_limit_survives_a_restart(env, tmp_path):
    """The hourly allowance is kept in the store, so a new app process honours it."""
    env.subscribe("a@example.org")
    app2 = create_app(env.config, clock=env.clock, transport_factory=lambda: env.mem)
    c2 = app2.test_client()
    token = re.search(r'name="csrf" value="([^"]+)"', c2.get("/subscribe").text).group(1)
    c2.post("/subscribe", data={"csrf": token, "email": "a@example.org"})
    assert len(env.mem.sent) == 1


def test_failed_confirmation_send_gives_the_allowance_back(tmp_path):
    """When the transport refuses the confirmation, the reader sees 503 and may retry at once."""
    calls = []

    def fail(rcpt):
        calls.append(rcpt)
        return DeliveryResult(rcpt, "failed", error="550 no") if len(calls) == 1 else None

    env = Env(tmp_path, fail=fail)
    assert env.subscribe("a@example.org").status_code == 503
    assert env.subscribe("a@example.org").status_code == 200
    assert len(env.mem.sent) == 1


def test_bounced_or_complained_address_gets_no_confirmation(env):
    """A suppressed (bounced, complained) address is never mailed, even when someone asks."""
    env.add("b@example.org", status="bounced")
    env.add("c@example.org", status="complained")
    assert env.subscribe("b@example.org").status_code == 200
    assert env.subscribe("c@example.org").status_code == 200
    assert env.mem.sent == []


# --- confirm ------------------------------------------------------------------------------

def test_confirm_get_shows_a_button_and_post_subscribes_with_chosen_tags(env):
    """GET (what link scanners do) changes nothing; the button's POST activates the chosen tags."""
    env.subscribe("r@example.org", tags=["rocm"], name="Reader")
    path = env.confirm_path()
    r = env.client.get(path)
    assert r.status_code == 200 and 'method="post"' in r.text
    assert_html5(r.text)
    assert env.sub("r@example.org") is None
    r = env.app.test_client().post(path)  # no cookie needed: the signed link is the credential
    assert r.status_code == 200
    assert env.sub("r@example.org") == Subscriber("r@example.org", "Reader", ("rocm",), "active")


def test_replayed_confirmation_changes_nothing(env):
    """A used link replayed after unsubscribing does not resubscribe."""
    env.subscribe("r@example.org")
    path = env.confirm_path()
    env.client.post(path)
    env.client.post(path_of(env.links.unsubscribe_url("r@example.org")), data={"List-Unsubscribe": "One-Click"})
    assert env.sub("r@example.org").status == "unsubscribed"
    r = env.client.post(path)
    assert r.status_code == 200 and "已使用过" in r.text
    assert env.sub("r@example.org").status == "unsubscribed"


def test_unused_link_does_not_resubscribe_after_unsubscribe(env):
    """A pending link stops working once the address unsubscribes."""
    env.add("r@example.org")
    env.subscribe("r@example.org", tags=["cpu"])
    path = env.confirm_path()
    env.client.post(path_of(env.links.unsubscribe_url("r@example.org")), data={"List-Unsubscribe": "One-Click"})
    r = env.client.post(path)
    assert r.status_code == 409
    assert env.sub("r@example.org").status == "unsubscribed"


def test_confirmation_link_expires_after_48_hours(env):
    """After 48 hours the link answers 410 and subscribes nobody."""
    env.subscribe("r@example.org")
    path = env.confirm_path()
    env.clock.advance(hours=48, minutes=1)
    r = env.client.post(path)
    assert r.status_code == 410 and env.sub("r@example.org") is None


def test_tampered_confirmation_token_is_refused(env):
    """Changing any character of the token, or using another purpose's token, is refused."""
    env.subscribe("r@example.org")
    path = env.confirm_path()
    tampered = path[:-3] + ("A" if path[-3] != "A" else "B") + path[-2:]
    assert env.client.post(tampered).status_code == 400
    unsub = path_of(env.links.unsubscribe_url("r@example.org")).split("?")[1]
    assert env.client.post(f"/confirm?{unsub}").status_code == 400
    assert env.client.get("/confirm").status_code == 400
    assert env.sub("r@example.org") is None


def test_unsubscribed_reader_can_come_back_through_a_new_confirmation(env):
    """Someone who unsubscribed and asks again gets a fresh link that works."""
    env.add("r@example.org", status="unsubscribed")
    env.clock.advance(minutes=5)
    env.subscribe("r@example.org", tags=["rocm"])
    env.clock.advance(minutes=1)
    assert env.client.post(env.confirm_path()).status_code == 200
    assert env.sub("r@example.org").status == "active"


# --- unsubscribe --------------------------------------------------------------------------

def test_unsubscribe_get_shows_one_button_and_changes_nothing(env):
    """The unsubscribe page is one button posting List-Unsubscribe=One-Click; showing it unsubscribes nobody."""
    env.add("r@example.org")
    r = env.client.get(path_of(env.links.unsubscribe_url("r@example.org")))
    assert r.status_code == 200
    assert_html5(r.text)
    assert r.text.count("<button") == 1
    assert 'name="List-Unsubscribe" value="One-Click"' in r.text
    assert env.sub("r@example.org").status == "active"


def test_one_click_unsubscribe_by_bare_post_without_cookies(env):
    """RFC 8058: a POST with only the body List-Unsubscribe=One-Click, no cookie, unsubscribes at once."""
    env.add("r@example.org", tags=["rocm"])
    url = env.links.unsubscribe_url("r@example.org")
    bare = env.app.test_client(use_cookies=False)
    r = bare.post(path_of(url), data=b"List-Unsubscribe=One-Click",
                  content_type="application/x-www-form-urlencoded")
    assert r.status_code == 200
    assert env.sub("r@example.org").status == "unsubscribed"
    assert "Set-Cookie" not in r.headers
    with env.store() as st:
        assert [e["source"] for e in st.suppression_log("r@example.org")] == ["one-click"]


def test_one_click_unsubscribe_accepts_multipart(env):
    """RFC 8058 allows multipart/form-data bodies too."""
    env.add("r@example.org")
    r = env.client.post(path_of(env.links.unsubscribe_url("r@example.org")),
                        data={"List-Unsubscribe": "One-Click"}, content_type="multipart/form-data")
    assert r.status_code == 200 and env.sub("r@example.org").status == "unsubscribed"


def test_unsubscribe_refuses_tampered_token_and_missing_body(env):
    """A forged token or a POST without List-Unsubscribe=One-Click unsubscribes nobody."""
    env.add("r@example.org")
    url = path_of(env.links.unsubscribe_url("r@example.org"))
    assert env.client.post(url.replace("?t=", "?t=x"), data={"List-Unsubscribe": "One-Click"}).status_code == 400
    forged = path_of(env.links.preferences_url("r@example.org")).replace("/preferences", "/unsubscribe")
    assert env.client.post(forged, data={"List-Unsubscribe": "One-Click"}).status_code == 400
    assert env.client.post(url, data={}).status_code == 400
    assert env.sub("r@example.org").status == "active"


def test_unsubscribing_an_unknown_address_records_it(env):
    """A test copy's recipient who unsubscribes is recorded, so a later import cannot mail them."""
    env.client.post(path_of(env.links.unsubscribe_url("new@example.org")), data={"List-Unsubscribe": "One-Click"})
    assert env.sub("new@example.org").status == "unsubscribed"


def test_unsubscribe_does_not_weaken_a_complaint(env):
    """An address that complained stays 'complained' when it also unsubscribes."""
    env.add("c@example.org", status="complained")
    env.client.post(path_of(env.links.unsubscribe_url("c@example.org")), data={"List-Unsubscribe": "One-Click"})
    assert env.sub("c@example.org").status == "complained"


# --- preferences --------------------------------------------------------------------------

def prefs(env, email):
    return path_of(env.links.preferences_url(email))


def test_preferences_page_shows_followed_tags(env):
    """The preferences page is valid HTML5 and has the followed tags checked."""
    env.add("r@example.org", tags=["rocm"])
    r = env.client.get(prefs(env, "r@example.org"))
    assert r.status_code == 200
    assert_html5(r.text)
    assert re.search(r'value="rocm" checked> ROCm', r.text)
    assert not re.search(r'value="cpu" checked', r.text)
    assert "opml?tag=rocm" in r.text


def test_preferences_change_tags(env):
    """Ticking tags saves exactly those (unknown ones dropped); ticking none means every tag."""
    env.add("r@example.org")
    path = prefs(env, "r@example.org")
    token = env.csrf(path)
    r = env.client.post(path, data={"csrf": token, "tag": ["cpu", "性能", "nonsense"],
                                    "delivery": "email"})
    assert r.status_code == 200 and "已保存" in r.text
    assert env.sub("r@example.org").tags == ("cpu", "性能")
    env.client.post(path, data={"csrf": token, "delivery": "email"})
    assert env.sub("r@example.org") == Subscriber("r@example.org", "", (), "active")


def test_preferences_feeds_only_unsubscribes_and_offers_opml(env):
    """'Feeds only' stops the email and lists the chosen tags' feeds and their OPML."""
    env.add("r@example.org")
    path = prefs(env, "r@example.org")
    r = env.client.post(path, data={"csrf": env.csrf(path), "tag": ["rocm"],
                                    "delivery": "feeds"})
    assert env.sub("r@example.org").status == "unsubscribed"
    assert "https://reviews.example.org/tags/rocm.atom" in r.text
    assert "opml?tag=rocm" in r.text
    assert "cuda-graph.atom" not in r.text


def test_preferences_need_a_csrf_token_bound_to_the_address(env):
    """A token made for another address, or no cookie, changes nothing."""
    env.add("r@example.org", tags=["rocm"])
    env.add("x@example.org")
    other_token = env.csrf(prefs(env, "x@example.org"))
    r = env.client.post(prefs(env, "r@example.org"), data={"csrf": other_token, "delivery": "feeds"})
    assert r.status_code == 400
    r = env.app.test_client().post(prefs(env, "r@example.org"),
                                   data={"csrf": env.csrf(prefs(env, "r@example.org"))})
    assert r.status_code == 400
    assert env.sub("r@example.org") == Subscriber("r@example.org", "", ("rocm",), "active")


def test_preferences_refuse_a_forged_token(env):
    """A preferences link with an altered token shows an error and no form."""
    r = env.client.get(prefs(env, "r@example.org") + "x")
    assert r.status_code == 400 and "<form" not in r.text


def test_preferences_cannot_reactivate_a_bounced_address(env):
    """Choosing email on the preferences page does not revive a bounced address."""
    env.add("b@example.org", status="bounced")
    path = prefs(env, "b@example.org")
    env.client.post(path, data={"csrf": env.csrf(path), "delivery": "email"})
    assert env.sub("b@example.org").status == "bounced"


def test_preferences_back_to_email_needs_a_new_confirmation(env):
    """An unsubscribed reader choosing email again is sent a confirmation link and stays unsubscribed until it is used."""
    env.add("u@example.org", tags=["rocm"], status="unsubscribed")
    path = prefs(env, "u@example.org")
    r = env.client.post(path, data={"csrf": env.csrf(path), "tag": ["rocm"], "delivery": "email"})
    assert r.status_code == 200 and env.sub("u@example.org").status == "unsubscribed"
    assert len(env.mem.sent) == 1 and "/confirm?t=" in env.mem.sent[0].fields["text"]
    confirm = env.confirm_path()
    env.client.post(confirm)
    assert env.sub("u@example.org").status == "active"


def test_head_on_a_confirmation_link_changes_nothing(env):
    """A link scanner's HEAD request does not confirm a subscription (only POST does)."""
    env.subscribe("h@example.org")
    path = env.confirm_path()
    assert env.client.head(path).status_code == 200
    assert env.sub("h@example.org") is None or env.sub("h@example.org").status != "active"


def test_look_alike_domains_are_one_mailbox(env):
    """Full-width spellings of a domain share the hourly limit: one confirmation, not one per spelling."""
    for addr in ["v@example.net", "v@ｅxample.net", "v@eｘample.net", "v@EXAMPLE.net"]:
        env.subscribe(addr)
    assert len(env.mem.sent) == 1


def test_opml_of_chosen_tags(env):
    """/opml?tag=… lists exactly the chosen tag feeds; without tags, everything."""
    from lxml import etree

    r = env.client.get("/opml?tag=rocm&tag=cpu")
    assert r.status_code == 200 and r.mimetype == "text/x-opml"
    assert "attachment" in r.headers["Content-Disposition"]
    urls = etree.fromstring(r.data).xpath("//outline/@xmlUrl")
    assert sorted(urls) == ["https://reviews.example.org/tags/cpu.atom", "https://reviews.example.org/tags/rocm.atom"]
    urls = etree.fromstring(env.client.get("/opml").data).xpath("//outline/@xmlUrl")
    assert "https://reviews.example.org/all.atom" in urls and len(urls) == 5


# --- static feeds, misc -------------------------------------------------------------------

def test_feeds_directory_is_served_for_local_preview(env):
    """/ serves feeds/index.html and /tags/<slug>.atom the feed; paths outside the directory are 404."""
    from newsletter.feeds import build_feeds

    with env.store() as st:
        build_feeds(env.config, st)
    r = env.client.get("/")
    assert r.status_code == 200 and "<h1>" in r.text
    assert 'href="https://reviews.example.org/subscribe"' in r.text
    r = env.client.get("/tags/rocm.atom")
    assert r.status_code == 200 and b"<feed" in r.data
    assert r.mimetype == "application/xml"  # so a browser applies feed.xsl
    assert env.client.get("/../newsletter.toml").status_code == 404
    assert env.client.get("/%2e%2e/newsletter.toml").status_code == 404
    assert env.client.get("/nothing-here.html").status_code == 404


def test_home_redirects_to_subscribe_without_feeds(env):
    """Before any feeds are written, / leads to the subscribe form."""
    r = env.client.get("/")
    assert r.status_code == 302 and r.headers["Location"].endswith("subscribe")


def test_app_needs_the_signing_key(tmp_path, monkeypatch):
    """Without the signing key the app refuses to start, naming the variable."""
    monkeypatch.delenv("NEWSLETTER_TEST_SECRET")
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    with pytest.raises(ConfigError, match="NEWSLETTER_TEST_SECRET"):
        create_app(load_config(make_config(tmp_path)))


def test_english_site_gets_english_pages(tmp_path):
    """Labels follow site.language: an English site shows English words."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    text = make_config(tmp_path).read_text(encoding="utf-8").replace('"zh-CN"', '"en"')
    (tmp_path / "newsletter.toml").write_text(text, encoding="utf-8")
    config = load_config(tmp_path / "newsletter.toml")
    r = create_app(config, clock=lambda: START).test_client().get("/subscribe")
    assert '<html lang="en">' in r.text and "Email address" in r.text and "Subscribe" in r.text
