"""The benchmark corpus (benchmarks/corpus.py): seeded, and shaped as issue 6 asks."""

import sys
from pathlib import Path

from newsletter.records import check_record

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import corpus  # noqa: E402


def test_corpus_is_seeded_and_shaped_as_asked():
    """Same seed, same records; 150 distinct tags, 3 per review, bodies of 1–3 KB mixing Chinese and English."""
    a, b = corpus.corpus(200), corpus.corpus(200)
    assert a == b
    assert len({t.casefold() for t in corpus.tag_names()}) == 150
    for r in a:
        check_record(r)
        assert len(set(r["tags"])) == 3
        size = len(r["body"].encode())
        assert 1024 <= size <= 3072
        assert any("\u4e00" <= c <= "\u9fff" for c in r["body"]) and any(c.isascii() and c.isalpha() for c in r["body"])


def test_subscribers_cover_exactly_twenty_tag_sets(tmp_path):
    """The subscriber CSV has the asked number of rows over exactly 20 distinct tag sets, one of them 'every tag'."""
    import csv
    path = corpus.write_subscribers(tmp_path / "s.csv", 500)
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert len(rows) == 500 and len({r["email"] for r in rows}) == 500
    sets = {frozenset(r["tags"].split("|")) if r["tags"] else frozenset() for r in rows}
    assert len(sets) == 20 and frozenset() in sets


def test_week_reviews_are_newer_than_the_corpus():
    """The week's reviews are published in 2026-W47, after every corpus review, with fresh ids."""
    old, new = corpus.corpus(100), corpus.week(10, 101)
    assert max(r["published"] for r in old) < min(r["published"] for r in new)
    assert not {r["id"] for r in old} & {r["id"] for r in new}
