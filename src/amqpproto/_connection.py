"""The sans-IO AMQP 0-9-1 connection: bytes in, events out, bytes back (both roles)."""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

from . import _state as S
from . import spec
from ._buffer import ReceiveBuffer
from ._errors import LocalProtocolError, RemoteProtocolError
from ._events import (
    NEED_DATA,
    ConnectionClosed,
    Event,
    Heartbeat,
    HeartbeatDue,
    NeedData,
    OutgoingEvent,
    PeerTimedOut,
    ProtocolHeader,
)
from ._readers import CONTENT_HEADER, FRAME_HEADER, TooDeep
from ._sasl import amqplain_response, plain_response
from ._state import CLIENT, SERVER, ChannelState, ConnectionState, Role
from ._writers import HEARTBEAT_FRAME

_DECODERS = spec.DECODERS
_ENCODERS = spec.ENCODERS
_U32 = struct.Struct(">I")
_unpack_frame_header = FRAME_HEADER.unpack_from
_pack_frame_header = FRAME_HEADER.pack
_END_AND_HEADER = struct.Struct(">BBHI").pack  # frame-end of one frame + header of the next
_HEADER_FRAME_START = struct.Struct(">HHQ").pack
#: send_deliver's pieces: frame header + basic.deliver's ids; delivery tag + flags; frame end +
#: content-header frame header + class/weight/body size
_DELIVER_HEAD = struct.Struct(">BHII").pack
_DELIVER_MID = struct.Struct(">QB").pack
_DELIVER_PROPS = struct.Struct(">BBHIHHQ").pack
_DELIVER_IDS = (60 << 16) | 60
#: Bound of each per-connection encode/decode cache below (entries); a full cache is cleared, so
#: unbounded name sets (routing keys) cost at most this many entries per connection.
_CACHE_MAX = 256


def _short(cache: dict[str, bytes], s: str) -> bytes:
    """``s`` as an encoded shortstr (length octet included), remembered in ``cache``; b"" marks a
    name too long for a shortstr."""
    b = s.encode("utf-8", "surrogateescape")
    out = bytes((len(b),)) + b if len(b) <= 255 else b""
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[s] = out
    return out


def _route_bytes(cache: dict[tuple[str, str], bytes], exchange: str, routing_key: str) -> bytes:
    """Exchange and routing key as two encoded shortstrs, remembered in ``cache``; b"" if either
    is too long."""
    x = exchange.encode("utf-8", "surrogateescape")
    k = routing_key.encode("utf-8", "surrogateescape")
    out = bytes((len(x),)) + x + bytes((len(k),)) + k if len(x) <= 255 and len(k) <= 255 else b""
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[(exchange, routing_key)] = out
    return out
_decode_properties = spec.decode_properties
_decode_publish = spec._decode_BasicPublish
_PUBLISH_IDX = spec.BasicPublish.INDEX
_Properties = spec.BasicProperties
_Publish = spec.BasicPublish
_encode_properties = spec.encode_properties
_EMPTY_PROPS = spec.encode_properties(spec.BasicProperties())
#: The methods that carry content (properties and a body).
ContentMethod = spec.BasicPublish | spec.BasicReturn | spec.BasicDeliver | spec.BasicGetOk
_CHANNEL_MGMT = frozenset({spec.ChannelOpen, spec.ChannelOpenOk, spec.ChannelClose,
                           spec.ChannelCloseOk})
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError)
_ENCODE_ERRORS = (struct.error, ValueError, TypeError, OverflowError, AttributeError)
_HEADER = spec.PROTOCOL_HEADER
_CONTENT = S.CONTENT_TABLE


class _Channel:
    __slots__ = ("state", "cstate", "method", "size", "chunks", "got", "paused")

    def __init__(self, state: ChannelState) -> None:
        self.state = state
        self.paused = False  # the peer sent channel.flow(active=False): hold our content
        self.cstate = S.C_IDLE
        self.method: ContentMethod | None = None
        self.size = 0
        self.chunks: list[bytes] = []
        self.got = 0


def _negotiate(a: int, b: int) -> int:
    # 0 means "no limit" for channel-max/frame-max and "off" for heartbeat (RabbitMQ's rule:
    # if either side says 0 take the other, else the smaller).
    return max(a, b) if a == 0 or b == 0 else min(a, b)


