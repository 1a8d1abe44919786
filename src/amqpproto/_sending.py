"""The send side: an event checked against the state machines and framed (content split at
frame_max, pre-encoded properties taken as they are), and a server's fast path for basic.deliver
that writes the frames without building an event."""

from __future__ import annotations

import struct
from typing import Any

from . import _state as S
from . import spec
from ._base import ContentMethod
from ._errors import LocalProtocolError
from ._events import Heartbeat, OutgoingEvent, ProtocolHeader
from ._limits import CACHE_MAX
from ._readers import FRAME_HEADER
from ._receiving import Receiving
from ._state import SERVER
from ._writers import HEARTBEAT_FRAME

__all__ = ["Sending"]

_ENCODERS = spec.ENCODERS
_pack_frame_header = FRAME_HEADER.pack
_END_AND_HEADER = struct.Struct(">BBHI").pack  # frame-end of one frame + header of the next
_HEADER_FRAME_START = struct.Struct(">HHQ").pack
#: send_deliver's pieces: frame header + basic.deliver's ids; delivery tag + flags; frame end +
#: content-header frame header + class/weight/body size
_DELIVER_HEAD = struct.Struct(">BHII").pack
_DELIVER_MID = struct.Struct(">QB").pack
_DELIVER_PROPS = struct.Struct(">BBHIHHQ").pack
_DELIVER_IDS = (60 << 16) | 60
_encode_properties = spec.encode_properties
_EMPTY_PROPS = spec.encode_properties(spec.BasicProperties())
_ENCODE_ERRORS = (struct.error, ValueError, TypeError, OverflowError, AttributeError)
_HEADER = spec.PROTOCOL_HEADER


def _short(cache: dict[str, bytes], s: str) -> bytes:
    """``s`` as an encoded shortstr (length octet included), remembered in ``cache``; b"" marks a
    name too long for a shortstr."""
    b = s.encode("utf-8", "surrogateescape")
    out = bytes((len(b),)) + b if len(b) <= 255 else b""
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[s] = out
    return out


def _route_bytes(cache: dict[tuple[str, str], bytes], exchange: str, routing_key: str) -> bytes:
    """Exchange and routing key as two encoded shortstrs, remembered in ``cache``; b"" if either
    is too long."""
    x = exchange.encode("utf-8", "surrogateescape")
    k = routing_key.encode("utf-8", "surrogateescape")
    out = bytes((len(x),)) + x + bytes((len(k),)) + k if len(x) <= 255 and len(k) <= 255 else b""
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[(exchange, routing_key)] = out
    return out


def _deliver_parts(ch: int, ct: bytes, tag: int, redelivered: bool, route: bytes, props: bytes,
                   body: bytes | memoryview) -> tuple[bytes | memoryview, ...]:
    """A basic.deliver's three frames (two with an empty body) as pieces to join: ``ct`` and
    ``route`` are encoded shortstrs, the body fits in one frame."""
    n = len(body)
    head = (_DELIVER_HEAD(1, ch, 13 + len(ct) + len(route), _DELIVER_IDS), ct,
            _DELIVER_MID(tag, 1 if redelivered else 0), route,
            _DELIVER_PROPS(0xCE, 2, ch, 12 + len(props), 60, 0, n), props)
    if n:
        return (*head, _END_AND_HEADER(0xCE, 3, ch, n), body, b"\xce")
    return (*head, b"\xce")


class Sending(Receiving):
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
        parts = _deliver_parts(ch, ct, delivery_tag, redelivered, route, properties, body)
        if now is not None:
            self._last_send = now
            self._due_sent = False
        return b"".join(parts)

    def send_deliveries(self, ch: int, consumer_tag: str, first_tag: int,
                        items: list[tuple[str, str, bytes, bytes | memoryview]], now: float | None = None) -> bytes:
        """``send_deliver`` of each (exchange, routing key, encoded properties, body) of ``items``
        with delivery tags from ``first_tag`` up, none redelivered, as one bytes (a stream's read
        window): the checks made once, each delivery's frames packed inline. Byte for byte what
        ``send_deliver`` gives each of them; a delivery that needs more (a body over frame_max) goes
        through ``send_deliver``."""
        chan = self._channels.get(ch)
        ct = self._tag_cache.get(consumer_tag)
        if ct is None:
            ct = _short(self._tag_cache, consumer_tag)
        if (chan is None or chan.state is not S.CH_OPEN or chan.paused or self.state is not S.OPEN
                or self.our_role is not SERVER or not ct or first_tag < 0 or first_tag + len(items) > 1 << 64):
            return b"".join([self.send_deliver(ch, consumer_tag, tag, False, ex, rk, props, bytes(body), now)
                             for tag, (ex, rk, props, body) in enumerate(items, first_tag)])
        maxp = self._send_max_payload
        routes = self._route_cache
        parts: list[bytes | memoryview] = []
        extend = parts.extend
        tag = first_tag
        last: tuple[str, str] | None = None
        head = route = b""
        for ex, rk, props, body in items:
            if last is None or ex is not last[0] or rk is not last[1]:  # a window mostly has one route
                last = (ex, rk)
                route = routes.get(last) or _route_bytes(routes, ex, rk)
                head = _DELIVER_HEAD(1, ch, 13 + len(ct) + len(route), _DELIVER_IDS) + ct
            n = len(body)
            if not route or n > maxp or len(props) + 12 > maxp:
                parts.append(self.send_deliver(ch, consumer_tag, tag, False, ex, rk, props, bytes(body)))
            elif n:
                extend((head, _DELIVER_MID(tag, 0), route, _DELIVER_PROPS(0xCE, 2, ch, 12 + len(props), 60, 0, n),
                        props, _END_AND_HEADER(0xCE, 3, ch, n), body, b"\xce"))
            else:
                extend((head, _DELIVER_MID(tag, 0), route, _DELIVER_PROPS(0xCE, 2, ch, 12 + len(props), 60, 0, 0),
                        props, b"\xce"))
            tag += 1
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
