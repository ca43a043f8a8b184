"""Signed per-recipient links (unsubscribe, preferences).

Tokens are signed with HMAC-SHA256 (:mod:`itsdangerous`, ``URLSafeSerializer``)
using the key in the environment variable named by ``[site] secret_key_env``.
They do not expire, so an unsubscribe link in an old issue keeps working; a
forged or altered token fails :func:`read_token`.
"""

from __future__ import annotations

from typing import Optional

from itsdangerous import BadSignature, URLSafeSerializer

from .config import Config

SALTS = {"unsubscribe": "newsletter.unsubscribe", "preferences": "newsletter.preferences"}


class Links:
    """Builds and checks signed links for one configuration.

    Args:
        config: the configuration.
        key: the signing key (read from the environment by the caller).
    """

    def __init__(self, config: Config, key: str) -> None:
        self.base = config.site.base_url
        self.key = key

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        return URLSafeSerializer(self.key, salt=SALTS[purpose])

    def token(self, purpose: str, email: str) -> str:
        """A signed token carrying ``email`` for ``purpose`` (``unsubscribe`` or ``preferences``)."""
        return self._serializer(purpose).dumps(email.lower())

    def read_token(self, purpose: str, token: str) -> Optional[str]:
        """The address in a token, or ``None`` if it is forged, altered or for another purpose."""
        try:
            value = self._serializer(purpose).loads(token)
        except BadSignature:
            return None
        return value if isinstance(value, str) else None

    def unsubscribe_url(self, email: str) -> str:
        """``<base_url>unsubscribe?t=<token>`` (served by ``newsletter serve``)."""
        return f"{self.base}unsubscribe?t={self.token('unsubscribe', email)}"

    def preferences_url(self, email: str) -> str:
        """``<base_url>preferences?t=<token>``."""
        return f"{self.base}preferences?t={self.token('preferences', email)}"
