"""Mailgun messages API: batch sending with recipient-variables, regions."""

from __future__ import annotations

import pytest

from newsletter.errors import ConfigError
from tests.provider_fakes import FakeMailgun, KEY, ledger, prepare, send, transport_toml


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)


def test_recipient_variables_fill_each_copy(http_stub, tmp_path):
    """One request, `to` repeated, recipient-variables keyed by address: each copy is that recipient's own."""
    from newsletter.job import links_for

    fake = FakeMailgun(http_stub)
    config = prepare(tmp_path, 3, transport_toml("mailgun", http_stub.url))
    send(config)
    assert fake.problems == [] and fake.batch_sizes == [3]
    links = links_for(config)
    for m in fake.inbox:
        assert links.unsubscribe_url(m["to"]) in m["text"]
        assert m["headers"]["List-Unsubscribe"].startswith(f"<{links.unsubscribe_url(m['to'])}>")
        assert "%recipient." not in m["html"] + m["text"] + m["subject"]


def test_rejected_address_fails_alone(http_stub, tmp_path):
    """A whole-request 400 is split until the bad recipient is alone."""
    fake = FakeMailgun(http_stub)
    fake.reject = {"r0000@example.com"}
    config = prepare(tmp_path, 4, transport_toml("mailgun", http_stub.url))
    _, summary = send(config)
    assert summary.ledger == {"sent": 3, "failed": 1} and ledger(config)["r0000@example.com"][0] == "failed"


def test_region_picks_the_base_url(tmp_path):
    """`region = "eu"` sends to api.eu.mailgun.net; an unknown region is a config error."""
    from newsletter.config import load_config
    from newsletter.transports import make_transport
    from tests.conftest import make_config

    t = make_transport(load_config(make_config(tmp_path, transport='kind = "mailgun"\napi_key_env = '
                                               '"NEWSLETTER_TEST_API_KEY"\ndomain = "mg.x.org"\nregion = "eu"')))
    assert t.base_url == "https://api.eu.mailgun.net"
    with pytest.raises(ConfigError, match="region"):
        make_transport(load_config(make_config(tmp_path, transport='kind = "mailgun"\napi_key_env = '
                                               '"NEWSLETTER_TEST_API_KEY"\ndomain = "x"\nregion = "mars"')))
