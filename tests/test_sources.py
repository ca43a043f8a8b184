"""Reading sources: files, directories, HTTP pages."""

import json

import pytest

from newsletter.config import SourceConfig
from newsletter.errors import SourceError
from newsletter.sources import HttpCache, read_source
from tests.conftest import review, write_jsonl


def test_jsonl_bad_line_is_an_item_error_and_the_rest_are_read(tmp_path):
    """A line that is not JSON is reported with its line number; other lines still come."""
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(review(1)) + "\n{not json\n\n" + json.dumps(review(2)) + "\n", encoding="utf-8")
    items = read_source(SourceConfig(path=p)).items
    assert [i.location for i in items] == [f"{p}:1", f"{p}:2", f"{p}:4"]
    assert items[1].error.startswith("not JSON") and items[0].data["id"] == "acme/widgets#1"


def test_json_array_and_object_containers(tmp_path):
    """A JSON array and a {"reviews": [...]} object are both read, with indexes."""
    a = tmp_path / "a.json"
    a.write_text(json.dumps([review(1), review(2)]), encoding="utf-8")
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"reviews": [review(3)], "next": None}), encoding="utf-8")
    assert [i.location for i in read_source(SourceConfig(path=a)).items] == [f"{a}[0]", f"{a}[1]"]
    assert read_source(SourceConfig(path=b)).items[0].data["id"] == "acme/widgets#3"


def test_invalid_json_file_is_a_source_error(tmp_path):
    """A .json file that is not JSON fails the whole source with the position."""
    p = tmp_path / "bad.json"
    p.write_text("[{", encoding="utf-8")
    with pytest.raises(SourceError, match="not valid JSON"):
        read_source(SourceConfig(path=p))


def test_markdown_front_matter(tmp_path):
    """A Markdown file's front matter gives the keys and the rest is the body."""
    p = tmp_path / "r.md"
    p.write_text("---\nid: x/y#1\ntitle: 标题\nurl: https://github.com/x/y/pull/1\ntags: [ROCm]\n"
                 "published: '2026-11-20T10:00:00+08:00'\n---\n\n**粗体** body\n", encoding="utf-8")
    item = read_source(SourceConfig(path=p)).items[0]
    assert item.data["title"] == "标题" and item.data["body"] == "**粗体** body"


def test_markdown_unquoted_timestamp_keeps_offset(tmp_path):
    """An unquoted YAML timestamp with offset stays a valid RFC 3339 string."""
    p = tmp_path / "r.md"
    p.write_text("---\nid: a\ntitle: t\nurl: https://e.org/\ntags: [x]\npublished: 2026-11-20T10:00:00+08:00\n---\nb\n",
                 encoding="utf-8")
    from newsletter.records import check_record
    assert check_record(read_source(SourceConfig(path=p)).items[0].data).review.published.utcoffset()


def test_markdown_without_front_matter_is_item_error(tmp_path):
    """A Markdown file without front matter is one rejected record, not a crash."""
    p = tmp_path / "r.md"
    p.write_text("# just text\n", encoding="utf-8")
    assert "front matter" in read_source(SourceConfig(path=p)).items[0].error


def test_directory_is_read_recursively_in_stable_order(tmp_path):
    """Files under a directory are read sorted by relative path; hidden files and other suffixes are skipped."""
    write_jsonl(tmp_path / "b" / "2.jsonl", [review(2)])
    write_jsonl(tmp_path / "a.jsonl", [review(1)])
    write_jsonl(tmp_path / "b" / "1.jsonl", [review(3)])
    write_jsonl(tmp_path / ".hidden" / "x.jsonl", [review(4)])
    (tmp_path / "notes.txt").write_text("ignored")
    ids = [i.data["id"] for i in read_source(SourceConfig(path=tmp_path)).items]
    assert ids == ["acme/widgets#1", "acme/widgets#3", "acme/widgets#2"]


def test_missing_path_is_source_error(tmp_path):
    """A path that does not exist fails with its name."""
    with pytest.raises(SourceError, match="no such file"):
        read_source(SourceConfig(path=tmp_path / "nope.jsonl"))


