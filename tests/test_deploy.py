"""The shipped scheduling recipes (deploy/): crontab line, systemd service + timer, GitHub Actions workflow."""

import configparser
import re
import shlex
from pathlib import Path

import yaml

from newsletter.cli import main

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
FIELD_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]   # minute hour day-of-month month day-of-week


def cron_field_ok(field: str, lo: int, hi: int) -> bool:
    """One crontab(5) time field: *, N, N-M, lists and /step, within its range."""
    for part in field.split(","):
        base, _, step = part.partition("/")
        if step and not (step.isdigit() and int(step) > 0):
            return False
        if base == "*":
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", base)
        if not m:
            return False
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if not (lo <= a <= b <= hi):
            return False
    return True


def newsletter_args(command: str) -> list[str]:
    """The arguments after the ``newsletter`` executable, up to the first shell operator or redirection."""
    words = shlex.split(command)
    start = next(i for i, w in enumerate(words) if w.endswith("bin/newsletter") or w == "newsletter") + 1
    out = []
    for w in words[start:]:
        if w in ("&&", "||", ";", "|") or w.startswith((">", "2>", "<")):
            break
        out.append(w)
    return out


def assert_cli_command(args: list[str], expected: str) -> None:
    """The arguments parse as the real CLI and name an existing subcommand."""
    import warnings

    ctx = main.make_context("newsletter", list(args), resilient_parsing=True)
    with warnings.catch_warnings():   # Click 8.2 deprecates protected_args; 8.1 needs it
        warnings.simplefilter("ignore", DeprecationWarning)
        rest = list(getattr(ctx, "protected_args", [])) + list(ctx.args)
    sub = rest[0]
    assert sub == expected and sub in main.commands


def test_crontab_line_has_five_valid_fields_and_runs_the_job():
    """The crontab line has 5 valid time fields and runs `newsletter run` with secrets from an env file."""
    lines = [ln for ln in (DEPLOY / "crontab").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) == 1
    fields = lines[0].split(None, 5)
    assert len(fields) == 6
    for field, (lo, hi) in zip(fields[:5], FIELD_RANGES):
        assert cron_field_ok(field, lo, hi), field
    command = fields[5]
    assert_cli_command(newsletter_args(command), "run")
    assert "newsletter.env" in command and "SECRET" not in command.upper().replace("NEWSLETTER.ENV", "")


def read_unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str   # systemd keys are case-sensitive
    parser.read_string((DEPLOY / "systemd" / name).read_text())
    return parser


def test_systemd_service_is_a_oneshot_running_the_job():
    """The service is a oneshot with ExecStart `newsletter … run`, a working directory and an EnvironmentFile."""
    unit = read_unit("newsletter.service")
    service = unit["Service"]
    assert service["Type"] == "oneshot"
    for key in ("ExecStart", "WorkingDirectory", "EnvironmentFile", "User"):
        assert service.get(key), key
    assert service["ExecStart"].startswith("/")
    assert_cli_command(newsletter_args(service["ExecStart"]), "run")
    assert "Description" in unit["Unit"]


def test_systemd_timer_has_oncalendar_and_starts_the_service():
    """The timer has OnCalendar, Persistent and names the shipped service; it is wanted by timers.target."""
    timer = read_unit("newsletter.timer")
    t = timer["Timer"]
    assert t.get("OnCalendar") in ("hourly", "daily", "weekly") or re.fullmatch(r"[\w*,:./ -]+", t["OnCalendar"])
    assert t["Persistent"] == "true"
    assert (DEPLOY / "systemd" / t["Unit"]).exists()
    assert timer["Install"]["WantedBy"] == "timers.target"


def test_github_workflow_is_valid_yaml_with_schedule_dispatch_and_commit():
    """The workflow has a weekly-or-more schedule, dispatch inputs issue/to/dry-run, runs the job, commits feeds/."""
    doc = yaml.safe_load((DEPLOY / "github" / "newsletter.yml").read_text())
    on = doc.get("on", doc.get(True))    # YAML 1.1 reads a bare `on` key as true
    crons = [s["cron"] for s in on["schedule"]]
    assert crons and all(len(c.split()) == 5 for c in crons)
    for c in crons:
        for field, (lo, hi) in zip(c.split(), FIELD_RANGES):
            assert cron_field_ok(field, lo, hi), c
    inputs = on["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"issue", "to", "dry-run"} and inputs["dry-run"]["type"] == "boolean"
    assert doc["permissions"]["contents"] == "write"
    (job,) = doc["jobs"].values()
    steps = job["steps"]
    assert all(("uses" in s) != ("run" in s) for s in steps)
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "newsletter run" in runs and "newsletter send" in runs
    assert "git add --force feeds/" in runs and "git push" in runs
    for name, value in job["env"].items():   # secrets only ever come from the secrets context
        if "SECRET" in name or "PASSWORD" in name or "TOKEN" in name:
            assert re.fullmatch(r"\$\{\{ secrets\.\w+ \}\}", value), name
