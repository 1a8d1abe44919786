"""What every protocol session shares: outbound accounting (back-pressure), its codec timer in the
broker's timer queue, the handshake deadline, receipts held until the store is synced, the memory
alarm, and closing.

Handshake deadline (RabbitMQ's ``handshake_timeout``, ``Limits.handshake_timeout``): from the
moment the transport is accepted, a connection has that long to be logged in (STOMP CONNECTED, AMQP
connection.open-ok; over WebSocket the upgrade and the inner handshake together; over TLS the TLS
handshake too, which happens under the session). Until then its codec also takes only small frames
(``Limits.max_frame_size_unauthenticated``): nobody sends a large frame without credentials.

Reading from a connection is paused for any of four reasons, each a flag: ``out_paused`` (the
client does not read what we send), ``held_paused`` (too many receipts wait for the store),
``flow_blocked`` (a queue it publishes to is over its credit, see ``engine._broker.FLOW_CREDIT``) and
``mem_blocked`` (the broker's queued message bytes are over ``Limits.memory_high_watermark`` and
this connection publishes, as RabbitMQ's memory alarm). ``update_reading`` turns their union into
one PauseReading/ResumeReading edge; a session carried inside another (AMQP or STOMP inside
WebSocket) defers to its carrier, which owns the socket.
"""

from __future__ import annotations

import ipaddress
import random
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from . import oplog
from ._mypyc import interpreted_class
from ._timers import TimerKey
from .config import Config
from .model import Consumer, Model

__all__ = ["Carrier", "Host", "Session", "SERVER_NAME", "SUBSCRIPTION_BYTES", "is_loopback"]

SERVER_NAME = "sansmq/0.1.0"
#: what one subscription or consumer counts in the memory alarm: a little above what an idle
#: STOMP /queue destination costs in RSS (subscription, queue, dict slots, allocator slack), so
#: a client that subscribes without end raises the alarm as RabbitMQ's memory watermark would
SUBSCRIPTION_BYTES = 512


class Host(Protocol):
    """What a session may ask of the broker that runs it: the narrow interface between the
    protocol sessions and everything else (the broker implements it)."""

    config: Config
    model: Model
    rng: random.Random
    #: the driver's clock, as of the current call
    now: float
    #: server properties AMQP's connection.start adds (a cluster node's name, management port)
    advertised: dict[str, Any]

    def write(self, conn_id: int, data: bytes) -> None: ...

    def close_connection(self, conn_id: int) -> None:
        """Flush what was written, then close (the session is forgotten)."""

    def pause_reading(self, conn_id: int) -> None: ...

    def resume_reading(self, conn_id: int) -> None: ...

    def sync_token(self, wrote: bool) -> int | None:
        """None when the store needs no sync; else the token whose sync covers every store write
        so far (``wrote``) or 0 (nothing of this caller's to wait for)."""

    def is_synced(self, token: int, local: bool = False) -> bool: ...

    def holding(self, session: Session, on: bool) -> None:
        """``session`` holds (or no longer holds) answers until a sync: call its release_held."""

    def arm_timer(self, deadline: float, fn: Callable[[Any, float], None], arg: Any) -> TimerKey: ...

    def cancel_timer(self, key: TimerKey | None) -> None: ...

    def timer_moved(self, session: Session) -> None:
        """The session's codec deadline may have moved: ``refresh_timer`` it when the call settles."""

    def new_name(self, prefix: str) -> str: ...

    def internal_error(self, session: Session, exc: BaseException) -> None:
        """A bug met while serving ``session`` (kept for tests, logged with its traceback)."""

    def alarm_reason(self) -> str:
        """The resource alarms blocking publishers, as RabbitMQ names them ("low on memory")."""


def is_loopback(peer: tuple[Any, ...]) -> bool:
    """Whether a peer address is this machine (users with ``loopback_only`` connect only so)."""
    if not peer:
        return False
    host = str(peer[0])
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return bool(addr.is_loopback or (mapped is not None and mapped.is_loopback))


