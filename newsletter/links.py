"""Signed per-recipient links (unsubscribe, preferences, subscription confirmation).

Tokens are signed with HMAC-SHA256 (:mod:`itsdangerous`, ``URLSafeSerializer``)
using the key in the environment variable named by ``[site] secret_key_env``;
each purpose has its own salt, so a token for one purpose is refused for another.
Unsubscribe and preferences tokens do not expire, so an unsubscribe link in an
old issue keeps working; a forged or altered token fails :func:`read_token`.
Confirmation tokens carry their issue time and a nonce; :meth:`Links.read_confirm`
refuses them after ``max_age``. Links point at ``[site] app_url`` (the web app),
which defaults to ``base_url``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from itsdangerous import BadSignature, URLSafeSerializer

from .config import Config

SALTS = {"unsubscribe": "newsletter.unsubscribe", "preferences": "newsletter.preferences",
         "confirm": "newsletter.confirm"}


@dataclass(frozen=True)
class ConfirmToken:
    """What a confirmation link carries.

    Attributes:
        email: the address to confirm.
        nonce: the pending request's nonce (see ``Store.request_confirmation``).
        issued: aware UTC datetime the link was made.
        expired: older than the ``max_age`` given to :meth:`Links.read_confirm`.
    """

    email: str
    nonce: str
    issued: datetime
    expired: bool = False


class Links:
    """Builds and checks signed links for one configuration.

    Args:
        config: the configuration.
        key: the signing key (read from the environment by the caller).
    """

    def __init__(self, config: Config, key: str) -> None:
        self.base = config.site.app_url or config.site.base_url
        self.key = key
        self._serializers: dict[str, URLSafeSerializer] = {}

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        # One serializer per purpose, made once: a send signs two links per recipient.
        found = self._serializers.get(purpose)
        if found is None:
            found = self._serializers[purpose] = URLSafeSerializer(self.key, salt=SALTS[purpose])
        return found

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
        """``<app_url>unsubscribe?t=<token>`` (served by ``newsletter serve``)."""
        return f"{self.base}unsubscribe?t={self.token('unsubscribe', email)}"

    def preferences_url(self, email: str) -> str:
        """``<app_url>preferences?t=<token>``."""
        return f"{self.base}preferences?t={self.token('preferences', email)}"

    def confirm_url(self, email: str, nonce: str, now: datetime) -> str:
        """``<app_url>confirm?t=<token>``: a token carrying ``email``, ``nonce`` and ``now`` (whole UTC seconds)."""
        payload = [email.lower(), nonce, int(now.timestamp())]
        return f"{self.base}confirm?t={self._serializer('confirm').dumps(payload)}"

    def read_confirm(self, token: str, now: datetime, max_age_seconds: float) -> Optional[ConfirmToken]:
        """Check a confirmation token.

        Args:
            token: the ``t`` parameter.
            now: aware current time.
            max_age_seconds: links older than this are marked ``expired``.

        Returns:
            A :class:`ConfirmToken`, or ``None`` when the token is forged, altered or malformed.
        """
        try:
            value = self._serializer("confirm").loads(token)
        except BadSignature:
            return None
        if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], str)
                or not isinstance(value[1], str) or not isinstance(value[2], int)):
            return None
        issued = datetime.fromtimestamp(value[2], timezone.utc)
        age = (now - issued).total_seconds()
        return ConfirmToken(value[0], value[1], issued, expired=age > max_age_seconds or age < -300)
