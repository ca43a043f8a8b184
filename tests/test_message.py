"""One RFC 5322 message per recipient: headers, encodings, injection safety."""

import email
from datetime import datetime, timezone
from email import policy

import pytest

from newsletter.message import build_message, idna_address, list_id_header, parse_sender

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=timezone.utc)


def build(**over):
    args = dict(sender=parse_sender("评审 Reviews <reviews@example.org>"), reply_to="maintainers@example.org",
                to_name="Rivera, Alex", to_addr="alex@example.org", subject="周报 · 2026-W48 · 3",
                html="<html lang=\"zh-CN\"><body>你好</body></html>", text="你好", issue_id="2026-W48",
                list_id="weekly.reviews.example.org", list_title="vLLM 代码评审周报",
                unsubscribe_url="https://reviews.example.org/unsubscribe?t=abc",
                unsubscribe_mailto="unsubscribe@example.org", now=NOW)
    args.update(over)
    return build_message(**args)


def parse(msg):
    return email.message_from_bytes(msg.data, policy=policy.default)


def test_required_headers_and_parts():
    """The message has every header DESIGN.md lists and text + html alternatives."""
    m = parse(build())
    for h in ("From", "To", "Subject", "Date", "Message-ID", "List-Id", "List-Unsubscribe",
              "List-Unsubscribe-Post", "Reply-To", "MIME-Version"):
        assert m[h], h
    assert m.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in m.iter_parts()] == ["text/plain", "text/html"]
    assert m["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert m["List-Unsubscribe"] == "<https://reviews.example.org/unsubscribe?t=abc>, <mailto:unsubscribe@example.org?subject=unsubscribe>"
    assert m.get_body(("html",)).get_content() .startswith('<html lang="zh-CN">')


def test_non_ascii_headers_are_rfc2047_and_address_plain():
    """Chinese subject and display names are encoded words; the addresses stay plain ASCII."""
    msg = build()
    raw = msg.data.decode("ascii")  # the whole message is 7-bit
    assert "=?utf-8?" in raw.lower()
    assert "<alex@example.org>" in raw and "<reviews@example.org>" in raw
    m = parse(msg)
    assert m["Subject"] == "周报 · 2026-W48 · 3"
    assert m["To"].addresses[0].display_name == "Rivera, Alex"
    assert m["From"].addresses[0].display_name == "评审 Reviews"


def test_crlf_line_endings():
    """Every line ends with CRLF."""
    data = build().data
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")


@pytest.mark.parametrize("field", ["subject", "to_name", "list_title", "reply_to"])
def test_line_breaks_cannot_inject_headers(field):
    """CR, LF and Unicode line separators in any header input never create a new header."""
    m = parse(build(**{field: "x\r\nBcc: victim@example.org\u2028X-Evil: 1"}))
    assert m["Bcc"] is None and m["X-Evil"] is None


def test_message_id_is_stable_per_issue_and_recipient():
    """The same issue and recipient give the same Message-ID; another recipient a different one."""
    assert build().message_id == build().message_id
    assert build().message_id != build(to_addr="sam@example.org").message_id


def test_idna_domain():
    """An internationalised domain is written in IDNA form."""
    assert idna_address("用户@例子.测试") == "用户@xn--fsqu00a.xn--0zwm56d"
    m = parse(build(to_addr="alex@bücher.example"))
    assert m["To"].addresses[0].addr_spec == "alex@xn--bcher-kva.example"


def test_list_id_phrase():
    """List-Id carries the list id in angle brackets and an encoded title."""
    assert list_id_header("Plain", "a.b").endswith("<a.b>")
    assert list_id_header("周报", "a.b").startswith("=?utf-8?")


@pytest.mark.parametrize("field", ["to_name", "subject", "list_title"])
def test_encoded_words_in_data_cannot_inject_headers(field):
    """Data spelling an RFC 2047 encoded word with CR LF inside never becomes a header or a body."""
    evil = "=?utf-8?q?Eve=0D=0ABcc:_list@evil.com?="
    msg = build(**{field: evil})
    raw = msg.data.decode("ascii")
    head = raw.split("\r\n\r\n", 1)[0]
    m = parse(msg)
    assert m["Bcc"] is None
    assert not any(line.lower().startswith("bcc:") for line in head.split("\r\n"))
