"""Fast bulk decode: many stream deliveries from a byte string straight into column lists.

The general path (``Connection.next_event``) builds one ``BasicDeliver`` with a ``BasicProperties``
and a headers dict per message. A reader of a stream (RabbitMQ's ``x-stream-offset`` consumers)
that wants columns (Arrow, pandas, a database's COPY) needs none of those objects:
``StreamDeliveryDecoder.decode`` parses whole deliveries in place with ``struct`` and appends each
one's fields to a ``DeliveryColumns``: offsets, timestamps, routing keys, content types, bodies and
the headers as flat string key/value lists (Arrow's map layout). Only the fields a row needs are
read; the rest is skipped.

A delivery is three or more frames on one channel: basic.deliver, its content header, and its body
(several body frames for a body over frame_max). The headers table is cut around its
``x-stream-offset`` field (found with ``bytes.find``, not parsed); what remains is mostly the same
from one message to the next, so its flattened key/value lists are parsed once and reused from a
small cache. sansmq's ``x-stream-timestamp`` (the broker's append time, on request) is cut out the
same way and fills the timestamp column instead of the AMQP timestamp property. Each row's stream
filter value (RabbitMQ's ``x-stream-filter-value`` header) is a column of its own, taken from the
same cache; a reader that wants no headers column (``DeliveryColumns(headers=False)``) gets no
per-row header lists at all.

A stream's deliveries to one consumer mostly repeat one layout byte for byte, but for the delivery
tag, the offset (and append time) values and the body: once two in a row share their frame sizes,
the next ones are decoded by template (``_Template``: the constant stretches compared with
``bytes.startswith``, only the varying fields read), until one differs and the general loop reads it.

Anything that is not a delivery of that channel (a method such as basic.consume-ok or
channel.close, a frame on another channel) stops the decoder at that frame's first byte with
``other=True``; heart-beats are skipped. Give that frame (``frame_end`` tells where it ends) to the
connection's general path, ``Connection.receive_data`` then ``next_event``, which reports errors as
usual. Bytes the decoder cannot parse raise ``RemoteProtocolError`` (hint: connection.close 501
FRAME_ERROR), like the general path.

Usage, with ``conn`` the client-role ``Connection`` that sent basic.consume on ``channel``::

    decoder = StreamDeliveryDecoder(channel)
    cols = DeliveryColumns()
    pos, highest_offset, other = decoder.decode(buf, 0, cols)
    # cols.offset, cols.routing_key, ... hold the deliveries in buf[:pos];
    # ack up to decoder.last_tag (basic.ack multiple) to grant the stream more credit
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from . import spec
from ._errors import INTERNAL_ERRORS, RemoteProtocolError
from ._readers import read_table

__all__ = ["OFFSET_HEADER", "STAMP_HEADER", "FILTER_HEADER", "DeliveryColumns", "MissingStreamOffset",
           "StreamDeliveryDecoder", "flat_headers", "frame_end", "header_text"]

#: the header a stream queue stamps on every delivery: the message's offset in the stream
OFFSET_HEADER = "x-stream-offset"
#: sansmq's stream deliveries carry the record's append time (ms) here when the consumer asked for it
#: (consumer argument ``x-stream-timestamp: true``)
STAMP_HEADER = "x-stream-timestamp"
#: RabbitMQ's stream filter value of a message (its publisher sets it), kept as column ``filter_value``
FILTER_HEADER = "x-stream-filter-value"
_NO_END = 1 << 64  # past every offset


class MissingStreamOffset(ValueError):
    """A delivery without an integer ``x-stream-offset`` header: the queue is not a stream."""


def header_text(value: Any) -> str:
    """A header value as the string the header columns hold: bytes as UTF-8, timestamps in ISO
    8601, arrays as JSON (numbers and booleans kept), anything else ``str()``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return json.dumps([header_text(v) if not isinstance(v, int | float | bool) else v for v in value])
    return str(value)


def flat_headers(headers: Mapping[str, Any] | None, prefix: str = "") -> list[tuple[str, str]]:
    """A headers table as (key, text) pairs: nested tables flattened with dotted keys (RabbitMQ's
    firehose nests ``properties``), void values left out."""
    out: list[tuple[str, str]] = []
    for key, value in (headers or {}).items():
        if isinstance(value, dict):
            out.extend(flat_headers(value, f"{prefix}{key}."))
        elif value is not None:
            out.append((prefix + key, header_text(value)))
    return out


