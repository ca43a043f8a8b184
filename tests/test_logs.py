"""Logs on stderr: levels from -v/-q, and one JSON object per line for schedulers."""

import io
import json
import logging

from click.testing import CliRunner

from newsletter.cli import main
from newsletter.logs import setup_logging


def test_json_lines_parse_with_time_level_logger_message():
    """Every line is one JSON object with time (RFC 3339 UTC), level, logger and message."""
    out = io.StringIO()
    setup_logging(fmt="json", stream=out)
    log = logging.getLogger("newsletter.test")
    log.info("gather: %d new", 3)
    log.warning("中文 \"quoted\"\nsecond line")
    try:
        raise ValueError("boom")
    except ValueError:
        log.error("failed", exc_info=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    docs = [json.loads(line) for line in lines]
    assert [d["level"] for d in docs] == ["INFO", "WARNING", "ERROR"]
    assert docs[0]["message"] == "gather: 3 new" and docs[0]["logger"] == "newsletter.test"
    assert docs[1]["message"] == "中文 \"quoted\"\nsecond line"
    assert docs[0]["time"].endswith("+00:00") and "T" in docs[0]["time"]
    assert "ValueError: boom" in docs[2]["exc"]


def test_levels_follow_verbose_and_quiet():
    """-v shows DEBUG, -q only errors, text default warnings, json default info."""
    assert setup_logging(verbose=1, stream=io.StringIO()) == logging.DEBUG
    assert setup_logging(quiet=True, stream=io.StringIO()) == logging.ERROR
    assert setup_logging(stream=io.StringIO()) == logging.WARNING
    assert setup_logging(fmt="json", stream=io.StringIO()) == logging.INFO


def test_cli_run_in_json_mode_writes_only_json_on_stderr(site, monkeypatch):
    """`newsletter --log-format json run` (or NEWSLETTER_LOG_FORMAT=json) logs parseable lines about the run."""
    monkeypatch.setenv("NEWSLETTER_LOG_FORMAT", "json")
    result = CliRunner().invoke(main, ["--config", str(site), "run"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    docs = [json.loads(line) for line in result.stderr.splitlines()]
    messages = [d["message"] for d in docs]
    assert any(m.startswith("gather: 6 new") for m in messages)
    assert any(m.startswith("feeds: ") for m in messages)


def test_cli_error_in_json_mode_is_one_json_line(tmp_path):
    """A configuration error in JSON mode is one ERROR record, exit code 2, no traceback."""
    result = CliRunner().invoke(
        main, ["--log-format", "json", "--config", str(tmp_path / "missing.toml"), "status"])
    assert result.exit_code == 2
    (doc,) = [json.loads(line) for line in result.stderr.splitlines()]
    assert doc["level"] == "ERROR" and "config file not found" in doc["message"]
