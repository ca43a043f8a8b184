"""The tag registry: ``[tags]`` in the config — aliases, display names, descriptions, renames.

The TOML shape (every table optional, every key and value a one-line string)::

    [tags.aliases]            # another spelling (or an old name) → the canonical tag
    "AMD" = "ROCm"
    "CUDA Graphs" = "CUDA Graph"

    [tags.names]              # display name shown in feeds, the index and the OPML
    "ROCm" = "ROCm (AMD GPUs)"

    [tags.descriptions]       # shown in the index and as the tag feed's subtitle
    "ROCm" = "AMD GPU support: HIP kernels, ROCm builds and CI."

Keys are matched like tags are (:func:`newsletter.tags.tag_key`: NFKC + case
folding), so ``"rocm"`` and ``"ROCm"`` name the same tag; ``names`` and
``descriptions`` keys may use any spelling or alias of the tag.

Rules:

- An alias folds every review carrying the spelling into the canonical tag's
  feed. ``"rocm" = "ROCm"`` (same key) only fixes how the tag is written.
- A **rename** is an alias whose spelling already had a feed: the old feed
  (``tags/<old-slug>.atom`` / ``.json``) is kept, now holding one last entry
  that points to the new feed, and ``_redirects`` / ``redirects.map`` map the
  old URLs to the new ones for the web server. Old archive pages stay on disk.
- A tag that no review carries any more keeps its (now empty) feed: no reader
  of it ever gets a 404.
- An alias may not point to another alias (say ``"A" = "C"`` rather than
  ``"A" = "B"``, ``"B" = "C"``): the config is rejected with the chain named.

The registry applies to feeds, the OPML and the index; the store keeps each
review's tags as they were gathered.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .errors import ConfigError
from .models import Tag
from .tags import clean_tag_name, tag_key

_TABLES = ("aliases", "names", "descriptions")


@dataclass(frozen=True)
class TagsConfig:
    """``[tags]``: each table as ``(key as written, value)`` pairs, in file order.

    Attributes:
        aliases: (spelling, canonical tag name).
        names: (tag, display name).
        descriptions: (tag, one-line description).
    """

    aliases: tuple[tuple[str, str], ...] = ()
    names: tuple[tuple[str, str], ...] = ()
    descriptions: tuple[tuple[str, str], ...] = ()


def parse_tags_table(file: Path, data: Any) -> TagsConfig:
    """Validate the ``[tags]`` table of a config file.

    Raises:
        ConfigError: unknown sub-table, a non-string or multi-line value, an empty
            key, two keys naming the same tag, or an alias pointing to an alias;
            the message names the file and the key.
    """
    if data is None:
        return TagsConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: [tags] must be a table")
    unknown = sorted(set(data) - set(_TABLES))
    if unknown:
        raise ConfigError(f"{file}: [tags] unknown key {unknown[0]!r}",
                          hint="known tables: [tags.aliases], [tags.names], [tags.descriptions]")
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for name in _TABLES:
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: [tags.{name}] must be a table of \"tag\" = \"text\"")
        pairs, seen = [], {}
        for key, value in table.items():
            where = f"{file}: [tags.{name}] {key!r}"
            if not isinstance(value, str):
                raise ConfigError(f"{where} must be a string, got {type(value).__name__}")
            if re.search(r"[\r\n\u2028\u2029\x85]", value) or re.search(r"[\r\n]", key):
                raise ConfigError(f"{where} must be one line")
            if not tag_key(key) or not value.strip():
                raise ConfigError(f"{where}: tag and value must not be empty")
            k = tag_key(key)
            if k in seen:
                raise ConfigError(f"{where} names the same tag as {seen[k]!r}")
            seen[k] = key
            pairs.append((clean_tag_name(key), " ".join(value.split())))
        out[name] = tuple(pairs)
    alias_of = {tag_key(a): b for a, b in out["aliases"]}
    for a, b in out["aliases"]:
        kb = tag_key(b)
        if kb != tag_key(a) and kb in alias_of and tag_key(alias_of[kb]) != kb:
            raise ConfigError(f"{file}: [tags.aliases] {a!r} points to {b!r}, which is itself an alias "
                              f"of {alias_of[kb]!r}", hint=f"write {a!r} = {alias_of[kb]!r}")
    return TagsConfig(**out)


@dataclass(frozen=True)
class TagFeed:
    """A canonical tag as its feed shows it.

    Attributes:
        tag: the stored tag (its ``slug`` names the feed files).
        name: display name.
        description: one line, possibly empty.
    """

    tag: Tag
    name: str
    description: str

    @property
    def feed_key(self) -> str:
        """The tag's feed id in the store's feed tables: ``"tag:" + key``."""
        return "tag:" + self.tag.key


@dataclass(frozen=True)
class MovedTag:
    """A tag that became an alias of another after it had its own feed.

    Attributes:
        old: the stored tag whose feed moved.
        new: the canonical tag's feed it moved to.
    """

    old: Tag
    new: TagFeed


class TagRegistry:
    """Stored tags seen through ``[tags]``: which feed each belongs to and how it is shown.

    Args:
        config: the parsed ``[tags]`` table.
        stored: every stored tag by key (:meth:`newsletter.store.Store.tags`).
        ensure: creates (or returns) the stored tag for a display name; called
            for an alias target that no review carries yet, so it gets a slug.

    Attributes:
        feeds: canonical tags, by slug; every stored tag that is not an alias,
            plus alias targets (created through ``ensure`` when needed).
        moved: stored tags that are now aliases of another tag, by slug.
    """

    def __init__(self, config: TagsConfig, stored: dict[str, Tag],
                 ensure: Callable[[str], Tag]) -> None:
        self.config = config
        self._alias = {tag_key(a): tag_key(b) for a, b in config.aliases}
        spelled = {tag_key(b): b for _a, b in config.aliases}
        names = {self.canonical_key(tag_key(k)): v for k, v in config.names}
        descriptions = {self.canonical_key(tag_key(k)): v for k, v in config.descriptions}
        by_key: dict[str, Tag] = dict(stored)
        for key in sorted({self.canonical_key(k) for k in stored}):
            if key not in by_key:
                by_key[key] = ensure(spelled[key])
        self._feeds: dict[str, TagFeed] = {}
        for key, tag in by_key.items():
            if self.canonical_key(key) == key:
                self._feeds[key] = TagFeed(tag, names.get(key) or spelled.get(key) or tag.name,
                                           descriptions.get(key, ""))
        self.feeds: list[TagFeed] = sorted(self._feeds.values(), key=lambda f: f.tag.slug)
        self.moved: list[MovedTag] = sorted(
            (MovedTag(tag, self._feeds[self.canonical_key(key)]) for key, tag in by_key.items()
             if self.canonical_key(key) != key), key=lambda m: m.old.slug)

    def canonical_key(self, key: str) -> str:
        """The key of the tag whose feed holds reviews tagged ``key``."""
        return self._alias.get(key, key)

    def feed_for(self, key: str) -> Optional[TagFeed]:
        """The canonical tag feed for a stored tag key (``None`` for an unknown key)."""
        return self._feeds.get(self.canonical_key(key))

    def feed_keys(self) -> dict[str, str]:
        """Every stored tag key → the feed id (``"tag:" + canonical key``) its reviews go to."""
        keys = set(self._feeds) | {m.old.key for m in self.moved}
        return {k: "tag:" + self.canonical_key(k) for k in keys}

    def categories(self, tags: tuple[Tag, ...]) -> list[TagFeed]:
        """A review's tags as canonical tag feeds, in order, each once."""
        out: list[TagFeed] = []
        for t in tags:
            f = self.feed_for(t.key)
            if f is not None and f not in out:
                out.append(f)
        return out

    @property
    def fingerprint(self) -> str:
        """A digest of the ``[tags]`` table: with the (immutable) stored names and slugs
        it fixes how every review's categories are written."""
        doc = [self.config.aliases, self.config.names, self.config.descriptions]
        return hashlib.sha256(json.dumps(doc, ensure_ascii=False).encode()).hexdigest()[:16]
