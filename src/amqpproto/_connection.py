"""The sans-IO AMQP 0-9-1 connection: bytes in, events out, bytes back (both roles).

``Connection`` is put together from one class per job (see ``_base``); this module keeps its
construction, the public entry points that tie the parts together, and the heartbeat timers.
"""

from __future__ import annotations

from . import _state as S
from . import spec
from ._base import NO_TUNE, ChannelRecord
from ._buffer import ReceiveBuffer
from ._errors import INTERNAL_ERRORS, LocalProtocolError, RemoteProtocolError
from ._events import Event, HeartbeatDue, NeedData, PeerTimedOut
from ._rawprops import PropertyShapes, PublishParsing
from ._sending import Sending
from ._state import CLIENT, SERVER, Role

#: the methods each role may send: shared by every connection (two frozensets of ~2.2 KB each)
_SENDERS: dict[Role, frozenset[type]] = {
    role: frozenset(c for c in spec.METHODS.values() if (c.BY_CLIENT if role is CLIENT else c.BY_SERVER))
    for role in (CLIENT, SERVER)
}

__all__ = ["Connection"]


class Connection(Sending):
    """One AMQP connection, either role.

    ``frame_max``/``channel_max``/``heartbeat`` are this side's limits and preferences; the
    negotiated values replace them once connection.tune-ok has passed (either direction).
    ``max_body_size`` caps an announced content body (a breach is the soft error 311).
    ``initial_frame_max`` caps the frames received until connection.tune-ok has passed (None:
    ``frame_max``): a server's peer is not logged in before that, and RabbitMQ takes only small
    frames from it (FRAME_MIN_SIZE; the spec guarantees a peer at least 4096).
    ``raw_properties`` (server role): a basic.publish parsed by the fast path (method, header and
    body all buffered) carries its properties as a ``RawProperties`` (the bytes as received, and
    their shape decoded once), the general path's as ``BasicProperties``; ``varying_header`` names
    an integer header whose value may differ between publishes of one shape (a publishing id).
    ``publish_runs`` (with ``raw_properties``): fast-path publishes that follow one another on a
    channel with the same method frame come as one ``PublishRun`` event.
    """

    def __init__(
        self,
        role: Role,
        *,
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
        max_body_size: int = 128 * 1024 * 1024,
        initial_frame_max: int | None = None,
        raw_properties: bool = False,
        varying_header: str | None = None,
        publish_runs: bool = False,
    ) -> None:
        if role not in (CLIENT, SERVER):
            raise ValueError("role must be CLIENT or SERVER")
        if not spec.FRAME_MIN_SIZE <= frame_max <= 0xFFFFFFFF:
            raise ValueError("frame_max must be in 4096..2**32-1")
        if initial_frame_max is not None and not spec.FRAME_MIN_SIZE <= initial_frame_max:
            raise ValueError("initial_frame_max must be at least 4096")
        self.our_role = role
        self.their_role = role.peer
        self.state = S.AWAIT_HEADER
        self.config_frame_max = frame_max
        self.config_channel_max = channel_max
        self.config_heartbeat = heartbeat
        self.max_body_size = max_body_size
        self.frame_max = frame_max
        self.channel_max = channel_max or 65535
        self.heartbeat = 0  # negotiated seconds; 0 = off until tune-ok says otherwise
        self._recv_max_payload = min(frame_max, initial_frame_max or frame_max) - 8
        self._send_max_payload = spec.FRAME_MIN_SIZE - 8
        self._buf = ReceiveBuffer()
        self._eof = False
        self._broken: RemoteProtocolError | None = None
        self._bad_header = False
        #: timer events waiting for next_event: at most two, so a list (a deque is ~600 bytes)
        self._queued: list[Event] = []
        self._channels: dict[int, ChannelRecord] = {}
        self._may_send = _SENDERS[role]
        self._may_recv = _SENDERS[self.their_role]
        self._last_recv: float | None = None
        self._last_send: float | None = None
        self._due_sent = False
        self._timed_out = False
        self._tune = NO_TUNE
        #: parse basic.publish + header + body in one pass when all are buffered (server role)
        self._fast_publish = role is SERVER
        # Per-connection caches (at most CACHE_MAX entries each) for the hot paths: a producer
        # sends the same basic.publish method payload over and over (and, with raw properties, a
        # few property shapes), a consumer's deliveries repeat its consumer tag and a few
        # (exchange, routing key) pairs.
        #: the decoded basic.publish fields; with ``raw_properties`` the property shapes (``_rawprops``)
        self._publishing = PublishParsing(PropertyShapes(varying_header, publish_runs)
                                          if raw_properties and role is SERVER else None)
        #: encoded consumer tags and (exchange, routing key) pairs for send_deliver
        self._tag_cache: dict[str, bytes] = {}
        self._route_cache: dict[tuple[str, str], bytes] = {}

    # ---- public API -------------------------------------------------------------------
    def receive_data(self, data: bytes | bytearray | memoryview,
                     now: float | None = None) -> None:
        """Buffer bytes from the peer; ``b""`` means EOF. Parsing happens in next_event()."""
        if data:
            if self._eof:
                raise LocalProtocolError("received data after EOF")
            self._buf.feed(data)
            if now is not None:
                self._last_recv = now
        else:
            self._eof = True

    def next_event(self) -> Event | NeedData:
        """Return the next event, or NEED_DATA. Only RemoteProtocolError escapes."""
        if self._queued:
            return self._queued.pop(0)
        if self._broken is not None:
            raise self._broken.detached()  # a fresh copy each time: the kept one has no traceback
        try:
            return self._next()
        except RemoteProtocolError as e:
            self._failed(e)
            raise
        except INTERNAL_ERRORS as bug:  # a bug of ours: report 541, never crash the caller
            err = self._hard(spec.INTERNAL_ERROR, f"internal error: {bug!r}", fatal=True)
            self._failed(err)
            raise err from bug

    def get_timer(self) -> float | None:
        """Absolute time of the next heartbeat deadline, or None."""
        if not self.heartbeat or self.state is S.CLOSED or self._timed_out:
            return None
        deadlines = []
        if self._last_send is not None and not self._due_sent:
            deadlines.append(self._last_send + self.heartbeat)
        if self._last_recv is not None:
            deadlines.append(self._last_recv + 2 * self.heartbeat)
        return min(deadlines) if deadlines else None

    def peer_alive(self, now: float) -> None:
        """Count the peer as heard from at ``now`` and re-arm a timed-out receive deadline: for a
        server that stopped reading the peer on purpose (RabbitMQ's blocked connections)."""
        self._last_recv = now
        self._timed_out = False

    def handle_timer(self, now: float) -> None:
        """Queue HeartbeatDue / PeerTimedOut events whose deadlines have passed."""
        if not self.heartbeat or self.state is S.CLOSED:
            return
        if (self._last_recv is not None and not self._timed_out
                and now >= self._last_recv + 2 * self.heartbeat):
            self._timed_out = True
            self._queued.append(PeerTimedOut())
        if (self._last_send is not None and not self._due_sent
                and now >= self._last_send + self.heartbeat):
            self._due_sent = True
            self._queued.append(HeartbeatDue())

    @property
    def buffered_bytes(self) -> int:
        """Received bytes held: not parsed yet, or the body frames of a message being assembled."""
        return len(self._buf) + sum(chan.got for chan in self._channels.values() if chan.chunks)

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """Unparsed bytes and whether EOF was seen (like h11)."""
        return bytes(self._buf.data[self._buf.pos:]), self._eof

    def _failed(self, e: RemoteProtocolError) -> None:
        if isinstance(e.hint, spec.ChannelClose):
            chan = self._channels.get(e.hint.channel)
            if chan is not None:
                chan.state = S.CH_ERROR
                chan.cstate = S.C_IDLE
                chan.method = None
                chan.chunks = []
            return
        if e.fatal:
            self._broken = e.detached()
        if self.state not in S.CLOSING_BY and self.state is not S.CLOSED:
            self.state = S.ERROR
