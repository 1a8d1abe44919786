"""``Broker``: the driver contract. Owns the model, the sessions, the timers and the action queue.

Every driver call sets ``now``, runs the session or timer work, then settles: queues touched are
dispatched once, session timers re-registered, and a store write since the last Sync opens a sync
token. ``drain()`` hands back the actions in the order they were produced.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from . import oplog
from ._actions import Action, Close, PauseReading, ResumeReading, Sync, Write
from ._session import Session
from ._timers import TimerKey, TimerQueue
from .amqp import AmqpSession
from .config import Config
from .model import Model
from .stomp import StompSession
from .store import Store
from .ws import WsSession

__all__ = ["Broker", "register_protocol"]

#: internal errors (bugs met while serving a connection) are logged here with their traceback
log = logging.getLogger("sansmq.engine")

SessionFactory = Callable[["Broker", int, tuple[Any, ...]], Session]
#: protocol name given to ``connection_made`` -> session factory(broker, conn_id, peer)
SESSION_TYPES: dict[str, SessionFactory] = {}


def register_protocol(name: str, factory: SessionFactory) -> None:
    """Plug in a session type for protocol ``name`` (stomp, amqp and ws are built in)."""
    SESSION_TYPES[name] = factory


SESSION_TYPES.setdefault("stomp", StompSession)
SESSION_TYPES.setdefault("amqp", AmqpSession)
SESSION_TYPES.setdefault("ws", WsSession)


class Broker:
    """All broker state behind the synchronous driver contract (see DESIGN.md section 2).

    ``now`` arguments are wall-clock seconds since the epoch, injected by the server; the broker
    never reads a clock and draws randomness only from ``rng``. ``sync_failed(token, now)`` is an
    extension a server may call when ``store.sync`` raised.
    """

    def __init__(self, config: Config, store: Store, rng: random.Random) -> None:
        self.config = config
        self.store = store
        self.rng = rng
        self.now = 0.0
        self.timers = TimerQueue()
        self.model = Model(store, self.timers)
        self.model.light_limit = config.limits.max_topic_buffer
        self.model.page_window = max(1, config.limits.queue_window)
        self.model.page_window_bytes = max(1, config.limits.queue_window_bytes)
        self.sessions: dict[int, Session] = {}
        self._out: list[Action | list[Any]] = []  # a list item is a pending Write: [conn_id, chunks]
        self._last_write: list[Any] | None = None
        self._sync_token = 0
        self._open_token: int | None = None
        self._synced_token = 0
        #: sessions holding receipts until a token is synced, in the order they started holding
        self._holding: dict[Session, None] = {}
        #: sessions whose codec deadline may have moved (re-registered in _settle, no scan)
        self._timer_dirty: dict[Session, None] = {}
        self._store_writes_seen = 0
        self._name_seq = 0
        #: the memory alarm: queued message bytes passed Limits.memory_high_watermark
        self.mem_alarm = False
        #: exceptions raised by session code (a bug); the connection concerned was closed
        self.internal_errors: list[Exception] = []
        self.model.restore(store.recover())
        for name in config.vhosts:
            self.model.add_vhost(name, persist=False)
        self.model.add_vhost(config.default_vhost, persist=False)
        for name in config.trace_vhosts:
            self.model.set_trace(name)

    # -- driver contract --------------------------------------------------------------------------
    def connection_made(self, conn_id: int, protocol: str, peer: tuple[Any, ...], now: float) -> None:
        self._enter(now)
        factory = SESSION_TYPES.get(protocol)
        if factory is None or conn_id in self.sessions:
            self._emit(Close(conn_id))
            return
        session = factory(self, conn_id, peer)
        self.sessions[conn_id] = session
        oplog.accepted(conn_id, protocol, peer)
        self._guarded(session, session.start)
        self._settle()

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self._enter(now)
        session = self.sessions.get(conn_id)
        if session is not None:
            publishes = self.model.publishes
            self._guarded(session, session.data_received, data)
            if self.model.publishes != publishes:
                session.published = True
                if self.mem_alarm or self._over_watermark():
                    # as RabbitMQ: a publisher is blocked once it publishes while the alarm is on
                    # (_settle raises the alarm for the other publishers)
                    self._guarded(session, session.memory_alarm, True)
        self._settle()

    def connection_lost(self, conn_id: int, now: float) -> None:
        self._enter(now)
        session = self.sessions.get(conn_id)
        if session is not None:
            session.lost()
            self.sessions.pop(conn_id, None)
        self._settle()

    def handle_timer(self, now: float) -> None:
        self._enter(now)
        while (due := self.timers.pop_due(now)) is not None:
            fn, arg = due
            session = arg if isinstance(arg, Session) else None
            if session is not None:
                self._guarded(session, fn, arg, now)
            else:
                fn(arg, now)
            self.model.dispatch()
        self._settle()

    def get_timer(self) -> float | None:
        return self.timers.next_deadline()

    def drain(self) -> list[Write | Close | PauseReading | ResumeReading | Sync]:
        self._check_store_writes()
        if self._open_token is not None:
            self._out.append(Sync(self._open_token))
            self._open_token = None
        out: list[Any] = []
        for item in self._out:
            if isinstance(item, list):
                chunks = item[1]
                out.append(Write(item[0], chunks[0] if len(chunks) == 1 else b"".join(chunks)))
            else:
                out.append(item)
        self._out = []
        self._last_write = None
        return out

    def data_sent(self, conn_id: int, nbytes: int) -> None:
        session = self.sessions.get(conn_id)
        if session is not None:
            session.bytes_sent(nbytes)
            self._settle()

    def synced(self, token: int, now: float) -> None:
        self._enter(now)
        if token > self._synced_token:
            self._synced_token = token
        self.model.streams.committed()  # the sync moved streams' committed offsets: wake their readers
        for session in list(self._holding):
            self._guarded(session, session.release_held, self._synced_token)
        self._settle()

    def run_sync(self, token: int) -> None:
        """Make every store write covered by ``token`` durable (the fsync). The one broker method a
        server calls from a worker thread, one call at a time, while the loop goes on; it touches
        only the store, whose ``sync`` is safe to run beside the loop's writes. Raises what the
        store raises (then call ``sync_failed``)."""
        self.store.sync(token)

    def close_store(self) -> None:
        """Close the store once no server drives the broker any more (flushes and releases files)."""
        self.store.close()

    def sync_failed(self, token: int, now: float) -> None:
        """Extension: ``store.sync(token)`` raised. Connections waiting on it get an ERROR and close,
        so no client is told a message is safe when it may not be."""
        self._enter(now)
        for session in list(self._holding):
            self._guarded(session, session.fail_held, token)
        self._settle()

    def shutdown(self, now: float) -> None:
        """Extension: the server is stopping. Every connection gets its protocol's close (AMQP
        connection.close 320, STOMP ERROR, WebSocket Close 1001 around the inner one); the server
        then waits a bounded time for the Close actions before dropping what is left."""
        self._enter(now)
        for session in list(self.sessions.values()):
            if not session.closed:
                self._guarded(session, session.shutdown)
        self._settle()

    # -- the host interface of sessions (engine._session.Host) ---------------------------------
    def write(self, conn_id: int, data: bytes) -> None:
        last = self._last_write
        if last is not None and last[0] == conn_id:
            last[1].append(data)
            return
        last = [conn_id, [data]]
        self._out.append(last)
        self._last_write = last

    def _emit(self, action: Action) -> None:
        self._out.append(action)
        self._last_write = None

    def close_connection(self, conn_id: int) -> None:
        self._emit(Close(conn_id))
        self.sessions.pop(conn_id, None)

    def pause_reading(self, conn_id: int) -> None:
        self._emit(PauseReading(conn_id))

    def resume_reading(self, conn_id: int) -> None:
        self._emit(ResumeReading(conn_id))

    def sync_token(self, wrote: bool) -> int | None:
        if not self.store.needs_sync:
            return None
        if not wrote:
            return 0
        # the token whose Sync will cover every store write made so far (opening one if needed)
        self._check_store_writes()
        if self._open_token is None:
            # nothing unsynced since the last Sync: the last emitted token covers it
            return self._sync_token
        return self._open_token

    def is_synced(self, token: int) -> bool:
        return token <= self._synced_token

    def holding(self, session: Session, on: bool) -> None:
        if on:
            self._holding[session] = None
        else:
            self._holding.pop(session, None)

    def arm_timer(self, deadline: float, fn: Callable[[Any, float], None], arg: Any) -> TimerKey:
        return self.timers.add(deadline, fn, arg)

    def cancel_timer(self, key: TimerKey | None) -> None:
        self.timers.cancel(key)

    def timer_moved(self, session: Session) -> None:
        self._timer_dirty[session] = None

    def new_name(self, prefix: str) -> str:
        """An unguessable but reproducible name (from the injected rng)."""
        self._name_seq += 1
        return f"{prefix}{self._name_seq}-{self.rng.getrandbits(48):012x}"

    # -- internals ---------------------------------------------------------------------------------
    def internal_error(self, session: Session, exc: BaseException) -> None:
        """Record and log a bug met while serving ``session`` (whose connection it closes), with
        its traceback; the last 100 are kept in ``internal_errors``."""
        self.internal_errors.append(exc)  # type: ignore[arg-type]
        del self.internal_errors[:-100]
        log.error("internal error on connection %d (%s, peer %s); closing it", session.conn_id,
                  type(session).__name__, session.peer, exc_info=(type(exc), exc, exc.__traceback__))

    def _guarded(self, session: Session, fn: Callable[..., None], *args: Any) -> None:
        """A bug met while serving one connection closes that connection, not the broker.
        The exception is kept in ``internal_errors`` (``engine.testing`` re-raises it)."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - isolation boundary
            self.internal_error(session, exc)
            if not session.closed:
                try:
                    session.abort("internal error")
                except Exception as exc2:  # noqa: BLE001
                    self.internal_error(session, exc2)
                    session.closed = True
                    self.sessions.pop(session.conn_id, None)
                    self._emit(Close(session.conn_id))

    def _check_store_writes(self) -> None:
        writes = self.model.store_writes
        if writes != self._store_writes_seen:
            self._store_writes_seen = writes
            if self._open_token is None:
                self._sync_token += 1
                self._open_token = self._sync_token

    def _enter(self, now: float) -> None:
        # time never goes backwards inside the engine, whatever the server's clock does
        if now > self.now:
            self.now = now
        self.model.now = self.now

    def _over_watermark(self) -> bool:
        mark = self.config.limits.memory_high_watermark
        return bool(mark) and self.model.queued_bytes > mark

    def _check_memory(self) -> None:
        """Raise or clear the memory alarm; publishing connections are blocked while it is on."""
        over = self._over_watermark()
        if over == self.mem_alarm:
            return
        self.mem_alarm = over
        oplog.memory_alarm(over, self.model.queued_bytes, self.config.limits.memory_high_watermark)
        for session in list(self.sessions.values()):
            if session.published:
                self._guarded(session, session.memory_alarm, over)

    def _settle(self) -> None:
        self.model.dispatch()
        self._check_memory()
        while self._timer_dirty:
            session = next(iter(self._timer_dirty))
            del self._timer_dirty[session]
            session.refresh_timer()
