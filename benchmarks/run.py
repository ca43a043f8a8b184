"""Benchmarks at scale: feeds (full, a normal week, nothing changed), delivery (SMTP, HTTP), memory.

One command, from a clean clone::

    pip install -e '.[bench]'          # pelican, Markdown, aiosmtpd
    python benchmarks/run.py           # full scale, writes benchmarks/RESULTS.md
    python benchmarks/run.py --quick   # smoke run at 1/10 scale (results not written unless --out)

Every figure is a ratio against a baseline measured in the same run, on the same data:

- feeds, full build: ``gather`` + ``feeds`` into an empty store, versus (a) ``bare_feeds.py``
  (json → cmarkgfm → nh3 → feedgen, nothing else) and (b) Pelican configured to write only the
  same tag feeds (Atom, 50 entries each, no HTML pages) from the same reviews as Markdown files;
- feeds, a normal week: 100 new reviews (a new file in the source directory) gathered into the
  store, then ``feeds``, versus the full build; and nothing changed: the same again, versus the
  full build, checking that no file in ``feeds/`` was rewritten (mtimes and sizes);
- delivery over SMTP: ``send`` of one issue to every subscriber into an aiosmtpd sink running in
  its own process, versus a bare ``smtplib`` loop sending the same pre-built messages (one per
  tag set) over one connection to the same sink; MJML compiles are counted;
- delivery over HTTP through the ``postmark`` and ``sendgrid`` transports (when registered) into a
  loopback HTTP stub (own process), versus a bare ``requests.Session`` loop posting batches of the
  same size and format;
- peak RSS (``getrusage`` ``ru_maxrss``) of the process doing the full send.

Each measurement runs in a fresh child process (``run.py child TASK ARGS``) that times only the
work (imports and interpreter start-up excluded; the Pelican comparison times whole commands on
both sides). Timed library calls take the best of ``--repeat`` runs. Set ``--profile DIR`` to
write a cProfile of every child task there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402

PY = sys.executable
SCALES = {
    "full": {"reviews": 10_000, "week": 100, "subscribers": 50_000, "tags": 150, "sets": 20},
    "quick": {"reviews": 1_000, "week": 100, "subscribers": 2_000, "tags": 150, "sets": 20},
}
TARGETS = {
    "full_vs_bare": ("≤", 1.5), "full_vs_pelican": ("≤", 0.1), "week_vs_full": ("≤", 0.1),
    "nothing_vs_full": ("≤", 0.2), "smtp_vs_bare": ("≥", 0.8), "postmark_vs_bare": ("≥", 0.8),
    "sendgrid_vs_bare": ("≥", 0.8), "send_rss_mb": ("≤", 300),
}
SECRET_ENV = "BENCH_SECRET_KEY"
TOKEN_ENV = "BENCH_PROVIDER_TOKEN"
CONFIG = """
[site]
title = "Bench 代码评审周报"
base_url = "https://reviews.example.org/"
language = "zh-CN"
timezone = "Asia/Shanghai"
secret_key_env = "{secret}"

[[sources]]
path = "{reviews}"

[store]
path = "state/newsletter.db"

[feeds]
dir = "feeds"
max_entries = 50

[email]
from = "Bench Reviews <reviews@bench.example>"
reply_to = "maintainers@bench.example"
since = {since}
unsubscribe_mailto = "unsubscribe@bench.example"

