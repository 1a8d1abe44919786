"""``Broker``: the driver contract. Owns the model, the sessions, the timers and the action queue.

Every driver call sets ``now``, runs the session or timer work, then settles: queues touched are
dispatched once, publishers paused or resumed by credit flow, session timers re-registered, and a
store write since the last Sync opens a sync token (a lazy one, an ack's, only when a receipt waits
on it or after LAZY_SYNC_DELAY). ``drain()`` hands back the actions in the order they were produced.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections.abc import Callable
from typing import Any

from . import oplog
from ._actions import Action, Close, PauseReading, ResumeReading, Sync, Write
from ._mypyc import interpreted_class
from ._session import SUBSCRIPTION_BYTES, Session
from ._timers import TimerKey, TimerQueue
from .admin import Administration
from .amqp import AmqpSession
from .config import Config, Limits
from .model import Model, Queue
from .stats import Sampler
from .stomp import StompSession
from .store import Store
from .ws import WsSession

__all__ = ["Broker", "register_protocol"]

#: internal errors (bugs met while serving a connection) are logged here with their traceback
log = logging.getLogger("sansmq.engine")

#: seconds lazy store writes (acks) may wait for a sync when no other write brings one: bounds how
#: many acks a crash can undo (each only a redelivery) and how long emptied segments stay on disk
LAZY_SYNC_DELAY = 1.0

#: credit flow, as RabbitMQ's: a publisher is not read while a queue it just published to holds
#: this many ready messages with consumers attached (the broker is falling behind delivering them;
#: reading on would only grow the queue and its latency), and is read again once that queue is down
#: to half. Queues without consumers are the memory alarm's and the page's business. The default of
#: ``Limits.flow_credit``, which sets it.
FLOW_CREDIT = Limits().flow_credit

SessionFactory = Callable[["Broker", int, tuple[Any, ...]], Session]
#: protocol name given to ``connection_made`` -> session factory(broker, conn_id, peer)
SESSION_TYPES: dict[str, SessionFactory] = {}


def register_protocol(name: str, factory: SessionFactory) -> None:
    """Plug in a session type for protocol ``name`` (stomp, amqp and ws are built in)."""
    SESSION_TYPES[name] = factory


SESSION_TYPES.setdefault("stomp", StompSession)
SESSION_TYPES.setdefault("amqp", AmqpSession)
SESSION_TYPES.setdefault("ws", WsSession)


def _without_traceback(exc: BaseException) -> BaseException:
    """``exc`` made fit to be kept: its traceback as text in a note (``engine.testing`` re-raises
    it), no live traceback along its cause/context chain, whose frames would hold the session."""
    exc.add_note("".join(["Traceback (kept as text):\n", *traceback.format_tb(exc.__traceback__)]))
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and not any(link is s for s in seen):  # a chain may loop back
        seen.append(link)
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return exc


# plain Python: a native class cannot extend a Python one (Administration), and the STOMP tail caches
# hold the broker by weak reference
@interpreted_class
class Broker(Administration):
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
        #: what AMQP connection.start adds to the server properties: a cluster node's name
        #: (``node``) and management port (``management_port``), set by the server
        self.advertised: dict[str, Any] = {}
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
        #: caps a synced token at what else must be durable first (a cluster node: the token's
        #: forwards confirmed by their leaders, ``ClusterStore.confirmed_through``)
        self.sync_gate: Callable[[int], int] | None = None
        #: the highest token the store's own sync covers (``_synced_token``: less what the gate holds)
        self._local_synced = 0
        #: sessions holding receipts until a token is synced, in the order they started holding
        self._holding: dict[Session, None] = {}
        #: sessions whose codec deadline may have moved (re-registered in _settle, no scan)
        self._timer_dirty: dict[Session, None] = {}
        self._store_writes_seen = 0
        self._eager_writes_seen = 0
        self._lazy_timer: TimerKey | None = None  # brings a sync for lazy writes left alone
        #: sync token -> what runs once it completed (the model's ``when_durable``)
        self._after_durable: dict[int, list[Callable[[], None]]] = {}
        #: ready messages above which a queue with consumers pauses its publishers (0: never)
        self.flow_credit = config.limits.flow_credit
        #: queues over their credit -> the publishers paused on them
        self._flow: dict[Queue, dict[Session, None]] = {}
        self._name_seq = 0
        #: the memory alarm: queued message bytes plus ``inbound_bytes`` passed
        #: Limits.memory_high_watermark
        self.mem_alarm = False
        #: the disk alarm: the free space the server last sampled (None: never) is below
        #: ``disk_free_limit`` (RabbitMQ's disk_free_limit; the server samples, the engine never reads disks)
        self.disk_alarm = False
        self.disk_free: int | None = None
        self.disk_free_limit = config.disk_free_limit
        #: publishers are blocked (reading paused, AMQP connection.blocked) while either alarm is on
        self.publishers_blocked = False
        #: received bytes the connections' codecs hold (frames still arriving, a large message
        #: being assembled, a login that never comes) and their subscriptions at
        #: ``SUBSCRIPTION_BYTES`` each: memory a peer makes us spend before any message is
        #: queued, so the memory alarm counts it too
        self.inbound_bytes = 0
        #: exceptions raised by session code (a bug); the connection concerned was closed
        self.internal_errors: list[Exception] = []
        #: the statistics sampler, once management or Prometheus asked for it (``enable_stats``)
        self.sampler: Sampler | None = None
        self.model.restore(store.recover())
        for name in config.vhosts:
            self.model.add_vhost(name, persist=False)
        self.model.add_vhost(config.default_vhost, persist=False)
        for name in config.trace_vhosts:
            self.model.set_trace(name)
        if config.event_vhost is not None:
            self.model.set_events(config.event_vhost)
        self._bootstrap_users()

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
        self.timer_moved(session)  # arm the handshake deadline
        self._settle()

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self._enter(now)
        session = self.sessions.get(conn_id)
        touched: list[Any] | None = None
        if session is not None:
            publishes = self.model.publishes
            events = self.model.events
            if events.exchange is not None:  # the event exchange names who acted
                events.actor = session
                self._guarded(session, session.data_received, data)
                events.actor = None
            else:
                self._guarded(session, session.data_received, data)
            self._count_inbound(session)
            if self.model.publishes != publishes:
                session.published = True
                touched = list(self.model.dirty)  # the queues this call published to (among others)
                if self.publishers_blocked or self._over_watermark():
                    # as RabbitMQ: a publisher is blocked once it publishes while the alarm is on
                    # (_settle raises the alarm for the other publishers). A message still arriving
                    # is read to its end first, as RabbitMQ blocks at the next publish: pausing it
                    # halfway would keep its bytes, and so the alarm, for good.
                    self._guarded(session, session.memory_alarm, True)
        self._settle()
        if touched and session is not None:
            self._flow_check(session, touched)

    def connection_lost(self, conn_id: int, now: float) -> None:
        self._enter(now)
        session = self.sessions.get(conn_id)
        if session is not None:
            session.lost()
            self.sessions.pop(conn_id, None)
            self._forget_inbound(session)
            if session.flow_blocked:
                for waiting in self._flow.values():
                    waiting.pop(session, None)
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
        self._check_store_writes(eager=True)
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
        if token > self._local_synced:
            self._local_synced = token
        if self.sync_gate is not None:
            token = self.sync_gate(token)
        if token > self._synced_token:
            self._synced_token = token
        self.model.streams.committed()  # the sync moved streams' committed offsets: wake their readers
        while self._after_durable and (t := next(iter(self._after_durable))) <= self._synced_token:
            for fn in self._after_durable.pop(t):
                fn()
        local = self._local_synced
        for session in list(self._holding):
            self._guarded(session, session.release_held, local if session.durable_locally else self._synced_token)
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

    # -- operations (the management API runs these on the broker's thread) ------------------------
    def disk_free_sampled(self, free: int, now: float) -> None:
        """Extension: the server measured ``free`` bytes available on the data directory's disk;
        the disk alarm follows (raised below ``disk_free_limit``, cleared at or above it)."""
        self._enter(now)
        self.disk_free = free
        self._settle()

    def set_disk_free_limit(self, limit: int, now: float) -> None:
        """RabbitMQ's ``rabbitmqctl set_disk_free_limit``: a new limit in bytes (0: no disk alarm)."""
        self._enter(now)
        self.disk_free_limit = limit
        self._settle()

    def alarm_reason(self) -> str:
        """The alarms in effect as RabbitMQ's connection.blocked reason ("low on memory & low on disk")."""
        # a publisher may be blocked just before the alarm is raised (the same call raises it)
        memory = self.mem_alarm or self._over_watermark()
        return " & ".join(f"low on {name}" for name, on in (("memory", memory), ("disk", self.disk_alarm)) if on)

    def enable_stats(self, interval: float = 1.0) -> None:
        """Sample the message counters every ``interval`` seconds of the server's clock (for rates);
        idempotent. Off until asked: a broker without management has no timer for it."""
        if self.sampler is None:
            self.sampler = Sampler(interval)
            self.sampler.sample(self.now, self.model)
            self.timers.add(self.now + interval, self._sample, None)

    def _sample(self, _arg: Any, now: float) -> None:
        sampler = self.sampler
        assert sampler is not None
        sampler.sample(now, self.model)
        self.timers.add(now + sampler.interval, self._sample, None)

    def force_close(self, conn_id: int, text: str, now: float) -> bool:
        """Close one connection with its protocol's forced close (AMQP 320 CONNECTION_FORCED with
        ``text``, STOMP ERROR); False when there is no such connection."""
        self._enter(now)
        session = self.sessions.get(conn_id)
        if session is None or session.closed:
            return False
        self._guarded(session, session.force_close, text)
        self._settle()
        return True

    def run_command(self, fn: Callable[[Broker], Any], now: float) -> Any:
        """Run a management command against the model at ``now``, then settle (dispatch queues
        it touched, raise or clear the memory alarm)."""
        self._enter(now)
        try:
            return fn(self)
        finally:
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
        session = self.sessions.pop(conn_id, None)
        if session is not None:
            self._forget_inbound(session)

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

    def is_synced(self, token: int, local: bool = False) -> bool:
        return token <= (self._local_synced if local else self._synced_token)

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
        log.error("internal error on connection %d (%s, peer %s); closing it", session.conn_id,
                  type(session).__name__, session.peer, exc_info=(type(exc), exc, exc.__traceback__))
        self.internal_errors.append(_without_traceback(exc))  # type: ignore[arg-type]
        del self.internal_errors[:-100]

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
                    self._forget_inbound(session)
                    self._emit(Close(session.conn_id))

    def _check_store_writes(self, eager: bool = False) -> None:
        """Open a sync token for the store writes made since the last one. ``eager``: only when
        some of them are not lazy; lazy ones alone get a timer (see LAZY_SYNC_DELAY) instead."""
        model = self.model
        writes = model.store_writes
        if writes == self._store_writes_seen:
            return
        if eager and model.eager_writes == self._eager_writes_seen:
            if self._lazy_timer is None:
                self._lazy_timer = self.timers.add(self.now + LAZY_SYNC_DELAY, self._lazy_due, None)
            return
        self._store_writes_seen = writes
        self._eager_writes_seen = model.eager_writes
        if self._lazy_timer is not None:
            self.timers.cancel(self._lazy_timer)
            self._lazy_timer = None
        if self._open_token is None:
            self._sync_token += 1
            self._open_token = self._sync_token

    def _lazy_due(self, _arg: Any, _now: float) -> None:
        self._lazy_timer = None
        self._check_store_writes()

    def _enter(self, now: float) -> None:
        # time never goes backwards inside the engine, whatever the server's clock does
        if now > self.now:
            self.now = now
        self.model.now = self.now

    def _count_inbound(self, session: Session) -> None:
        """Update ``inbound_bytes`` with what ``session`` holds now: received bytes its codec
        holds and its subscriptions (uncapped, as RabbitMQ: they are bounded by the alarm)."""
        held = 0 if session.closed else session.inbound_bytes() + session.subscription_count() * SUBSCRIPTION_BYTES
        if held != session.inbound:
            self.inbound_bytes += held - session.inbound
            session.inbound = held

    def _forget_inbound(self, session: Session) -> None:
        self.inbound_bytes -= session.inbound
        session.inbound = 0

    def memory_used(self) -> int:
        """What the memory alarm compares with the high watermark: queued message bytes plus the
        received bytes the codecs hold plus ``SUBSCRIPTION_BYTES`` per subscription."""
        return self.model.queued_bytes + self.inbound_bytes

    def _over_watermark(self) -> bool:
        mark = self.config.limits.memory_high_watermark
        return bool(mark) and self.memory_used() > mark

    def _below_disk_limit(self) -> bool:
        return bool(self.disk_free_limit) and self.disk_free is not None and self.disk_free < self.disk_free_limit

    def _check_alarms(self) -> None:
        """Raise or clear the memory and disk alarms; publishing connections are blocked while
        either is on."""
        over = self._over_watermark()
        if over != self.mem_alarm:
            self.mem_alarm = over
            self.model.events.alarm(over, "memory")
            oplog.memory_alarm(over, self.memory_used(), self.config.limits.memory_high_watermark)
        low = self._below_disk_limit()
        if low != self.disk_alarm:
            self.disk_alarm = low
            self.model.events.alarm(low, "disk")
            oplog.disk_alarm(low, self.disk_free or 0, self.disk_free_limit)
        blocked = self.mem_alarm or self.disk_alarm
        if blocked == self.publishers_blocked:
            return
        self.publishers_blocked = blocked
        for session in list(self.sessions.values()):
            # a publisher in the middle of a message is blocked at its next publish (see
            # data_received) rather than now, halfway, holding what it sent so far
            if session.published and not (blocked and session.inbound_bytes()):
                self._guarded(session, session.memory_alarm, blocked)

    def _flow_check(self, session: Session, touched: list[Any]) -> None:
        """After ``session`` published: pause its reading if a queue it wrote to is over its credit
        (after dispatch, so only messages the consumers could not take yet count)."""
        credit = self.flow_credit
        if session.closed or session.flow_blocked or not credit:
            return
        for q in touched:
            if type(q) is Queue and q.count >= credit and q.consumers:
                session.flow_blocked = True
                self._flow.setdefault(q, {})[session] = None
                self._guarded(session, session.update_reading)
                return

    def _flow_release(self) -> None:
        """Resume the publishers paused on queues that drained to half their credit (or lost their
        consumers, or were deleted)."""
        low = self.flow_credit // 2
        for q in [q for q in self._flow if q.count <= low or not q.consumers]:
            for session in self._flow.pop(q):
                session.flow_blocked = False
                if not session.closed:
                    self._guarded(session, session.update_reading)

    def _settle(self) -> None:
        self.model.dispatch()
        waiting = self.model.after_durable
        if waiting:  # they wait for the token covering every write so far
            token = self.sync_token(True) or 0
            ready, waiting[:] = list(waiting), []
            if token <= self._synced_token:  # durable already: no later sync need come for them
                for fn in ready:
                    fn()
                self.model.dispatch()
            else:
                self._after_durable.setdefault(token, []).extend(ready)
        if self._flow:
            self._flow_release()
        self._check_alarms()
        while self._timer_dirty:
            session = next(iter(self._timer_dirty))
            del self._timer_dirty[session]
            session.refresh_timer()
