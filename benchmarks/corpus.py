"""Seeded synthetic corpus for the benchmarks: reviews (JSONL and Markdown files) and subscribers (CSV).

Shapes (issue 6):
- ``N`` reviews (default 10,000), ``150`` tags (English and Chinese names), ``3`` distinct tags each,
  bodies of 1–3 KB (UTF-8 bytes) of mixed Chinese and English GitHub-flavoured Markdown
  (headings, paragraphs, inline code, fenced code, lists, links, sometimes a table);
  published between 2022-11-16 and 2026-11-15 (UTC+08:00), so that the "week" reviews
  (published 2026-11-16 … 2026-11-22, ISO week 2026-W47) are the newest.
- subscribers with exactly 20 distinct tag sets: set 0 is "every tag" (empty), sets 1–19
  follow 1–6 tags each; addresses ``reader00001@bench.example`` … .

Everything is a pure function of the seed, so two runs write byte-identical files.
"""

from __future__ import annotations

import csv
import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

TZ = timezone(timedelta(hours=8))
CORPUS_START = datetime(2022, 11, 16, tzinfo=TZ)
CORPUS_END = datetime(2026, 11, 15, 23, 0, tzinfo=TZ)
WEEK_START = datetime(2026, 11, 16, tzinfo=TZ)   # Monday of 2026-W47
WEEK_ISSUE = "2026-W47"
SINCE = "2026-11-16"

EN_WORDS = ("kernel scheduler cache attention prefill decode batch tensor pipeline quantization memory "
            "allocator graph capture speculative sampler tokenizer worker engine request latency throughput "
            "regression benchmark refactor fallback compile shape stride dtype block page swap offload "
            "distributed parallel rank gather reduce stream event lock race leak overflow").split()
ZH_CHUNKS = ("性能 调度器 缓存 注意力 预填充 解码 批处理 张量 流水线 量化 显存 分配器 计算图 投机采样 采样器 分词器 "
             "工作进程 引擎 请求 延迟 吞吐 回归 基准测试 重构 回退 编译 形状 步长 数据类型 分块 分页 换出 卸载 "
             "分布式 并行 全局规约 流 事件 锁 竞态 泄漏 溢出 这个改动 看起来 没有问题 但是 需要 注意 边界 条件 "
             "建议 补充 单元测试 以及 文档 说明 在多卡 场景下 可能 会 导致 死锁").split()
EN_TAGS = ("ROCm CUDA CUDA-Graph Triton FlashAttention PagedAttention LoRA MoE FP8 INT4 AWQ GPTQ TPU XPU CPU "
           "Spec-Decode Prefix-Cache Chunked-Prefill Scheduler KV-Cache Tokenizer OpenAI-API Multimodal "
           "Pipeline-Parallel Tensor-Parallel Ray Docker CI Benchmarks Docs").split()
ZH_TAGS = ("性能 内存 调度 正确性 兼容性 安全 重构 测试 文档 构建 量化 分布式 推理 采样 编译 并发 日志 配置 "
           "接口 部署").split()


def tag_names(count: int = 150, seed: int = 6) -> list[str]:
    """``count`` distinct tag display names, English and Chinese, unique after case folding."""
    rng = random.Random(seed)
    names: list[str] = []
    seen: set[str] = set()
    pool = EN_TAGS + ZH_TAGS
    i = 0
    while len(names) < count:
        base = pool[i % len(pool)]
        name = base if i < len(pool) else f"{base} {i // len(pool) + 1}"
        if rng.random() < 0.1 and i >= len(pool):
            name = f"{base}-{rng.choice(EN_WORDS)}"
        if name.casefold() not in seen:
            seen.add(name.casefold())
            names.append(name)
        i += 1
    return names


def _sentence(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(6, 14)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(ZH_CHUNKS))
        elif r < 0.85:
            parts.append(rng.choice(EN_WORDS))
        elif r < 0.95:
            parts.append(f"`{rng.choice(EN_WORDS)}_{rng.choice(EN_WORDS)}()`")
        else:
            parts.append(f"[{rng.choice(EN_WORDS)}](https://github.com/bench/engine/blob/main/"
                         f"{rng.choice(EN_WORDS)}.py#L{rng.randint(1, 900)})")
    text = " ".join(parts)
    return text[0].upper() + text[1:] + rng.choice(("。", ".", "；", "!", "？"))