def _text(msg: str) -> str:
    return msg.encode("utf-8")[:255].decode("utf-8", "ignore")


class Connection:
    """One AMQP connection, either role.

    ``frame_max``/``channel_max``/``heartbeat`` are this side's limits and preferences; the
    negotiated values replace them once connection.tune-ok has passed (either direction).
    ``max_body_size`` caps an announced content body (a breach is the soft error 311).
    """

    def __init__(
        self,
        role: Role,
        *,
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
        max_body_size: int = 128 * 1024 * 1024,
    ) -> None:
        if role not in (CLIENT, SERVER):
            raise ValueError("role must be CLIENT or SERVER")
        if not spec.FRAME_MIN_SIZE <= frame_max <= 0xFFFFFFFF:
            raise ValueError("frame_max must be in 4096..2**32-1")
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
        self._recv_max_payload = frame_max - 8
        self._send_max_payload = spec.FRAME_MIN_SIZE - 8
        self._buf = ReceiveBuffer()
        self._eof = False
        self._broken: RemoteProtocolError | None = None
        self._bad_header = False
        self._queued: deque[Event] = deque()
        self._channels: dict[int, _Channel] = {}
        self._may_send = self._senders(role)
        self._may_recv = self._senders(self.their_role)
        self._last_recv: float | None = None
        self._last_send: float | None = None
        self._due_sent = False
        self._timed_out = False
        self._tune = spec.ConnectionTune(0, 0, 0)
        #: parse basic.publish + header + body in one pass when all are buffered (server role)
        self._fast_publish = role is SERVER
        # Per-connection caches (at most _CACHE_MAX entries each) for the hot paths: a producer
        # sends the same basic.publish method payload over and over, a consumer's deliveries
        # repeat its consumer tag and a few (exchange, routing key) pairs.
        #: decoded basic.publish fields (ticket, exchange, routing key, mandatory, immediate)
        self._publish_cache: dict[bytes, tuple[int, str, str, bool, bool]] = {}
        #: encoded consumer tags and (exchange, routing key) pairs for send_deliver
        self._tag_cache: dict[str, bytes] = {}
        self._route_cache: dict[tuple[str, str], bytes] = {}

    @staticmethod
    def _senders(role: Role) -> frozenset[type]:
        return frozenset(c for c in spec.METHODS.values()
                         if (c.BY_CLIENT if role is CLIENT else c.BY_SERVER))

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
            return self._queued.popleft()
        if self._broken is not None:
            raise self._broken
        try:
            return self._next()
        except RemoteProtocolError as e:
            self._failed(e)
            raise
        except _DECODE_ERRORS as e:  # a bug of ours: report 541, never crash the caller
            err = self._hard(spec.INTERNAL_ERROR, f"internal error: {e!r}", fatal=True)
            self._failed(err)
            raise err from e

    def send(self, event: OutgoingEvent, now: float | None = None) -> bytes:
        """Validate ``event`` against the state machines and serialise it."""
        cls: Any = type(event)
        enc = _ENCODERS.get(cls)
        if enc is None:
            out = self._send_other(event)
        else:
            m: Any = event  # a method: cls's class attributes say which
            ch = m.channel
            if ch == 0:
                if cls.CLASS_ID != 10:
                    raise LocalProtocolError(f"{cls.NAME} needs a channel number >= 1")
                new_state = self._connection_next(cls, self.our_role, LocalProtocolError)
                if cls is spec.ConnectionTuneOk and 0 < m.frame_max < spec.FRAME_MIN_SIZE:
                    raise LocalProtocolError("frame_max below the 4096 minimum")
            else:
                self._channel_send_check(cls, ch)
            try:
                payload = enc(m)
                if len(payload) > self._send_max_payload:
                    raise LocalProtocolError(f"{cls.NAME} does not fit in frame_max")
                if cls.CONTENT:
                    out = self._content_frames(ch, payload, m)
                else:
                    out = _pack_frame_header(1, ch, len(payload)) + payload + b"\xce"
            except _ENCODE_ERRORS as e:
                raise LocalProtocolError(f"cannot encode {cls.NAME}: {e}") from e
            if ch == 0:  # state moves only once the event is known to serialise
                self.state = new_state
                self._after_connection_method(m, sent=True)
            else:
                self._after_channel_method(cls, ch, self.our_role)
        if now is not None:
            self._last_send = now
            self._due_sent = False
        return out

    def send_deliver(self, ch: int, consumer_tag: str, delivery_tag: int, redelivered: bool,
                     exchange: str, routing_key: str, properties: bytes, body: bytes,
                     now: float | None = None) -> bytes:
        """``send(BasicDeliver(...))`` for a server's hot path, byte for byte the same output.

        ``properties`` is an encoded property list (``encode_properties`` output), so a message
        fanned out to many consumers is encoded once. No event object is built; anything
        unusual (channel not plainly open, paused, long names, a body needing several frames)
        takes the general path, which also raises its errors.
        """
        chan = self._channels.get(ch)
        n = len(body)
        if (chan is None or chan.state is not S.CH_OPEN or chan.paused or self.state is not S.OPEN
                or self.our_role is not SERVER or n > self._send_max_payload
                or len(properties) + 12 > self._send_max_payload or type(body) is not bytes):
            return self._send_deliver_general(ch, consumer_tag, delivery_tag, redelivered, exchange,
                                              routing_key, properties, body, now)
        ct = self._tag_cache.get(consumer_tag)
        if ct is None:
            ct = _short(self._tag_cache, consumer_tag)
        route = self._route_cache.get((exchange, routing_key))
        if route is None:
            route = _route_bytes(self._route_cache, exchange, routing_key)
        if not ct or not route or not 0 <= delivery_tag < 1 << 64:  # b"": a name over 255 bytes
            return self._send_deliver_general(ch, consumer_tag, delivery_tag, redelivered, exchange,
                                              routing_key, properties, body, now)
        lp = len(properties)
        parts = [_DELIVER_HEAD(1, ch, 13 + len(ct) + len(route), _DELIVER_IDS), ct,
                 _DELIVER_MID(delivery_tag, 1 if redelivered else 0), route,
                 _DELIVER_PROPS(0xCE, 2, ch, 12 + lp, 60, 0, n), properties]
        if n:
            parts.append(_END_AND_HEADER(0xCE, 3, ch, n))
            parts.append(body)
        parts.append(b"\xce")
        if now is not None:
            self._last_send = now
            self._due_sent = False
        return b"".join(parts)

    def _send_deliver_general(self, ch: int, consumer_tag: str, delivery_tag: int, redelivered: bool,
                              exchange: str, routing_key: str, properties: bytes, body: bytes,
                              now: float | None) -> bytes:
        """send_deliver's way out for anything unusual: send() with its checks and errors."""
        encoded: Any = properties  # send() takes encoded properties in place of BasicProperties
        return self.send(spec.BasicDeliver(consumer_tag, delivery_tag, redelivered, exchange,
                                           routing_key, encoded, body, channel=ch), now)

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

    def start_ok(self, start: spec.ConnectionStart, user: str, password: str,
                 product: str) -> spec.ConnectionStartOk:
        """Client helper: the start-ok logging in as ``user`` with PLAIN (AMQPLAIN if the server
        offers only that), announcing the RabbitMQ capabilities a confirming consumer relies on."""
        mechs = bytes(start.mechanisms).split()
        if b"PLAIN" in mechs or not mechs:
            mech, response = "PLAIN", plain_response(user, password)
        else:
            mech, response = "AMQPLAIN", amqplain_response(user, password)
        props = {"product": product, "capabilities": {
            "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
            "authentication_failure_close": True}}  # a refused log-in is a connection.close 403
        return spec.ConnectionStartOk(props, mech, response, "en_US")

    def tune_ok(self, tune: spec.ConnectionTune) -> spec.ConnectionTuneOk:
        """Client helper: the tune-ok that negotiates the server's proposal with our limits."""
        return spec.ConnectionTuneOk(
            channel_max=_negotiate(tune.channel_max, self.config_channel_max),
            frame_max=_negotiate(tune.frame_max, self.config_frame_max),
            heartbeat=_negotiate(tune.heartbeat, self.config_heartbeat),
        )

    def tune(self) -> spec.ConnectionTune:
        """Server helper: the tune proposing our limits."""
        return spec.ConnectionTune(channel_max=self.config_channel_max,
                                   frame_max=self.config_frame_max,
                                   heartbeat=self.config_heartbeat)

    def channel_state(self, channel: int) -> ChannelState:
        """The channel's state (``ChannelState``); CH_CLOSED if unknown."""
        ch = self._channels.get(channel)
        return ch.state if ch is not None else S.CH_CLOSED

    def channel_paused(self, channel: int) -> bool:
        """True while the peer's channel.flow(active=False) holds our content on ``channel``
        (basic.get-ok excepted, as the spec says); sending such content is a LocalProtocolError."""
        ch = self._channels.get(channel)
        return ch is not None and ch.paused

    @property
    def trailing_data(self) -> tuple[bytes, bool]:
        """Unparsed bytes and whether EOF was seen (like h11)."""
        return bytes(self._buf.data[self._buf.pos:]), self._eof

    # ---- errors -----------------------------------------------------------------------
    def _hard(self, code: int, msg: str, cls: Any = None, fatal: bool = False
              ) -> RemoteProtocolError:
        hint = spec.ConnectionClose(code, _text(msg), cls.CLASS_ID if cls else 0,
                                    cls.METHOD_ID if cls else 0)
        return RemoteProtocolError(msg, code, hint, fatal=fatal)

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
            self._broken = e
        if self.state not in S.CLOSING_BY and self.state is not S.CLOSED:
            self.state = S.ERROR

    # ---- receive ----------------------------------------------------------------------
    def _next(self) -> Event | NeedData:
        buf = self._buf
        data = buf.data
        if self.state is S.AWAIT_HEADER and self.our_role is SERVER:
            return self._read_header(data, buf.pos, len(data) - buf.pos)
        # only before connection.start can the server answer with a protocol header
        early_client = self.our_role is CLIENT and self.state in S.BEFORE_START
        max_payload = self._recv_max_payload
        while True:
            pos = buf.pos
            avail = len(data) - pos
            if early_client and avail and data[pos] == 0x41:  # 'A' of 'AMQP'
                self._server_header(data, pos, avail)
                return NEED_DATA
            if avail < 7:
                if self._eof:
                    if avail:
                        raise self._hard(spec.FRAME_ERROR, "EOF in the middle of a frame",
                                         fatal=True)
                    return ConnectionClosed()
                return NEED_DATA
            # frame_max is enforced from the 7-byte header, before waiting for the payload
            ftype, ch, size = _unpack_frame_header(data, pos)
            if size > max_payload:
                raise self._hard(spec.FRAME_ERROR,
                                 f"frame of {size + 8} bytes exceeds frame_max {self.frame_max}",
                                 fatal=True)
            end = pos + 7 + size
            if end >= len(data):
                if self._eof:
                    raise self._hard(spec.FRAME_ERROR, "EOF in the middle of a frame",
                                     fatal=True)
                return NEED_DATA
            if data[end] != 0xCE:
                raise self._hard(spec.FRAME_ERROR, "frame-end octet missing", fatal=True)
            if ftype == 1 and size >= 9 and self._fast_publish and self.state is S.OPEN:
                publish = self._publish_triplet(data, pos, end, ch, size, max_payload)
                if publish is not None:
                    return publish
            buf.pos = end + 1
            payload = bytes(data[pos + 7:end])
            if ftype == 3:
                ev = self._on_body(ch, payload)
            elif ftype == 1:
                ev = self._on_method(ch, payload)
            elif ftype == 2:
                ev = self._on_header(ch, payload)
            elif ftype == 8:
                if ch != 0:
                    raise self._hard(spec.FRAME_ERROR, "heartbeat frame on a non-zero channel")
                if self.state in S.NO_HEARTBEAT:
                    raise self._hard(spec.UNEXPECTED_FRAME, "heartbeat before tuning")
                return Heartbeat()
            else:
                raise self._hard(spec.FRAME_ERROR, f"unknown frame type {ftype}")
            if ev is not None:
                return ev

    def _read_header(self, data: bytearray, pos: int, avail: int) -> Event | NeedData:
        got = bytes(data[pos:pos + 8])
        if not _HEADER.startswith(got):
            self._bad_header = True
            raise RemoteProtocolError(f"bad protocol header {got!r}", 0, ProtocolHeader(),
                                      fatal=True)
        if avail < 8:
            if self._eof:
                if avail:
                    raise self._hard(spec.FRAME_ERROR, "EOF inside the protocol header",
                                     fatal=True)
                return ConnectionClosed()
            return NEED_DATA
        self._buf.pos = pos + 8
        self.state = S.AWAIT_START
        return ProtocolHeader()

    def _server_header(self, data: bytearray, pos: int, avail: int) -> None:
        # 0x41 is no frame type: the server answered our header with its own, i.e. it does
        # not speak 0-9-1 (or it is not AMQP at all). Wait for all 8 bytes, then report.
        got = bytes(data[pos:pos + 8])
        if avail < 8 and not self._eof and b"AMQP".startswith(got[:4]):
            return
        raise RemoteProtocolError(f"server refused our protocol header, answered {got!r}",
                                  fatal=True)

    def _discarding(self) -> bool:
        st = self.state
        return st is S.ERROR or st is S.CLOSED or S.CLOSING_BY.get(st) is self.our_role

    def _chan_discarding(self, chan: _Channel) -> bool:
        return chan.state is S.CH_ERROR or S.CH_DISCARDING.get(chan.state) is self.our_role

    def _publish_triplet(self, data: bytearray, pos: int, end: int, ch: int, size: int,
                         max_payload: int) -> spec.BasicPublish | None:
        """A server's hot path: a basic.publish whose content header and single body frame are
        all in the buffer, on a plainly open channel, parsed in one go into the same event the
        frame-by-frame path would return. None (nothing consumed) for anything else, which the
        general path then handles, errors included."""
        if _U32.unpack_from(data, pos + 7)[0] != _PUBLISH_IDX:
            return None
        chan = self._channels.get(ch)
        if chan is None or chan.state is not S.CH_OPEN or chan.cstate is not S.C_IDLE:
            return None
        h = end + 1  # the content header frame
        n = len(data)
        if h + 7 > n:
            return None
        htype, hch, hsize = _unpack_frame_header(data, h)
        hend = h + 7 + hsize
        if (htype != 2 or hch != ch or hsize < 14 or hsize > max_payload or hend >= n
                or data[hend] != 0xCE):
            return None
        class_id, _weight, body_size = CONTENT_HEADER.unpack_from(data, h + 7)
        if class_id != 60 or body_size > self.max_body_size:
            return None
        if body_size:
            b = hend + 1
            if b + 7 > n:
                return None
            btype, bch, bsize = _unpack_frame_header(data, b)
            bend = b + 7 + bsize
            if (btype != 3 or bch != ch or bsize != body_size or bsize > max_payload
                    or bend >= n or data[bend] != 0xCE):
                return None
        else:
            bend = hend
        try:
            mp = bytes(data[pos + 7:end])
            cache = self._publish_cache
            fields = cache.get(mp)
            if fields is None:
                m = _decode_publish(mp, ch)
                fields = (m.ticket, m.exchange, m.routing_key, m.mandatory, m.immediate)
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[mp] = fields
            # the common property lists, none or delivery-mode only, without the general decoder
            if hsize == 15 and data[h + 19] == 0x10 and data[h + 20] == 0:
                props = _Properties(delivery_mode=data[h + 21])
            else:
                props = _decode_properties(bytes(data[h + 7:hend]), 12, hsize)
        except Exception:  # malformed: the general path reports it as it always does
            return None
        if body_size:
            body = bytes(data[bend - body_size:bend])
            chan.size = body_size
            chan.got = 0
        else:
            body = b""
        self._buf.pos = bend + 1
        return _Publish(*fields, props, body, ch)

    def _on_method(self, ch: int, payload: bytes) -> Event | None:
        if len(payload) < 4:
            raise self._hard(spec.FRAME_ERROR, "method frame shorter than its ids")
        idx = _U32.unpack_from(payload)[0]
        dec = _DECODERS.get(idx)
        if dec is None:
            raise self._hard(spec.NOT_IMPLEMENTED, f"unknown method {idx >> 16}/{idx & 0xFFFF}")
        try:
            m = dec(payload, ch)
        except TooDeep as e:
            raise self._hard(spec.RESOURCE_ERROR, str(e), spec.METHODS[idx]) from e
        except _DECODE_ERRORS as e:
            cls = spec.METHODS[idx]
            raise self._hard(spec.SYNTAX_ERROR, f"malformed {cls.NAME}: {e}", cls) from e
        cls = type(m)
        if ch == 0:
            if cls.CLASS_ID != 10:
                raise self._hard(spec.CHANNEL_ERROR, f"{cls.NAME} on channel 0", cls)
            if self._discarding() and cls is not spec.ConnectionClose and \
                    cls is not spec.ConnectionCloseOk:
                return None
            if self.state is S.ERROR or self.state is S.CLOSED:
                return None
            self._connection_transition(cls, self.their_role, RemoteProtocolError)
            self._after_connection_method(m, sent=False)
            return m
        if cls.CLASS_ID == 10:
            raise self._hard(spec.COMMAND_INVALID, f"{cls.NAME} on channel {ch}", cls)
        if self.state is not S.OPEN:
            if self._discarding():
                return None
            raise self._hard(spec.COMMAND_INVALID,
                             f"{cls.NAME} while the connection is {self.state}", cls)
        chan = self._channels.get(ch)
        if chan is not None:
            if (chan.cstate, S.METHOD) not in _CONTENT:
                raise self._hard(spec.UNEXPECTED_FRAME,
                                 f"{cls.NAME} while content was expected on channel {ch}", cls)
            st = chan.state
            if st is S.CH_OPEN and cls in self._may_recv and cls not in _CHANNEL_MGMT:
                if cls.CONTENT:
                    chan.cstate = S.C_HEADER
                    chan.method = m  # type: ignore[assignment]  # cls.CONTENT: a content method
                    return None
                if type(m) is spec.ChannelFlow:
                    chan.paused = not m.active
                return m
        else:
            st = S.CH_CLOSED
        new = self._channel_next(st, cls, self.their_role)
        if new is None:
            if S.CH_DISCARDING.get(st) is self.our_role or st is S.CH_ERROR:
                if cls.CONTENT and chan is not None:
                    chan.cstate = S.C_HEADER  # swallow its header and body too
                    chan.method = None
                return None
            if st is S.CH_CLOSED:
                raise self._hard(spec.CHANNEL_ERROR, f"{cls.NAME} on closed channel {ch}", cls)
            if cls is spec.ChannelOpen:
                raise self._hard(spec.CHANNEL_ERROR, f"channel {ch} is already open", cls)
            raise self._hard(spec.COMMAND_INVALID,
                             f"{cls.NAME} not allowed on channel {ch} in {st}", cls)
        if cls is spec.ChannelOpen and len(self._channels) >= self.channel_max:
            # RabbitMQ's rule: channel_max bounds how many channels are open at once, not their
            # numbers (any of 1..65535 may be used)
            raise self._hard(spec.NOT_ALLOWED, f"number of channels opened ({len(self._channels)}) has "
                             f"reached the negotiated channel_max ({self.channel_max})", cls)
        self._set_channel(ch, chan, new)
        if cls.CONTENT:  # only reachable on CH_OPEN, handled above
            raise AssertionError("unreachable")
        return m

    def _on_header(self, ch: int, payload: bytes) -> Event | None:
        chan = self._channels.get(ch)
        if chan is None or (chan.cstate, S.HEADER) not in _CONTENT:
            if self._discarding() or (chan is not None and self._chan_discarding(chan)):
                return None
            raise self._hard(spec.UNEXPECTED_FRAME, f"content header on channel {ch} "
                             "without a content method")
        m = chan.method
        if m is None:  # discarding a message on a channel we are closing
            size = CONTENT_HEADER.unpack_from(payload)[2] if len(payload) >= 12 else 0
            chan.cstate, chan.size, chan.got, chan.chunks = (
                (S.C_BODY, size, 0, []) if size else (S.C_IDLE, 0, 0, []))
            return None
        try:
            class_id, _weight, size = CONTENT_HEADER.unpack_from(payload)
            props = _decode_properties(payload, 12, len(payload))
        except TooDeep as e:
            raise self._hard(spec.RESOURCE_ERROR, str(e)) from e
        except _DECODE_ERRORS as e:
            raise self._hard(spec.SYNTAX_ERROR, f"malformed content header: {e}") from e
        if class_id != m.CLASS_ID:
            raise self._hard(spec.UNEXPECTED_FRAME,
                             f"content header for class {class_id}, expected {m.CLASS_ID}")
        if size > self.max_body_size:
            raise RemoteProtocolError(
                f"content of {size} bytes exceeds max_body_size {self.max_body_size}",
                spec.CONTENT_TOO_LARGE,
                spec.ChannelClose(spec.CONTENT_TOO_LARGE, f"message size {size} is larger than "
                                  f"configured max size {self.max_body_size}", m.CLASS_ID,
                                  m.METHOD_ID, channel=ch))
        m.properties = props
        if size == 0:
            chan.cstate = S.C_IDLE
            chan.method = None
            return m
        chan.cstate = S.C_BODY
        chan.size = size
        chan.got = 0
        return None

    def _on_body(self, ch: int, payload: bytes) -> Event | None:
        chan = self._channels.get(ch)
        if chan is None or (chan.cstate, S.BODY) not in _CONTENT:
            if self._discarding() or (chan is not None and self._chan_discarding(chan)):
                return None
            raise self._hard(spec.UNEXPECTED_FRAME, f"content body on channel {ch} "
                             "without a content header")
        got = chan.got + len(payload)
        if got > chan.size:
            raise self._hard(spec.UNEXPECTED_FRAME,
                             f"content body exceeds the announced {chan.size} bytes")
        m = chan.method
        if got < chan.size:
            chan.got = got
            if m is not None:  # a discarded message is counted, not kept
                chan.chunks.append(payload)
            return None
        chan.cstate = S.C_IDLE
        chan.method = None
        if m is None:  # discarded message
            chan.chunks = []
            return None
        if chan.chunks:
            chan.chunks.append(payload)
            payload = b"".join(chan.chunks)
            chan.chunks = []
        m.body = payload
        return m

    # ---- shared transitions -------------------------------------------------------------
    def _connection_transition(self, cls: Any, sender: Role, exc: type) -> None:
        self.state = self._connection_next(cls, sender, exc)

    def _connection_next(self, cls: Any, sender: Role, exc: type) -> ConnectionState:
        new = S.CONNECTION_TABLE.get((sender, self.state, cls))
        if new is None:
            name = getattr(cls, "NAME", cls.__name__)
            msg = f"{name} from the {sender.value} not allowed in state {self.state}"
            if exc is RemoteProtocolError:
                raise self._hard(spec.COMMAND_INVALID, msg, cls)
            raise LocalProtocolError(msg)
        return new

    def _after_connection_method(self, m: Any, sent: bool) -> None:
        cls = type(m)
        if cls is spec.ConnectionTune:
            self._tune = m
        elif cls is spec.ConnectionTuneOk:
            if not sent and self.our_role is SERVER:
                self._check_tune_ok(m)
            self.frame_max = m.frame_max or self.config_frame_max
            self.channel_max = m.channel_max or 65535
            self.heartbeat = m.heartbeat
            self._send_max_payload = self.frame_max - 8
            self._recv_max_payload = max(self.frame_max, spec.FRAME_MIN_SIZE) - 8
        elif cls is spec.ConnectionCloseOk and self.state is S.CLOSED:
            self._channels.clear()

    def _check_tune_ok(self, m: spec.ConnectionTuneOk) -> None:
        # RabbitMQ's checks and texts; 0 ("no limit") exceeds any limit we proposed
        if m.frame_max and m.frame_max < spec.FRAME_MIN_SIZE:
            raise self._hard(spec.NOT_ALLOWED, f"negotiated frame_max = {m.frame_max} is lower than the "
                             f"minimum allowed value ({spec.FRAME_MIN_SIZE})", spec.ConnectionTuneOk)
        for field, ours, theirs in (("frame_max", self._tune.frame_max, m.frame_max),
                                    ("channel_max", self._tune.channel_max, m.channel_max)):
            if ours and (theirs == 0 or theirs > ours):
                detail = " (no limit)" if field == "channel_max" and theirs == 0 else ""
                raise self._hard(spec.NOT_ALLOWED, f"negotiated {field} = {theirs}{detail} is higher than "
                                 f"the maximum allowed value ({ours})", spec.ConnectionTuneOk)

    @staticmethod
    def _channel_next(st: ChannelState, cls: Any, sender: Role) -> ChannelState | None:
        new = S.CHANNEL_TABLE.get((sender, st, cls))
        if new is None and cls not in _CHANNEL_MGMT and (
                cls.BY_CLIENT if sender is CLIENT else cls.BY_SERVER):
            new = S.CHANNEL_TABLE.get((sender, st, S.ANY_METHOD))
        return new

    def _set_channel(self, ch: int, chan: _Channel | None, new: ChannelState) -> None:
        if new is S.CH_CLOSED:
            self._channels.pop(ch, None)
        elif chan is None:
            self._channels[ch] = _Channel(new)
        else:
            chan.state = new

    def _after_channel_method(self, cls: Any, ch: int, sender: Role) -> None:
        chan = self._channels.get(ch)
        if chan is not None and chan.state is S.CH_OPEN and cls not in _CHANNEL_MGMT:
            return
        st = chan.state if chan is not None else S.CH_CLOSED
        new = self._channel_next(st, cls, sender)
        if new is not None:
            self._set_channel(ch, chan, new)

    # ---- send -------------------------------------------------------------------------
    def _channel_send_check(self, cls: Any, ch: int) -> None:
        if cls.CLASS_ID == 10:
            raise LocalProtocolError(f"{cls.NAME} must be sent on channel 0")
        if self.state is not S.OPEN:
            if not (self.state in S.CLOSING_BY and cls in (spec.ChannelCloseOk,)):
                raise LocalProtocolError(f"{cls.NAME} while the connection is {self.state}")
        if not 0 < ch <= 65535:
            raise LocalProtocolError(f"channel {ch} outside 1..65535")
        chan = self._channels.get(ch)
        if chan is not None and chan.state is S.CH_OPEN and cls in self._may_send and \
                cls not in _CHANNEL_MGMT:
            if chan.paused and cls.CONTENT and cls is not spec.BasicGetOk:
                raise LocalProtocolError(f"the peer paused content on channel {ch} "
                                         "(channel.flow active=False)")
            return
        st = chan.state if chan is not None else S.CH_CLOSED
        if self._channel_next(st, cls, self.our_role) is None:
            raise LocalProtocolError(
                f"{cls.NAME} from the {self.our_role.value} not allowed on channel {ch} in {st}")

    def _content_frames(self, ch: int, payload: bytes, m: ContentMethod) -> bytes:
        body = m.body
        props: spec.BasicProperties | bytes | None = m.properties  # send() takes all three
        n = len(body)
        # properties may be pre-encoded bytes (encode_properties output): a broker fanning one
        # message out to many consumers encodes them once.
        hp = _HEADER_FRAME_START(m.CLASS_ID, 0, n) + (
            _EMPTY_PROPS if props is None else
            props if isinstance(props, bytes) else _encode_properties(props))
        if len(hp) > self._send_max_payload:
            raise LocalProtocolError("content header does not fit in frame_max")
        parts: list[bytes | memoryview] = [_pack_frame_header(1, ch, len(payload)), payload,
                 _END_AND_HEADER(0xCE, 2, ch, len(hp)), hp]
        if n:
            maxp = self._send_max_payload
            if n <= maxp:
                parts.append(_END_AND_HEADER(0xCE, 3, ch, n))
                parts.append(body)
            else:
                mv = memoryview(body)
                for i in range(0, n, maxp):
                    chunk = mv[i:i + maxp]
                    parts.append(_END_AND_HEADER(0xCE, 3, ch, len(chunk)))
                    parts.append(chunk)
        parts.append(b"\xce")
        return b"".join(parts)

    def _send_other(self, event: OutgoingEvent) -> bytes:
        if type(event) is Heartbeat:
            if self.state in S.NO_HEARTBEAT or self.state is S.CLOSED:
                raise LocalProtocolError(f"heartbeat not allowed in state {self.state}")
            return HEARTBEAT_FRAME
        if type(event) is ProtocolHeader:
            if self._bad_header and self.our_role is SERVER:
                self.state = S.CLOSED  # answered a wrong header: nothing else may follow
                return _HEADER
            if event != ProtocolHeader():
                raise LocalProtocolError("only AMQP 0-9-1 is spoken here")
            self._connection_transition(ProtocolHeader, self.our_role, LocalProtocolError)
            return _HEADER
        raise LocalProtocolError(f"cannot send {type(event).__name__}")
