"""Gather: records into the store, rejections reported, nothing stored ever lost."""

import json
from datetime import datetime, timezone

from newsletter.config import load_config
from newsletter.gather import gather
from newsletter.store import Store
from tests.conftest import make_config, review, write_jsonl

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def run_gather(cfg_path):
    config = load_config(cfg_path)
    with Store(config.store_path) as store:
        return gather(config, store, NOW), store.review_count()


def test_bad_records_are_reported_and_the_rest_taken(tmp_path):
    """Each rejected record gets one line naming source, line, id and reason; good ones are stored."""
    p = tmp_path / "reviews.jsonl"
    lines = [json.dumps(review(1)), "{nope", json.dumps(review(2, url="javascript:alert(1)")),
             json.dumps(review(3, tags=[])), json.dumps(review(4))]
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report, count = run_gather(make_config(tmp_path))
    assert (report.new, report.rejected, count) == (2, 3, 2)
    assert report.problems[0].startswith(f"{p}:2: not JSON")
    assert f"{p}:3 (id 'acme/widgets#2'): url" in report.problems[1]
    assert "tags must hold at least one" in report.problems[2]


def test_same_id_with_changed_content_is_an_update(tmp_path):
    """Gathering the same id with a new title updates it; gathering again is unchanged."""
    cfg = make_config(tmp_path)
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    assert run_gather(cfg)[0].new == 1
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, title="新标题")])
    report, count = run_gather(cfg)
    assert (report.updated, count) == (1, 1)
    assert run_gather(cfg)[0].unchanged == 1


def test_same_id_twice_in_one_batch_rejects_the_second(tmp_path):
    """The second record with an id already seen in this gather is rejected, naming the first place."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1), review(1, title="other")])
    report, count = run_gather(make_config(tmp_path))
    assert (report.new, report.rejected, count) == (1, 1, 1)
    assert "already at" in report.problems[0]


def test_failing_source_leaves_store_as_it_was(tmp_path, http_stub):
    """An HTTP source answering 500 takes nothing and changes nothing; the file source is still read."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    http_stub.routes[("GET", "/r")] = lambda h, b: (500, {}, b"")
    cfg = make_config(tmp_path, sources=f'path = "reviews.jsonl"\n\n[[sources]]\nurl = "{http_stub.url}/r"\nretries = 0')
    report, count = run_gather(cfg)
    assert (report.failed_sources, report.new, count) == (1, 1, 1)
    assert "HTTP 500" in report.problems[0] and "store is unchanged" in report.problems[0]


def test_huge_body_and_raw_html_are_stored_sanitized(tmp_path):
    """A 200 KB body with <script> is taken; its stored HTML has no script element."""
    body = ("<script>alert(1)</script><img src=x onerror=alert(1)>\n\n" + "段落 text. " * 20000)
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, body=body)])
    config = load_config(make_config(tmp_path))
    with Store(config.store_path) as store:
        assert gather(config, store, NOW).new == 1
        html = store.latest_reviews(1)[0].body_html
    assert len(body.encode()) > 200_000
    assert "<script" not in html and "onerror" not in html


def test_tags_from_different_records_merge_by_key(tmp_path):
    """`rocm` in one record and `ROCm` in another are one tag with the first spelling."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, tags=["ROCm"]), review(2, tags=["rocm", "ＲＯＣｍ"])])
    config = load_config(make_config(tmp_path))
    with Store(config.store_path) as store:
        gather(config, store, NOW)
        tags = store.tag_counts()
    assert [(t.name, t.slug, n) for t, n, _ in tags] == [("ROCm", "rocm", 2)]


def test_records_that_crash_parsers_cost_only_themselves(tmp_path):
    """Deep JSON nesting, huge integers, deep Markdown nesting each reject one record; the others are stored."""
    p = tmp_path / "reviews.jsonl"
    lines = [json.dumps(review(1)), "[" * 100000 + "]" * 100000, '{"n": ' + "9" * 5000 + "}",
             json.dumps(review(2, body=">" * 10000 + " x")), json.dumps(review(3, body="<div>" * 5000)),
             json.dumps(review(4))]
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report, count = run_gather(make_config(tmp_path))
    assert (report.new, report.rejected, count) == (2, 4, 2)
    assert any("nests" in line for line in report.problems)


def test_front_matter_with_two_bodies_is_rejected(tmp_path):
    """A Markdown file whose front matter also has a 'body' key is refused, not silently overridden."""
    (tmp_path / "r.md").write_text("---\nid: a\ntitle: t\nurl: https://e.org/\ntags: [x]\n"
                                   "published: '2026-11-20T10:00:00Z'\nbody: hidden\n---\nvisible\n", encoding="utf-8")
    report, count = run_gather(make_config(tmp_path, sources='path = "r.md"'))
    assert count == 0 and "body is given twice" in report.problems[0]


def test_unchanged_record_is_not_validated_again(tmp_path, monkeypatch):
    """A second gather of the same records counts them unchanged without validating them again."""
    import newsletter.gather as g
    write_jsonl(tmp_path / "reviews.jsonl", [review(n) for n in range(1, 6)])
    cfg = make_config(tmp_path)
    run_gather(cfg)
    calls = []
    real = g.check_record
    monkeypatch.setattr(g, "check_record", lambda data: calls.append(data) or real(data))
    report, count = run_gather(cfg)
    assert (report.unchanged, report.new, calls, count) == (5, 0, [], 5)


def test_record_with_warnings_warns_when_taken_not_when_unchanged(tmp_path):
    """A record taken with a remark (unknown key) warns when stored; unchanged later, it is quiet and not revalidated."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1, extra_key="x")])
    cfg = make_config(tmp_path)
    first, _ = run_gather(cfg)
    second, _ = run_gather(cfg)
    assert "ignored unknown key(s): extra_key" in first.warnings[0]
    assert second.warnings == [] and second.unchanged == 1


def test_reordered_keys_are_unchanged_and_a_real_edit_is_an_update(tmp_path):
    """The same record with keys in another order is unchanged; a changed title is an update."""
    path = tmp_path / "reviews.jsonl"
    write_jsonl(path, [review(1)])
    cfg = make_config(tmp_path)
    run_gather(cfg)
    rec = review(1)
    write_jsonl(path, [dict(reversed(list(rec.items())))])
    assert run_gather(cfg)[0].unchanged == 1
    write_jsonl(path, [review(1, title="改了标题")])
    assert run_gather(cfg)[0].updated == 1


def test_worker_processes_give_the_same_store_as_one_process(tmp_path, monkeypatch):
    """Validation and rendering on worker processes store exactly what one process stores."""
    import newsletter.gather as g
    records = [review(n) for n in range(1, 40)] + [{"id": "bad"}] + [review(3)]
    results = {}
    for mode, minimum in (("serial", 10 ** 9), ("parallel", 1)):
        d = tmp_path / mode
        d.mkdir()
        write_jsonl(d / "reviews.jsonl", records)
        monkeypatch.setattr(g, "PARALLEL_MIN", minimum)
        config = load_config(make_config(d))
        with Store(config.store_path) as store:
            report = gather(config, store, NOW)
            rows = store.db.execute("SELECT id, body_html, content_hash, record_hash FROM reviews ORDER BY id").fetchall()
        problems = [p.replace(str(d), "DIR") for p in report.problems]
        results[mode] = (report.counts(), problems, [tuple(r) for r in rows])
    assert results["serial"] == results["parallel"]
    assert results["serial"][0]["rejected"] == 2