[transport]
{transport}
"""
PELICAN_CONF = """
AUTHOR = "Bench"
SITENAME = "Bench 代码评审周报"
SITEURL = "https://reviews.example.org"
FEED_DOMAIN = SITEURL
TIMEZONE = "Asia/Shanghai"
DEFAULT_LANG = "zh"
PATH = "content"
# Only the feeds: all + one Atom feed per tag, 50 entries, full content.
FEED_ALL_ATOM = "all.atom"
TAG_FEED_ATOM = "tags/{slug}.atom"
FEED_MAX_ITEMS = 50
RSS_FEED_SUMMARY_ONLY = False
FEED_ATOM = FEED_RSS = FEED_ALL_RSS = CATEGORY_FEED_ATOM = CATEGORY_FEED_RSS = None
TRANSLATION_FEED_ATOM = TRANSLATION_FEED_RSS = AUTHOR_FEED_ATOM = AUTHOR_FEED_RSS = TAG_FEED_RSS = None
# No HTML pages at all.
DIRECT_TEMPLATES = []
PAGINATED_TEMPLATES = {}
ARTICLE_SAVE_AS = ARTICLE_LANG_SAVE_AS = DRAFT_SAVE_AS = DRAFT_LANG_SAVE_AS = ""
PAGE_SAVE_AS = PAGE_LANG_SAVE_AS = DRAFT_PAGE_SAVE_AS = DRAFT_PAGE_LANG_SAVE_AS = ""
CATEGORY_SAVE_AS = TAG_SAVE_AS = AUTHOR_SAVE_AS = INDEX_SAVE_AS = ""
YEAR_ARCHIVE_SAVE_AS = MONTH_ARCHIVE_SAVE_AS = DAY_ARCHIVE_SAVE_AS = ""
STATIC_PATHS = []
THEME_STATIC_PATHS = []
CACHE_CONTENT = False
LOAD_CONTENT_CACHE = False
DEFAULT_PAGINATION = False
"""


# --- children: each task runs in a fresh process and prints one JSON line ---------------------

def _clock():
    return datetime.now(timezone.utc)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def task_build(config_path: str) -> dict:
    """gather + feeds on whatever store the config names (empty or not)."""
    from newsletter.config import load_config
    from newsletter.feeds import build_feeds
    from newsletter.gather import gather
    from newsletter.store import Store

    config = load_config(config_path)
    t0 = time.perf_counter()
    with Store(config.store_path) as store:
        g = gather(config, store, _clock())
        t1 = time.perf_counter()
        f = build_feeds(config, store)
    t2 = time.perf_counter()
    return {"seconds": t2 - t0, "gather_s": t1 - t0, "feeds_s": t2 - t1, "gather": g.counts(),
            "written": len(f.written), "unchanged": len(f.unchanged), "rss_mb": _rss_mb()}


def task_bare(jsonl: str, out: str) -> dict:
    """The bare json → cmarkgfm → nh3 → feedgen script, in process."""
    import bare_feeds

    t0 = time.perf_counter()
    bare_feeds.main(jsonl, out)
    return {"seconds": time.perf_counter() - t0, "rss_mb": _rss_mb()}


def task_send(config_path: str, issue_id: str) -> dict:
    """``send`` of one issue to every active subscriber, through the configured transport."""
    from newsletter import job
    from newsletter.config import load_config

    config = load_config(config_path)
    t0 = time.perf_counter()
    issue, summary = job.send_issue(config, _clock, issue_id)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "sent": summary.counts.get("sent", 0),
            "skipped": summary.counts.get("skipped", 0), "failed": summary.counts.get("failed", 0),
            "compiles": summary.compiles, "ledger": summary.ledger, "status": issue.status,
            "rss_mb": _rss_mb()}


def _prebuilt(config_path: str, issue_id: str):
    """The messages ``send`` would build, one per distinct tag set, and the recipients in ledger order.

    Returns ``(config, [(address, tag-set key)], {tag-set key: OutgoingMessage})``; recipients whose
    tag set matches no review are left out, as ``send`` skips them.
    """
    from newsletter.config import load_config
    from newsletter.deliver import Composer
    from newsletter.job import links_for
    from newsletter.render import Renderer
    from newsletter.store import Store

    config = load_config(config_path)
    with Store(config.store_path) as store:
        issue = store.get_issue(issue_id)
        composer = Composer(config, issue, store.reviews_in_issue(issue_id), Renderer(config),
                            links_for(config))
        subs = store.subscribers("active")
    now = _clock()
    built: dict = {}
    recipients = []
    for s in subs:
        key = frozenset(s.tags)
        if key not in built:
            built[key] = composer.message(s, now)
        if built[key] is not None:
            recipients.append((s.email, key))
    return config, recipients, built


def task_bare_smtp(config_path: str, issue_id: str, host: str, port: str) -> dict:
    """A bare smtplib loop: the same pre-built messages over one connection."""
    import smtplib

    _config, recipients, built = _prebuilt(config_path, issue_id)
    conn = smtplib.SMTP(host, int(port))
    t0 = time.perf_counter()
    for addr, key in recipients:
        m = built[key]
        conn.sendmail(m.sender, [addr], m.data)
    seconds = time.perf_counter() - t0
    conn.quit()
    return {"seconds": seconds, "sent": len(recipients), "rss_mb": _rss_mb()}


def _postmark_item(m, to: str) -> dict:
    f = m.fields
    return {"From": f["from"], "To": to, "Subject": f["subject"], "HtmlBody": f["html"],
            "TextBody": f["text"], "ReplyTo": f["reply_to"], "MessageStream": "broadcast",
            "Headers": [{"Name": k, "Value": v} for k, v in f["headers"].items()],
            "Metadata": {"message_id": f["message_id"]}}


def _sendgrid_body(m, tos: list[str]) -> dict:
    """One shared body, one personalization per recipient (headers and substitutions of their own)."""
    f = m.fields
    return {"from": {"email": m.sender}, "subject": f["subject"],
            "content": [{"type": "text/plain", "value": f["text"]}, {"type": "text/html", "value": f["html"]}],
            "personalizations": [{"to": [{"email": t}], "headers": f["headers"],
                                  "substitutions": {"-name-": t.split("@")[0], "-unsubscribe-": f["headers"]["List-Unsubscribe"]}}
                                 for t in tos]}


def task_bare_http(config_path: str, issue_id: str, kind: str, url: str, batch: str) -> dict:
    """A bare requests.Session loop posting batches of the same size and format as the transport."""
    import requests

    _config, recipients, built = _prebuilt(config_path, issue_id)
    size = int(batch)
    session = requests.Session()
    headers = {"Accept": "application/json", "X-Postmark-Server-Token": "bench",
               "Authorization": "Bearer bench"}
    t0 = time.perf_counter()
    for i in range(0, len(recipients), size):
        chunk = recipients[i:i + size]
        if kind == "postmark":
            r = session.post(f"{url}/email/batch", json=[_postmark_item(built[k], a) for a, k in chunk],
                             headers=headers, timeout=60)
        else:  # sendgrid: per batch, one request per edition (shared body, personalizations)
            groups: dict = {}
            for a, k in chunk:
                groups.setdefault(k, []).append(a)
            for k, tos in groups.items():
                r = session.post(f"{url}/v3/mail/send", json=_sendgrid_body(built[k], tos),
                                 headers=headers, timeout=60)
        r.raise_for_status()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "sent": len(recipients), "rss_mb": _rss_mb()}


TASKS = {"build": task_build, "bare": task_bare, "send": task_send, "bare_smtp": task_bare_smtp,
         "bare_http": task_bare_http}


def child_main(argv: list[str]) -> int:
    name, args = argv[0], argv[1:]
    prof_dir = os.environ.get("BENCH_PROFILE")
    if prof_dir:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        result = prof.runcall(TASKS[name], *args)
        stem = Path(prof_dir) / f"{name}-{int(time.time() * 1000) % 10_000_000}"
        prof.dump_stats(str(stem) + ".prof")
        with open(str(stem) + ".txt", "w") as fh:
            pstats.Stats(prof, stream=fh).sort_stats("cumulative").print_stats(40)
            pstats.Stats(prof, stream=fh).sort_stats("tottime").print_stats(30)
    else:
        result = TASKS[name](*args)
    print("BENCH-RESULT " + json.dumps(result, default=str))
    return 0


# --- parent ---------------------------------------------------------------------------------

def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child(task: str, *args: str, env: dict | None = None) -> dict:
    """Run one task in a fresh interpreter and return its JSON result."""
    proc = subprocess.run([PY, str(Path(__file__).resolve()), "child", task, *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"child {task} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("BENCH-RESULT "):])


def write_config(dirpath: Path, reviews: Path, transport: str, name: str = "newsletter.toml") -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / name
    path.write_text(CONFIG.format(secret=SECRET_ENV, reviews=reviews, since=corpus.SINCE,
                                  transport=transport), encoding="utf-8")
    return path


def snapshot(root: Path) -> dict:
    """relative path → (mtime_ns, size) of every file under root."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(root.rglob("*")) if p.is_file()}


