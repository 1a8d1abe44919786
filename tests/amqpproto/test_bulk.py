"""amqpproto.bulk against the general path: the same deliveries, sent by a server-role Connection,
read as events by a client-role Connection and decoded in bulk into columns, give the same rows,
whatever the chunking, the range and the row limit; what is not a delivery stops the decoder at
that frame, and bytes that do not parse are a RemoteProtocolError."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from amqp_strategies import CI, pair, properties, shortstr
from hypothesis import given
from hypothesis import strategies as st

import amqpproto as a
from amqpproto import spec
from amqpproto.bulk import (
    FILTER_HEADER,
    OFFSET_HEADER,
    STAMP_HEADER,
    DeliveryColumns,
    MissingStreamOffset,
    StreamDeliveryDecoder,
    flat_headers,
    frame_end,
)

OFFSET_INTS = st.one_of(st.integers(0, 127), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))

messages = st.lists(st.tuples(
    shortstr(),                                                     # routing key
    properties(),                                                   # every other property, any headers
    st.booleans(),                                                  # the offset header first or last
    st.one_of(st.none(), st.integers(0, 2**33)),                     # timestamp (seconds)
    st.binary(max_size=9000),                                       # body: over frame_max at times
    st.one_of(st.none(), st.integers(0, 2**62)),                    # x-stream-timestamp (ms), sansmq's
    st.one_of(st.none(), st.text(max_size=4), st.binary(max_size=3)),  # x-stream-filter-value
), min_size=1, max_size=12)


def _wire(msgs, offsets) -> tuple[a.Connection, bytes]:
    """The deliveries as a server sends them (frame_max 4096), and the client that reads them."""
    client, server = pair(frame_max=4096)
    client_consume = spec.BasicConsume(queue="s", arguments={"x-stream-offset": 0}, channel=1)
    server.receive_data(client.send(client_consume))
    assert isinstance(server.next_event(), spec.BasicConsume)
    client.receive_data(server.send(spec.BasicConsumeOk("ctag", channel=1)))
    assert isinstance(client.next_event(), spec.BasicConsumeOk)
    out = []
    for tag, ((rk, props, first, ts, body, stamp, *filt), offset) in enumerate(zip(msgs, offsets, strict=True), 1):
        rest = {k: v for k, v in (props.headers or {}).items() if k not in (OFFSET_HEADER, STAMP_HEADER)}
        if filt and filt[0] is not None:
            rest[FILTER_HEADER] = filt[0]
        headers = {OFFSET_HEADER: offset, **rest} if first else {**rest, OFFSET_HEADER: offset}
        if stamp is not None:  # where the broker puts it: after the offset
            headers[STAMP_HEADER] = stamp
        props.headers, props.timestamp = headers, None if ts is None else datetime.fromtimestamp(ts, UTC)
        out.append(server.send(spec.BasicDeliver("ctag", tag, False, "", rk, properties=props, body=body,
                                                 channel=1)))
        if tag % 3 == 0:
            out.append(server.send(a.Heartbeat()))
    return client, b"".join(out)


def _rows_from_events(client: a.Connection, wire: bytes) -> list[tuple]:
    """The general path: events from next_event, turned into the rows the columns document."""
    client.receive_data(wire)
    rows = []
    while (ev := client.next_event()) is not a.NEED_DATA:
        if isinstance(ev, a.Heartbeat):
            continue
        assert isinstance(ev, spec.BasicDeliver)
        props = ev.properties
        headers = dict(props.headers or {})
        offset = headers.pop(OFFSET_HEADER)
        ts = None if props.timestamp is None else int(props.timestamp.timestamp()) * 1000
        if STAMP_HEADER in headers:  # the broker's append time wins over the publisher's property
            ts = headers.pop(STAMP_HEADER)
        pairs = [(OFFSET_HEADER, str(offset)), *flat_headers(headers)]
        filt = next((v for k, v in pairs if k == FILTER_HEADER), None)
        rows.append((offset, ts, ev.routing_key, pairs, props.content_type, ev.body, filt, ev.delivery_tag))
    return rows


def _rows_from_columns(cols: DeliveryColumns, tags: list[int]) -> list[tuple]:
    hk, hv, ho = cols.header_keys, cols.header_values, cols.header_offsets
    if not cols.headers:  # the rows without their headers: nothing was built for them
        assert ho == hk == hv == []
        return [(cols.offset[i], cols.timestamp[i], cols.routing_key[i], None, cols.content_type[i],
                 cols.body[i], cols.filter_value[i], tags[i]) for i in range(len(cols))]
    assert len(ho) == len(cols) + 1 and ho[-1] == len(hk) == len(hv)
    return [(cols.offset[i], cols.timestamp[i], cols.routing_key[i],
             list(zip(hk[ho[i]:ho[i + 1]], hv[ho[i]:ho[i + 1]], strict=True)), cols.content_type[i],
             cols.body[i], cols.filter_value[i], tags[i]) for i in range(len(cols))]


def _decode_chunked(wire: bytes, chunks: list[int], headers: bool = True) -> DeliveryColumns:
    """Decode as a reader does: bytes arrive in chunks, the undecoded tail is kept for the next."""
    decoder = StreamDeliveryDecoder(1)
    cols = DeliveryColumns(headers)
    buf, pos, i, k = b"", 0, 0, 0
    while True:
        pos, _, other = decoder.decode(buf, pos, cols)
        assert not other
        if i >= len(wire):
            assert pos == len(buf)
            return cols
        n = chunks[k % len(chunks)]
        k += 1
        buf, pos, i = buf[pos:] + wire[i:i + n], 0, i + n


@CI
@given(msgs=messages, offsets_from=OFFSET_INTS, chunks=st.lists(st.integers(1, 5000), min_size=1, max_size=8))
def test_bulk_decode_gives_the_rows_of_the_general_path(msgs, offsets_from, chunks):
    msgs = msgs + msgs  # the same headers again: decoded from the decoder's cache (the inline paths)
    offsets = list(range(offsets_from, offsets_from + len(msgs)))
    client, wire = _wire(msgs, offsets)
    expected = _rows_from_events(client, wire)
    assert len(expected) == len(msgs)
    decoder = StreamDeliveryDecoder(1)
    cols = DeliveryColumns()
    pos, seen, other = decoder.decode(wire, 0, cols)
    assert (pos, seen, other) == (len(wire), offsets[-1], False)
    assert decoder.last_tag == len(msgs)
    got = _rows_from_columns(cols, [row[-1] for row in expected])
    assert got == expected
    # the same, the bytes arriving in chunks that split frames anywhere
    cols = _decode_chunked(wire, chunks)
    assert [r[:-1] for r in _rows_from_columns(cols, [0] * len(cols))] == [r[:-1] for r in expected]
    # a reader that wants no headers column: the same rows, no header lists built
    cols = _decode_chunked(wire, chunks, headers=False)
    assert [r[:-1] for r in _rows_from_columns(cols, [0] * len(cols))] == [
        (*r[:3], None, *r[4:-1]) for r in expected]


@CI
@given(msgs=messages, repeats=st.lists(st.integers(1, 6), min_size=1), same_body=st.booleans(),
       offsets_from=OFFSET_INTS, chunks=st.lists(st.integers(1, 5000), min_size=1, max_size=8))
def test_runs_of_one_layout_decode_as_the_general_path_does(msgs, repeats, same_body, offsets_from, chunks):
    """A stream's deliveries mostly repeat one layout (the template's fast path): runs of the same
    message with other offsets, append times and (same or other length) bodies, heart-beats between."""
    runs = []
    for i, (rk, props, first, ts, body, stamp, filt) in enumerate(msgs):
        for j in range(repeats[i % len(repeats)]):
            runs.append((rk, props, first, ts, body if same_body else body + b"+" * j,
                         None if stamp is None else stamp + j, filt))
    offsets = list(range(offsets_from, offsets_from + len(runs)))
    client, wire = _wire(runs, offsets)
    expected = _rows_from_events(client, wire)
    cols = DeliveryColumns()
    decoder = StreamDeliveryDecoder(1)
    assert decoder.decode(wire, 0, cols) == (len(wire), offsets[-1], False)
    assert _rows_from_columns(cols, [row[-1] for row in expected]) == expected
    assert decoder.last_tag == len(runs)
    cols = _decode_chunked(wire, chunks)
    assert [r[:-1] for r in _rows_from_columns(cols, [0] * len(cols))] == [r[:-1] for r in expected]
    start = offsets_from + len(runs) // 3  # a range inside the runs, and a row limit
    end = offsets_from + 2 * len(runs) // 3 + 1
    cols = DeliveryColumns(headers=False)
    pos, _, _ = StreamDeliveryDecoder(1).decode(wire, 0, cols, start, end, limit=max(1, len(runs) // 4))
    want = [(*r[:3], None, *r[4:-1]) for r in expected if start <= r[0] < end][:max(1, len(runs) // 4)]
    assert [r[:-1] for r in _rows_from_columns(cols, [0] * len(cols))] == want


@CI
@given(msgs=messages, data=st.data())
def test_bulk_decode_keeps_the_range_and_stops_at_the_limit(msgs, data):
    offsets = list(range(100, 100 + len(msgs)))
    client, wire = _wire(msgs, offsets)
    expected = _rows_from_events(client, wire)
    start = data.draw(st.integers(100, 100 + len(msgs)))
    end = data.draw(st.integers(start, 101 + len(msgs)))
    limit = data.draw(st.integers(1, len(msgs) + 1))
    cols = DeliveryColumns()
    decoder = StreamDeliveryDecoder(1)
    pos, _, other = decoder.decode(wire, 0, cols, start, end, limit)
    want = [r for r in expected if start <= r[0] < end][:limit]
    assert not other
    assert [r[:-1] for r in _rows_from_columns(cols, [0] * len(cols))] == [r[:-1] for r in want]
    rest = DeliveryColumns()  # decoding on from pos gives what the range still holds
    decoder.decode(wire, pos, rest, start, end)
    in_range = [r[:-1] for r in expected if start <= r[0] < end]
    assert [r[:-1] for r in _rows_from_columns(cols, [0] * len(cols)) + _rows_from_columns(rest, [0] * len(rest))
            ] == in_range


def test_a_method_stops_the_decoder_at_its_first_byte_and_the_general_path_reads_it():
    client, wire = _wire([("k", spec.BasicProperties(), True, None, b"x", None)] * 2, [5, 6])
    _, server = pair()
    close = server.send(spec.ChannelClose(404, "NOT_FOUND - no stream", 0, 0, channel=1))
    buf = wire + close + wire
    cols = DeliveryColumns()
    pos, seen, other = StreamDeliveryDecoder(1).decode(buf, 0, cols)
    assert (pos, seen, other, cols.offset) == (len(wire), 6, True, [5, 6])
    assert frame_end(buf, pos) == len(wire) + len(close)
    client.receive_data(wire + buf[pos:frame_end(buf, pos)])
    events = []
    while (ev := client.next_event()) is not a.NEED_DATA:
        events.append(ev)
    assert isinstance(events[-1], spec.ChannelClose) and events[-1].reply_code == 404


def test_a_delivery_of_another_channel_is_not_decoded():
    _, wire = _wire([("k", spec.BasicProperties(), True, None, b"x", None)], [1])
    cols = DeliveryColumns()
    assert StreamDeliveryDecoder(2).decode(wire, 0, cols) == (0, -1, True) and len(cols) == 0


def test_a_delivery_without_its_offset_says_the_queue_is_not_a_stream():
    client, server = pair()
    wire = server.send(spec.BasicDeliver("c", 1, False, "", "k", properties=spec.BasicProperties(headers={"a": 1}),
                                         body=b"x", channel=1))
    with pytest.raises(MissingStreamOffset, match="stream"):
        StreamDeliveryDecoder(1).decode(wire, 0, DeliveryColumns())


def test_bytes_that_do_not_parse_are_a_remote_protocol_error_with_a_frame_error_close():
    _, wire = _wire([("k", spec.BasicProperties(content_type="text/plain"), True, 7, b"body", None)], [1])
    deliver_end = frame_end(wire, 0)
    header = bytearray(wire[deliver_end:frame_end(wire, deliver_end)])
    header[3:7] = (len(header) - 8 - 5).to_bytes(4, "big")  # the properties now run past the frame
    bad = wire[:deliver_end] + bytes(header[:-6]) + b"\xce" + wire[frame_end(wire, deliver_end):]
    with pytest.raises(a.RemoteProtocolError) as info:
        StreamDeliveryDecoder(1).decode(bad, 0, DeliveryColumns())
    assert info.value.reply_code == spec.FRAME_ERROR and isinstance(info.value.hint, spec.ConnectionClose)


@CI
@given(msgs=messages, data=st.data())
def test_damaged_bytes_give_rows_or_a_remote_protocol_error_never_another_exception(msgs, data):
    """The fuzz invariant of next_event, for bulk decode: whatever the bytes, decode returns or
    raises RemoteProtocolError (or MissingStreamOffset), and never loops for ever."""
    _, wire = _wire(msgs, list(range(len(msgs))))
    damaged = bytearray(wire)
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    damaged = damaged[:data.draw(st.integers(0, len(damaged)))]
    cols = DeliveryColumns()
    try:
        pos, _, other = StreamDeliveryDecoder(1).decode(bytes(damaged), 0, cols)
    except (a.RemoteProtocolError, MissingStreamOffset):
        return
    assert 0 <= pos <= len(damaged) and len(cols.header_offsets) == len(cols) + 1
