"""The HTTP provider transports' shared behaviour, against each fake provider on loopback."""

from __future__ import annotations

import math
import time

import pytest

from newsletter.errors import DeliveryError
from tests.provider_fakes import FAKES, KEY, ledger, prepare, send, transport_toml

KINDS = sorted(FAKES)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)


def setup(kind, http_stub, tmp_path, n, **kw):
    fake = FAKES[kind](http_stub)
    timeout = kw.pop("timeout", 2.0)
    config = prepare(tmp_path, n, transport_toml(kind, http_stub.url, timeout=timeout), **kw)
    return fake, config


@pytest.fixture(scope="module")
def messages_1201(tmp_path_factory):
    """1,201 composed messages of one issue (composing costs ~3 ms each, so it is done once)."""
    from newsletter.deliver import Composer
    from newsletter.job import links_for
    from newsletter.render import Renderer
    from newsletter.store import Store
    from tests.provider_fakes import NOW

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEWSLETTER_TEST_SECRET", "test-signing-key")
        config = prepare(tmp_path_factory.mktemp("m1201"), 1201, 'kind = "memory"\n')
        with Store(config.store_path) as store:
            from newsletter.compose import compose

            issue = compose(config, store, NOW)
            composer = Composer(config, issue, store.reviews_in_issue(issue.id), Renderer(config), links_for(config))
            subs = store.subscribers("active")
        return [composer.message(s, NOW) for s in subs]


@pytest.mark.parametrize("kind", KINDS)
def test_1201_recipients_in_fewest_requests(kind, http_stub, tmp_path, messages_1201):
    """1,201 recipients go out in ceil(1201 / cap) requests, each recipient exactly once with their own link."""
    from newsletter.config import load_config
    from newsletter.transports import make_transport
    from tests.conftest import make_config

    fake = FAKES[kind](http_stub)
    transport = make_transport(load_config(make_config(tmp_path, transport=transport_toml(kind, http_stub.url))))
    results = []
    for i in range(0, len(messages_1201), transport.max_batch):
        results += transport.send(messages_1201[i:i + transport.max_batch])
    assert fake.problems == []
    assert len(http_stub.requests) == math.ceil(1201 / fake.cap) == transport.calls
    assert max(fake.batch_sizes) == fake.cap
    assert [r.status for r in results] == ["sent"] * 1201 and all(r.provider_id for r in results)
    assert len(fake.inbox) == 1201 and set(fake.copies.values()) == {1}
    by_to = {m.recipient: m for m in messages_1201}
    for got in fake.inbox[::50]:
        want = by_to[got["to"]]
        assert got["html"] == want.fields["html"] and got["text"] == want.fields["text"]
        assert got["headers"]["List-Unsubscribe"] == want.fields["headers"]["List-Unsubscribe"]
    assert sum(got["to"] in other["html"] for got in fake.inbox[:3] for other in fake.inbox[3:40]) == 0


def test_1201_recipients_end_to_end(http_stub, tmp_path):
    """`send` of 1,201 subscribers through Resend: 13 requests of ≤ 100, everyone sent exactly once."""
    fake, config = setup("resend", http_stub, tmp_path, 1201)
    issue, summary = send(config)
    assert fake.problems == [] and fake.batch_sizes == [100] * 12 + [1]
    assert summary.requests == 13 and summary.ledger == {"sent": 1201} and summary.ok
    assert len(fake.copies) == 1201 and set(fake.copies.values()) == {1}
    assert "" not in {v[1] for v in ledger(config).values()}


