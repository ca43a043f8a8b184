"""The ``outbox`` transport: one ``.eml`` file per message in a directory.

Each file is the exact message an SMTP server would receive (CRLF line
endings), named after its ``Message-ID``, so it opens in any mail client and a
message written twice is one file. Files are written to a temporary name and
renamed, so none is ever half written.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Sequence

from ..config import Config
from ..errors import DeliveryError
from ..models import DeliveryResult, OutgoingMessage
from . import option, register


def eml_name(message_id: str) -> str:
    """A safe file name for a message id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", message_id) + ".eml"


@register("outbox")
class OutboxTransport:
    """Writes messages under ``[transport] dir`` (default ``outbox``).

    Raises:
        ConfigError: ``dir`` is not a string path.
        DeliveryError: the directory cannot be created or written.
    """

    name = "outbox"
    max_batch = 500
    idempotent = True

    def __init__(self, config: Config) -> None:
        raw = option(config, "dir", (str, Path), "outbox")
        self.dir = Path(raw) if Path(raw).is_absolute() else config.path.resolve().parent / raw
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeliveryError(f"outbox {self.dir}: cannot create: {exc.strerror}") from None

    def send(self, messages: Sequence[OutgoingMessage]) -> list[DeliveryResult]:
        """Write each message atomically; returns ``sent`` with the file name as provider id."""
        results = []
        for m in messages:
            target = self.dir / eml_name(m.message_id)
            try:
                fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".eml")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(m.data)
                os.replace(tmp, target)
            except OSError as exc:
                raise DeliveryError(f"outbox {self.dir}: cannot write: {exc.strerror}") from None
            results.append(DeliveryResult(m.recipient, "sent", target.name))
        return results

    def close(self) -> None:
        """Nothing to release."""