class DeliveryColumns:
    """The column lists of decoded deliveries, one entry per row. The headers are kept as Arrow
    keeps a map column: row ``i``'s pairs are ``header_keys[header_offsets[i]:header_offsets[i + 1]]``
    (and the same slice of ``header_values``); the offset header comes first in every row. With
    ``headers=False`` the three header lists stay empty (``header_offsets`` too): the decoder skips
    them, for a reader that does not want them."""

    __slots__ = ("offset", "timestamp", "routing_key", "header_offsets", "header_keys", "header_values",
                 "content_type", "body", "filter_value", "headers")

    def __init__(self, headers: bool = True) -> None:
        self.offset: list[int] = []
        #: ms since the epoch: the broker's append time (``x-stream-timestamp``) if the delivery
        #: carries it, else the AMQP timestamp property (seconds on the wire), else None
        self.timestamp: list[int | None] = []
        self.routing_key: list[str] = []
        self.header_offsets: list[int] = [0] if headers else []
        self.header_keys: list[str] = []
        self.header_values: list[str] = []
        self.content_type: list[str | None] = []
        self.body: list[bytes] = []
        #: the ``x-stream-filter-value`` header's text (the first one after flattening), else None
        self.filter_value: list[str | None] = []
        self.headers = headers

    def __len__(self) -> int:
        return len(self.offset)

    def add(self, offset: int, timestamp: int | None, routing_key: str, content_type: str | None, body: bytes,
            headers: _Headers) -> None:
        """One row; ``headers``: the other headers' keys and values and the filter value."""
        self.offset.append(offset)
        self.timestamp.append(timestamp)
        self.routing_key.append(routing_key)
        if self.headers:
            self.header_keys.append(OFFSET_HEADER)
            self.header_values.append(str(offset))
            self.header_keys.extend(headers[0])
            self.header_values.extend(headers[1])
            self.header_offsets.append(len(self.header_keys))
        self.content_type.append(content_type)
        self.body.append(body)
        self.filter_value.append(headers[2])


_FRAME = struct.Struct(">BHI")  # type, channel, payload size
_DELIVER = spec.BasicDeliver.INDEX  # class 60 (basic), method 60 (deliver) as one u32
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEADER = struct.Struct(">QH")  # body size, property flags (after class and weight)
_KEY = b"\x0f" + OFFSET_HEADER.encode()
_KEY_LEN = len(_KEY)
_STAMP_KEY = b"\x12" + STAMP_HEADER.encode()
#: field table integer types: struct format of the value after the type octet
_INTS = {ord(t): struct.Struct(">" + f) for t, f in (("b", "b"), ("B", "B"), ("s", "h"), ("u", "H"),
                                                       ("I", "i"), ("i", "I"), ("l", "q"), ("L", "Q"))}
_STAMP_LEN = len(_STAMP_KEY)
#: property flag bits, high to low, and what each property is (AMQP 0-9-1 basic class)
_SHORTSTR, _CONTENT_TYPE, _TABLE, _OCTET, _TIMESTAMP = range(5)
_PROPERTY_KINDS = ((15, _CONTENT_TYPE), (14, _SHORTSTR), (13, _TABLE), (12, _OCTET), (11, _OCTET),
                   (10, _SHORTSTR), (9, _SHORTSTR), (8, _SHORTSTR), (7, _SHORTSTR), (6, _TIMESTAMP),
                   (5, _SHORTSTR), (4, _SHORTSTR), (3, _SHORTSTR), (2, _SHORTSTR))
_CACHE_MAX = 4096
_USELESS_MAX = 4  # templates in a row that decode nothing, after which a decoder makes no more
_OTHER, _PAST_END, _MORE = range(3)  # why a template's run stopped: another frame, offset >= end, bytes missing


#: a headers table's flattened keys and values, and its filter value
_Headers = tuple[list[str], list[str], str | None]


def _kinds(flags: int) -> tuple[int, ...]:
    return tuple(kind for bit, kind in _PROPERTY_KINDS if flags & (1 << bit))


