"""Configuration loading: defaults, resolution, and errors that name file and key."""

import pytest

from newsletter.config import load_config
from newsletter.errors import ConfigError
from tests.conftest import ROOT, make_config


def test_bundled_config_loads():
    """The repository's newsletter.toml is valid and resolves paths against its directory."""
    config = load_config(ROOT / "newsletter.toml")
    assert config.sources[0].path == ROOT / "examples" / "vllm-reviews.jsonl"
    assert config.site.base_url.endswith("/") and config.email.send_at.weekday == 0


@pytest.mark.parametrize("site, email, message", [
    ('base_url = "ftp://x"', "", "[site] base_url must be an absolute http(s) URL"),
    ('timezone = "Mars/Olympus"', "", "unknown time zone"),
    ("", 'send_at = "someday"', "[email] send_at must look like 'MON 09:00'"),
    ("", "skip_empty = 3", "[email] skip_empty must be true or false"),
    ("", "colour = 1", "[email] unknown key 'colour'"),
])
def test_bad_values_name_file_and_key(tmp_path, site, email, message):
    """A wrong value gives one error naming the file and the key."""
    path = make_config(tmp_path, site=site, email=email)
    text = path.read_text()
    if site.startswith("base_url"):
        text = text.replace('base_url = "https://reviews.example.org/"\n', "")
    if site.startswith("timezone"):
        text = text.replace('timezone = "Asia/Shanghai"\n', "")
    if email.startswith("send_at"):
        text = text.replace('send_at = "MON 09:00"\n', "")
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(path) in str(exc.value) and message in str(exc.value)


def test_missing_file(tmp_path):
    """A missing config file says so and how to point at another."""
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_not_toml(tmp_path):
    """A file that is not TOML is reported with its name."""
    p = tmp_path / "newsletter.toml"
    p.write_text("[site\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)


def test_unknown_transport_kind(tmp_path):
    """An unknown transport kind lists the known ones."""
    from newsletter.transports import make_transport
    config = load_config(make_config(tmp_path, transport='kind = "pigeon"'))
    with pytest.raises(ConfigError, match="kind 'pigeon' is not known"):
        make_transport(config)
