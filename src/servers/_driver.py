"""What every server adapter shares: calling the broker, draining it, executing its actions.

An adapter subclasses :class:`Driver` and supplies only I/O primitives (``_send``, ``_close``,
``_pause``, ``_resume``, ``_start_sync``, ``_arm_timer``, ``serve_forever``, ``stop``). The
driver contract is applied here once: after every broker call, ``drain()`` and execute the
actions in order; writes are coalesced per connection within one batch; bytes reported sent and
connections the adapter closed are fed back (``data_sent`` / ``connection_lost``) and drained
again until the broker is quiet; then the single timer is re-armed if ``get_timer()`` moved.
There is no protocol logic here: the protocol string is just handed to ``connection_made``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine import Close, PauseReading, ResumeReading, Sync, Write

__all__ = ["Listener", "BrokerLike", "Driver", "ReadyCallback", "format_address", "log"]

log = logging.getLogger("sansmq")

#: a Close whose flush cannot finish (the peer stopped reading) is forced after this long.
CLOSE_TIMEOUT = 10.0
#: on a graceful stop, how long clients get to answer their protocol's close before the sockets
#: are dropped (AMQP close-ok, WebSocket Close); syncs in flight are waited for in any case.
SHUTDOWN_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket: ``protocol`` is the string given to ``connection_made``; a TLS
    listener (``amqps``, ``stomps``, ``wss``) carries its ``ssl.SSLContext`` (see servers.tls)."""

    protocol: str
    host: str
    port: int
    tls: Any = field(default=None, compare=False, repr=False)


ReadyCallback = Callable[[list[Listener]], None]


