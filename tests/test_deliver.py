"""The send loop: pacing, pause after failures, retry-failed, unknown-fate policy, and resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from newsletter.config import load_config
from newsletter.errors import ConfigError
from newsletter.models import DeliveryResult
from newsletter.store import Store
from newsletter.transports.memory import MemoryTransport
from tests.provider_fakes import KEY, NOW, FakeResend, ledger, prepare, send, transport_toml

MEMORY = 'kind = "memory"\n'


def test_delivery_table_defaults_and_errors(tmp_path):
    """[delivery] keys have documented defaults; a bad policy or negative rate names the key."""
    config = prepare(tmp_path, 0, MEMORY)
    d = config.delivery
    assert (d.rate, d.max_attempts, d.pause_after_failures, d.unknown) == (0.0, 3, 10, "skip")
    text = config.path.read_text()
    config.path.write_text(text + 'unknown = "maybe"\n')
    with pytest.raises(ConfigError, match=r"\[delivery\] unknown must be one of skip, resend"):
        load_config(config.path)
    config.path.write_text(text + "rate = -1\n")
    with pytest.raises(ConfigError, match=r"\[delivery\] rate"):
        load_config(config.path)


def test_pause_after_consecutive_failures_then_resume(tmp_path):
    """After N failures in a row the run stops cleanly with the rest pending; the next run finishes the job."""
    config = prepare(tmp_path, 12, MEMORY, delivery="pause_after_failures = 3\nmax_attempts = 1\nbatch_size = 2\n")
    down = MemoryTransport(fail=lambda r: DeliveryResult(r, "retry", error="HTTP 503: busy"))
    _, first = send(config, transport=down)
    assert first.paused and "failures in a row" in first.paused and not first.ok
    assert first.ledger == {"failed": 4, "pending": 8}
    up = MemoryTransport()
    _, second = send(config, transport=up, retry_failed=True)
    assert second.ledger == {"sent": 12} and second.ok and len(up.sent) == 12


def test_rate_limits_messages_per_second(tmp_path, monkeypatch):
    """rate = 20 spaces 30 messages over ~1.5 s of waits."""
    from newsletter import pacing

    config = prepare(tmp_path, 30, MEMORY, delivery="rate = 20\nbatch_size = 5\n")
    waits = []

    class FakeTime:
        now = 0.0

        @staticmethod
        def monotonic():
            return FakeTime.now

        @staticmethod
        def sleep(s):
            waits.append(s)
            FakeTime.now += s

    monkeypatch.setattr(pacing, "time", FakeTime)
    _, summary = send(config, transport=MemoryTransport())
    assert summary.ledger == {"sent": 30}
    assert sum(waits) == pytest.approx(25 / 20)        # the first batch leaves at once


def test_rate_limiter_spaces_batches():
    """RateLimiter: n messages take n/rate seconds of the budget."""
    from newsletter.pacing import RateLimiter

    t, slept = [0.0], []
    lim = RateLimiter(10, sleep=lambda s: (slept.append(s), t.__setitem__(0, t[0] + s)), monotonic=lambda: t[0])
    lim.acquire(5)
    lim.acquire(5)
    lim.acquire(1)
    assert slept == [pytest.approx(0.5), pytest.approx(0.5)]


def test_retry_failed_requeues_only_failed(tmp_path):
    """`send --retry-failed` sends again to failed recipients and to nobody already sent."""
    config = prepare(tmp_path, 4, MEMORY, delivery="max_attempts = 1\n")
    first = MemoryTransport(fail=lambda r: DeliveryResult(r, "failed", error="550 no") if r.startswith("r0001") else None)
    send(config, transport=first)
    second = MemoryTransport()
    _, summary = send(config, transport=second)
    assert second.sent == [] and summary.ledger == {"sent": 3, "failed": 1}
    _, summary = send(config, transport=second, retry_failed=True)
    assert [m.recipient for m in second.sent] == ["r0001@example.com"] and summary.ledger == {"sent": 4}


def _interrupt(config, emails):
    """Leave rows as a killed run would: 'sending'."""
    with Store(config.store_path) as store:
        from newsletter.compose import compose

        issue = compose(config, store, NOW)
        store.enqueue(issue.id, NOW)
        store.mark_sending(issue.id, emails, "deadbeef", NOW)


@pytest.mark.parametrize("policy, resent", [("skip", 0), ("resend", 2)])
def test_unknown_policy_for_non_idempotent_transport(tmp_path, policy, resent):
    """Rows a dead run left 'sending' become unknown: `skip` reports them, `resend` sends them again."""
    config = prepare(tmp_path, 4, MEMORY, delivery=f'unknown = "{policy}"\n')
    _interrupt(config, ["r0000@example.com", "r0001@example.com"])
    t = MemoryTransport()
    _, summary = send(config, transport=t)
    assert len(t.sent) == 2 + resent
    assert summary.ledger == ({"sent": 2, "unknown": 2} if policy == "skip" else {"sent": 4})
    rows = ledger(config)
    if policy == "skip":
        assert rows["r0000@example.com"][0] == "unknown" and "fate unknown" in rows["r0000@example.com"][2]


def test_idempotent_transport_replays_unknown_batch(tmp_path):
    """With an idempotent transport the interrupted batch is replayed as the same group, whatever the policy."""
    config = prepare(tmp_path, 4, 'kind = "outbox"\ndir = "outbox"\n')
    _interrupt(config, ["r0001@example.com", "r0002@example.com"])
    _, summary = send(config)
    assert summary.ledger == {"sent": 4} and summary.counts["replayed"] == 2
    assert len(list((config.path.parent / "outbox").glob("*.eml"))) == 4


# --- SIGKILL a real `newsletter send` ------------------------------------------------------

def _compose(config) -> str:
    """Compose the due issue at NOW in-process (the subprocess runs on the real clock)."""
    from newsletter.compose import compose

    with Store(config.store_path) as store:
        return compose(config, store, NOW).id


def _cli(config, *args, wait=True):
    args = ("--issue", _compose(config), *args)
    env = {**os.environ, "NEWSLETTER_TEST_SECRET": "test-signing-key", "NEWSLETTER_TEST_API_KEY": KEY}
    cmd = [sys.executable, "-m", "newsletter", "--config", str(config.path), "send", *args]
    proc = subprocess.Popen(cmd, cwd=config.path.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if wait:
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out.decode(), err.decode()
    return proc


def test_sigkill_during_resend_batches_loses_and_duplicates_nobody(http_stub, tmp_path, monkeypatch):
    """Kill `send` while Resend holds a batch (accepted, answer not yet back), twice; the next run replays: one copy each."""
    monkeypatch.setenv("NEWSLETTER_TEST_API_KEY", KEY)
    fake = FakeResend(http_stub)
    config = prepare(tmp_path, 23, transport_toml("resend", http_stub.url), delivery="batch_size = 5\n")
    kills = {2, 3}
    state = {}

    def hook(f, n):
        if n in kills and n not in state:
            state[n] = True
            os.kill(state["pid"], signal.SIGKILL)
            time.sleep(0.2)

    fake.on_request = hook
    for _ in range(2):
        proc = _cli(config, wait=False)
        state["pid"] = proc.pid
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
    rc, out, err = _cli(config)
    assert rc == 0, err
    assert len(fake.copies) == 23 and set(fake.copies.values()) == {1}
    assert fake.replays == 2
    assert {v[0] for v in ledger(config).values()} == {"sent"}
    assert "replayed" in out


def test_sigkill_during_smtp_send_never_duplicates(tmp_path):
    """Kill `send` mid-SMTP (before a DATA reply, and before a RCPT) and resume: nobody gets two copies;
    only the message in flight at each kill is `unknown`, and it is reported."""
    from aiosmtpd.controller import Controller
    from tests.conftest import free_port
    from tests.test_smtp_transport import Behaving

    class Killer(Behaving):
        pid = 0
        kill_at_data = {4}
        kill_at_rcpt = {"r0009@example.com"}

        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
            if address in self.kill_at_rcpt:
                self.kill_at_rcpt.discard(address)
                os.kill(self.pid, signal.SIGKILL)
            return await super().handle_RCPT(server, session, envelope, address, rcpt_options)

        async def handle_DATA(self, server, session, envelope):
            reply = await super().handle_DATA(server, session, envelope)
            if len(self.messages) in self.kill_at_data:
                os.kill(self.pid, signal.SIGKILL)
            return reply

    handler = Killer()
    port = free_port()
    ctrl = Controller(handler, hostname="127.0.0.1", port=port)
    ctrl.start()
    try:
        config = prepare(tmp_path, 14, f'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\nsecurity = "none"\n'
                                       f"timeout = 5\n")
        for _ in range(2):
            proc = _cli(config, wait=False)
            handler.pid = proc.pid
            proc.wait(timeout=60)
            assert proc.returncode == -signal.SIGKILL
        rc, out, err = _cli(config)
    finally:
        ctrl.stop()
    rows = ledger(config)
    unknown = {e for e, v in rows.items() if v[0] == "unknown"}
    assert len(unknown) == 2 and rc == 1 and "unknown: 2 message(s)" in err
    assert max(handler.copies.values()) == 1
    never = {f"r{i:04d}@example.com" for i in range(14)} - set(handler.copies)
    assert never <= unknown and "r0009@example.com" in never     # killed before its DATA
    assert {e for e, v in rows.items() if v[0] == "sent"} == set(handler.copies) - unknown