def copy_state(src: Path, dst: Path) -> None:
    """Copy a benchmark directory (store, feeds, config) for an independent run."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


class Sink:
    """A sink process from sinks.py; ``stats`` after :meth:`stop`."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.port_file = workdir / f"{kind}-{time.time_ns()}.port"
        self.proc = subprocess.Popen([PY, str(HERE / "sinks.py"), kind, str(self.port_file)])
        deadline = time.time() + 20
        while not self.port_file.exists():
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"{kind} sink did not start")
            time.sleep(0.05)
        self.port = int(self.port_file.read_text())
        self.stats: dict = {}

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        stats_file = Path(str(self.port_file) + ".stats")
        self.stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        return self.stats


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                   if ln.startswith("MemTotal"))
        mem_gb = f"{int(mem) / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration):
        mem_gb = "?"
    versions = {}
    for dist in ("feedgen", "cmarkgfm", "nh3", "mjml-python", "aiosmtpd", "pelican", "Markdown", "requests"):
        try:
            from importlib.metadata import version
            versions[dist] = version(dist)
        except Exception:
            versions[dist] = "-"
    return {"nproc": os.cpu_count(), "cpu": model or platform.processor(), "memory": mem_gb,
            "python": platform.python_version(), "platform": platform.platform(), "versions": versions}


