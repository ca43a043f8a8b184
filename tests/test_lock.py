"""The run lock: two overlapping `newsletter run` processes never both work; the second exits at once."""

import os
import subprocess
import sys
import threading
import time

import pytest

from newsletter.errors import LockError
from newsletter.lock import RunLock
from tests.conftest import make_config, review


def test_second_lock_in_the_same_machine_is_refused(tmp_path):
    """While one holder has the lock, taking it again fails with a clear LockError; afterwards it works."""
    store = tmp_path / "state" / "newsletter.db"
    with RunLock(store):
        with pytest.raises(LockError, match="another newsletter run holds the lock"):
            with RunLock(store):
                pass
    with RunLock(store):
        pass


def test_two_real_runs_overlap_and_the_second_exits_at_once(tmp_path, http_stub):
    """A second `newsletter run` started while the first is busy exits within seconds, code 1, saying why."""
    started, release = threading.Event(), threading.Event()

    def slow(handler, body):
        started.set()
        release.wait(20)
        return 200, {}, [review(1)]

    http_stub.routes[("GET", "/reviews")] = slow
    cfg = make_config(tmp_path, sources=f'url = "{http_stub.url}/reviews"\nretries = 0\ntimeout = 30')
    env = {**os.environ}
    cmd = [sys.executable, "-m", "newsletter", "--config", str(cfg), "run"]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert started.wait(20), "first run never reached its source"
        t0 = time.monotonic()
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        elapsed = time.monotonic() - t0
        assert second.returncode == 1
        assert "another newsletter run holds the lock" in second.stderr
        assert "Traceback" not in second.stderr
        assert elapsed < 10
        assert first.poll() is None      # the first is still working
    finally:
        release.set()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert "gather: 1 new" in out
