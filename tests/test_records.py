"""Validation of single review records."""

import re

import pytest

from newsletter.errors import RecordError
from newsletter.records import check_record
from tests.conftest import review


def test_valid_record_keeps_fields():
    """A valid record becomes a Review with aware datetimes and updated defaulting to published."""
    r = check_record(review(1)).review
    assert r.id == "acme/widgets#1" and r.tags == ("CUDA Graph",)
    assert r.published.utcoffset().total_seconds() == 8 * 3600
    assert r.updated == r.published


@pytest.mark.parametrize("over, reason", [
    ({"id": None}, "missing required key 'id'"),
    ({"title": None}, "missing required key 'title'"),
    ({"tags": []}, "at least one"),
    ({"tags": ["  ", ""]}, "at least one"),
    ({"tags": "ROCm"}, "list of strings"),
    ({"url": "javascript:alert(1)"}, "not an absolute http(s) URL"),
    ({"url": "/pull/1"}, "not an absolute http(s) URL"),
    ({"url": "ftp://example.org/x"}, "not an absolute http(s) URL"),
    ({"published": "2026-11-20T10:00:00"}, "no UTC offset"),
    ({"published": "2026-11-20"}, "no UTC offset"),
    ({"published": "last tuesday"}, "not an RFC 3339"),
    ({"updated": "2026-13-40T10:00:00Z"}, "updated"),
    ({"title": "line one\nBcc: victim@example.org"}, "one line"),
    ({"title": "sep\u2028arated"}, "one line"),
    ({"title": "bell\x07"}, "control character U+0007"),
    ({"tags": ["ok", "bad\r\nX-Header: 1"]}, "one line"),
    ({"repo": "not a repo"}, "owner/name"),
    ({"body": 42}, "body must be a string"),
])
def test_bad_records_are_refused_with_reason(over, reason):
    """Each broken rule is refused with a reason naming the key."""
    rec = review(1)
    for k, v in over.items():
        if v is None:
            rec.pop(k)
        else:
            rec[k] = v
    with pytest.raises(RecordError, match=re.escape(reason)):
        check_record(rec)


def test_not_an_object_is_refused():
    """A record that is a list or a string is refused."""
    with pytest.raises(RecordError, match="must be an object"):
        check_record(["id", "x"])


def test_control_characters_in_body_are_removed_with_warning():
    """XML-forbidden characters in a body are removed and reported; the record is taken."""
    checked = check_record(review(1, body="a\x00b\x1fc\x0cd"))
    assert checked.review.body == "abcd"
    assert any("control character" in w for w in checked.warnings)


def test_tags_that_clash_after_folding_are_one_tag():
    """`ROCm`, `rocm` and full-width `ＲＯＣｍ` in one record are one tag, first spelling kept."""
    checked = check_record(review(1, tags=["ROCm", "rocm", "ＲＯＣｍ", "性能"]))
    assert checked.review.tags == ("ROCm", "性能")
    assert len(checked.warnings) == 2


def test_z_offset_and_fractional_seconds_accepted():
    """`Z` and fractional seconds are valid RFC 3339."""
    r = check_record(review(1, published="2026-11-20T02:00:00.123Z")).review
    assert r.published.utcoffset().total_seconds() == 0


@pytest.mark.parametrize("over, reason", [
    ({"published": "9999-12-31T23:59:59Z"}, "outside the years"),
    ({"published": "0001-01-01T00:00:00+01:00"}, "outside the years"),
    ({"title": "a\ud800"}, "unpaired surrogate"),
    ({"url": "http://[::1"}, "not a valid URL"),
    ({"url": "https://x.org:99999/"}, "not a valid URL"),
    ({"url": "http://user:pass@github.com/x"}, "credentials"),
    ({"url": 'https://x.org/"onmouseover=1'}, "characters URLs may not hold"),
    ({"tags": [f"t{i}" for i in range(51)]}, "at most 50"),
    ({"body": False}, "body must be a string"),
    ({"body": []}, "body must be a string"),
])
def test_hostile_values_are_refused(over, reason):
    """Extreme dates, broken Unicode, odd URLs, too many tags and non-string bodies are refused with a reason."""
    with pytest.raises(RecordError, match=re.escape(reason)):
        check_record(review(1, **over))


def test_unknown_keys_of_mixed_types_are_only_a_warning():
    """Unknown keys that are not strings (YAML `1:`, `~:`) are reported, not a crash."""
    rec = review(1)
    rec[1] = "one"
    rec[None] = 2
    assert any("ignored unknown key" in w for w in check_record(rec).warnings)


def test_invisible_characters_are_removed_from_tags():
    """Zero-width and bidi-override characters vanish from tags; a tag of only those is dropped."""
    checked = check_record(review(1, tags=["\u200b", "\u202eROCm", "CU\u200bDA"]))
    assert checked.review.tags == ("ROCm", "CUDA")
