"""Provider webhooks (newsletter.webhooks) and /webhooks/<provider>: signatures good and bad, events → suppression."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime, timezone

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import make_config, review, write_jsonl
from newsletter.config import load_config
from newsletter.models import Subscriber
from newsletter.store import Store
from newsletter.web import create_app
from newsletter.webhooks import WebhookRefused, handle

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
TS = str(int(NOW.timestamp()))
MAILGUN_KEY = "key-mailgun-signing"
POSTMARK_AUTH = "hook:p4ss"
RESEND_KEY = b"resend-test-secret-0123456789abc"
RESEND_SECRET = "whsec_" + base64.b64encode(RESEND_KEY).decode()


@pytest.fixture(scope="module")
def sendgrid_key():
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def env(tmp_path, monkeypatch, sendgrid_key):
    der = sendgrid_key.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
    monkeypatch.setenv("NEWSLETTER_SENDGRID_WEBHOOK_KEY", base64.b64encode(der).decode())
    monkeypatch.setenv("NEWSLETTER_MAILGUN_SIGNING_KEY", MAILGUN_KEY)
    monkeypatch.setenv("NEWSLETTER_POSTMARK_WEBHOOK_AUTH", POSTMARK_AUTH)
    monkeypatch.setenv("NEWSLETTER_RESEND_WEBHOOK_SECRET", RESEND_SECRET)
    write_jsonl(tmp_path / "reviews.jsonl", [review(1)])
    config = load_config(make_config(tmp_path))
    with Store(config.store_path) as st:
        for addr in ("a@example.org", "b@example.org", "c@example.org"):
            st.upsert_subscriber(Subscriber(addr), NOW)
    app = create_app(config, clock=lambda: NOW)

    class E:
        pass

    e = E()
    e.config, e.client = config, app.test_client(use_cookies=False)

    def status(addr):
        with Store(config.store_path) as st:
            sub = st.get_subscriber(addr)
            return sub.status if sub else None

    e.status = status
    return e


# --- signing helpers (what each provider does) --------------------------------------------

def sendgrid_request(key, events, ts=TS):
    body = json.dumps(events).encode()
    sig = key.sign(ts.encode() + body, ec.ECDSA(hashes.SHA256()))
    return body, {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(sig).decode(),
                  "X-Twilio-Email-Event-Webhook-Timestamp": ts, "Content-Type": "application/json"}


def mailgun_request(event_data, key=MAILGUN_KEY, ts=TS, token="tok-123"):
    sig = hmac.new(key.encode(), (ts + token).encode(), hashlib.sha256).hexdigest()
    body = json.dumps({"signature": {"timestamp": ts, "token": token, "signature": sig},
                       "event-data": event_data}).encode()
    return body, {"Content-Type": "application/json"}


def postmark_request(payload, auth=POSTMARK_AUTH):
    return json.dumps(payload).encode(), {"Content-Type": "application/json",
                                          "Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}


def resend_request(payload, key=RESEND_KEY, ts=TS, sid="msg_2abc"):
    body = json.dumps(payload).encode()
    sig = base64.b64encode(hmac.new(key, f"{sid}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
    return body, {"svix-id": sid, "svix-timestamp": ts, "svix-signature": f"v1,bm90LXRoaXM= v1,{sig}",
                  "Content-Type": "application/json"}


def post(env, provider, body, headers):
    return env.client.post(f"/webhooks/{provider}", data=body, headers=headers)


# --- SendGrid -----------------------------------------------------------------------------

def test_sendgrid_signed_bounce_and_spamreport_suppress(env, sendgrid_key):
    """A correctly signed SendGrid batch marks the bounce 'bounced' and the spam report 'complained'."""
    body, headers = sendgrid_request(sendgrid_key, [
        {"email": "a@example.org", "event": "bounce", "type": "bounce", "reason": "550 no such user",
         "sg_event_id": "e1", "timestamp": 1},
        {"email": "b@example.org", "event": "spamreport", "sg_event_id": "e2"},
        {"email": "c@example.org", "event": "bounce", "type": "blocked", "sg_event_id": "e3"},
        {"email": "c@example.org", "event": "delivered", "sg_event_id": "e4"}])
    r = post(env, "sendgrid", body, headers)
    assert r.status_code == 200 and r.json["suppressed"] == 2
    assert (env.status("a@example.org"), env.status("b@example.org"), env.status("c@example.org")) == \
        ("bounced", "complained", "active")


def test_sendgrid_bad_signature_is_refused(env, sendgrid_key):
    """An altered body, another key's signature or a stale timestamp gets 401 and changes nothing."""
    events = [{"email": "a@example.org", "event": "bounce", "sg_event_id": "e1"}]
    body, headers = sendgrid_request(sendgrid_key, events)
    assert post(env, "sendgrid", body.replace(b"a@", b"b@"), headers).status_code == 401
    body, headers = sendgrid_request(ec.generate_private_key(ec.SECP256R1()), events)
    assert post(env, "sendgrid", body, headers).status_code == 401
    body, headers = sendgrid_request(sendgrid_key, events, ts=str(int(NOW.timestamp()) - 3600))
    assert post(env, "sendgrid", body, headers).status_code == 401
    assert post(env, "sendgrid", body, {"Content-Type": "application/json"}).status_code == 401
    assert env.status("a@example.org") == "active"