def best(results: list[dict]) -> dict:
    return min(results, key=lambda r: r["seconds"])


def registered_transports() -> set[str]:
    from newsletter.transports import REGISTRY
    import newsletter.transports as t
    import pkgutil
    import importlib

    for mod in pkgutil.iter_modules(t.__path__):
        try:
            importlib.import_module(f"newsletter.transports.{mod.name}")
        except Exception:
            pass
    return set(REGISTRY)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 reviews and 2,000 subscribers (smoke run)")
    ap.add_argument("--workdir", type=Path, help="where to generate data (default: a fresh temp dir)")
    ap.add_argument("--out", type=Path, help="results file (default: benchmarks/RESULTS.md at full scale)")
    ap.add_argument("--repeat", type=int, help="runs per timed feeds measurement (default 3; quick 1)")
    ap.add_argument("--skip", action="append", default=[],
                    help="skip a part: pelican, smtp, http (repeatable)")
    ap.add_argument("--profile", type=Path, help="write a cProfile of every child task to this directory")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    opts = ap.parse_args(argv)
    scale_name = "quick" if opts.quick else "full"
    scale = SCALES[scale_name]
    repeat = opts.repeat or (1 if opts.quick else 3)
    out = opts.out or (None if opts.quick else HERE / "RESULTS.md")
    if opts.profile:
        opts.profile.mkdir(parents=True, exist_ok=True)
        os.environ["BENCH_PROFILE"] = str(opts.profile.resolve())
    os.environ.setdefault(SECRET_ENV, "bench-signing-key")
    os.environ.setdefault(TOKEN_ENV, "bench-provider-token")
    import tempfile

    work = (opts.workdir or Path(tempfile.mkdtemp(prefix="newsletter-bench-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    fig: dict = {"scale": scale_name, **scale, "repeat": repeat}
    notes: list[str] = []
    try:
        run(work, scale, repeat, opts, fig, notes)
    finally:
        if not opts.keep and not opts.workdir:
            shutil.rmtree(work, ignore_errors=True)
    fig["total_s"] = time.time() - started
    report = render(fig, machine(), notes)
    print(report)
    if out:
        out.write_text(report, encoding="utf-8")
        log(f"wrote {out}")
    return 0


def run(work: Path, scale: dict, repeat: int, opts, fig: dict, notes: list[str]) -> None:
    # --- data ---
    log(f"work directory {work}")
    reviews_dir = work / "reviews"
    if reviews_dir.exists():
        shutil.rmtree(reviews_dir)
    records = corpus.corpus(scale["reviews"], tag_count=scale["tags"])
    corpus_file = corpus.write_jsonl(reviews_dir / "0000-corpus.jsonl", records)
    week_records = corpus.week(scale["week"], scale["reviews"] + 1, tag_count=scale["tags"])
    subs_csv = corpus.write_subscribers(work / "subscribers.csv", scale["subscribers"], sets=scale["sets"])
    fig["corpus_mb"] = corpus_file.stat().st_size / 1e6
    log(f"corpus: {len(records)} reviews ({fig['corpus_mb']:.1f} MB JSONL), {scale['subscribers']} subscribers")

    outbox = 'kind = "outbox"\ndir = "outbox"'
    # --- feeds, full build: ours vs bare (in-process work, best of N) ---
    ours, bare = [], []
    for i in range(repeat):
        d = work / f"full-{i}"
        if d.exists():
            shutil.rmtree(d)
        cfg = write_config(d, reviews_dir, outbox)
        ours.append(child("build", cfg))
        bare.append(child("bare", corpus_file, work / f"bare-{i}"))
        log(f"full build #{i + 1}: ours {ours[-1]['seconds']:.2f} s "
            f"(gather {ours[-1]['gather_s']:.2f}, feeds {ours[-1]['feeds_s']:.2f}), bare {bare[-1]['seconds']:.2f} s")
    fb, bb = best(ours), best(bare)
    fig.update(full_s=fb["seconds"], full_gather_s=fb["gather_s"], full_feeds_s=fb["feeds_s"],
               full_written=fb["written"], bare_s=bb["seconds"], full_vs_bare=fb["seconds"] / bb["seconds"],
               full_rss_mb=fb["rss_mb"])

    # --- feeds, full build: whole commands, ours vs Pelican ---
    exe = shutil.which("pelican", path=str(Path(PY).parent)) or shutil.which("pelican")
    if "pelican" not in opts.skip and exe:
        pel = work / "pelican"
        if pel.exists():
            shutil.rmtree(pel)
        corpus.write_markdown(pel / "content", records)
        (pel / "pelicanconf.py").write_text(PELICAN_CONF, encoding="utf-8")
        t0 = time.perf_counter()
        p = subprocess.run([exe, "content", "-s", "pelicanconf.py", "-o", "output", "-q"], cwd=pel,
                           capture_output=True, text=True)
        fig["pelican_s"] = time.perf_counter() - t0
        if p.returncode:
            raise RuntimeError(f"pelican failed:\n{p.stderr[-3000:]}")
        fig["pelican_feeds"] = len(list((pel / "output").rglob("*.atom")))
        fig["pelican_html"] = len(list((pel / "output").rglob("*.html")))
        d = work / "cli"
        if d.exists():
            shutil.rmtree(d)
        cfg = write_config(d, reviews_dir, outbox)
        nl = [PY, "-m", "newsletter", "--config", str(cfg)]
        t0 = time.perf_counter()
        subprocess.run(nl + ["gather"], check=True, capture_output=True)
        subprocess.run(nl + ["feeds"], check=True, capture_output=True)
        fig["cli_full_s"] = time.perf_counter() - t0
        fig["full_vs_pelican"] = fig["cli_full_s"] / fig["pelican_s"]
        log(f"pelican {fig['pelican_s']:.1f} s ({fig['pelican_feeds']} feeds, {fig['pelican_html']} html); "
            f"newsletter gather+feeds commands {fig['cli_full_s']:.2f} s")
    else:
        notes.append("Pelican comparison skipped (not installed or --skip pelican).")

    # --- feeds, a normal week and nothing changed ---
    base = work / "full-0"
    weeks, nothings = [], []
    for i in range(repeat):
        d = work / f"week-{i}"
        copy_state(base, d)
        wk_dir = d / "reviews"
        shutil.copytree(reviews_dir, wk_dir)
        corpus.write_jsonl(wk_dir / "2026-W47.jsonl", week_records)
        cfg = write_config(d, wk_dir, outbox)
        feeds_dir = d / "feeds"
        weeks.append(child("build", cfg))
        before = snapshot(feeds_dir)
        time.sleep(0.01)
        nothings.append(child("build", cfg))
        after = snapshot(feeds_dir)
        nothings[-1]["rewritten"] = sorted(k for k in after if before.get(k) != after[k])
        log(f"week #{i + 1}: {weeks[-1]['seconds']:.3f} s (gather {weeks[-1]['gather_s']:.3f}, feeds "
            f"{weeks[-1]['feeds_s']:.3f}; {weeks[-1]['written']} files written); nothing changed: "
            f"{nothings[-1]['seconds']:.3f} s, {len(nothings[-1]['rewritten'])} files rewritten")
    wb, nb = best(weeks), best(nothings)
    fig.update(week_s=wb["seconds"], week_gather_s=wb["gather_s"], week_feeds_s=wb["feeds_s"],
               week_written=wb["written"], week_new=wb["gather"]["new"], week_vs_full=wb["seconds"] / fb["seconds"],
               nothing_s=nb["seconds"], nothing_gather_s=nb["gather_s"], nothing_feeds_s=nb["feeds_s"],
               nothing_vs_full=nb["seconds"] / fb["seconds"],
               nothing_rewritten=max(len(n["rewritten"]) for n in nothings),
               nothing_written=max(n["written"] for n in nothings))

    # --- delivery: compose the week's issue, import subscribers, snapshot ---
    if "smtp" in opts.skip and "http" in opts.skip:
        return
    deliv = work / "deliver-base"
    copy_state(work / "week-0", deliv)
    cfg = write_config(deliv, deliv / "reviews", outbox)
    from newsletter.compose import compose
    from newsletter.config import load_config
    from newsletter.store import Store
    from newsletter.subscribers import import_csv

    config = load_config(cfg)
    with Store(config.store_path) as store:
        with subs_csv.open(encoding="utf-8", newline="") as fh:
            imp = import_csv(store, fh, str(subs_csv), _clock())
        issue = compose(config, store, _clock(), corpus.WEEK_ISSUE)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fig.update(issue=issue.id, issue_reviews=issue.review_count, subscribers_added=imp.added)
    log(f"issue {issue.id}: {issue.review_count} reviews; {imp.added} subscribers imported")

    if "smtp" not in opts.skip:
        sink = Sink("smtp", work)
        try:
            d = work / "send-smtp"
            copy_state(deliv, d)
            cfg = write_config(d, d / "reviews", f'kind = "smtp"\nhost = "127.0.0.1"\nport = {sink.port}\n'
                                                  'security = "none"')
            log("SMTP send (newsletter) …")
            ours = child("send", cfg, issue.id)
            log(f"  {ours['sent']} sent in {ours['seconds']:.1f} s, {ours['compiles']} MJML compiles, "
                f"peak RSS {ours['rss_mb']:.0f} MB")
            log("SMTP bare smtplib loop …")
            bare_r = child("bare_smtp", cfg, issue.id, "127.0.0.1", sink.port)
            log(f"  {bare_r['sent']} sent in {bare_r['seconds']:.1f} s")
        finally:
            stats = sink.stop()
        fig.update(smtp_sent=ours["sent"], smtp_skipped=ours["skipped"], smtp_failed=ours["failed"],
                   smtp_s=ours["seconds"], smtp_rate=ours["sent"] / ours["seconds"],
                   smtp_compiles=ours["compiles"], smtp_tag_sets=scale["sets"],
                   smtp_rss_mb=ours["rss_mb"], smtp_bare_s=bare_r["seconds"],
                   smtp_bare_rate=bare_r["sent"] / bare_r["seconds"],
                   smtp_sink_messages=stats.get("messages"), smtp_sink_mb=(stats.get("bytes") or 0) / 1e6)
        fig["smtp_vs_bare"] = fig["smtp_rate"] / fig["smtp_bare_rate"]

    if "http" not in opts.skip:
        kinds = registered_transports()
        for kind in ("postmark", "sendgrid"):
            if kind not in kinds:
                notes.append(f"HTTP delivery through `{kind}` skipped: no transport registered under that "
                             f"kind yet (registered: {', '.join(sorted(kinds))}).")
                log(f"skip {kind}: not registered")
                continue
            sink = Sink("http", work)
            try:
                d = work / f"send-{kind}"
                copy_state(deliv, d)
                url = f"http://127.0.0.1:{sink.port}"
                cfg = write_config(d, d / "reviews", f'kind = "{kind}"\napi_key_env = "{TOKEN_ENV}"\n'
                                                      f'base_url = "{url}"')
                from newsletter.transports import REGISTRY
                batch = getattr(REGISTRY[kind], "max_batch", 500)
                log(f"HTTP send via {kind} (batch {batch}) …")
                ours = child("send", cfg, issue.id)
                log(f"  {ours['sent']} sent in {ours['seconds']:.1f} s; peak RSS {ours['rss_mb']:.0f} MB")
                bare_r = child("bare_http", cfg, issue.id, kind, url, batch)
                log(f"  bare: {bare_r['sent']} in {bare_r['seconds']:.1f} s")
            finally:
                stats = sink.stop()
            fig.update({f"{kind}_sent": ours["sent"], f"{kind}_s": ours["seconds"],
                        f"{kind}_rate": ours["sent"] / ours["seconds"], f"{kind}_batch": batch,
                        f"{kind}_bare_rate": bare_r["sent"] / bare_r["seconds"],
                        f"{kind}_rss_mb": ours["rss_mb"], f"{kind}_requests": stats.get("requests")})
            fig[f"{kind}_vs_bare"] = fig[f"{kind}_rate"] / fig[f"{kind}_bare_rate"]
    rss = [fig[k] for k in ("smtp_rss_mb", "postmark_rss_mb", "sendgrid_rss_mb") if k in fig]
    if rss:
        fig["send_rss_mb"] = max(rss)


def _verdict(key: str, fig: dict) -> str:
    if key not in fig:
        return "not measured"
    op, target = TARGETS[key]
    ok = fig[key] <= target if op == "≤" else fig[key] >= target
    if ok:
        return "met"
    miss = fig[key] / target if op == "≤" else target / fig[key]
    return f"**missed** ({miss:.1f}× off)"


def render(fig: dict, m: dict, notes: list[str]) -> str:
    g = lambda k, f="{:.2f}": (f.format(fig[k]) if k in fig else "–")  # noqa: E731
    rows = [
        ("Feeds, full build vs bare script", "full_vs_bare",
         f"{g('full_s')} s (gather {g('full_gather_s')}, feeds {g('full_feeds_s')}) vs bare {g('bare_s')} s"),
        ("Feeds, full build vs Pelican (whole commands)", "full_vs_pelican",
         f"{g('cli_full_s')} s vs Pelican {g('pelican_s', '{:.1f}')} s ({g('pelican_feeds', '{}')} feeds)"),
        ("Feeds, a normal week vs full build", "week_vs_full",
         f"{g('week_s', '{:.3f}')} s (gather {g('week_gather_s', '{:.3f}')}, feeds {g('week_feeds_s', '{:.3f}')}; "
         f"{g('week_written', '{}')} files written)"),
        ("Feeds, nothing changed vs full build", "nothing_vs_full",
         f"{g('nothing_s', '{:.3f}')} s (gather {g('nothing_gather_s', '{:.3f}')}, feeds "
         f"{g('nothing_feeds_s', '{:.3f}')}); files rewritten: {g('nothing_rewritten', '{}')}"),
        ("Delivery over SMTP vs bare smtplib loop", "smtp_vs_bare",
         f"{g('smtp_rate', '{:.0f}')} msg/s ({g('smtp_sent', '{}')} in {g('smtp_s', '{:.1f}')} s) vs "
         f"{g('smtp_bare_rate', '{:.0f}')} msg/s; MJML compiles {g('smtp_compiles', '{}')} "
         f"(tag sets {g('smtp_tag_sets', '{}')})"),
        ("Delivery over HTTP, postmark vs bare requests", "postmark_vs_bare",
         f"{g('postmark_rate', '{:.0f}')} msg/s vs {g('postmark_bare_rate', '{:.0f}')} msg/s"),
        ("Delivery over HTTP, sendgrid vs bare requests", "sendgrid_vs_bare",
         f"{g('sendgrid_rate', '{:.0f}')} msg/s vs {g('sendgrid_bare_rate', '{:.0f}')} msg/s"),
        ("Peak RSS of the send, worst transport", "send_rss_mb",
         f"SMTP {g('smtp_rss_mb', '{:.0f}')} MB, postmark {g('postmark_rss_mb', '{:.0f}')} MB, "
         f"sendgrid {g('sendgrid_rss_mb', '{:.0f}')} MB"),
    ]
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `python benchmarks/run.py{' --quick' if fig['scale'] == 'quick' else ''}` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; total run {fig.get('total_s', 0) / 60:.1f} min.",
        "",
        f"Data: {fig['reviews']:,} reviews ({fig.get('corpus_mb', 0):.1f} MB JSONL), {fig['tags']} tags, 3 per review, "
        f"bodies 1–3 KB mixed Chinese/English Markdown; a week of {fig['week']} new reviews; "
        f"{fig['subscribers']:,} subscribers over {fig['sets']} tag sets; issue {fig.get('issue', '–')} "
        f"with {fig.get('issue_reviews', '–')} reviews. Timed library work is the best of {fig['repeat']} run(s).",
        "",
        f"Machine: {m['nproc']} CPU(s), {m['cpu']}, {m['memory']} RAM; Python {m['python']}; {m['platform']}.",
        "Libraries: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".",
        "",
        "| measurement | figures | ratio | target | verdict |",
        "|---|---|---|---|---|",
    ]
    for title, key, figures in rows:
        op, target = TARGETS[key]
        ratio = (f"{fig[key]:.0f} MB" if key.endswith("_mb") else f"{fig[key]:.2f}×") if key in fig else "–"
        lines.append(f"| {title} | {figures} | {ratio} | {op} {target}{' MB' if key.endswith('_mb') else '×'} | "
                     f"{_verdict(key, fig)} |")
    lines += ["", "Raw figures:", "", "```json", json.dumps(fig, indent=1, sort_keys=True, default=str), "```", ""]
    if notes:
        lines += ["Notes from this run:", ""] + [f"- {n}" for n in notes] + [""]
    analysis = HERE / "ANALYSIS.md"
    if analysis.exists():
        lines += [analysis.read_text(encoding="utf-8").rstrip(), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        sys.exit(child_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
