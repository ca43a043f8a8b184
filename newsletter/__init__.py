"""newsletter — publish tagged code reviews as per-tag Atom feeds and a weekly email."""

__version__ = "0.1.0"