class Carrier(Protocol):
    """A session whose transport carries another session's bytes (STOMP inside WebSocket)."""

    def carry(self, data: bytes) -> None:
        """Send one chunk of the nested protocol's output (framed, counted against back-pressure)."""

    def carried_closed(self) -> None:
        """The nested session closed itself: end the outer protocol, then close the connection."""

    def carried_handshake_done(self) -> None:
        """The nested session logged in: the transport may take full-size frames from now on."""

    def update_reading(self) -> None:
        """A pause reason of the nested session changed: pause or resume the socket."""


@interpreted_class
class Session:
    __slots__ = (
        "host", "model", "conn_id", "peer", "blocked", "closed", "outbound", "timer_key", "timer_deadline",
        "held", "held_paused", "out_paused", "carrier", "mem_blocked", "flow_blocked", "published",
        "reading_paused", "handshaking", "handshake_deadline", "inbound",
        "close_reason", "__weakref__",
    )
    #: the protocol's name in log lines
    PROTOCOL = "?"
    #: what it waits for is durable once this node's own commit holds it (a cluster peer's link,
    #: whose publishes are never forwarded further): released by the store's sync alone, never
    #: by the confirms of this node's own forwards (``Broker.sync_gate``), which may wait for
    #: the very peer on the other end of this link
    durable_locally = False

    def __init__(self, host: Host, conn_id: int, peer: tuple[Any, ...]) -> None:
        self.host = host
        self.model = host.model
        self.conn_id = conn_id
        self.peer = peer
        #: over the outbound limit: no deliveries (reading goes on, so the client's ACKs still arrive)
        self.blocked = False
        #: reading paused because replies alone (receipts, errors) passed twice the outbound limit
        self.out_paused = False
        self.closed = False
        #: bytes handed to the server and not yet reported sent
        self.outbound = 0
        self.timer_key: tuple[float, int] | None = None
        self.timer_deadline: float | None = None
        #: (sync token, thunk) waiting for the store; None when nothing is held
        self.held: deque[tuple[int, Callable[[], None]]] | None = None
        #: reading paused because too many receipts wait for the store (Limits.max_pending_receipts)
        self.held_paused = False
        #: set when this session runs inside another one's transport: output and close go through it
        self.carrier: Carrier | None = None
        #: blocked by the memory alarm: not read until the broker's queued bytes drop below the mark
        self.mem_blocked = False
        #: paused by credit flow: a queue it published to has too many ready messages (the broker
        #: resumes it when that queue drains)
        self.flow_blocked = False
        #: this connection has published (only publishers are blocked by the memory alarm)
        self.published = False
        #: a PauseReading is in force for this connection
        self.reading_paused = False
        #: why the connection ends, for the log line (set by whoever decides to close it)
        self.close_reason = ""
        #: not logged in yet: small frames only (see ``handshake_done``)
        self.handshaking = True
        #: when the connection must have finished its handshake; None once it has (or no deadline)
        timeout = host.config.limits.handshake_timeout
        self.handshake_deadline: float | None = host.now + timeout / 1000 if timeout else None
        #: received bytes the codec holds (unparsed, or a message being assembled) and the
        #: subscriptions' share, as the broker last counted them for the memory alarm
        self.inbound = 0

    # -- to implement ----------------------------------------------------------------------------
    def start(self) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        raise NotImplementedError

    def lost(self) -> None:
        """The transport is gone: tear down without a Close action."""
        if not self.closed:
            self.close_reason = self.close_reason or oplog.EOF_REASON
            self.teardown()
            self._finish()

    def teardown(self) -> None:
        """Release everything the connection holds in the model (requeue its unacked messages)."""

    def inbound_bytes(self) -> int:
        """Received bytes the codec holds: not parsed yet, or parts of a message being assembled."""
        return 0

    def subscription_count(self) -> int:
        """Subscriptions (STOMP) or consumers (AMQP) the connection holds: no cap bounds them, so
        the memory alarm counts them (``SUBSCRIPTION_BYTES`` each)."""
        return 0

    def handshake_done(self) -> None:
        """The client is logged in: no handshake deadline any more, and full-size frames (the
        STOMP and AMQP codecs raise their own limits at CONNECTED and tune-ok; a carrier is told)."""
        if not self.handshaking:
            return
        self.handshaking = False
        self.handshake_deadline = None
        if self.carrier is not None:
            self.carrier.carried_handshake_done()
        self.host.timer_moved(self)

    def handshake_timed_out(self) -> None:
        """The handshake deadline passed: close (protocols override this to tell the peer first)."""
        self.close()

    def _handshake_expired(self) -> None:
        timeout = self.host.config.limits.handshake_timeout / 1000
        self.close_reason = self.close_reason or f"handshake not finished within {timeout:g} s (handshake_timeout)"
        oplog.handshake_timeout(self, timeout)
        self.handshake_timed_out()

    def codec_timer(self) -> float | None:
        return None

    def handle_codec_timer(self, now: float) -> None:
        pass

    def consumers(self) -> list[Consumer]:
        return []

    def fail_held(self, token: int) -> None:
        pass

    def abort(self, reason: str) -> None:
        """Close after an internal error (protocols override this to tell the peer first)."""
        self.close()

    def shutdown(self) -> None:
        """The broker is stopping: send the protocol's close (protocols override this), then close."""
        self.close_reason = "broker shutdown"
        self.close()

    def describe(self) -> dict[str, Any]:
        """What the management API shows of this connection (protocols add their fields)."""
        return {"protocol": self.PROTOCOL, "peer": self.peer, "user": None, "vhost": None,
                "channels": 0, "client_properties": {}}

    def force_close(self, text: str) -> None:
        """An operator (or the shutdown) closes the connection: the protocol's forced close
        (AMQP connection.close 320, STOMP ERROR CONNECTION_FORCED; protocols override this)."""
        self.close_reason = self.close_reason or f"closed by an operator: {text}"
        self.close()

    # -- output -----------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not data or self.closed:
            return
        if self.carrier is not None:
            self.carrier.carry(data)
            return
        self.host.write(self.conn_id, data)
        self.outbound += len(data)
        limit = self.host.config.limits.max_outbound_buffer
        if self.outbound > limit:
            self.blocked = True
            # Deliveries have stopped, so only answers to the client's own frames still grow the
            # buffer: a client that sends but never reads is paused before that grows unbounded.
            if not self.out_paused and self.outbound > 2 * limit:
                self.out_paused = True
                self.update_reading()

    def bytes_sent(self, nbytes: int) -> None:
        self.outbound = max(0, self.outbound - nbytes)
        limit = self.host.config.limits.max_outbound_buffer
        if self.out_paused and self.outbound <= limit:
            self.out_paused = False
            self.update_reading()
        if self.blocked and self.outbound <= limit // 2:
            self.blocked = False
            self.model.owner_unblocked(self.consumers())

    def close(self) -> None:
        """Tear down, then tell the server to flush and close."""
        if self.closed:
            return
        self.teardown()
        self._finish()
        if self.carrier is not None:
            self.carrier.carried_closed()
        else:
            self.host.close_connection(self.conn_id)

    def _finish(self) -> None:
        self.closed = True
        if self.carrier is None:  # a carried session is logged by its carrier
            oplog.closed(self, self.close_reason or "closed by the broker")
        self.model.events.connection_closed(self)
        self.model.limits.closed(self)
        self.held = None
        self.host.holding(self, False)
        self.host.cancel_timer(self.timer_key)
        self.timer_key = None

    # -- timers -----------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """The earliest of the codec's deadline and the handshake deadline."""
        deadline = self.codec_timer()
        handshake = self.handshake_deadline
        if handshake is not None and (deadline is None or handshake < deadline):
            return handshake
        return deadline

    def refresh_timer(self) -> None:
        if self.closed:
            return
        deadline = self.next_deadline()
        current = self.timer_deadline
        if deadline == current:
            return
        if deadline is not None and current is not None and deadline > current:
            return  # deadlines only moved later: let the registered timer fire early and re-arm then
        self.host.cancel_timer(self.timer_key)
        self.timer_key = None
        self.timer_deadline = deadline
        if deadline is not None:
            self.timer_key = self.host.arm_timer(deadline, Session._fire, self)

    @staticmethod
    def _fire(session: Session, now: float) -> None:
        session.timer_key = None
        fired = session.timer_deadline
        session.timer_deadline = None
        if session.closed:
            return
        handshake = session.handshake_deadline
        if handshake is not None and now >= handshake:
            session.handshake_deadline = None
            session._handshake_expired()
            if session.closed:
                return
        session.handle_codec_timer(now)
        if not session.closed:
            deadline = session.next_deadline()
            if deadline is not None and deadline <= now and deadline == fired:
                return  # the codec did not move its deadline; do not spin on it
            session.refresh_timer()

    # -- receipts held for the store ----------------------------------------------------------------
    def after_sync(self, wrote: bool, thunk: Callable[[], None]) -> None:
        """Run ``thunk`` (send a receipt, close...) once every store write it depends on is synced.
        Items queue behind earlier held ones so a connection's receipts stay in order."""
        host = self.host
        token = host.sync_token(wrote)
        if token is None or (not wrote and not self.held):
            thunk()
            return
        if self.held:
            token = max(token, self.held[-1][0])
        elif host.is_synced(token, self.durable_locally):
            thunk()
            return
        if self.held is None:
            self.held = deque()
        self.held.append((token, thunk))
        host.holding(self, True)
        if not self.held_paused and len(self.held) > host.config.limits.max_pending_receipts:
            # a client pipelining receipts faster than the store syncs: stop reading it
            self.held_paused = True
            self.update_reading()

    def held_last(self, wrote: bool) -> Callable[[], None] | None:
        """The thunk held last, if the sync that releases it would release one given to
        ``after_sync(wrote, ...)`` now as well: the caller may fold the new one into it (a run of
        publisher confirms held as one). None otherwise."""
        held = self.held
        if not held:
            return None
        token, last = held[-1]
        if wrote and token != self.host.sync_token(True):  # it wrote after the last Sync: a later one
            return None
        return last  # nothing written: it would queue behind ``last`` and go with it

    def release_held(self, synced: int) -> None:
        held = self.held
        while held and not self.closed and held[0][0] <= synced:
            held.popleft()[1]()
        if not self.held:
            self.held = None
            self.host.holding(self, False)
        if self.held_paused and not self.closed and (
            not held or len(held) <= self.host.config.limits.max_pending_receipts // 2
        ):
            self.held_paused = False
            self.update_reading()

    # -- reading pauses and the memory alarm ------------------------------------------------------------
    def wants_pause(self) -> bool:
        return self.out_paused or self.held_paused or self.mem_blocked or self.flow_blocked

    def reading_held(self) -> bool:
        """The broker itself stopped reading this client (memory alarm, credit flow), or its carrier:
        missed heart-beats are then not the client's fault."""
        carrier = self.carrier
        return self.mem_blocked or self.flow_blocked or bool(
            carrier is not None and getattr(carrier, "flow_blocked", False))

    def update_reading(self) -> None:
        """Emit PauseReading/ResumeReading when the union of the pause reasons changed."""
        if self.carrier is not None:
            self.carrier.update_reading()
            return
        if self.closed:
            return
        want = self.wants_pause()
        if want != self.reading_paused:
            self.reading_paused = want
            if want:
                self.host.pause_reading(self.conn_id)
            else:
                self.host.resume_reading(self.conn_id)

    def memory_alarm(self, on: bool) -> None:
        """The broker's resource alarms (memory, disk) went on or all off while this connection
        publishes: block or unblock it."""
        if self.mem_blocked == on or self.closed:
            return
        self.mem_blocked = on
        self.notify_blocked(on)
        self.update_reading()

    def notify_blocked(self, on: bool) -> None:
        """Tell the client, if its protocol can (AMQP connection.blocked/unblocked)."""