def frame_end(buf: bytes | bytearray, pos: int) -> int:
    """Where the whole frame starting at ``buf[pos]`` ends (its 7-byte header read), to hand exactly
    that frame to ``Connection.receive_data``."""
    size: int = _FRAME.unpack_from(buf, pos)[2]
    return pos + size + 8


class StreamDeliveryDecoder:
    """Decodes whole stream deliveries of one channel from a byte string into ``DeliveryColumns``."""

    __slots__ = ("channel", "last_tag", "_kinds", "_headers", "_strings", "_template", "_useless", "_last_layout")

    def __init__(self, channel: int = 1) -> None:
        self.channel = channel
        #: the delivery tag of the last delivery decoded (acks grant credit up to it)
        self.last_tag = 0
        self._kinds: dict[int, tuple[int, ...]] = {}
        #: the headers table without its offset (and stamp) field -> flattened (keys, values, filter value)
        self._headers: dict[bytes, _Headers] = {}
        #: routing keys and content types as bytes -> str
        self._strings: dict[bytes, str] = {}
        #: the last delivery's layout, for the deliveries that repeat it (``_Template``)
        self._template: _Template | None = None
        self._useless = 0  # templates in a row that decoded nothing: past _USELESS_MAX none is made
        self._last_layout: tuple[int, int, int] | None = None  # the last slow-path delivery's frame sizes, flags

    def decode(self, buf: bytes, pos: int, cols: DeliveryColumns, start: int = 0, end: int = _NO_END,
               limit: int = _NO_END) -> tuple[int, int, bool]:
        """Decode the deliveries in ``buf`` from ``pos`` into ``cols``, keeping the rows whose offset
        is in [start, end), and stopping once ``cols`` holds ``limit`` rows or at the first offset
        at or past ``end``. Returns (the position after the last whole delivery decoded, the highest
        offset seen or -1, True if a whole frame other than a delivery's stopped it).

        Raises ``RemoteProtocolError`` for bytes that do not parse and ``MissingStreamOffset`` for
        a delivery without its offset header."""
        try:
            return self._decode(buf, pos, cols, start, end, limit)
        except MissingStreamOffset:
            raise
        except INTERNAL_ERRORS as exc:
            msg = f"malformed delivery: {exc!r}"
            hint = spec.ConnectionClose(spec.FRAME_ERROR, msg[:255], 60, 60)
            raise RemoteProtocolError(msg, spec.FRAME_ERROR, hint, fatal=True) from exc

    def _decode(self, buf: bytes, pos: int, cols: DeliveryColumns, start: int, end: int,
                limit: int) -> tuple[int, int, bool]:
        unpack_frame = _FRAME.unpack_from
        unpack_u64 = _U64.unpack_from
        unpack_header = _HEADER.unpack_from
        headers_cache = self._headers
        our_channel = self.channel
        rows = len(cols)
        n = len(buf)
        seen = -1
        while rows < limit:
            template = self._template
            if template is not None:  # the deliveries that repeat the last one's layout
                pos, run_seen, stop = template.run(self, buf, pos, cols, start, end, limit)
                seen = max(seen, run_seen)
                rows = len(cols)
                if stop == _PAST_END or rows >= limit:
                    break
                if stop == _OTHER:  # the next delivery has another layout: the general path reads it
                    self._useless = 0 if template.used else self._useless + 1
                    self._template = None
            if n - pos < 7:
                break
            p0 = pos
            ftype, channel, size = unpack_frame(buf, pos)
            if n - pos < size + 8:
                break
            if ftype != 1 or channel != our_channel or size < 4 or _U32.unpack_from(buf, pos + 7)[0] != _DELIVER:
                if ftype == 8 and size == 0 and buf[pos + 7] == 0xCE:  # a heartbeat
                    pos += 8
                    continue
                return pos, seen, True  # the whole frame is in ``buf``
            # basic.deliver: consumer tag, delivery tag, redelivered, exchange, routing key
            o = pos + 11
            o += 1 + buf[o]
            tag_at = o
            tag = unpack_u64(buf, o)[0]
            o += 9
            o += 1 + buf[o]
            rk_len = buf[o]
            rk_raw = buf[o + 1:o + 1 + rk_len]
            if o + 1 + rk_len > pos + 7 + size or buf[pos + 7 + size] != 0xCE:
                raise ValueError("basic.deliver runs past its frame, or lacks its frame-end octet")
            # the header and body frames are checked inline, not by a helper: a call per frame costs ~5%
            h = pos + size + 8  # the content header frame
            if n - h < 7:
                break
            htype, hchannel, hsize = unpack_frame(buf, h)
            if htype != 2 or hchannel != our_channel:
                return pos, seen, True
            if n - h < hsize + 8:
                break
            if buf[h + 7 + hsize] != 0xCE:
                raise ValueError("a frame without its frame-end octet")
            body_size, flags = unpack_header(buf, h + 11)
            b = h + hsize + 8  # the body frame(s)
            one_frame = False
            if body_size == 0:
                body = b""
                after = b
            elif (n - b >= body_size + 8 and buf[b] == 3 and unpack_frame(buf, b) == (3, our_channel, body_size)
                  and buf[b + 7 + body_size] == 0xCE):  # the common case: the whole body in one frame
                body = buf[b + 7:b + 7 + body_size]
                after = b + body_size + 8
                one_frame = True
            else:
                need = body_size
                parts: list[bytes] = []
                after = b
                while need > 0:
                    if n - after < 7:
                        break
                    btype, bchannel, bsize = unpack_frame(buf, after)
                    if btype != 3 or bchannel != our_channel:
                        return pos, seen, True
                    if n - after < bsize + 8:
                        break
                    if buf[after + 7 + bsize] != 0xCE:
                        raise ValueError("a frame without its frame-end octet")
                    parts.append(buf[after + 7:after + 7 + bsize])
                    need -= bsize
                    after += bsize + 8
                if need > 0:
                    break  # the rest of the body has not arrived
                if need < 0:
                    raise ValueError("body frames longer than the content header's body size")
                body = parts[0] if len(parts) == 1 else b"".join(parts)
            # the properties, in flag order
            kinds = self._kinds.get(flags)
            if kinds is None:
                if flags & 1:  # a second flags word: not in AMQP 0-9-1's basic class
                    return pos, seen, True
                kinds = self._kinds[flags] = _kinds(flags)
            p = h + 21
            content_type = None
            table = b""
            table_at = 0
            ts = None
            for kind in kinds:
                if kind == _SHORTSTR:
                    p += 1 + buf[p]
                elif kind == _TABLE:
                    tlen = _U32.unpack_from(buf, p)[0]
                    table_at = p + 4
                    table = buf[p + 4:p + 4 + tlen]
                    p += 4 + tlen
                elif kind == _OCTET:
                    p += 1
                elif kind == _TIMESTAMP:
                    ts = unpack_u64(buf, p)[0] * 1000  # seconds on the wire, milliseconds in the column
                    p += 8
                else:
                    raw = buf[p + 1:p + 1 + buf[p]]
                    content_type = self._text(raw)
                    p += 1 + len(raw)
            if p > h + 7 + hsize:
                raise ValueError("properties run past their content header frame")
            pos = after
            self.last_tag = tag
            # the offset (and the broker's append time, which replaces the property), and the other
            # headers from the cache: the common cases inline, the offset alone or the stamp right after it
            at = table.find(_KEY)
            fmt = _INTS.get(table[at + _KEY_LEN]) if 0 <= at < len(table) - _KEY_LEN else None
            cached = None
            sfmt = None
            if fmt is not None and table.find(_KEY, at + 1) < 0:
                v = at + _KEY_LEN + 1
                after_offset = v + fmt.size
                st = table.find(_STAMP_KEY)
                if st < 0:
                    cached = headers_cache.get(table[:at] + table[after_offset:])
                elif st == after_offset and table.find(_STAMP_KEY, st + 1) < 0:
                    sfmt = _INTS.get(table[st + _STAMP_LEN]) if st < len(table) - _STAMP_LEN else None
                    if sfmt is not None:
                        cached = headers_cache.get(table[:at] + table[st + _STAMP_LEN + 1 + sfmt.size:])
                        if cached is not None:
                            ts = sfmt.unpack_from(table, st + _STAMP_LEN + 1)[0]
                if cached is not None:
                    offset = fmt.unpack_from(table, v)[0]
                    layout = (size, hsize, flags)
                    if one_frame and layout == self._last_layout and self._useless < _USELESS_MAX:
                        # a second delivery of this layout in a row: the next ones are decoded by template
                        self._template = _Template(buf, p0, tag_at, h, table_at + v, fmt, sfmt, b, rk_raw,
                                                   content_type, ts, cached, self)
                    self._last_layout = layout
            if cached is None:  # odd tables, and a table seen for the first time
                offset, stamp, cached = self._split(table)
                if stamp is not None:
                    ts = stamp
            seen = offset
            if offset < start:  # a chunk may begin before the offset asked for
                continue
            if offset >= end:
                break
            cols.add(offset, ts, self._text(rk_raw), content_type, body, cached)
            rows += 1
        return pos, seen, False

    def _text(self, raw: bytes) -> str:
        """A routing key or content type as text (decoded once per distinct value)."""
        text = self._strings.get(raw)
        if text is None:
            text = self._strings[raw] = raw.decode("utf-8", "replace")
        return text

    def _split(self, table: bytes) -> tuple[int, int | None, _Headers]:
        """The ``x-stream-offset`` of a headers table, its ``x-stream-timestamp`` (None without one)
        and the other headers, flattened (cached by the table without those two fields)."""
        offset, rest = _cut(table, _KEY)
        if offset is None:  # absent, odd, or nested ones too: parse it all
            return self._parsed(table)
        stamp = None
        if rest.find(_STAMP_KEY) >= 0:
            stamp, rest = _cut(rest, _STAMP_KEY)
            if stamp is None:
                return self._parsed(table)
        cached = self._headers.get(rest)
        if cached is None:
            cached = _flattened(flat_headers(read_table(_U32.pack(len(rest)) + rest, 0)[0]) if rest else [])
            if len(self._headers) >= _CACHE_MAX:
                self._headers.clear()
            self._headers[rest] = cached
        return offset, stamp, cached

    @staticmethod
    def _parsed(table: bytes) -> tuple[int, int | None, _Headers]:
        headers = read_table(_U32.pack(len(table)) + table, 0)[0]
        offset = headers.pop(OFFSET_HEADER, None)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise MissingStreamOffset("a delivery lacks the integer x-stream-offset header: is it from a stream queue?")
        stamp = headers.get(STAMP_HEADER)
        if isinstance(stamp, int) and not isinstance(stamp, bool):
            del headers[STAMP_HEADER]
        else:
            stamp = None
        return offset, stamp, _flattened(flat_headers(headers))


