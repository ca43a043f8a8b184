"""The ``smtp`` transport: one connection for many messages.

Security ``starttls`` (RFC 3207, default on port 587), ``ssl`` (implicit TLS,
RFC 8314, port 465) or ``none``; ``AUTH`` when ``username`` is set, with the
password from the environment variable named by ``password_env``. Each message
is sent with ``MAIL``/``RCPT``/``DATA`` so the server's reply (which usually
carries its queue id) is kept as the provider id. Reply codes (RFC 5321 §4.2):
4xx is transient (retry later), 5xx permanent for that recipient.
A connection lost *after* the whole message went out (the end-of-data ``.``
was written) counts as sent, whether or not the 250 reply arrived: the server
has the message, and sending it again would make a second copy. A connection
lost before that is retried on a new connection. A server that never greets
fails within ``timeout``.
"""

from __future__ import annotations

import re
import smtplib
import socket
import ssl
import threading
import time
from typing import Optional, Sequence

from ..config import Config
from ..errors import ConfigError, DeliveryError
from ..models import DeliveryResult, OutgoingMessage
from ..pacing import backoff_delay
from . import option, register

SECURITY = ("starttls", "ssl", "none")


@register("smtp")
class SmtpTransport:
    """SMTP submission.

    Options (``[transport]``): ``host`` (required), ``port`` (587 / 465 / 25 by
    security), ``security``, ``username``, ``password_env``, ``timeout`` (seconds,
    default 30), ``cafile`` (extra CA bundle, e.g. a test server's certificate),
    ``local_hostname`` (EHLO name), and optional DKIM signing: ``dkim_key_path``,
    ``dkim_selector``, ``dkim_domain`` (see :mod:`newsletter.dkim_sign`).

    Raises:
        ConfigError: bad options or the password variable is unset.
    """

    name = "smtp"
    max_batch = 1          # one message per ledger commit: a crash leaves at most one message in doubt
    idempotent = False

    def __init__(self, config: Config) -> None:
        self.config = config
        self.host = option(config, "host", str, required=True)
        self.security = option(config, "security", str, "starttls")
        if self.security not in SECURITY:
            raise ConfigError(f"{config.path}: [transport] security must be one of {', '.join(SECURITY)}")
        default_port = {"starttls": 587, "ssl": 465, "none": 25}[self.security]
        self.port = option(config, "port", int, default_port)
        self.timeout = float(option(config, "timeout", (int, float), 30))
        self.username = option(config, "username", str, "")
        self.password = ""
        if self.username:
            env = option(config, "password_env", str, required=True)
            self.password = config.secret(env, "[transport] password_env")
        cafile = option(config, "cafile", object, None)
        self.context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        self.local_hostname = option(config, "local_hostname", str, None)
        self.conn: Optional[smtplib.SMTP] = None
        self.smtputf8 = False
        from ..dkim_sign import signer_from_config
        self.dkim = signer_from_config(config)

    # --- connection ---------------------------------------------------------------

    def _connect(self) -> smtplib.SMTP:
        """Connect, greet, STARTTLS and log in, all within ``timeout`` seconds in total.

        ``timeout`` alone bounds each read, so a server dripping ``220-`` lines could
        hold the connection for ever; a watchdog shuts the socket at the deadline.
        """
        if self.security == "ssl":
            conn: smtplib.SMTP = smtplib.SMTP_SSL(timeout=self.timeout, context=self.context,
                                                  local_hostname=self.local_hostname)
        else:
            conn = smtplib.SMTP(timeout=self.timeout, local_hostname=self.local_hostname)
        conn._host = self.host  # what the constructor would set: the TLS server name to verify
        watchdog = threading.Timer(self.timeout, _shut, args=(conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect(self.host, self.port)
            conn.ehlo()
            if self.security == "starttls":
                if not conn.has_extn("starttls"):
                    raise DeliveryError(f"smtp {self.host}:{self.port}: server does not offer STARTTLS",
                                        hint="set security = \"ssl\" or \"none\"")
                conn.starttls(context=self.context)
                conn.ehlo()
            if self.username:
                conn.login(self.username, self.password)
            self.smtputf8 = conn.has_extn("smtputf8")
            return conn
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"smtp {self.host}:{self.port}: authentication refused ({exc.smtp_code})",
                                hint="check username and the password variable") from None
        except (OSError, smtplib.SMTPException) as exc:
            # Refused or reset at once: worth another try. Silence until the timeout is not
            # (a server that never greets fails within `timeout`, as documented).
            retryable = isinstance(exc, (ConnectionRefusedError, ConnectionResetError)) and watchdog.is_alive()
            if not watchdog.is_alive():
                exc = f"no ready server within {self.timeout:g} s"
            err = DeliveryError(f"smtp {self.host}:{self.port}: cannot connect: {exc}")
            err.retryable = retryable
            raise err from None
        finally:
            watchdog.cancel()

    def _ensure(self) -> smtplib.SMTP:
        """The open connection, made if needed. A connection refused or reset at once is
        tried ``[delivery] max_attempts`` times with exponential backoff and jitter; a
        server silent past ``timeout`` or a refused login is not retried."""
        attempts = max(1, self.config.delivery.max_attempts)
        for attempt in range(1, attempts + 1):
            if self.conn is not None:
                return self.conn
            try:
                self.conn = self._connect()
            except DeliveryError as exc:
                if attempt == attempts or not getattr(exc, "retryable", False):
                    raise
                d = self.config.delivery
                time.sleep(backoff_delay(attempt, d.backoff, d.backoff_max))
        assert self.conn is not None
        return self.conn

    def _drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    # --- sending ------------------------------------------------------------------

    def send(self, messages: Sequence[OutgoingMessage]) -> list[DeliveryResult]:
        """Send each message; a dropped connection is reopened once per message.

        Raises:
            DeliveryError: cannot connect or log in before the first message (nothing sent);
                later in the batch the remaining messages come back as ``retry`` instead.
        """
        results: list[DeliveryResult] = []
        for m in messages:
            try:
                results.append(self._send_one(m))
            except DeliveryError as exc:
                if not results:
                    raise
                results += [DeliveryResult(x.recipient, "retry", error=str(exc)[:300])
                            for x in messages[len(results):]]
                break
        return results

    def _send_one(self, m: OutgoingMessage) -> DeliveryResult:
        for attempt in (1, 2):
            conn = self._ensure()
            try:
                return self._transaction(conn, m)
            except smtplib.SMTPServerDisconnected:
                self._drop()
                if attempt == 2:
                    return DeliveryResult(m.recipient, "retry", error="connection lost before DATA was accepted")
            except smtplib.SMTPResponseException as exc:
                try:
                    conn.rset()
                except (OSError, smtplib.SMTPException):
                    self._drop()
                return _reply(m.recipient, exc.smtp_code, exc.smtp_error, "SMTP")
            except (socket.timeout, TimeoutError):
                self._drop()
                return DeliveryResult(m.recipient, "retry", error=f"timed out after {self.timeout:g} s")
            except OSError as exc:
                self._drop()
                if attempt == 2:
                    return DeliveryResult(m.recipient, "retry", error=f"connection error: {exc}")
        raise AssertionError("unreachable")  # pragma: no cover

    def _transaction(self, conn: smtplib.SMTP, m: OutgoingMessage) -> DeliveryResult:
        data = self.dkim.sign(m.data) if self.dkim else m.data
        mail_opts: list[str] = []
        if not m.recipient.isascii():
            if not self.smtputf8:
                return DeliveryResult(m.recipient, "failed",
                                      error="non-ASCII address and the server does not offer SMTPUTF8")
            mail_opts.append("SMTPUTF8")
        code, resp = conn.mail(m.sender, mail_opts)
        if code != 250:
            conn.rset()
            return _reply(m.recipient, code, resp, "MAIL FROM")
        code, resp = conn.rcpt(m.recipient)
        if code not in (250, 251):
            conn.rset()
            return _reply(m.recipient, code, resp, "RCPT TO")
        code, resp = conn.docmd("data")
        if code != 354:
            conn.rset()
            return _reply(m.recipient, code, resp, "DATA")
        body = re.sub(rb"(?m)^\.", b"..", data)
        if not body.endswith(b"\r\n"):
            body += b"\r\n"
        conn.send(body + b".\r\n")
        # the whole message is with the server now: whatever happens next, it is not sent again
        try:
            code, resp = conn.getreply()
        except smtplib.SMTPServerDisconnected:
            self._drop()
            return DeliveryResult(m.recipient, "sent", error="the server closed the connection after the "
                                  "message was transmitted, without a reply; counted as sent")
        except (socket.timeout, TimeoutError, OSError):
            self._drop()
            return DeliveryResult(m.recipient, "unknown", error=f"no reply to the end of DATA within "
                                  f"{self.timeout:g} s")
        if code != 250:
            return _reply(m.recipient, code, resp, "DATA")
        return DeliveryResult(m.recipient, "sent", provider_id=_text(resp)[:200])

    def close(self) -> None:
        """QUIT and close the connection."""
        if self.conn is not None:
            try:
                self.conn.quit()
            except (OSError, smtplib.SMTPException):
                pass
            self.conn = None


def _shut(conn: smtplib.SMTP) -> None:
    """Watchdog: end a connection that overran its deadline (the blocked read then fails)."""
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _text(resp: bytes | str) -> str:
    return resp.decode("utf-8", "replace") if isinstance(resp, bytes) else str(resp)


def _reply(recipient: str, code: int, resp: bytes | str, stage: str) -> DeliveryResult:
    status = "retry" if 400 <= code < 500 else "failed"
    return DeliveryResult(recipient, status, error=f"{stage}: {code} {_text(resp)}"[:300])
