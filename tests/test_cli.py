"""The command line: thin over the library, one-line errors, DESIGN.md exit codes."""

import csv
import io
import subprocess
import sys

from click.testing import CliRunner
from freezegun import freeze_time

from newsletter.cli import main
from tests.conftest import ROOT, make_config, review, write_jsonl


def invoke(cfg, *args):
    return CliRunner().invoke(main, ["--config", str(cfg), *args], catch_exceptions=False)


def test_every_command_is_documented_in_readme():
    """Each command and subcommand appears in README.md."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, cmd in main.commands.items():
        assert f"newsletter {name}" in readme, name
        for sub in getattr(cmd, "commands", {}):
            assert sub in readme, f"{name} {sub}"


def test_gather_with_rejections_exits_1_and_names_them(tmp_path):
    """gather prints one line per rejected record on stderr, the counts, and exits 1."""
    (tmp_path / "reviews.jsonl").write_text('{"id": "x"}\n', encoding="utf-8")
    result = invoke(make_config(tmp_path), "gather")
    assert result.exit_code == 1
    assert "rejected: " in result.stderr and ":1 (id 'x'): missing required key 'title'" in result.stderr
    assert "0 new, 0 updated, 0 unchanged, 1 rejected" in result.stdout


def test_config_error_exits_2_with_one_line(tmp_path):
    """A bad config prints one 'error:' line naming file and key, no traceback, exit 2."""
    cfg = make_config(tmp_path, email='send_at = "whenever"')
    cfg.write_text(cfg.read_text().replace('send_at = "MON 09:00"\n', ""))
    result = invoke(cfg, "gather")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "send_at" in result.stderr and "Traceback" not in result.stderr


def test_missing_config_exits_2(tmp_path):
    """No config file: exit 2 with a hint."""
    result = invoke(tmp_path / "missing.toml", "status")
    assert result.exit_code == 2 and "config file not found" in result.stderr


@freeze_time("2026-11-30T02:00:00Z")
def test_run_then_status(site):
    """run sends the due issue; status shows it with its delivery counts."""
    assert invoke(site, "subscribers", "add", "a@example.org", "--name", "A").exit_code == 0
    result = invoke(site, "run")
    assert result.exit_code == 0, result.output
    assert "send 2026-W48: 1 sent" in result.stdout
    status = invoke(site, "status")
    assert "issue 2026-W48: sent, 6 reviews; sent 1" in status.stdout


def test_subscribers_import_export_round_trip(tmp_path, site):
    """CSV import reports bad rows and export writes what was imported, tags by name."""
    src = tmp_path / "subs.csv"
    src.write_text('email,name,tags\nwang@example.org,王芳,\n"alex@EXAMPLE.org","Rivera, Alex",ROCm|性能\nnot-an-address,x,\n',
                   encoding="utf-8")
    result = invoke(site, "subscribers", "import", str(src))
    assert result.exit_code == 1 and "subs.csv:4: 'not-an-address' is not an email address" in result.stderr
    out = invoke(site, "subscribers", "export").stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["email"], r["name"], r["status"]) for r in rows] == [
        ("alex@example.org", "Rivera, Alex", "active"), ("wang@example.org", "王芳", "active")]


def test_removed_subscriber_is_not_reactivated_by_import(tmp_path, site):
    """An address removed stays unsubscribed when a CSV lists it again."""
    invoke(site, "subscribers", "add", "a@example.org")
    invoke(site, "subscribers", "remove", "a@example.org")
    src = tmp_path / "subs.csv"
    src.write_text("email\na@example.org\n")
    assert "1 suppressed" in invoke(site, "subscribers", "import", str(src)).stdout
    assert "a@example.org\tunsubscribed" in invoke(site, "subscribers", "list").stdout


def test_python_dash_m_works(site):
    """`python -m newsletter --help` runs the same CLI."""
    out = subprocess.run([sys.executable, "-m", "newsletter", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "gather" in out.stdout


def test_verbose_shows_traceback(tmp_path):
    """With -v an error also prints its traceback."""
    result = CliRunner().invoke(main, ["-v", "--config", str(tmp_path / "x.toml"), "status"])
    assert result.exit_code == 2 and "Traceback" in result.stderr


def test_bad_issue_id_is_a_usage_error(site):
    """--issue 2026-W99 is refused as a usage error (exit 2)."""
    result = invoke(site, "preview", "--issue", "2026-W99")
    assert result.exit_code == 2 and "not an ISO week" in result.stderr


def test_subscribers_add_keeps_what_is_not_given(site):
    """Changing a subscriber's tags keeps their name, and changing the name keeps the tags."""
    invoke(site, "subscribers", "add", "a@example.org", "--name", "Ann", "--tags", "ROCm|性能")
    invoke(site, "subscribers", "add", "a@example.org", "--name", "Ann B")
    out = invoke(site, "subscribers", "list").stdout
    assert "a@example.org\tactive\tAnn B\trocm, 性能" in out