def _flattened(pairs: list[tuple[str, str]]) -> _Headers:
    """Flattened header pairs as the cache keeps them: keys, values and the filter value."""
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    return keys, values, values[keys.index(FILTER_HEADER)] if FILTER_HEADER in keys else None


class _Template:
    """The layout of one delivery, to decode the deliveries that repeat it byte for byte but for the
    delivery tag, the offset (and append time) values and the body, as a stream's deliveries to one
    consumer mostly do: each is checked with a few ``bytes.startswith`` against the constant stretches
    in between, nothing else parsed. Anything else (another length of a field, a heart-beat, a method)
    ends the run and the general path reads it.

    Stretches, from the delivery's first byte: basic.deliver's frame up to the delivery tag | tag |
    the rest of that frame, the content header's frame header, class and weight | body size | flags
    and properties up to the offset's value | offset | (if stamped: up to the stamp's value | stamp |)
    the rest of the properties, the frame end, the body frame's type and channel | body frame size |
    body | frame end."""

    __slots__ = ("segments", "tag_at", "size_at", "offset_at", "fmt", "stamp_at", "sfmt", "body_at", "row", "used")

    def __init__(self, buf: bytes, p0: int, tag_at: int, h: int, offset_at: int, fmt: struct.Struct,
                 sfmt: struct.Struct | None, b: int, rk_raw: bytes, content_type: str | None, ts: int | None,
                 cached: _Headers, decoder: StreamDeliveryDecoder) -> None:
        rk = decoder._text(rk_raw)
        cuts = [(tag_at, 8), (h + 11, 8), (offset_at, fmt.size)]  # (variable field, its size)
        if sfmt is not None:  # the stamp's value follows the offset's, after its key and type octet
            cuts.append((offset_at + fmt.size + _STAMP_LEN + 1, sfmt.size))
        cuts.append((b + 3, 4))
        segments, at = [], p0
        for where, width in cuts:
            segments.append((at - p0, buf[at:where]))
            at = where + width
        self.segments = tuple(segments)
        self.tag_at, self.size_at, self.offset_at = tag_at - p0, h + 11 - p0, offset_at - p0
        self.fmt, self.sfmt = fmt, sfmt
        self.stamp_at = offset_at + fmt.size + _STAMP_LEN + 1 - p0
        self.body_at = b + 7 - p0
        #: what every row of the run shares: routing key, content type, timestamp if not stamped, headers
        self.row = (rk, content_type, ts, cached)
        self.used = False  # it decoded a delivery

    def run(self, decoder: StreamDeliveryDecoder, buf: bytes, pos: int, cols: DeliveryColumns, start: int,
            end: int, limit: int) -> tuple[int, int, int]:
        """Decode the deliveries from ``pos`` on that repeat this layout, as ``_decode`` would; returns
        (the position after them, the highest offset seen or -1, why it stopped: ``_OTHER`` a frame
        that is not such a delivery, ``_PAST_END`` a delivery at or past ``end``, ``_MORE`` the
        next delivery's bytes are not all there, or ``limit`` rows)."""
        startswith = buf.startswith
        segments = self.segments
        unpack_u64, unpack_u32, unpack_offset = _U64.unpack_from, _U32.unpack_from, self.fmt.unpack_from
        unpack_stamp = None if self.sfmt is None else self.sfmt.unpack_from
        tag_at, size_at, offset_at, stamp_at, body_at = (self.tag_at, self.size_at, self.offset_at, self.stamp_at,
                                                         self.body_at)
        rk, content_type, ts, (keys, values, filter_value) = self.row
        offsets, timestamps, routing_keys = cols.offset, cols.timestamp, cols.routing_key
        ckeys, cvalues, map_offsets = cols.header_keys, cols.header_values, cols.header_offsets
        content_types, bodies, filter_values = cols.content_type, cols.body, cols.filter_value
        want_headers = cols.headers
        rows = len(offsets)
        n = len(buf)
        seen = -1
        tag = -1
        stop = _MORE
        while rows < limit:
            if n - pos <= body_at:
                break  # not a whole delivery of this layout: whatever it is, the general path sees it
            for rel, stretch in segments:
                if not startswith(stretch, pos + rel):
                    break
            else:
                b = pos + body_at
                body_size = unpack_u64(buf, pos + size_at)[0]
                if body_size != unpack_u32(buf, b - 4)[0] or not body_size:
                    stop = _OTHER  # not one body frame of the body's size
                    break
                if n - b <= body_size:
                    break  # the rest of the body has not arrived
                if buf[b + body_size] != 0xCE:
                    stop = _OTHER
                    break
                tag = unpack_u64(buf, pos + tag_at)[0]
                offset = unpack_offset(buf, pos + offset_at)[0]
                stamp = ts if unpack_stamp is None else unpack_stamp(buf, pos + stamp_at)[0]
                body = buf[b:b + body_size]
                pos = b + body_size + 1
                seen = offset
                if offset < start:
                    continue
                if offset >= end:
                    stop = _PAST_END
                    break
                # a row, as DeliveryColumns.add appends one (inline: a call per row costs)
                offsets.append(offset)
                timestamps.append(stamp)
                routing_keys.append(rk)
                if want_headers:
                    ckeys.append(OFFSET_HEADER)
                    cvalues.append(str(offset))
                    if keys:
                        ckeys.extend(keys)
                        cvalues.extend(values)
                    map_offsets.append(len(ckeys))
                content_types.append(content_type)
                bodies.append(body)
                filter_values.append(filter_value)
                rows += 1
                continue
            stop = _OTHER
            break
        if tag >= 0:
            decoder.last_tag = tag
            self.used = True
        return pos, seen, stop


def _cut(table: bytes, key: bytes) -> tuple[int | None, bytes]:
    """The integer field ``key`` (its length octet and name) of an encoded table and the table
    without it; (None, table) unless it occurs once with an integer value."""
    at = table.find(key)
    v = at + len(key)
    fmt = _INTS.get(table[v]) if 0 <= at < len(table) - len(key) else None
    if fmt is None or table.find(key, at + 1) >= 0:
        return None, table
    value: int = fmt.unpack_from(table, v + 1)[0]
    return value, table[:at] + table[v + 1 + fmt.size:]
