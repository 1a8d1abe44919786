"""The receive side: frames parsed from the buffer into events, channel 0 and channel methods
checked against the state machines, content (method, header, body frames) assembled into one
event, and a server's fast path for a publish whose three frames are all buffered."""

from __future__ import annotations

import struct

from . import _state as S
from . import spec
from ._channels import CHANNEL_MGMT, ChannelTracking
from ._errors import RemoteProtocolError
from ._events import NEED_DATA, ConnectionClosed, Event, Heartbeat, NeedData, PublishRun
from ._limits import CACHE_MAX
from ._rawprops import PropertyShapes, RawProperties
from ._readers import CONTENT_HEADER, FRAME_HEADER, TooDeep
from ._state import CLIENT, SERVER

__all__ = ["Receiving", "DECODE_ERRORS"]

_DECODERS = spec.DECODERS
_U32 = struct.Struct(">I")
_unpack_frame_header = FRAME_HEADER.unpack_from
_decode_properties = spec.decode_properties
_decode_publish = spec._decode_BasicPublish
_PUBLISH_IDX = spec.BasicPublish.INDEX
_Properties = spec.BasicProperties
_Publish = spec.BasicPublish
DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, KeyError)
_CONTENT = S.CONTENT_TABLE


class Receiving(ChannelTracking):
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
                                 f"frame of {size + 8} bytes exceeds frame_max {max_payload + 8}",
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

    def _publish_triplet(self, data: bytearray, pos: int, end: int, ch: int, size: int,
                         max_payload: int) -> spec.BasicPublish | PublishRun | None:
        """A server's hot path: a basic.publish whose content header and single body frame are
        all in the buffer, on a plainly open channel, parsed in one go into the same event the
        frame-by-frame path would return. None (nothing consumed) for anything else, which the
        general path then handles, errors included. With ``publish_runs``, the publishes that
        follow it with the same method frame on the channel, all buffered too, come with it as
        one ``PublishRun``."""
        if _U32.unpack_from(data, pos + 7)[0] != _PUBLISH_IDX:
            return None
        chan = self._channels.get(ch)
        if chan is None or chan.state is not S.CH_OPEN or chan.cstate is not S.C_IDLE:
            return None
        content = self._content_at(data, end + 1, ch, max_payload)
        if content is None:
            return None
        h, hend, body_size, bend = content
        try:
            mp = bytes(data[pos + 7:end])
            parsing = self._publishing
            cache = parsing.methods
            fields = cache.get(mp)
            if fields is None:
                m = _decode_publish(mp, ch)
                fields = (m.ticket, m.exchange, m.routing_key, m.mandatory, m.immediate)
                if len(cache) >= CACHE_MAX:
                    cache.clear()
                cache[mp] = fields
            shapes = parsing.shapes
            props: spec.BasicProperties | RawProperties | None
            if shapes is not None:  # kept as received, validated by shape
                props = shapes.get(bytes(data[h + 19:hend]))
                if props is None:
                    return None
            # the common property lists, none or delivery-mode only, without the general decoder
            elif hend - h == 22 and data[h + 19] == 0x10 and data[h + 20] == 0:
                props = _Properties(delivery_mode=data[h + 21])
            else:
                props = _decode_properties(bytes(data[h + 7:hend]), 12, hend - h - 7)
        except Exception:  # malformed: the general path reports it as it always does
            return None
        body = bytes(data[bend - body_size:bend]) if body_size else b""
        if shapes is not None and shapes.runs:
            run = self._run_after(data, bend + 1, ch, size, mp, max_payload, shapes)
            if run is not None:
                run[0].insert(0, props)  # type: ignore[arg-type]
                run[1].insert(0, body)
                bend = run[2]
                body_size = next((len(b) for b in reversed(run[1]) if b), 0)
                if body_size:  # as the publishes one by one leave it: the last body's size
                    chan.size = body_size
                    chan.got = 0
                self._buf.pos = bend + 1
                return PublishRun(ch, *fields, run[0], run[1])
        if body_size:
            chan.size = body_size
            chan.got = 0
        self._buf.pos = bend + 1
        return _Publish(*fields, props, body, ch)

    def _content_at(self, data: bytearray, h: int, ch: int, max_payload: int) -> tuple[int, int, int, int] | None:
        """A publish's content header frame at ``h`` and its one body frame, both buffered and well
        framed: (``h``, the header's end, the body's size, the body frame's end); None otherwise."""
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
        if not body_size:
            return h, hend, 0, hend
        b = hend + 1
        if b + 7 > n:
            return None
        btype, bch, bsize = _unpack_frame_header(data, b)
        bend = b + 7 + bsize
        if (btype != 3 or bch != ch or bsize != body_size or bsize > max_payload
                or bend >= n or data[bend] != 0xCE):
            return None
        return h, hend, body_size, bend

    def _run_after(self, data: bytearray, pos: int, ch: int, size: int, mp: bytes, max_payload: int,
                   shapes: PropertyShapes) -> tuple[list[RawProperties], list[bytes], int] | None:
        """The publishes from ``pos`` on with method frame ``mp`` on channel ``ch``, each with its
        header and body buffered and its properties of a known or learnable shape: their
        properties, bodies and where the last one ends (None: not one)."""
        props: list[RawProperties] = []
        bodies: list[bytes] = []
        last = -1
        n = len(data)
        while pos + 7 <= n:
            ftype, fch, fsize = _unpack_frame_header(data, pos)
            end = pos + 7 + fsize
            if ftype != 1 or fch != ch or fsize != size or end >= n or data[end] != 0xCE \
                    or data[pos + 7:end] != mp:
                break
            content = self._content_at(data, end + 1, ch, max_payload)
            if content is None:
                break
            h, hend, body_size, bend = content
            rp = shapes.get(bytes(data[h + 19:hend]))
            if rp is None:
                break
            props.append(rp)
            bodies.append(bytes(data[bend - body_size:bend]) if body_size else b"")
            last = bend
            pos = bend + 1
        return (props, bodies, last) if props else None
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
        except DECODE_ERRORS as bad:
            cls = spec.METHODS[idx]
            raise self._hard(spec.SYNTAX_ERROR, f"malformed {cls.NAME}: {bad}", cls) from bad
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
            if st is S.CH_OPEN and cls in self._may_recv and cls not in CHANNEL_MGMT:
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
        except DECODE_ERRORS as bad:
            raise self._hard(spec.SYNTAX_ERROR, f"malformed content header: {bad}") from bad
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