def body(rng: random.Random) -> str:
    """One Markdown body of 1–3 KB (UTF-8)."""
    target = rng.randint(1024, 3072)
    blocks: list[str] = []
    size = 0
    while size < target:
        r = rng.random()
        if r < 0.1:
            block = f"### {rng.choice(ZH_CHUNKS)} {rng.choice(EN_WORDS)}"
        elif r < 0.2:
            block = "```python\n" + "\n".join(
                f"{rng.choice(EN_WORDS)} = {rng.choice(EN_WORDS)}({rng.randint(0, 64)})  # {rng.choice(ZH_CHUNKS)}"
                for _ in range(rng.randint(2, 6))) + "\n```"
        elif r < 0.32:
            block = "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(2, 4)))
        elif r < 0.36:
            block = ("| 项目 | before | after |\n|---|---|---|\n" + "\n".join(
                f"| {rng.choice(EN_WORDS)} | {rng.randint(1, 999)} ms | {rng.randint(1, 999)} ms |"
                for _ in range(rng.randint(2, 4))))
        else:
            block = " ".join(_sentence(rng) for _ in range(rng.randint(1, 3)))
        blocks.append(block)
        size += len(block.encode()) + 2
    text = "\n\n".join(blocks)
    raw = text.encode()
    if len(raw) > 3072:
        text = raw[:3072].decode("utf-8", "ignore").rsplit("\n", 1)[0] or raw[:3000].decode("utf-8", "ignore")
    return text


def review(rng: random.Random, n: int, tags: list[str], published: datetime) -> dict:
    """One review record (DESIGN.md review-record table)."""
    chosen = rng.sample(tags, 3)
    return {
        "id": f"bench/engine#{n}",
        "title": f"[{chosen[0]}] {rng.choice(ZH_CHUNKS)} {rng.choice(EN_WORDS)} {rng.choice(EN_WORDS)} (#{n})",
        "url": f"https://github.com/bench/engine/pull/{n}",
        "tags": chosen,
        "published": published.isoformat(timespec="seconds"),
        "body": body(rng),
        "summary": f"{rng.choice(('LGTM', '需要修改', '建议合并', 'Needs work'))}: {rng.choice(ZH_CHUNKS)} {rng.choice(EN_WORDS)}.",
        "repo": "bench/engine",
        "author": rng.choice(("Alice", "Bob", "张伟", "李娜", "Chen Wei")),
    }


def corpus(n: int, seed: int = 6, tag_count: int = 150) -> list[dict]:
    """``n`` reviews published in [CORPUS_START, CORPUS_END], ids 1…n."""
    rng = random.Random(seed)
    tags = tag_names(tag_count, seed)
    span = (CORPUS_END - CORPUS_START).total_seconds()
    return [review(rng, i, tags, CORPUS_START + timedelta(seconds=int(rng.random() * span)))
            for i in range(1, n + 1)]


def week(n: int, first_id: int, seed: int = 7, tag_count: int = 150) -> list[dict]:
    """``n`` new reviews published in 2026-W47 (UTC+08:00), ids first_id…"""
    rng = random.Random(seed)
    tags = tag_names(tag_count, 6)
    return [review(rng, first_id + i, tags, WEEK_START + timedelta(seconds=int(rng.random() * 6.9 * 86400)))
            for i in range(n)]


def tag_sets(count: int = 20, seed: int = 8, tag_count: int = 150) -> list[list[str]]:
    """``count`` distinct tag sets (display names); the first is empty (= every tag)."""
    rng = random.Random(seed)
    tags = tag_names(tag_count, 6)
    sets: list[list[str]] = [[]]
    seen = {frozenset()}
    while len(sets) < count:
        s = rng.sample(tags, rng.randint(1, 6))
        if frozenset(s) not in seen:
            seen.add(frozenset(s))
            sets.append(s)
    return sets


def write_jsonl(path: Path, records: list[dict], append: bool = False) -> Path:
    """Write records as JSON Lines (UTF-8, not ASCII-escaped)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def write_markdown(dirpath: Path, records: list[dict]) -> Path:
    """One Markdown file per review with Pelican-style metadata (``Title:``, ``Date:``, ``Tags:`` …)."""
    dirpath.mkdir(parents=True, exist_ok=True)
    for r in records:
        n = r["id"].rsplit("#", 1)[1]
        meta = [f"Title: {r['title']}", f"Date: {r['published'][:16].replace('T', ' ')}",
                f"Tags: {', '.join(r['tags'])}", f"Slug: review-{n}", f"Author: {r['author']}",
                f"Summary: {r['summary']}"]
        (dirpath / f"review-{n}.md").write_text("\n".join(meta) + "\n\n" + r["body"] + "\n", encoding="utf-8")
    return dirpath


def write_subscribers(path: Path, count: int, seed: int = 8, sets: int = 20,
                      all_share: float = 0.4) -> Path:
    """CSV ``email,name,tags`` for ``count`` subscribers over ``sets`` distinct tag sets.

    About ``all_share`` of them follow every tag; the rest are spread over the other sets.
    """
    rng = random.Random(seed)
    choices = tag_sets(sets, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["email", "name", "tags"])
        for i in range(count):
            # every set is used at least once
            k = i if i < sets else (0 if rng.random() < all_share else rng.randint(1, sets - 1))
            w.writerow([f"reader{i:05d}@bench.example", f"Reader {i}" if i % 3 else f"读者 {i}",
                        "|".join(choices[k])])
    return path
