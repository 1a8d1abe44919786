"""HTTPS for the management and Prometheus listeners: waitress with its connections wrapped in TLS.

waitress speaks plain HTTP only, so each accepted socket is wrapped (``ssl.SSLSocket``, handshake
on the first read) in a channel that maps TLS's "want read/write" to waitress's "nothing yet",
drains the record bytes OpenSSL already decrypted (``pending``: select does not see them), and
retries a write with exactly the bytes OpenSSL asked for (it refuses a moved or resized retry).
A peer that fails the handshake (plain HTTP, a bad or missing client certificate) is logged and
closed; nothing else is affected.
"""

from __future__ import annotations

import logging
import ssl
import time
from typing import Any

from .channel import DeadlineChannel

__all__ = ["tls_channel"]

log = logging.getLogger("sansmq.tls")
#: plaintext bytes per TLS write (one record)
_RECORD = 16 * 1024


class _TlsChannel(DeadlineChannel):
    ssl_context: ssl.SSLContext
    name = "https"

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        sock.setblocking(False)
        tls = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        #: bytes of a write TLS must be given again (a want-write retry), else 0
        self._retry = 0
        super().__init__(server, tls, addr, adj, map)

    def _failed(self, exc: ssl.SSLError) -> None:
        log.info("%s: TLS handshake or record failed from %s: %s", self.name, self.addr, exc,
                 extra={"event": "tls.failed", "protocol": self.name})
        self.handle_close()

    def handle_read(self) -> None:
        """waitress's handle_read, except that "no plaintext yet" (a handshake or a partial record
        in progress) is not the peer closing."""
        try:
            data: bytes = self.socket.recv(self.adj.recv_bytes)
            while data and (more := self.socket.pending()):
                data += self.socket.recv(more)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except ssl.SSLError as exc:
            self._failed(exc)
            return
        except OSError:
            self.handle_close()
            return
        if data:
            self.last_activity = time.time()
            self.received(data)
        else:
            self.handle_close()

    def send(self, data: bytes, do_close: bool = True) -> int:
        chunk = data[:self._retry or _RECORD]
        try:
            sent: int = self.socket.send(chunk)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            self._retry = len(chunk)
            return 0
        except ssl.SSLError as exc:
            self._failed(exc)
            return 0
        except OSError:
            if do_close:
                self.handle_close()
            return 0
        self._retry = 0
        return sent


def tls_channel(ctx: ssl.SSLContext, name: str) -> type:
    """A waitress channel class speaking TLS with ``ctx`` (set as a server's ``channel_class``)."""
    return type("TlsChannel", (_TlsChannel,), {"ssl_context": ctx, "name": name})
