"""Optional DKIM signing (RFC 6376) of outgoing messages, with dkimpy.

Configured in ``[transport]`` (SMTP transport)::

    dkim_key_path = "keys/dkim.pem"      # PEM private key (RSA, or Ed25519 per RFC 8463); resolved against the config file
    dkim_selector = "news2026"           # the DNS record is <selector>._domainkey.<domain>
    dkim_domain = "example.org"          # d= ; default: the domain of [email] from

The signature covers :data:`SIGNED_HEADERS` (``From``, ``To``, ``Subject``,
``Date``, ``Message-ID``, ``List-Id``, both ``List-Unsubscribe`` headers, …) with
relaxed/relaxed canonicalization, so Gmail and Yahoo can trust the one-click
unsubscribe header (RFC 8058 §4 requires it to be covered by a valid DKIM signature).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import dkim

from .config import Config
from .errors import ConfigError, DeliveryError

SIGNED_HEADERS: tuple[str, ...] = (
    "From", "To", "Subject", "Date", "Message-ID", "Reply-To", "List-Id", "List-Unsubscribe",
    "List-Unsubscribe-Post", "MIME-Version", "Content-Type",
)


class DkimSigner:
    """Signs whole RFC 5322 messages (bytes, CRLF) for one domain and selector.

    Args:
        key: the private key, PEM bytes.
        selector: DKIM selector (``s=``).
        domain: signing domain (``d=``).
        headers: header names to sign (``h=``); ``From`` must be among them.

    Raises:
        ConfigError: empty selector or domain, or ``From`` not signed.
    """

    def __init__(self, key: bytes, selector: str, domain: str,
                 headers: tuple[str, ...] = SIGNED_HEADERS) -> None:
        if not selector or not domain:
            raise ConfigError("DKIM needs a selector and a domain")
        if "from" not in {h.lower() for h in headers}:
            raise ConfigError("DKIM must sign the From header (RFC 6376 §5.4)")
        self.key, self.selector, self.domain = key, selector.encode(), domain.encode("idna")
        self.headers = [h.encode() for h in headers]

    def sign(self, data: bytes) -> bytes:
        """The message with a ``DKIM-Signature`` header prepended.

        Raises:
            DeliveryError: dkimpy refused the key or the message (e.g. a key that is not PEM).
        """
        try:
            header = dkim.sign(data, self.selector, self.domain, self.key,
                               canonicalize=(b"relaxed", b"relaxed"), include_headers=self.headers)
        except (dkim.DKIMException, ValueError) as exc:
            raise DeliveryError(f"DKIM signing failed: {exc}",
                                hint="check [transport] dkim_key_path is a PEM private key") from None
        return header + data


def signer_from_config(config: Config) -> Optional[DkimSigner]:
    """The signer described by ``[transport] dkim_*`` options, or ``None`` when ``dkim_key_path`` is unset.

    Raises:
        ConfigError: key file unreadable, selector missing, or an option of the wrong type.
    """
    from .message import parse_sender
    from .transports import option

    raw = option(config, "dkim_key_path", (str, Path), None)
    if raw is None:
        return None
    path = Path(raw)
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{config.path}: [transport] dkim_key_path {path}: cannot read: {exc.strerror}") from None
    if b"PRIVATE KEY" not in key:
        raise ConfigError(f"{config.path}: [transport] dkim_key_path {path} is not a PEM private key")
    selector = option(config, "dkim_selector", str, required=True)
    domain = option(config, "dkim_domain", str, "") or (parse_sender(config.email.sender).domain or "")
    return DkimSigner(key, selector, domain)
