"""Tag identity and slugs.

Two spellings are one tag when they are equal after Unicode NFKC normalisation
(which folds full-width and half-width forms, UAX #15) and case folding
(Unicode default case folding, as :meth:`str.casefold`): ``ROCm``, ``rocm`` and
``ＲＯＣｍ`` share the key ``rocm``.

A slug is the ASCII file-name part of the tag's feed. ASCII keys keep their
letters and digits (``CUDA Graph`` → ``cuda-graph``); keys with other
characters are written with Punycode (RFC 3492), as IDNA does for domain
labels, so every tag in every script gets a readable, reversible, ASCII slug
(``性能`` → ``xn--w8tw44e``; emoji too). The store assigns slugs once and keeps
them; a clash after this mapping gets a short hash suffix (:func:`unique_slug`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_NON_SLUG = re.compile(r"[^a-z0-9]+")


def tag_key(name: str) -> str:
    """The identity of a tag: NFKC, case-folded, inner white space collapsed.

    >>> tag_key("  ＲＯＣｍ ") == tag_key("rocm")
    True
    """
    folded = unicodedata.normalize("NFKC", clean_tag_name(name)).casefold()
    return " ".join(folded.split())


def clean_tag_name(name: str) -> str:
    """The display form of a tag: NFC, invisible format characters (Unicode category Cf:
    zero-width spaces, bidirectional overrides) removed, inner white space collapsed, trimmed."""
    visible = "".join(c for c in unicodedata.normalize("NFC", name) if unicodedata.category(c) != "Cf")
    return " ".join(visible.split())


MAX_SLUG = 64


def base_slug(key: str) -> str:
    """The slug a key gets when nothing else has it (see the module docstring).

    Returns:
        A non-empty string of ``[a-z0-9-]``, at most :data:`MAX_SLUG` characters
        (a longer one is cut and given 8 hex of SHA-1(key), so file names stay short).
    """
    if key.isascii():
        slug = _NON_SLUG.sub("-", key).strip("-")
        if not slug:
            return "tag-" + hashlib.sha1(key.encode()).hexdigest()[:8]
    else:
        puny = key.encode("punycode").decode("ascii").lower()
        slug = "xn--" + _NON_SLUG.sub("-", puny).strip("-")
    if len(slug) > MAX_SLUG:
        slug = slug[: MAX_SLUG - 9].rstrip("-") + "-" + hashlib.sha1(key.encode()).hexdigest()[:8]
    return slug


def unique_slug(key: str, taken: set[str]) -> str:
    """A slug for ``key`` not in ``taken``: the base slug, else base + 6 hex of SHA-1(key)."""
    slug = base_slug(key)
    if slug not in taken:
        return slug
    digest = hashlib.sha1(key.encode()).hexdigest()
    for n in range(6, 41):
        candidate = f"{slug}-{digest[:n]}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free slug for tag {key!r}")  # pragma: no cover — needs a SHA-1 collision
