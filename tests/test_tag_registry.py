"""The [tags] registry: parsing the config table, canonical tags, display names, descriptions, renames."""

from __future__ import annotations

from pathlib import Path

import pytest

from newsletter.config import load_config
from newsletter.errors import ConfigError
from newsletter.models import Tag
from newsletter.tag_registry import TagsConfig, TagRegistry, parse_tags_table

from tests.conftest import make_config

F = Path("newsletter.toml")


def registry(stored: list[Tag], **tables) -> tuple[TagRegistry, list[str]]:
    created: list[str] = []

    def ensure(name: str) -> Tag:
        created.append(name)
        return Tag(name.casefold(), name, name.casefold().replace(" ", "-"))

    cfg = parse_tags_table(F, tables)
    return TagRegistry(cfg, {t.key: t for t in stored}, ensure), created


def test_config_reads_the_tags_tables(tmp_path):
    """[tags.aliases], [tags.names] and [tags.descriptions] load from the config file."""
    path = make_config(tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + '\n[tags.aliases]\n"AMD" = "ROCm"\n'
                    '[tags.names]\n"rocm" = "ROCm (AMD)"\n[tags.descriptions]\n"ROCm" = "AMD GPUs."\n',
                    encoding="utf-8")
    cfg = load_config(path)
    assert cfg.tags == TagsConfig(aliases=(("AMD", "ROCm"),), names=(("rocm", "ROCm (AMD)"),),
                                  descriptions=(("ROCm", "AMD GPUs."),))


def test_no_tags_table_means_an_empty_registry(tmp_path):
    """A config without [tags] has no aliases, names or descriptions."""
    assert load_config(make_config(tmp_path)).tags == TagsConfig()


@pytest.mark.parametrize("data,message", [
    ({"alias": {}}, "[tags] unknown key 'alias'"),
    ({"aliases": ["x"]}, "[tags.aliases] must be a table"),
    ({"aliases": {"AMD": 3}}, "[tags.aliases] 'AMD' must be a string"),
    ({"names": {"ROCm": "two\nlines"}}, "must be one line"),
    ({"descriptions": {"ROCm": "  "}}, "must not be empty"),
    ({"names": {"ROCm": "a", "rocm": "b"}}, "'rocm' names the same tag as 'ROCm'"),
    ({"aliases": {"A": "B", "B": "C"}}, "'A' points to 'B', which is itself an alias of 'C'"),
])
def test_bad_tags_tables_are_rejected_with_the_key_named(data, message):
    """A wrong [tags] table is a ConfigError naming the file and the key."""
    with pytest.raises(ConfigError) as err:
        parse_tags_table(F, data)
    assert message in str(err.value) and "newsletter.toml" in str(err.value)


def test_an_alias_to_its_own_spelling_only_sets_how_the_tag_is_written():
    """``"rocm" = "ROCm"`` keeps one feed and shows the tag as ROCm."""
    reg, created = registry([Tag("rocm", "rocm", "rocm")], aliases={"rocm": "ROCm"})
    assert [(f.tag.slug, f.name) for f in reg.feeds] == [("rocm", "ROCm")]
    assert reg.moved == [] and created == []


def test_an_alias_folds_a_stored_tag_into_its_target_and_marks_the_old_feed_moved():
    """Reviews tagged with an alias belong to the canonical feed; the alias's old feed is moved."""
    amd, rocm = Tag("amd", "AMD", "amd"), Tag("rocm", "ROCm", "rocm")
    reg, created = registry([amd, rocm], aliases={"AMD": "ROCm"}, descriptions={"amd": "AMD GPUs."})
    assert [f.tag for f in reg.feeds] == [rocm]
    assert reg.feeds[0].description == "AMD GPUs."        # keys may use an alias's spelling
    assert [(m.old, m.new.tag) for m in reg.moved] == [(amd, rocm)]
    assert reg.feed_keys() == {"amd": "tag:rocm", "rocm": "tag:rocm"}
    assert [f.name for f in reg.categories((amd, rocm))] == ["ROCm"]
    assert created == []


def test_an_alias_target_nobody_used_yet_is_created_once_needed():
    """Renaming a tag to a new name creates the new tag (with its own slug) for the feed."""
    old = Tag("cuda graph", "CUDA Graph", "cuda-graph")
    reg, created = registry([old], aliases={"CUDA Graph": "CUDA Graphs"}, names={"CUDA Graphs": "CUDA Graphs ✓"})
    assert created == ["CUDA Graphs"]
    assert [(f.tag.slug, f.name) for f in reg.feeds] == [("cuda-graphs", "CUDA Graphs ✓")]
    assert reg.moved[0].old == old


def test_unused_aliases_create_nothing():
    """An alias whose spelling no review uses adds no tag and no feed."""
    reg, created = registry([Tag("cpu", "CPU", "cpu")], aliases={"AMD": "ROCm"})
    assert created == [] and [f.tag.key for f in reg.feeds] == ["cpu"]


def test_registry_fingerprint_follows_the_config_only():
    """The fingerprint changes with the [tags] table, not with the tags in the store."""
    a, _ = registry([Tag("cpu", "CPU", "cpu")], names={"CPU": "Processors"})
    b, _ = registry([Tag("cpu", "CPU", "cpu"), Tag("x", "X", "x")], names={"CPU": "Processors"})
    c, _ = registry([Tag("cpu", "CPU", "cpu")], names={"CPU": "CPUs"})
    assert a.fingerprint == b.fingerprint != c.fingerprint
