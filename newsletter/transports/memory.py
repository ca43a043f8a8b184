"""An in-memory transport for tests: keeps every message it is given."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..config import Config
from ..models import DeliveryResult, OutgoingMessage
from . import register


@register("memory")
class MemoryTransport:
    """Collects messages in :attr:`sent`.

    Args:
        config: unused (present for the registry).
        fail: optional ``recipient → DeliveryResult or None`` hook to simulate failures.
    """

    name = "memory"
    max_batch = 100
    idempotent = False

    def __init__(self, config: Optional[Config] = None,
                 fail: Optional[Callable[[str], Optional[DeliveryResult]]] = None) -> None:
        self.sent: list[OutgoingMessage] = []
        self.fail = fail
        self.closed = False

    def send(self, messages: Sequence[OutgoingMessage]) -> list[DeliveryResult]:
        """Keep each message unless ``fail`` returns a result for it."""
        results = []
        for m in messages:
            outcome = self.fail(m.recipient) if self.fail else None
            if outcome is None:
                self.sent.append(m)
                outcome = DeliveryResult(m.recipient, "sent", m.message_id)
            results.append(outcome)
        return results

    def close(self) -> None:
        """Mark closed."""
        self.closed = True