def test_sendgrid_key_may_be_pem(env, sendgrid_key, monkeypatch):
    """The verification key is accepted as PEM as well as bare base64 DER."""
    pem = sendgrid_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    body, headers = sendgrid_request(sendgrid_key, [{"email": "a@example.org", "event": "bounce"}])
    events = handle(env.config, "sendgrid", headers, body, NOW,
                    environ={"NEWSLETTER_SENDGRID_WEBHOOK_KEY": pem})
    assert [(e.email, e.status) for e in events] == [("a@example.org", "bounced")]


# --- Mailgun ------------------------------------------------------------------------------

def test_mailgun_permanent_failure_and_complaint(env):
    """Mailgun 'failed' + permanent → bounced; 'complained' → complained; temporary failures are ignored."""
    body, h = mailgun_request({"event": "failed", "severity": "permanent", "recipient": "a@example.org",
                               "id": "m1", "reason": "bounce"})
    assert post(env, "mailgun", body, h).status_code == 200
    body, h = mailgun_request({"event": "failed", "severity": "temporary", "recipient": "c@example.org", "id": "m2"},
                              token="tok-2")
    assert post(env, "mailgun", body, h).json["events"] == 0
    body, h = mailgun_request({"event": "complained", "recipient": "b@example.org", "id": "m3"}, token="tok-3")
    post(env, "mailgun", body, h)
    assert (env.status("a@example.org"), env.status("b@example.org"), env.status("c@example.org")) == \
        ("bounced", "complained", "active")


def test_mailgun_signature_cannot_be_reused_for_another_recipient(env):
    """A captured Mailgun signature replayed with a different recipient suppresses nobody."""
    body, h = mailgun_request({"event": "complained", "recipient": "a@example.org", "id": "m1"}, token="tok-9")
    assert post(env, "mailgun", body, h).json["suppressed"] == 1
    body, h = mailgun_request({"event": "complained", "recipient": "b@example.org", "id": "m2"}, token="tok-9")
    assert post(env, "mailgun", body, h).json["duplicate"] == 1
    assert env.status("b@example.org") == "active"


def test_deeply_nested_body_is_400(env):
    """A body nested 100,000 levels deep is refused with 400, not a server error."""
    assert post(env, "mailgun", b"[" * 100000 + b"]" * 100000, {"Content-Type": "application/json"}).status_code == 400


def test_mailgun_bad_signature_is_refused(env):
    """A signature made with the wrong key, or a stale timestamp, gets 401."""
    ev = {"event": "complained", "recipient": "a@example.org", "id": "m1"}
    body, h = mailgun_request(ev, key="wrong")
    assert post(env, "mailgun", body, h).status_code == 401
    body, h = mailgun_request(ev, ts=str(int(NOW.timestamp()) + 900))
    assert post(env, "mailgun", body, h).status_code == 401
    assert post(env, "mailgun", b"not json", {}).status_code == 400
    assert env.status("a@example.org") == "active"


# --- Postmark -----------------------------------------------------------------------------

def test_postmark_hard_bounce_and_spam_complaint(env):
    """Postmark HardBounce → bounced, SpamComplaint → complained, SoftBounce ignored."""
    assert post(env, "postmark", *postmark_request(
        {"RecordType": "Bounce", "ID": 42, "Type": "HardBounce", "TypeCode": 1, "Email": "a@example.org",
         "Inactive": True})).status_code == 200
    post(env, "postmark", *postmark_request(
        {"RecordType": "SpamComplaint", "ID": 43, "Type": "SpamComplaint", "TypeCode": 512,
         "Email": "b@example.org"}))
    post(env, "postmark", *postmark_request(
        {"RecordType": "Bounce", "ID": 44, "Type": "SoftBounce", "Email": "c@example.org", "Inactive": False}))
    assert (env.status("a@example.org"), env.status("b@example.org"), env.status("c@example.org")) == \
        ("bounced", "complained", "active")


