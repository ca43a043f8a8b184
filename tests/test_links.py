"""Signed links (newsletter.links): where they point, what they carry, what they refuse."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from newsletter.config import load_config
from newsletter.errors import ConfigError
from newsletter.links import Links
from tests.conftest import make_config

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


def test_links_point_at_app_url_when_set(tmp_path):
    """With [site] app_url the unsubscribe, preferences and confirm links use it, not the feeds' base_url."""
    config = load_config(make_config(tmp_path, site='app_url = "https://app.example.net/news"'))
    assert config.site.app_url == "https://app.example.net/news/"
    links = Links(config, "k")
    assert links.unsubscribe_url("a@example.org").startswith("https://app.example.net/news/unsubscribe?t=")
    assert links.preferences_url("a@example.org").startswith("https://app.example.net/news/preferences?t=")
    assert links.confirm_url("a@example.org", "n", NOW).startswith("https://app.example.net/news/confirm?t=")


def test_app_url_defaults_to_base_url(tmp_path):
    """Without app_url, links live next to the feeds."""
    config = load_config(make_config(tmp_path))
    assert config.site.app_url == config.site.base_url == "https://reviews.example.org/"
    assert Links(config, "k").unsubscribe_url("a@example.org").startswith("https://reviews.example.org/unsubscribe?t=")


def test_app_url_must_be_absolute(tmp_path):
    """A relative app_url is a configuration error naming the key."""
    with pytest.raises(ConfigError, match="app_url"):
        load_config(make_config(tmp_path, site='app_url = "/news/"'))


def test_confirm_token_round_trip_and_expiry(tmp_path):
    """A confirm token carries address, nonce and time; it is expired after max_age."""
    links = Links(load_config(make_config(tmp_path)), "k")
    token = links.confirm_url("A@Example.org", "nonce1", NOW).split("t=")[1]
    got = links.read_confirm(token, NOW + timedelta(hours=47), 48 * 3600)
    assert (got.email, got.nonce, got.issued, got.expired) == ("a@example.org", "nonce1", NOW, False)
    assert links.read_confirm(token, NOW + timedelta(hours=49), 48 * 3600).expired


def test_tokens_are_refused_when_altered_or_signed_with_another_key(tmp_path):
    """A changed character, another key, or another purpose's token is refused."""
    config = load_config(make_config(tmp_path))
    links = Links(config, "k")
    token = links.token("unsubscribe", "a@example.org")
    assert links.read_token("unsubscribe", token) == "a@example.org"
    assert links.read_token("unsubscribe", token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert Links(config, "other").read_token("unsubscribe", token) is None
    assert links.read_token("preferences", token) is None
    assert links.read_confirm(token, NOW, 3600) is None
    confirm = links.confirm_url("a@example.org", "n", NOW).split("t=")[1]
    assert links.read_token("unsubscribe", confirm) is None


def test_webhooks_table_names_secret_variables(tmp_path):
    """[webhooks] overrides the variable names; unknown keys are refused."""
    path = make_config(tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + '\n[webhooks]\nmailgun_key_env = "MG"\nmax_age = 60\n',
                    encoding="utf-8")
    config = load_config(path)
    assert config.webhooks.mailgun_key_env == "MG" and config.webhooks.max_age == 60
    assert config.webhooks.resend_secret_env == "NEWSLETTER_RESEND_WEBHOOK_SECRET"
    path.write_text(path.read_text(encoding="utf-8") + 'bogus = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="bogus"):
        load_config(path)
