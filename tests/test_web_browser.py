"""End to end in a real headless browser (Debian's chromium driven by Playwright): subscribe, confirm from the
captured email, change preferences, receive the issue, unsubscribe; screenshots go to test-artifacts/."""

from __future__ import annotations

import re
import shutil
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from newsletter import job
from newsletter.config import load_config
from newsletter.feeds import build_feeds
from newsletter.gather import gather
from newsletter.store import Store
from newsletter.transports.memory import MemoryTransport
from newsletter.web import create_app
from tests.conftest import EXAMPLE_JSONL, ROOT, make_config

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
START = datetime(2026, 11, 20, 4, 0, tzinfo=timezone.utc)
DUE = datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)   # Monday 10:00 Shanghai: 2026-W48 is due

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists() and not shutil.which("chromium"),
                                reason="Debian's chromium is not installed (apt-get install chromium); "
                                       ".ci/run installs it")


@pytest.fixture
def server(tmp_path):
    """The web app on 127.0.0.1 (werkzeug make_server in a thread), its config and captured mail."""
    from werkzeug.serving import make_server

    holder = {}
    srv = make_server("127.0.0.1", 0, lambda environ, start: holder["app"](environ, start), threaded=True)
    base = f"http://127.0.0.1:{srv.server_port}/"
    (tmp_path / "reviews.jsonl").write_bytes(EXAMPLE_JSONL.read_bytes())
    config = load_config(make_config(tmp_path, site=f'app_url = "{base}"'))
    config_text = config.path.read_text(encoding="utf-8").replace("https://reviews.example.org/", base)
    config.path.write_text(config_text, encoding="utf-8")
    config = load_config(config.path)
    with Store(config.store_path) as st:
        gather(config, st, START)
        build_feeds(config, st)
    t0 = time.monotonic()
    mail = MemoryTransport()
    holder["app"] = create_app(config, clock=lambda: START.replace() + _since(t0),
                               transport_factory=lambda: mail)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield base, config, mail
    srv.shutdown()


def _since(t0: float):
    from datetime import timedelta
    return timedelta(seconds=time.monotonic() - t0)


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                              args=ARGS, headless=True)
        yield b
        b.close()


def status_of(config, email):
    with Store(config.store_path) as st:
        sub = st.get_subscriber(email)
        return (sub.status, sub.tags) if sub else None


def test_subscribe_confirm_preferences_unsubscribe_in_a_browser(server, browser):
    """A reader subscribes to ROCm, confirms from the email, adds a tag, gets only those reviews, then unsubscribes."""
    base, config, mail = server
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 375, "height": 800})

    # subscribe: only ROCm
    page.goto(base + "subscribe")
    page.screenshot(path=str(ARTIFACTS / "subscribe-375.png"), full_page=True)
    page.fill("#email", "reader@example.org")
    page.fill("#name", "读者")
    page.check("input[name=tag][value=rocm]")
    page.click("button[type=submit]")
    assert "reader@example.org" in page.inner_text("main")
    assert status_of(config, "reader@example.org") is None
    assert len(mail.sent) == 1

    # confirm from the captured email
    link = re.search(r"http://\S+/confirm\?t=\S+", mail.sent[0].fields["text"]).group(0)
    page.goto(link)
    page.click("button[type=submit]")
    assert "订阅成功" in page.inner_text("main")
    assert status_of(config, "reader@example.org") == ("active", ("rocm",))

    # preferences: add 注意力 as well
    page.click("text=更改标签")
    assert page.is_checked("input[name=tag][value=rocm]")
    page.check("input[name=tag][value=注意力]")
    page.screenshot(path=str(ARTIFACTS / "preferences-375.png"), full_page=True)
    page.click("button[type=submit]")
    assert "已保存" in page.inner_text("main")
    assert status_of(config, "reader@example.org") == ("active", ("rocm", "注意力"))

    # the weekly issue holds only reviews tagged ROCm or 注意力
    weekly = MemoryTransport()
    report = job.run_job(config, lambda: DUE, transport=weekly)
    assert report.delivery.counts["sent"] == 1
    [msg] = weekly.sent
    html = msg.fields["html"]
    with Store(config.store_path) as st:
        reviews = st.reviews_in_issue("2026-W48")
    wanted = [r for r in reviews if {"rocm", "注意力"} & {t.key for t in r.tags}]
    assert 0 < len(wanted) < len(reviews)
    for r in reviews:
        assert (r.review.url in html) == (r in wanted)
    email_file = ARTIFACTS / "email.html"
    email_file.write_text(html, encoding="utf-8")
    for width in (375, 1200):
        view = browser.new_page(viewport={"width": width, "height": 900})
        view.goto(email_file.as_uri())
        scroll = view.evaluate("document.documentElement.scrollWidth")
        view.screenshot(path=str(ARTIFACTS / f"email-{width}.png"), full_page=True)
        view.close()
        assert scroll <= width, f"the email scrolls sideways at {width} px ({scroll} px wide)"

    # unsubscribe from the email's link: one button
    unsub = re.search(r'href="(http://[^"]+/unsubscribe\?t=[^"]+)"', html).group(1)
    page.goto(unsub.replace("&amp;", "&"))
    assert page.locator("button").count() == 1
    page.click("button")
    assert "已退订" in page.inner_text("main")
    assert status_of(config, "reader@example.org")[0] == "unsubscribed"
    page.close()