def test_postmark_wrong_credentials_are_refused(env):
    """Postmark signs nothing: wrong or missing basic-auth credentials get 401."""
    payload = {"RecordType": "Bounce", "ID": 1, "Type": "HardBounce", "Email": "a@example.org"}
    assert post(env, "postmark", *postmark_request(payload, auth="hook:wrong")).status_code == 401
    assert post(env, "postmark", json.dumps(payload).encode(), {}).status_code == 401
    assert env.status("a@example.org") == "active"


# --- Resend -------------------------------------------------------------------------------

def test_resend_svix_signed_bounce_and_complaint(env):
    """Resend email.bounced → bounced and email.complained → complained, for every address in data.to."""
    r = post(env, "resend", *resend_request({"type": "email.bounced", "created_at": "2026-11-20T12:00:00Z",
                                             "data": {"email_id": "x1", "to": ["a@example.org", "c@example.org"],
                                                      "bounce": {"message": "mailbox does not exist"}}}))
    assert r.status_code == 200 and r.json["suppressed"] == 2
    post(env, "resend", *resend_request({"type": "email.complained", "data": {"to": ["b@example.org"]}},
                                        sid="msg_2"))
    assert (env.status("a@example.org"), env.status("b@example.org"), env.status("c@example.org")) == \
        ("bounced", "complained", "bounced")


def test_resend_bad_signature_is_refused(env):
    """A Svix signature with another secret, a stale timestamp or an altered body gets 401."""
    payload = {"type": "email.bounced", "data": {"to": ["a@example.org"]}}
    assert post(env, "resend", *resend_request(payload, key=b"other")).status_code == 401
    assert post(env, "resend", *resend_request(payload, ts=str(int(NOW.timestamp()) - 301))).status_code == 401
    body, h = resend_request(payload)
    assert post(env, "resend", body.replace(b"a@", b"b@"), h).status_code == 401
    assert env.status("a@example.org") == "active"


# --- common -------------------------------------------------------------------------------

def test_unconfigured_or_unknown_provider_is_404(env, monkeypatch):
    """A provider without its secret variable, or an unknown one, is switched off."""
    monkeypatch.delenv("NEWSLETTER_MAILGUN_SIGNING_KEY")
    body, h = mailgun_request({"event": "complained", "recipient": "a@example.org"})
    r = post(env, "mailgun", body, h)
    assert r.status_code == 404 and r.json == post(env, "sparkpost", b"{}", {}).json | {"error": "unknown provider 'mailgun'"}
    assert "NEWSLETTER_MAILGUN_SIGNING_KEY" not in r.text
    assert MAILGUN_KEY not in r.text
    assert post(env, "sparkpost", b"{}", {}).status_code == 404


def test_duplicate_event_is_counted_once(env):
    """A retried delivery of the same event id is recorded as a duplicate."""
    body, h = mailgun_request({"event": "complained", "recipient": "a@example.org", "id": "same"})
    assert post(env, "mailgun", body, h).json["suppressed"] == 1
    assert post(env, "mailgun", body, h).json["duplicate"] == 1
    with Store(env.config.store_path) as st:
        assert len(st.suppression_log("a@example.org")) == 1


def test_bounce_for_unknown_address_blocks_a_later_import(env):
    """A bounce for an address not on the list is remembered: importing it later does not activate it."""
    import io

    from newsletter.subscribers import import_csv

    post(env, "postmark", *postmark_request({"RecordType": "Bounce", "ID": 9, "Type": "HardBounce",
                                             "Email": "stranger@example.org"}))
    with Store(env.config.store_path) as st:
        report = import_csv(st, io.StringIO("email,name,tags\nstranger@example.org,S,\n"), "x.csv", NOW)
    assert report.suppressed == 1 and env.status("stranger@example.org") == "bounced"


def test_handle_rejects_malformed_shapes(env):
    """Postmark posts one JSON object: an array is refused with 400."""
    with pytest.raises(WebhookRefused) as exc:
        handle(env.config, "postmark", {"Authorization": "Basic " + base64.b64encode(POSTMARK_AUTH.encode()).decode()},
               b"[]", NOW)
    assert exc.value.status == 400
