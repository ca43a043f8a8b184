"""The error tree.

Every error the library raises on purpose derives from :class:`NewsletterError`
and carries a one-line message naming where the problem came from, plus an
optional ``hint`` telling the user what to do::

    NewsletterError
    ├── ConfigError      bad or missing configuration (CLI exit code 2)
    ├── SourceError      a source could not be read (unreachable, HTTP error, bad container)
    ├── RecordError      one review record broke the review-record table
    ├── StoreError       the SQLite store is unusable (locked, newer schema)
    ├── RenderError      a template or the MJML compiler failed
    ├── DeliveryError    a transport failed as a whole (connection, auth)
    ├── NothingToSend    the issue is empty (exit 0)
    └── LockError        another run holds the lock
"""

from __future__ import annotations


class NewsletterError(Exception):
    """Root of every deliberate error; ``str(err)`` is one line for the user.

    Args:
        message: what went wrong and where (file, key, record).
        hint: optional advice shown after the message.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class ConfigError(NewsletterError):
    """The configuration file or an environment variable it names is wrong."""


class SourceError(NewsletterError):
    """A whole source could not be read; nothing from it is taken this run."""


class RecordError(NewsletterError):
    """One review record is invalid; the other records of its source are still taken."""


class StoreError(NewsletterError):
    """The SQLite store cannot be opened or migrated."""


class RenderError(NewsletterError):
    """A template could not be rendered or compiled to HTML."""


class DeliveryError(NewsletterError):
    """A transport failed as a whole (cannot connect, authentication refused)."""


class NothingToSend(NewsletterError):
    """The issue has no reviews (an empty week): not a failure, nothing is sent."""


class LockError(NewsletterError):
    """Another newsletter process holds the store's lock."""
