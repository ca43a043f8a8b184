"""Tag identity and slugs."""

import re

from newsletter.tags import base_slug, tag_key, unique_slug


def test_case_and_width_fold_to_one_key():
    """Tags differing only in case or Unicode width share a key."""
    assert tag_key("ROCm") == tag_key("rocm") == tag_key("ＲＯＣｍ") == tag_key("  ROCm ")
    assert tag_key("CUDA  Graph") == tag_key("cuda graph")


def test_slugs_are_ascii_and_stable():
    """Latin, Chinese-only and emoji tags all get ASCII slugs, the same every time."""
    for name in ["CUDA Graph", "性能", "推测解码", "🚀", "Bug 修复", "C++"]:
        slug = base_slug(tag_key(name))
        assert re.fullmatch(r"[a-z0-9-]+", slug), slug
        assert slug == base_slug(tag_key(name))
    assert base_slug(tag_key("CUDA Graph")) == "cuda-graph"
    assert base_slug(tag_key("性能")) != base_slug(tag_key("推测解码"))


def test_clashing_slugs_get_a_suffix():
    """`C++` and `C#` both map to `c`; the second one gets a hash suffix and stays unique."""
    first = unique_slug(tag_key("C++"), set())
    second = unique_slug(tag_key("C#"), {first})
    assert first == "c" and second.startswith("c-") and second != first


def test_long_tags_get_short_slugs():
    """A 100-character Chinese tag still gets a slug short enough for a file name, distinct from its neighbours."""
    a = "".join(chr(0x4E00 + i * 97) for i in range(100))
    b = a[:-1] + "字"
    sa, sb = base_slug(tag_key(a)), base_slug(tag_key(b))
    assert len(sa) <= 64 and len(sb) <= 64 and sa != sb