def test_long_output_piped_into_head_is_quiet(site, tmp_path):
    """`newsletter subscribers list | head -1` ends without an error line or traceback."""
    import os
    src = tmp_path / "many.csv"
    src.write_text("email\n" + "".join(f"reader{i}@example.org\n" for i in range(5000)))
    invoke(site, "subscribers", "import", str(src))
    env = {**os.environ, "NEWSLETTER_CONFIG": str(site)}
    out = subprocess.run(f"{sys.executable} -m newsletter subscribers list | head -1", shell=True,
                         capture_output=True, text=True, env=env)
    assert out.stdout.startswith("reader0@example.org")
    assert out.stderr == ""


def test_serve_answers_on_the_given_port(tmp_path):
    """`newsletter serve --port N` serves the subscribe page on 127.0.0.1:N until stopped."""
    import os
    import time
    import urllib.request

    from tests.conftest import free_port

    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    cfg = make_config(tmp_path)
    port = free_port()
    env = {**os.environ, "NEWSLETTER_TEST_SECRET": "k"}
    proc = subprocess.Popen([sys.executable, "-m", "newsletter", "--config", str(cfg), "serve", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        body, deadline = None, time.monotonic() + 15
        while body is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/subscribe", timeout=2) as resp:
                    body = resp.read().decode("utf-8")
            except OSError:
                time.sleep(0.1)
        assert body is not None and 'name="email"' in body
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_without_signing_key_exits_2(tmp_path, monkeypatch):
    """Without the signing key, serve prints one line naming the variable and exits 2."""
    monkeypatch.delenv("NEWSLETTER_TEST_SECRET")
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    result = invoke(make_config(tmp_path), "serve", "--port", "1")
    assert result.exit_code == 2
    assert "NEWSLETTER_TEST_SECRET" in result.stderr and "Traceback" not in result.stderr


def test_feeds_with_a_mistyped_store_path_publishes_nothing(site, tmp_path):
    """`feeds` with a store path that does not exist refuses instead of writing empty feeds."""
    cfg = site.read_text().replace('path = "state/newsletter.db"', 'path = "state/typo.db"')
    site.write_text(cfg)
    result = invoke(site, "feeds")
    assert result.exit_code == 1 and "no store yet" in result.stderr
    assert not (site.parent / "feeds").exists()


def test_issue_far_in_the_future_is_a_usage_error(site):
    """--issue 9999-W52 is refused as a usage error, not a crash."""
    result = invoke(site, "preview", "--issue", "9999-W52")
    assert result.exit_code == 2 and "Traceback" not in result.stderr


def test_complained_address_needs_force_to_come_back(site):
    """An address that reported spam is not re-activated by a plain `subscribers add`, only with --force."""
    from newsletter.config import load_config
    from newsletter.store import Store
    from datetime import datetime, timezone
    invoke(site, "subscribers", "add", "c@example.org")
    with Store(load_config(site).store_path) as st:
        st.set_subscriber_status("c@example.org", "complained", datetime(2026, 11, 25, tzinfo=timezone.utc))
    result = invoke(site, "subscribers", "add", "c@example.org")
    assert result.exit_code == 1 and "--force" in result.stderr
    assert "c@example.org\tcomplained" in invoke(site, "subscribers", "list").stdout
    assert invoke(site, "subscribers", "add", "c@example.org", "--force").exit_code == 0
    assert "c@example.org\tactive" in invoke(site, "subscribers", "list").stdout
