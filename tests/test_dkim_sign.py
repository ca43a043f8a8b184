"""DKIM signing (newsletter.dkim_sign) through the real SMTP transport, verified with dkimpy."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import make_config, review, write_jsonl
from newsletter.config import load_config
from newsletter.dkim_sign import SIGNED_HEADERS, DkimSigner, signer_from_config
from newsletter.errors import ConfigError
from newsletter.message import build_message, parse_sender
from newsletter.transports import make_transport

NOW = datetime(2026, 11, 23, 1, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def dns_for(key, selector="news", domain="example.org"):
    """A dnsfunc answering the TXT record <selector>._domainkey.<domain> with the key's public half."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)

    def dnsfunc(name, timeout=5):
        return record if name == f"{selector}._domainkey.{domain}.".encode() else None
    return dnsfunc


def sample_message():
    return build_message(
        sender=parse_sender("Widget Reviews <reviews@example.org>"), reply_to="", to_name="读者",
        to_addr="reader@example.net", subject="Widget 评审周报 · 2026-W47", html="<p>评审</p>", text="评审",
        issue_id="2026-W47", list_id="weekly.example.org", list_title="Widget 评审周报",
        unsubscribe_url="https://app.example.org/unsubscribe?t=abc", unsubscribe_mailto="unsubscribe@example.org",
        now=NOW)


def test_signature_verifies_and_covers_list_unsubscribe(rsa_key):
    """A signed message verifies with the public key, and h= lists both List-Unsubscribe headers."""
    signed = DkimSigner(pem(rsa_key), "news", "example.org").sign(sample_message().data)
    assert signed.startswith(b"DKIM-Signature:")
    assert dkim.verify(signed, dnsfunc=dns_for(rsa_key))
    header = signed.split(b"\r\n\r\n")[0].decode()
    h_tag = header.split(" h=")[1].split(";")[0]
    names = {"".join(n.split()).lower() for n in h_tag.split(":")}
    for name in ("from", "to", "subject", "date", "message-id", "list-id", "list-unsubscribe", "list-unsubscribe-post"):
        assert name in names


def test_altered_unsubscribe_header_breaks_the_signature(rsa_key):
    """Changing List-Unsubscribe after signing makes verification fail (the header is covered)."""
    signed = DkimSigner(pem(rsa_key), "news", "example.org").sign(sample_message().data)
    forged = signed.replace(b"unsubscribe?t=abc", b"unsubscribe?t=evil")
    assert forged != signed
    assert not dkim.verify(forged, dnsfunc=dns_for(rsa_key))


def test_smtp_transport_signs_what_it_sends(tmp_path, smtp_sink, rsa_key):
    """With dkim_key_path set, the message the SMTP server receives carries a valid DKIM signature."""
    (tmp_path / "dkim.pem").write_bytes(pem(rsa_key))
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    config = load_config(make_config(tmp_path, transport=f'''kind = "smtp"
host = "{smtp_sink.host}"
port = {smtp_sink.port}
security = "none"
dkim_key_path = "dkim.pem"
dkim_selector = "news"'''))
    transport = make_transport(config)
    try:
        [result] = transport.send([sample_message()])
    finally:
        transport.close()
    assert result.status == "sent"
    data = smtp_sink.messages[0][2]
    assert data.startswith(b"DKIM-Signature:")
    assert b"d=example.org" in data.split(b"\r\n\r\n")[0].replace(b"\r\n ", b" ")
    assert dkim.verify(data, dnsfunc=dns_for(rsa_key))


def test_smtp_without_dkim_options_does_not_sign(tmp_path, smtp_sink):
    """DKIM is optional: without dkim_key_path nothing is added."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    config = load_config(make_config(tmp_path, transport=f'kind = "smtp"\nhost = "{smtp_sink.host}"\n'
                                                          f'port = {smtp_sink.port}\nsecurity = "none"'))
    assert signer_from_config(config) is None
    transport = make_transport(config)
    transport.send([sample_message()])
    transport.close()
    assert b"DKIM-Signature" not in smtp_sink.messages[0][2]


def test_bad_dkim_options_are_config_errors(tmp_path):
    """A missing key file, a file that is not a key, or no selector: one line naming the option."""
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    base = 'kind = "smtp"\nhost = "127.0.0.1"\nsecurity = "none"\n'
    config = load_config(make_config(tmp_path, transport=base + 'dkim_key_path = "nope.pem"\ndkim_selector = "s"'))
    with pytest.raises(ConfigError, match="dkim_key_path"):
        signer_from_config(config)
    (tmp_path / "k.pem").write_text("hello")
    config = load_config(make_config(tmp_path, transport=base + 'dkim_key_path = "k.pem"\ndkim_selector = "s"'))
    with pytest.raises(ConfigError, match="not a PEM private key"):
        signer_from_config(config)
    (tmp_path / "k.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    config = load_config(make_config(tmp_path, transport=base + 'dkim_key_path = "k.pem"'))
    with pytest.raises(ConfigError, match="dkim_selector"):
        signer_from_config(config)


def test_signed_header_list_includes_the_bulk_sender_headers():
    """The default h= set holds From, To, Subject, Date, Message-ID, List-Id and both List-Unsubscribe headers."""
    for name in ("From", "To", "Subject", "Date", "Message-ID", "List-Id", "List-Unsubscribe", "List-Unsubscribe-Post"):
        assert name in SIGNED_HEADERS
    with pytest.raises(ConfigError):
        DkimSigner(b"", "s", "example.org", headers=("To",))
