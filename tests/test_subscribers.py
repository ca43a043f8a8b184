"""Subscriber addresses, CSV import and export."""

import csv
import io
from datetime import datetime, timezone

import pytest

from newsletter.errors import SourceError
from newsletter.models import Subscriber
from newsletter.store import Store
from newsletter.subscribers import export_csv, import_csv, normalize_email

NOW = datetime(2026, 11, 25, tzinfo=timezone.utc)


@pytest.mark.parametrize("addr", [".a..b.@example.org", "x@-.-", "x@xn--a.com", "x@example.123",
                                  "a b@example.org", "a@b@example.org", "noat.example.org"])
def test_addresses_sending_would_refuse_are_refused_at_import(addr):
    """Addresses that could never be sent are refused when they come in, with a reason."""
    with pytest.raises(ValueError):
        normalize_email(addr)


@pytest.mark.parametrize("addr, expected", [
    ("Alex@EXAMPLE.org", "Alex@example.org"),
    ("o'brien+news@example.org", "o'brien+news@example.org"),
    ("用户@例子.测试", "用户@xn--fsqu00a.xn--0zwm56d"),
    ("victim@ｅxample.com", "victim@example.com"),
])
def test_valid_addresses_are_kept(addr, expected):
    """Plus tags, apostrophes and internationalised addresses are accepted."""
    assert normalize_email(addr) == expected


def test_export_neutralises_formulas():
    """Cells starting with = + - @ are exported with a leading quote, so a spreadsheet shows text."""
    text = export_csv([Subscriber("=cmd|'/Ccalc'!A0@example.org", '=HYPERLINK("http://evil/","x")', ("=rocm",))],
                      {"=rocm": "=ROCm"})
    row = list(csv.reader(io.StringIO(text)))[1]
    assert row[0].startswith("'=") and row[1].startswith("'=") and row[2] == "'=ROCm"


def test_non_utf8_csv_imports_nothing(tmp_path):
    """A CSV that is not UTF-8 is refused whole with the line, and nothing is imported."""
    p = tmp_path / "subs.csv"
    p.write_bytes(b"email,name\nok@example.org,Ann\nx@example.org,caf\xe9\n")
    with Store(tmp_path / "s.db") as store, p.open(encoding="utf-8", newline="") as fh:
        with pytest.raises(SourceError, match="nothing was imported"):
            import_csv(store, fh, str(p), NOW)
        assert store.subscribers() == []


def test_bad_rows_are_reported_and_the_rest_imported(tmp_path):
    """One bad address costs one row; its line is named."""
    fh = io.StringIO("email,name,tags\nok@example.org,Ann,ROCm\nbad,,\n")
    with Store(tmp_path / "s.db") as store:
        report = import_csv(store, fh, "subs.csv", NOW)
        assert (report.added, report.rejected) == (1, 1) and report.problems[0].startswith("subs.csv:3:")
        assert store.subscribers()[0].tags == ("rocm",)