def test_http_pagination_etag_and_token(http_stub, monkeypatch):
    """HTTP pages are followed via `next`, sent with the bearer token, and 304 on the next run skips them."""
    monkeypatch.setenv("REVIEWS_TOKEN", "tok-123")

    def page1(h, body):
        if h.headers.get("If-None-Match") == '"v1"':
            return 304, {"ETag": '"v1"'}, b""
        return 200, {"ETag": '"v1"'}, {"reviews": [review(1)], "next": "/page2"}

    def page2(h, body):
        return 200, {}, {"reviews": [review(2)], "next": None}

    http_stub.routes[("GET", "/page1")] = page1
    http_stub.routes[("GET", "/page2")] = page2
    src = SourceConfig(url=http_stub.url + "/page1", token_env="REVIEWS_TOKEN", retries=0, timeout=5)
    first = read_source(src)
    assert [i.data["id"] for i in first.items] == ["acme/widgets#1", "acme/widgets#2"]
    assert http_stub.requests[0][2]["Authorization"] == "Bearer tok-123"
    second = read_source(src, first.cache)
    assert second.unchanged_pages == 1
    assert [i.data["id"] for i in second.items] == ["acme/widgets#2"]


@pytest.mark.parametrize("route, message", [
    (lambda h, b: (500, {}, b"boom"), "HTTP 500"),
    (lambda h, b: (200, {"Content-Type": "application/json"}, b"{oops"), "not valid JSON"),
])
def test_http_failures_are_source_errors(http_stub, route, message):
    """HTTP 500 (after retries) and invalid JSON fail the whole source with one line."""
    http_stub.routes[("GET", "/r")] = route
    with pytest.raises(SourceError, match=message):
        read_source(SourceConfig(url=http_stub.url + "/r", retries=1, timeout=5))


def test_http_500_is_retried(http_stub):
    """A transient 500 is retried and the source is then read."""
    calls = []

    def flaky(h, b):
        calls.append(1)
        return (500, {}, b"") if len(calls) == 1 else (200, {}, [review(1)])

    http_stub.routes[("GET", "/r")] = flaky
    items = read_source(SourceConfig(url=http_stub.url + "/r", retries=2, timeout=5)).items
    assert len(calls) == 2 and items[0].data["id"] == "acme/widgets#1"


def test_unreachable_url_is_source_error():
    """A URL nobody listens on fails quickly with 'cannot connect'."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(SourceError, match="cannot connect"):
        read_source(SourceConfig(url=f"http://127.0.0.1:{port}/r", retries=0, timeout=2))


def test_next_link_to_another_origin_is_refused(http_stub, monkeypatch):
    """A `next` link to another host never receives the bearer token: the source fails instead."""
    monkeypatch.setenv("REVIEWS_TOKEN", "tok-123")
    http_stub.routes[("GET", "/p")] = lambda h, b: (200, {}, {"reviews": [review(1)], "next": "http://169.254.169.254/steal"})
    with pytest.raises(SourceError, match="leaves the source's origin"):
        read_source(SourceConfig(url=http_stub.url + "/p", token_env="REVIEWS_TOKEN", retries=0, timeout=5))
    assert len(http_stub.requests) == 1


def test_non_utf8_http_body_is_refused(http_stub):
    """A page in Latin-1 without a charset fails the source instead of storing replacement characters."""
    http_stub.routes[("GET", "/p")] = lambda h, b: (200, {"Content-Type": "application/json"},
                                                    json.dumps([review(1, title="café")], ensure_ascii=False).encode("latin-1"))
    with pytest.raises(SourceError, match="not valid utf-8"):
        read_source(SourceConfig(url=http_stub.url + "/p", retries=0, timeout=5))


def test_oversized_response_is_refused(http_stub, monkeypatch):
    """A response larger than the cap fails the source without reading it all."""
    import newsletter.sources as sources
    monkeypatch.setattr(sources, "MAX_RESPONSE_BYTES", 1000)
    http_stub.routes[("GET", "/p")] = lambda h, b: (200, {}, [review(n) for n in range(50)])
    with pytest.raises(SourceError, match="larger than"):
        read_source(SourceConfig(url=http_stub.url + "/p", retries=0, timeout=5))


def test_long_retry_after_is_capped(http_stub, monkeypatch):
    """A Retry-After of a day is waited at most RETRY_AFTER_MAX seconds."""
    import time as _time
    import newsletter.sources as sources
    monkeypatch.setattr(sources, "RETRY_AFTER_MAX", 0.2)
    calls = []

    def route(h, b):
        calls.append(1)
        return (503, {"Retry-After": "86400"}, b"") if len(calls) == 1 else (200, {}, [review(1)])

    http_stub.routes[("GET", "/p")] = route
    start = _time.monotonic()
    items = read_source(SourceConfig(url=http_stub.url + "/p", retries=1, timeout=5)).items
    assert len(items) == 1 and _time.monotonic() - start < 5
