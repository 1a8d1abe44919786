"""TLS for every listener and every server kind, in one place: ``TlsBroker`` wraps the broker and
speaks TLS through ``ssl.SSLObject`` over memory BIOs, so the adapters (asyncio, threads+epoll,
trio) move ciphertext exactly as they move plaintext: non-blocking, no handshake on their side.

A TLS listener's protocol is the plain one with a suffix (``amqps``, ``stomps``, ``wss``); the
wrapper strips it for the broker. Towards the socket: the handshake's bytes, the broker's writes
encrypted, a close_notify before a Close. Towards the broker: decrypted bytes, and bytes reported
sent counted in plaintext (back-pressure sees what the broker wrote). A failed handshake (no or a
bad client certificate when ``verify_peer`` is on, not TLS at all) closes that connection only,
after the TLS alert, and is logged.

``make_ssl_context`` builds the server context from the options; the management HTTP listener uses
the same function.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from engine import Close, Write

__all__ = ["make_ssl_context", "TlsBroker", "TLS_SUFFIX", "plain_protocol", "TlsOptionsError"]

log = logging.getLogger("sansmq.tls")

#: TLS listener protocol names -> the broker's protocol, and their default ports (RabbitMQ's)
TLS_SUFFIX = {"amqps": "amqp", "stomps": "stomp", "wss": "ws"}
TLS_PORTS = {"amqps": 5671, "stomps": 61614, "wss": 15673}
_READ = 256 * 1024


class TlsOptionsError(ValueError):
    """The certificate, key or CA could not be used (the message says which and why)."""


def plain_protocol(protocol: str) -> str:
    return TLS_SUFFIX.get(protocol, protocol)


def make_ssl_context(cert: str, key: str | None = None, ca: str | None = None,
                     verify_peer: bool = False) -> ssl.SSLContext:
    """A server-side context: ``cert`` (PEM, may hold the key too), ``key``, and ``ca`` (PEM bundle)
    to verify client certificates with; ``verify_peer`` requires one (else clients without one are
    refused during the handshake), as RabbitMQ's ``verify_peer`` + ``fail_if_no_peer_cert``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsOptionsError(f"cannot load the TLS certificate {cert}"
                              f"{f' with key {key}' if key else ''}: {exc}") from None
    if ca:
        try:
            ctx.load_verify_locations(ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsOptionsError(f"cannot load the TLS CA bundle {ca}: {exc}") from None
    if verify_peer:
        if not ca:
            raise TlsOptionsError("verifying client certificates needs a CA bundle (--tls-ca)")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _TlsConn:
    __slots__ = ("obj", "incoming", "outgoing", "ready", "early", "owed", "failed")

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.ready = False
        #: plaintext the broker wrote before the handshake finished
        self.early: list[bytes] = []
        #: [ciphertext bytes, plaintext bytes they carry] not yet reported sent, in order
        self.owed: deque[list[int]] = deque()
        self.failed = False


class TlsBroker:
    """The driver contract, with TLS on the connections of TLS listeners (see the module docstring).
    Everything else is the wrapped broker's (attributes are delegated)."""

    def __init__(self, broker: Any, contexts: Mapping[str, ssl.SSLContext]) -> None:
        self.inner = broker
        #: TLS listener protocol (amqps, stomps, wss) -> its context
        self.contexts = dict(contexts)
        self.conns: dict[int, _TlsConn] = {}
        self._out: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- the driver contract ---------------------------------------------------------------------
    def connection_made(self, conn_id: int, protocol: str, peer: tuple[Any, ...], now: float) -> None:
        ctx = self.contexts.get(protocol)
        if ctx is not None:
            self.conns[conn_id] = _TlsConn(ctx)
        self.inner.connection_made(conn_id, plain_protocol(protocol), peer, now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        tc = self.conns.get(conn_id)
        if tc is None:
            self.inner.data_received(conn_id, data, now)
            return
        if tc.failed:
            return
        if data:
            tc.incoming.write(data)
        else:
            tc.incoming.write_eof()
        plain, eof = self._pull(conn_id, tc)
        if tc.failed:
            return
        if plain:
            self.inner.data_received(conn_id, plain, now)
        if eof or not data:
            self.inner.data_received(conn_id, b"", now)

    def _pull(self, conn_id: int, tc: _TlsConn) -> tuple[bytes, bool]:
        """Advance the handshake, then decrypt what arrived: (plaintext, the peer closed TLS)."""
        chunks: list[bytes] = []
        eof = False
        try:
            if not tc.ready:
                tc.obj.do_handshake()
                tc.ready = True
                if tc.early:
                    early, tc.early = tc.early, []
                    for chunk in early:
                        self._encrypt(conn_id, tc, chunk)
            while True:
                chunk = tc.obj.read(_READ)
                if not chunk:
                    eof = True
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            eof = True
        except (ssl.SSLError, OSError) as exc:
            self._fail(conn_id, tc, exc)
        self._flush(conn_id, tc, 0)
        return b"".join(chunks), eof

    def _fail(self, conn_id: int, tc: _TlsConn, exc: BaseException) -> None:
        peer = getattr(self.inner, "sessions", {}).get(conn_id)
        log.warning("connection %d%s: TLS %s failed: %s", conn_id,
                    f" ({peer.peer[0]}:{peer.peer[1]})" if peer is not None and peer.peer else "",
                    "handshake" if not tc.ready else "record", getattr(exc, "reason", None) or exc)
        tc.failed = True
        self._flush(conn_id, tc, 0)  # the alert, if any
        self._out.append(Close(conn_id))
        self.inner.connection_lost(conn_id, time.time())

    def _flush(self, conn_id: int, tc: _TlsConn, plain: int) -> None:
        """Queue the ciphertext waiting in the outgoing BIO (carrying ``plain`` plaintext bytes)."""
        cipher = tc.outgoing.read()
        if cipher:
            tc.owed.append([len(cipher), plain])
            self._out.append(Write(conn_id, cipher))
        elif plain:
            tc.owed.append([0, plain])

    def _encrypt(self, conn_id: int, tc: _TlsConn, data: bytes) -> None:
        if not tc.ready:
            tc.early.append(data)
            return
        try:
            tc.obj.write(data)
        except (ssl.SSLError, OSError) as exc:
            self._fail(conn_id, tc, exc)
            return
        self._flush(conn_id, tc, len(data))

    def drain(self) -> list[Any]:
        for action in self.inner.drain():
            tc = self.conns.get(action.conn_id) if isinstance(action, (Write, Close)) else None
            if tc is None:
                self._out.append(action)
            elif tc.failed:
                continue  # already closed after the failed handshake
            elif isinstance(action, Write):
                self._encrypt(action.conn_id, tc, action.data)
            else:  # Close: a close_notify first
                if tc.ready:
                    try:
                        tc.obj.unwrap()
                    except (ssl.SSLError, OSError):
                        pass  # wants the peer's close_notify: we do not wait for it
                    self._flush(action.conn_id, tc, 0)
                self._out.append(action)
        out, self._out = self._out, []
        return out

    def data_sent(self, conn_id: int, nbytes: int) -> None:
        tc = self.conns.get(conn_id)
        if tc is None:
            self.inner.data_sent(conn_id, nbytes)
            return
        plain = 0
        owed = tc.owed
        while owed and nbytes >= owed[0][0]:
            cipher, carried = owed.popleft()
            nbytes -= cipher
            plain += carried
        if owed and nbytes:
            owed[0][0] -= nbytes
        if plain:
            self.inner.data_sent(conn_id, plain)

    def connection_lost(self, conn_id: int, now: float) -> None:
        self.conns.pop(conn_id, None)
        self.inner.connection_lost(conn_id, now)