class BrokerLike(Protocol):
    """The driver contract (engine.Broker implements it; tests use fakes)."""

    def connection_made(
        self, conn_id: int, protocol: str, peer: tuple[Any, ...], now: float
    ) -> None: ...
    def data_received(self, conn_id: int, data: bytes, now: float) -> None: ...
    def connection_lost(self, conn_id: int, now: float) -> None: ...
    def handle_timer(self, now: float) -> None: ...
    def get_timer(self) -> float | None: ...
    def drain(self) -> list[Any]: ...
    def data_sent(self, conn_id: int, nbytes: int) -> None: ...
    def synced(self, token: int, now: float) -> None: ...
    def run_sync(self, token: int) -> None:
        """The store's fsync covering ``token``; called from a worker thread."""


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Driver:
    """Base class of the three adapters; see the module docstring."""

    kind = "?"
    #: seconds a Close may spend flushing to a peer that does not read before it is forced
    close_timeout = CLOSE_TIMEOUT
    #: seconds a graceful stop waits for the connections to close (see ``_close_clients``)
    shutdown_timeout = SHUTDOWN_TIMEOUT
    #: SO_RCVBUF of accepted connections (Limits.tcp_recv_buffer, set by make_server); 0: autotuned
    recv_buffer = 0
    #: the adapter's open connections by id
    conns: dict[int, Any]

    def __init__(self, broker: BrokerLike, listeners: Sequence[Listener]) -> None:
        self.broker = broker
        self.listeners = list(listeners)
        self.bound: list[Listener] = []
        self._deadline: float | None = None
        self._next_id = 0
        self._pending: dict[int, list[bytes]] = {}  # writes of the current batch
        self._sent: dict[int, int] = {}  # bytes that left the process, not yet reported
        self._lost: list[int] = []  # connections gone, not yet reported
        self._stopping = False
        self._dispatch: dict[type, Callable[[Any], None]] = {
            Write: self._on_write,
            Close: self._on_close,
            PauseReading: lambda a: self._pause(a.conn_id),
            ResumeReading: lambda a: self._resume(a.conn_id),
            Sync: self._on_sync,
        }

    # -- adapter primitives ------------------------------------------------------------------
    def _send(self, conn_id: int, data: bytes) -> None:
        raise NotImplementedError

    def _close(self, conn_id: int) -> None:
        """Close after what was sent so far is flushed; report via ``gone()`` when done."""
        raise NotImplementedError

    def _pause(self, conn_id: int) -> None:
        raise NotImplementedError

    def _resume(self, conn_id: int) -> None:
        raise NotImplementedError

    def _start_sync(self, token: int) -> None:
        """Run ``broker.run_sync(token)`` off the loop, then ``call(broker.synced, ...)``."""
        raise NotImplementedError

    def _arm_timer(self, deadline: float | None) -> None:
        """The broker's next deadline (wall clock) changed; None = no timer."""
        raise NotImplementedError

    def _post_soon(self, fn: Callable[[], None]) -> None:
        """Thread-safe: have the loop run ``fn()`` soon; RuntimeError when it is not running."""
        raise NotImplementedError

    def serve_forever(self, ready: ReadyCallback | None = None) -> None:
        """Bind, call ``ready(bound listeners)``, serve until :meth:`stop`; blocks."""
        raise NotImplementedError

    def stop(self) -> None:
        """Thread-safe and signal-safe request for a graceful shutdown."""
        raise NotImplementedError

    # -- shared machinery --------------------------------------------------------------------
    def call_soon(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Thread-safe: run ``fn()`` on the broker's thread, where every broker call must happen
        (the management API's administration: users, vhosts, policies, definitions), then drain
        and execute as after any broker call; the future holds ``fn``'s result or exception."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            self.pump()

        try:
            self._post_soon(run)
        except RuntimeError as exc:
            fut.set_exception(exc)
        return fut

    def new_conn_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def call(self, method: Callable[..., None], *args: Any) -> None:
        """Call a broker entry point, then drain and execute until the broker is quiet."""
        method(*args)
        self.pump()

    def sent(self, conn_id: int, nbytes: int) -> None:
        """Record bytes that left the process; reported by the next :meth:`pump`."""
        if nbytes > 0:
            self._sent[conn_id] = self._sent.get(conn_id, 0) + nbytes

    def gone(self, conn_id: int) -> None:
        """Record that a connection's socket is closed; reported by the next :meth:`pump`."""
        self._lost.append(conn_id)

    def pump(self) -> None:
        broker = self.broker
        dispatch = self._dispatch
        while True:
            for action in broker.drain():
                dispatch[type(action)](action)
            self._flush_pending()
            if not (self._sent or self._lost):
                break
            sent, self._sent = self._sent, {}
            lost, self._lost = self._lost, []
            for conn_id, nbytes in sent.items():
                if conn_id not in lost:
                    broker.data_sent(conn_id, nbytes)
            now = time.time()
            for conn_id in lost:
                broker.connection_lost(conn_id, now)
        deadline = broker.get_timer()
        if deadline != self._deadline:
            self._deadline = deadline
            self._arm_timer(deadline)

    def _flush_pending(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, {}
            for conn_id, chunks in pending.items():
                self._send(conn_id, chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _on_write(self, action: Write) -> None:
        chunks = self._pending.get(action.conn_id)
        if chunks is None:
            self._pending[action.conn_id] = [action.data]
        else:
            chunks.append(action.data)

    def _on_close(self, action: Close) -> None:
        chunks = self._pending.pop(action.conn_id, None)
        if chunks:
            self._send(action.conn_id, b"".join(chunks))
        self._close(action.conn_id)

    def _on_sync(self, action: Sync) -> None:
        if not self._stopping:
            self._start_sync(action.token)

    def _sync_done(self, token: int, exc: BaseException | None) -> None:
        """Back on the loop after ``broker.run_sync(token)`` returned (or raised ``exc``)."""
        if self._stopping:
            return
        if exc is None:
            self.call(self.broker.synced, token, time.time())
            return
        # Never confirm what may not be on disk. engine.Broker has the ``sync_failed`` extension
        # (fails the held receipts); a broker without it just keeps holding them.
        log.error("store.sync(%r) failed: %r", token, exc)
        failed = getattr(self.broker, "sync_failed", None)
        if failed is not None:
            self.call(failed, token, time.time())

    def _announce(self, bound: list[Listener], ready: ReadyCallback | None) -> None:
        self.bound = bound
        for lst in bound:
            where = format_address(lst.host, lst.port)
            log.info("%s listening on %s (%s server)", lst.protocol, where, self.kind,
                     extra={"event": "listener.started", "protocol": lst.protocol, "address": where,
                            "server": self.kind})
        if ready is not None:
            ready(list(bound))

    def _close_clients(self) -> bool:
        """Graceful stop, after the listeners are closed: ask the broker for every connection's
        protocol close. True when the adapter should then wait (up to ``shutdown_timeout``) until
        its connections are gone; a broker without ``shutdown`` (a test fake) has nothing to say."""
        shutdown = getattr(self.broker, "shutdown", None)
        log.info("stopping: no longer accepting; closing %d connection(s)", len(self.conns),
                 extra={"event": "server.stopping", "connections": len(self.conns)})
        if shutdown is None or not self.conns:
            return False
        self.call(shutdown, time.time())
        return bool(self.conns)

    def _stop_all(self, conn_ids: list[int]) -> None:
        """Shutdown: the adapter has dropped these sockets; tell the broker, ignore its replies."""
        if conn_ids:
            log.warning("stopping: dropped %d connection(s) still open", len(conn_ids))
        self._stopping = True
        now = time.time()
        for conn_id in dict.fromkeys([*self._lost, *conn_ids]):
            self.broker.connection_lost(conn_id, now)
        self.broker.drain()
        self._pending.clear()
        self._sent.clear()
        self._lost.clear()
