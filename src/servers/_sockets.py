"""Socket chores shared by the adapters: binding listeners and accepting without spinning."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ._driver import Listener, format_address, log

__all__ = ["ListenError", "READ_SIZE", "BACKLOG", "ACCEPT_RETRY_DELAY", "accept_ready", "bind_listeners"]

#: bytes per read: big chunks keep the per-call overhead of the broker low.
READ_SIZE = 256 * 1024
#: listen() backlog; the kernel caps it at net.core.somaxconn.
BACKLOG = 4096
#: after accept() fails for lack of resources (EMFILE...) the listeners rest this long.
ACCEPT_RETRY_DELAY = 0.1
#: connections accepted per readiness event, so a storm of them cannot starve the others
ACCEPT_BATCH = 256


class ListenError(OSError):
    """A listener could not be bound; ``str()`` names the protocol and address."""

    #: the listener's name (amqp, stomp, ws, http, prometheus...)
    protocol = ""

    def __str__(self) -> str:
        return str(self.strerror)

    @classmethod
    def of(cls, protocol: str, host: str, port: int, exc: OSError) -> ListenError:
        """The error for ``exc``, met binding ``protocol``'s listener to ``host:port``."""
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        err = cls(exc.errno, f"cannot listen for {protocol} on {format_address(host, port)}: {why}")
        err.protocol = protocol
        return err


def bind_listeners(listeners: Sequence[Listener], recv_buffer: int = 0) -> list[tuple[socket.socket, Listener]]:
    """Listening, non-blocking sockets (one per listener) with the addresses actually bound.

    Done here for all adapters so that port 0, IPv6 literals and the backlog behave the same.
    ``recv_buffer`` > 0 sets SO_RCVBUF on the listeners, so every accepted connection inherits it
    from its first segment on (its window scale is chosen at the handshake; setting it after accept
    would leave the large window already advertised). On failure the sockets opened so far are
    closed and the OSError propagates.
    """
    out: list[tuple[socket.socket, Listener]] = []
    try:
        for lst in listeners:
            try:
                family, _, _, _, addr = socket.getaddrinfo(
                    lst.host, lst.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
                )[0]
                sock = socket.create_server(addr, family=family, backlog=BACKLOG)
                if recv_buffer > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
            except OSError as exc:  # the operator's message: which listener, which address, why
                raise ListenError.of(lst.protocol, lst.host, lst.port, exc) from None
            sock.setblocking(False)
            host, port = sock.getsockname()[:2]
            out.append((sock, replace(lst, host=host, port=port)))
    except BaseException:
        for sock, _ in out:
            sock.close()
        raise
    return out


def accept_ready(lsock: socket.socket) -> tuple[list[tuple[socket.socket, Any]], bool]:
    """Accept what is pending on a non-blocking listener: ([(sock, peer)...], exhausted).

    ``exhausted`` means accept() failed (typically out of file descriptors): the caller must stop
    polling that listener for ACCEPT_RETRY_DELAY, or a level-triggered poll spins on it.
    Accepted sockets are non-blocking with TCP_NODELAY.
    """
    out: list[tuple[socket.socket, Any]] = []
    for _ in range(ACCEPT_BATCH):
        try:
            sock, peer = lsock.accept()
        except (BlockingIOError, InterruptedError):
            break
        except OSError as exc:
            log.warning("accept failed: %s", exc)
            return out, True
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out.append((sock, peer))
    return out, False
