"""Transports: the seam between the send loop and the world.

A transport takes a batch of :class:`~newsletter.models.OutgoingMessage` and
returns one :class:`~newsletter.models.DeliveryResult` per message, in order.
It is chosen by ``[transport] kind`` from :data:`REGISTRY`, never by an if/elif
on strings. :class:`~newsletter.transports.memory.MemoryTransport` is shipped
for users' own tests.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

from ..config import Config
from ..errors import ConfigError
from ..models import DeliveryResult, OutgoingMessage


@runtime_checkable
class Transport(Protocol):
    """What the send loop needs from a transport.

    Attributes:
        name: the ``kind`` it is registered under.
        max_batch: most messages one :meth:`send` call takes.
        idempotent: sending the same message (same ``message_id``) twice delivers
            one copy, so a message whose fate is unknown after a crash may be resent.
            The send loop replays such a batch with exactly the same messages.
        idempotency_window: optional attribute, seconds the provider remembers an
            idempotency key (Resend: 24 h); absent or ``None`` = forever (outbox).

    ``send`` raises DeliveryError only when no message of the batch can have been
    accepted; a request that went out without an answer gives ``unknown`` results.
    """

    name: str
    max_batch: int
    idempotent: bool

    def send(self, messages: Sequence[OutgoingMessage]) -> list[DeliveryResult]:
        """Send a batch; one result per message, same order. Raises DeliveryError if the transport as a whole fails."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


REGISTRY: dict[str, Callable[[Config], Transport]] = {}


def register(kind: str) -> Callable:
    """Class decorator: make a transport available as ``[transport] kind = "<kind>"``."""
    def deco(factory):
        REGISTRY[kind] = factory
        return factory
    return deco


def make_transport(config: Config) -> Transport:
    """The configured transport.

    Raises:
        ConfigError: unknown ``kind`` or a bad option (named with the file).
    """
    from . import mailgun, memory, outbox, postmark, resend, sendgrid, smtp  # noqa: F401  (registration)

    kind = config.transport.kind
    if kind not in REGISTRY:
        raise ConfigError(f"{config.path}: [transport] kind {kind!r} is not known",
                          hint=f"one of: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[kind](config)


def option(config: Config, key: str, kind: type | tuple, default=None, required: bool = False):
    """Read one ``[transport]`` option with its type checked.

    Raises:
        ConfigError: missing when required, or of the wrong type.
    """
    opts = config.transport.options
    if key not in opts:
        if required:
            raise ConfigError(f"{config.path}: [transport] {key} is required for kind {config.transport.kind!r}")
        return default
    value = opts[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{config.path}: [transport] {key} has the wrong type ({type(value).__name__})")
    return value