@pytest.mark.parametrize("kind", KINDS)
def test_each_recipient_gets_own_unsubscribe_link(kind, http_stub, tmp_path):
    """Each delivered copy carries its own List-Unsubscribe and unsubscribe link, not a neighbour's."""
    fake, config = setup(kind, http_stub, tmp_path, 5)
    send(config)
    from newsletter.job import links_for

    links = links_for(config)
    assert fake.problems == []
    for m in fake.inbox:
        url = links.unsubscribe_url(m["to"])
        assert m["headers"]["List-Unsubscribe"].startswith(f"<{url}>")
        assert m["headers"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert url in m["text"]
        assert m["name"] == f"Reader {m['to'][1:5].lstrip('0') or '0'}"


@pytest.mark.parametrize("kind", KINDS)
def test_429_waits_for_retry_after(kind, http_stub, tmp_path, monkeypatch):
    """A 429 with Retry-After is retried after exactly that wait and every recipient gets one copy."""
    from newsletter.transports import http_api

    waits = []
    monkeypatch.setattr(http_api, "_sleep", waits.append)
    fake, config = setup(kind, http_stub, tmp_path, 3)
    fake.faults = [("status", 429, {"Retry-After": "7"}, {"message": "too many requests"})]
    _, summary = send(config)
    assert waits == [7.0]
    assert len(http_stub.requests) == 2 and summary.ledger == {"sent": 3}
    assert set(fake.copies.values()) == {1}


def test_429_really_waits(http_stub, tmp_path):
    """On the wall clock: a 429 with `Retry-After: 1` delays the retry by at least a second."""
    fake, config = setup("postmark", http_stub, tmp_path, 2)
    fake.faults = [("status", 429, {"Retry-After": "1"}, {"ErrorCode": 429, "Message": "Rate limit exceeded"})]
    t0 = time.monotonic()
    _, summary = send(config)
    assert time.monotonic() - t0 >= 1.0 and summary.ledger == {"sent": 2}


def test_retry_after_longer_than_the_cap_gives_up_for_this_run(http_stub, tmp_path, monkeypatch):
    """A Retry-After beyond [delivery] retry_after_max is not slept through: the run pauses, rows stay pending."""
    from newsletter.transports import http_api

    waits = []
    monkeypatch.setattr(http_api, "_sleep", waits.append)
    fake, config = setup("sendgrid", http_stub, tmp_path, 2, delivery="retry_after_max = 5\nmax_attempts = 1\n")
    fake.faults = [("status", 429, {"Retry-After": "3600"}, {"errors": [{"message": "too many requests"}]})]
    _, summary = send(config)
    assert waits == [] and summary.ledger == {"pending": 2}
    assert "asked to wait 3600 s" in summary.paused and len(http_stub.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_500_is_retried_with_backoff(kind, http_stub, tmp_path):
    """Two 500s then success: three requests, all sent once."""
    fake, config = setup(kind, http_stub, tmp_path, 3)
    fake.faults = [("status", 500, {}, {"message": "boom"}), ("status", 503, {}, b"busy")]
    _, summary = send(config)
    assert len(http_stub.requests) == 3 and summary.ledger == {"sent": 3}


@pytest.mark.parametrize("kind", KINDS)
def test_persistent_500_fails_after_max_attempts(kind, http_stub, tmp_path):
    """A provider answering 500 to every try leaves the recipients failed (transient, gave up), reported."""
    fake, config = setup(kind, http_stub, tmp_path, 2, delivery="max_attempts = 2\n")
    fake.faults = [("status", 500, {}, {"message": "boom"})] * 10
    _, summary = send(config)
    assert summary.ledger == {"failed": 2} and not summary.ok
    assert len(http_stub.requests) == 4      # 2 rounds × 2 attempts
    assert all("gave up after 2 attempts" in v[2] and "HTTP 500" in v[2] for v in ledger(config).values())


@pytest.mark.parametrize("fault", [("slow", 0.8), ("drop",)], ids=["slow", "dropped"])
@pytest.mark.parametrize("kind", ["sendgrid", "mailgun", "postmark"])
def test_lost_answer_without_idempotency_is_unknown(kind, fault, http_stub, tmp_path):
    """No answer after the request went out: without an idempotency key the fate is unknown, reported, not resent."""
    fake, config = setup(kind, http_stub, tmp_path, 3, timeout=0.4)
    fake.faults = [fault]
    _, summary = send(config)
    assert summary.ledger == {"unknown": 3} and not summary.ok
    assert len(http_stub.requests) == 1
    assert set(fake.copies.values()) == {1}     # the provider did take them
    _, again = send(config)                    # policy "skip": nothing sent twice
    assert len(http_stub.requests) == 1 and again.ledger == {"unknown": 3}
    _, forced = send(config, resend_unknown=True)
    assert forced.ledger == {"sent": 3} and set(fake.copies.values()) == {2}   # the documented risk


@pytest.mark.parametrize("fault", [("slow", 0.8), ("drop",)], ids=["slow", "dropped"])
def test_lost_answer_with_idempotency_key_is_retried_once(fault, http_stub, tmp_path):
    """Resend: a lost answer is retried with the same Idempotency-Key, so each recipient still has one copy."""
    fake, config = setup("resend", http_stub, tmp_path, 3, timeout=0.4)
    fake.faults = [fault]
    _, summary = send(config)
    assert summary.ledger == {"sent": 3}
    assert len(http_stub.requests) == 2 and fake.replays == 1
    assert set(fake.copies.values()) == {1}
    keys = {r[2]["Idempotency-Key"] for r in http_stub.requests}
    assert len(keys) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_connection_refused_is_retried_then_reported(kind, tmp_path, monkeypatch):
    """A provider that cannot be reached: nothing was sent, rows stay retryable and end failed after the attempts."""
    import socket

    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    config = prepare(tmp_path, 2, transport_toml(kind, f"http://127.0.0.1:{port}"), delivery="max_attempts = 2\n")
    _, summary = send(config)
    assert summary.ledger == {"failed": 2}
    assert all("cannot connect" in v[2] for v in ledger(config).values())


@pytest.mark.parametrize("kind", KINDS)
def test_bad_key_stops_the_run_and_keeps_rows_pending(kind, http_stub, tmp_path):
    """401 stops the run with one clear error; nothing is marked sent or failed."""
    fake, config = setup(kind, http_stub, tmp_path, 3)
    fake.faults = [("status", 401, {}, {"message": "The provided authorization grant is invalid"})]
    with pytest.raises(DeliveryError, match="HTTP 401"):
        send(config)
    assert {v[0] for v in ledger(config).values()} == {"pending"}
    _, summary = send(config)
    assert summary.ledger == {"sent": 3}


@pytest.mark.parametrize("kind", KINDS)
def test_non_ascii_local_part_fails_alone(kind, http_stub, tmp_path):
    """A recipient with a non-ASCII local part fails with a reason; the others are sent."""
    from newsletter.models import Subscriber

    subs = [Subscriber("alice@example.com"), Subscriber("用户@example.com"), Subscriber("bob@example.com")]
    fake = FAKES[kind](http_stub)
    config = prepare(tmp_path, 0, transport_toml(kind, http_stub.url), subscribers=subs)
    _, summary = send(config)
    rows = ledger(config)
    assert rows["用户@example.com"][0] == "failed" and "non-ASCII local part" in rows["用户@example.com"][2]
    assert sorted(fake.copies) == ["alice@example.com", "bob@example.com"]


@pytest.mark.parametrize("kind", KINDS)
def test_display_names_and_idna_domains(kind, http_stub, tmp_path):
    """Names with commas, quotes and Chinese arrive intact; an internationalised domain goes out as IDNA."""
    from newsletter.models import Subscriber

    subs = [Subscriber("doe@example.com", "Doe, John"), Subscriber("q@example.com", 'Ann "Q" Lee'),
            Subscriber("zhang@例子.测试", "张三")]
    fake = FAKES[kind](http_stub)
    config = prepare(tmp_path, 0, transport_toml(kind, http_stub.url), subscribers=subs)
    send(config)
    assert fake.problems == []
    got = {m["to"]: m["name"] for m in fake.inbox}
    assert got == {"doe@example.com": "Doe, John", "q@example.com": 'Ann "Q" Lee',
                   "zhang@xn--fsqu00a.xn--0zwm56d": "张三"}


@pytest.mark.parametrize("kind, answer, ledger", [
    # Resend keeps idempotency keys: the batch is replayed under the same key and ends sent.
    ("resend", {"data": [1, 2, 3]}, {"sent": 2}),
    ("resend", {"data": [], "errors": 5}, {"sent": 2}),
    ("postmark", [{"ErrorCode": [1]}], {"unknown": 2}),
])
def test_accepted_answer_of_wrong_shape_is_unknown(kind, answer, ledger, http_stub, tmp_path):
    """A 200 whose body is not the documented shape makes the batch's fate unknown, with no traceback."""
    fake, config = setup(kind, http_stub, tmp_path, 2)
    fake.faults = [("status", 200, {}, answer)]
    _, summary = send(config)
    assert summary.ledger == ledger
    keys = {r[2].get("Idempotency-Key") for r in http_stub.requests}
    assert len(keys) == 1


def test_api_key_echoed_by_a_provider_is_redacted(http_stub, tmp_path):
    """An error text that repeats the API key is stored and shown without it."""
    fake, config = setup("postmark", http_stub, tmp_path, 1)
    key = config.secret(config.transport.options["api_key_env"], "k")
    fake.faults = [("status", 422, {}, {"ErrorCode": 300, "Message": f"bad key {key}"})]
    _, summary = send(config)
    assert key not in " ".join(summary.errors) and "[api key]" in " ".join(summary.errors)


def test_a_dripping_answer_is_cut_at_the_timeout(http_stub, tmp_path):
    """A provider sending its answer one byte at a time cannot hold the send past the timeout: fate unknown."""
    import time as _time
    fake, config = setup("postmark", http_stub, tmp_path, 2, timeout=1.0)
    fake.faults = [("drip", 0.2, 4.0)]
    start = _time.monotonic()
    _, summary = send(config)
    assert _time.monotonic() - start < 3.5
    assert summary.ledger == {"unknown": 2}
