"""Stream deliveries from stored bytes (``engine.amqp.stream_wire``, ``Sending.send_deliveries``)
against the general path (a decoded message, ``delivery_message``, ``props_bytes``,
``send_deliver`` per record): the same bytes, whatever the properties, headers, bodies (over
frame_max too), offsets and timestamps, on every store."""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from enginetest_helpers import new_net
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_amqp import declare, publish

from amqpproto import BasicProperties, spec, write_value
from engine._message import Message
from engine._raw_message import RawMessage
from engine.amqp.properties import props_bytes
from engine.amqp.session import AmqpSession
from engine.amqp.stream_wire import delivery_items
from engine.model.streams import delivery_message
from engine.records import _MSG, _decode_message, _encode_message
from engine.segment_store import SegmentStore
from engine.streams import StreamRecord
from engine.testing import AmqpSimClient, FakeStore, SimNetwork

STREAM = {"x-queue-type": "stream"}

_key = st.text(max_size=8) | st.sampled_from(
    ["content-type", "content-encoding", "reply-to", "correlation-id", "message-id", "timestamp", "priority",
     "expiration", "type", "user-id", "app-id", "persistent", "x-stream-offset", "x-stream-timestamp",
     "x-death", "x-producer", "x-publishing-id", "k" * 300])
_scalar = (st.text(max_size=8) | st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.binary(max_size=8)
           | st.floats(allow_nan=False))
_value = _scalar | st.lists(_scalar, max_size=2) | st.dictionaries(st.text(max_size=4), _scalar, max_size=2)
_headers = st.dictionaries(_key, _value, max_size=4)
_x_death = st.just({"x-death": [{"count": 1, "reason": "rejected", "queue": "q", "time": 1700000000}]})


@settings(max_examples=200, deadline=None)
@given(headers=_headers | _x_death, priority=st.integers(0, 255), persistent=st.booleans(),
       route=st.tuples(st.text(max_size=6), st.text(max_size=6)), body=st.binary(max_size=40),
       offset=st.integers(0, 2**63 - 1) | st.integers(0, 70000), ts=st.integers(0, 2**62), stamp=st.booleans())
def test_spliced_properties_equal_the_general_encoding(headers: dict[str, Any], priority: int, persistent: bool,
                                                        route: tuple[str, str], body: bytes, offset: int, ts: int,
                                                        stamp: bool) -> None:
    msg = Message(7, route[0], route[1], headers, body, priority, None, persistent)
    try:
        payload = _encode_message(msg)
    except (ValueError, OverflowError):  # not storable (the stores refuse it the same way)
        return
    general = delivery_message(StreamRecord(offset, ts, _decode_message(payload)), True, stamp)
    try:
        want = (general.exchange, general.routing_key, props_bytes(general), general.body)
    except ValueError:  # a key over 255 bytes has no AMQP encoding: the fast path fails alike
        with pytest.raises(ValueError):
            delivery_items([(offset, ts, payload)], stamp)
        return
    for stored in (payload, memoryview(payload)):  # segment files give views, PostgreSQL bytes
        (got,) = delivery_items([(offset, ts, stored)], stamp)
        assert (got[0], got[1], got[2], bytes(got[3])) == want
    # a second record with the same stored headers is made from the template the first made
    (again,) = delivery_items([(offset + 1, ts, payload)], stamp)
    general = delivery_message(StreamRecord(offset + 1, ts, _decode_message(payload)), True, stamp)
    assert again[2] == props_bytes(general)


@contextmanager
def _general_path(on: bool) -> Iterator[None]:
    """The model delivers through ``deliver`` (a message and an entry per record) when the
    session offers no ``deliver_stream``."""
    if not on:
        yield
        return
    saved = AmqpSession.deliver_stream
    AmqpSession.deliver_stream = None  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        AmqpSession.deliver_stream = saved  # type: ignore[method-assign]


def _client(net: SimNetwork, wire: list[bytes]) -> AmqpSimClient:
    """A client with frame_max 4096 whose received bytes are kept in ``wire``."""
    c = net.connect(protocol="amqp")
    assert isinstance(c, AmqpSimClient)
    c.conn.config_frame_max = 4096  # type: ignore[attr-defined]
    feed = c._feed

    def keep(data: bytes) -> None:
        wire.append(bytes(data))
        feed(data)

    c._feed = keep  # type: ignore[method-assign]
    assert isinstance(c.amqp_open(), spec.ConnectionOpenOk)
    assert isinstance(c.open_channel(1), spec.ChannelOpenOk)
    return c


_props = st.none() | st.builds(
    BasicProperties, headers=st.none() | st.dictionaries(st.sampled_from(["a", "x-stream-offset", "x-stream-timestamp"]),
                                                          st.text(max_size=4) | st.integers(0, 9), max_size=2),
    delivery_mode=st.none() | st.sampled_from([1, 2]), priority=st.none() | st.integers(0, 9),
    content_type=st.none() | st.text(max_size=6), expiration=st.none() | st.just("60000"),
    correlation_id=st.none() | st.text(max_size=6), timestamp=st.none() | st.just(1700000000))
#: bodies: empty, small, and over the 4096 frame_max (split into several body frames)
_body = st.sampled_from([b"", b"x", b"y" * 100, b"z" * 9000])
_run_args = dict(
    publishes=st.lists(st.tuples(_props, _body), min_size=1, max_size=12), prefetch=st.integers(1, 7),
    stamp=st.booleans(), ack_every=st.integers(1, 5), start=st.sampled_from(["first", 3, "last", "next"]),
    memory=st.booleans(), cancel_after=st.none() | st.integers(1, 10), end=st.none() | st.integers(0, 14))


def _run(publishes: list[tuple[Any, bytes]], prefetch: int, stamp: bool, ack_every: int, start: Any,
         memory: bool, cancel_after: int | None, end: int | None, general: bool) -> tuple[bytes, Any]:
    with tempfile.TemporaryDirectory() as root, _general_path(general):
        net = new_net(store=FakeStore() if memory else SegmentStore(root, sync=False))
        prod: list[bytes] = []
        p = _client(net, prod)
        declare(p, "s", durable=True, arguments=STREAM)
        half = len(publishes) // 2
        for props, body in publishes[:half]:
            publish(p, "s", body, props=props or BasicProperties())
        net.run_until_idle()
        wire: list[bytes] = []
        c = _client(net, wire)
        c.call(spec.BasicQos(prefetch_count=prefetch, channel=1))
        args: dict[str, Any] = {"x-stream-offset": start, "x-stream-timestamp": stamp}
        if end is not None:
            args["x-stream-end-offset"] = end
        c.call(spec.BasicConsume(queue="s", consumer_tag="c", arguments=args, channel=1))
        for props, body in publishes[half:]:  # some arrive while the consumer waits at the end
            publish(p, "s", body, props=props or BasicProperties())
            net.run_until_idle()
        seen = 0
        while True:  # ack as a client does: every few deliveries, multiple
            got = c.of(spec.BasicDeliver)
            if len(got) == seen:
                break
            for d in got[seen:]:
                seen += 1
                if cancel_after is not None and seen == cancel_after:
                    c.send(spec.BasicCancel("c", channel=1))
                if seen % ack_every == 0:
                    c.send(spec.BasicAck(d.delivery_tag, True, channel=1))
            if got and seen % ack_every:
                c.send(spec.BasicAck(got[-1].delivery_tag, False, channel=1))
            net.run_until_idle()
        state = net.broker.model.streams.state
        return b"".join(wire), (state.delivered, state.acked)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_run_args)
def test_a_consumer_receives_the_same_bytes_from_stored_bytes_as_from_messages(**kw: Any) -> None:
    fast = _run(**kw, general=False)
    assert fast == _run(**kw, general=True)
    if kw["start"] == "first" and kw["end"] is None:  # it read something: both paths were taken
        assert fast[1][0] > 0


@st.composite
def _dedup_publishes(draw: st.DrawFn) -> list[tuple[Any, bytes]]:
    """A deduplicating producer's publishes (the Spark sink's headers), ids counting up from near
    the edge of one of ``write_value``'s widths (so across it)."""
    pid = draw(st.sampled_from([0, 120, 2**15 - 3, 2**16 - 3, 2**31 - 3, 2**32 - 3, 2**63 - 30]))
    extra = draw(st.dictionaries(st.sampled_from(["a", "x-stream-filter-value"]), st.text(max_size=3), max_size=1))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        pid += draw(st.integers(1, 2))
        headers = {"x-producer": "spark-q-0", "x-publishing-id": pid, **extra}
        out.append((BasicProperties(headers=headers, delivery_mode=draw(st.sampled_from([None, 2])),
                                    content_type=draw(st.sampled_from([None, "text/plain"]))), draw(_body)))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**{**_run_args, "publishes": _dedup_publishes()})
def test_a_consumer_receives_a_deduplicating_producers_records_as_from_messages(**kw: Any) -> None:
    fast = _run(**kw, general=False)
    assert fast == _run(**kw, general=True)


def _global_prefetch_run(general: bool) -> tuple[bytes, list[int]]:
    """A stream consumer (prefetch 10) whose channel gets a global prefetch of 3 after it started
    (``basic.qos`` global): a window of 8 records stops at the channel's limit, and goes on as
    acks come."""
    with _general_path(general):
        net = new_net(store=FakeStore())
        prod: list[bytes] = []
        p = _client(net, prod)
        declare(p, "s", durable=True, arguments=STREAM)
        wire: list[bytes] = []
        c = _client(net, wire)
        c.call(spec.BasicQos(prefetch_count=10, channel=1))
        c.call(spec.BasicConsume(queue="s", consumer_tag="c", arguments={"x-stream-offset": "first"}, channel=1))
        c.call(spec.BasicQos(prefetch_count=3, global_=True, channel=1))
        for i in range(8):
            publish(p, "s", b"m%d" % i)
        net.run_until_idle()
        counts = [len(c.of(spec.BasicDeliver))]
        while len(c.of(spec.BasicDeliver)) < 8:
            c.call(spec.BasicAck(c.of(spec.BasicDeliver)[-1].delivery_tag, True, channel=1))
            counts.append(len(c.of(spec.BasicDeliver)))
        return b"".join(wire), counts


def test_a_channels_global_prefetch_bounds_a_stream_window_as_on_the_general_path() -> None:
    fast = _global_prefetch_run(False)
    assert fast == _global_prefetch_run(True)
    assert fast[1] == [3, 6, 8]


def test_a_template_is_made_on_the_second_sighting_of_stored_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored bytes that never repeat (a header differing in each record) take the general path
    without making a template each: one is made only for headers met before."""
    from engine.amqp import stream_wire

    made: list[Any] = []
    real = stream_wire._template
    monkeypatch.setattr(stream_wire, "_template", lambda p: made.append(p) or real(p))
    monkeypatch.setattr(stream_wire, "_SEEN", set())
    monkeypatch.setattr(stream_wire, "_TEMPLATES", {})
    once = [_encode_message(Message(i, "", "s", {"n": f"unique-{i}"}, b"b", 0, None, True)) for i in range(50)]
    delivery_items([(i, 0, p) for i, p in enumerate(once)], False)
    assert made == []
    twice = _encode_message(Message(0, "", "s", {"n": "again"}, b"b", 0, None, True))
    delivery_items([(i, 0, twice) for i in range(3)], False)
    assert len(made) == 1


# Records of deduplicating producers: x-producer and an x-publishing-id different in each record,
# stored as the publisher sent it (a RawMessage's AMQP property list, any integer type) or as a
# field table (a plain Message's: the narrowest type, or any); one template serves each shape.

#: field table integer types: (tag, struct format, lowest, highest)
_INT_TYPES = [("b", "b", -(2**7), 2**7 - 1), ("B", "B", 0, 2**8 - 1), ("s", "h", -(2**15), 2**15 - 1),
              ("u", "H", 0, 2**16 - 1), ("I", "i", -(2**31), 2**31 - 1), ("i", "I", 0, 2**32 - 1),
              ("l", "q", -(2**63), 2**63 - 1), ("L", "Q", 0, 2**64 - 1)]
#: the edges of write_value's widths, where the delivered type changes
_EDGES = sorted({v for e in (2**7, 2**8, 2**15, 2**16, 2**31, 2**32, 2**63) for v in (e - 1, e, -e, -e - 1)}
                | {0, 2**64 - 1})


def _table(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(bytes((len(k.encode()),)) + k.encode() + v for k, v in entries)
    return struct.pack(">I", len(body)) + body


def _dedup_record(shape: tuple[Any, ...], pid: int, mid: int) -> bytes:
    """A stored record of ``shape`` (encoding, integer type, producer, headers around the id,
    persistent, content type) with publishing id ``pid``."""
    amqp, (tag, fmt, _, _), producer, before, after, persistent, content_type = shape
    entries = [(k, write_value(v)) for k, v in before] + [("x-producer", write_value(producer)),
                                                           ("x-publishing-id", tag.encode() + struct.pack(">" + fmt, pid))]
    entries += [(k, write_value(v)) for k, v in after]
    if persistent and not amqp:  # the marker a persistent publish leaves in the model's headers
        entries.insert(0, ("persistent", write_value("true")))
    table = _table(entries)
    if amqp:  # the property list as a publisher sends it: content type, headers, delivery mode
        flags = 0x2000 | (0x8000 if content_type else 0) | (0x1000 if persistent else 0)
        ct = bytes((len(content_type),)) + content_type.encode() if content_type else b""
        props = struct.pack(">H", flags) + ct + table + (b"\x02" if persistent else b"")
        return _encode_message(RawMessage(mid, "", "s", props, b"body", persistent, None, None, None))
    plain = _encode_message(Message(mid, "", "s", {}, b"body", 0, None, persistent))
    head = _MSG.unpack(plain[:_MSG.size])
    return _MSG.pack(*head[:-1], len(table)) + plain[_MSG.size:len(plain) - 4] + table + b"body"


_int_type = st.sampled_from(_INT_TYPES)
_few_headers = st.lists(st.tuples(st.sampled_from(["a", "bb", "x-stream-filter-value"]),
                                  st.text(max_size=3) | st.integers(-300, 300)), max_size=2, unique_by=lambda kv: kv[0])
_shape = st.tuples(st.booleans(), _int_type, st.sampled_from(["spark-q-0", "p"]), _few_headers, _few_headers,
                   st.booleans(), st.sampled_from(["", "text/plain"]))


def _ids(int_type: tuple[str, str, int, int]) -> st.SearchStrategy[int]:
    low, high = int_type[2], int_type[3]
    return st.integers(low, high) | st.sampled_from([v for v in _EDGES if low <= v <= high])


@st.composite
def _dedup_runs(draw: st.DrawFn) -> list[bytes]:
    """Records of a few shapes, mixed, each with its own id (counting up in runs, or anywhere)."""
    shapes = draw(st.lists(_shape, min_size=1, max_size=3))
    out = []
    for i in range(draw(st.integers(1, 30))):
        shape = shapes[draw(st.integers(0, len(shapes) - 1))]
        if draw(st.integers(0, 9)) == 0:  # now and then a record of no producer
            out.append(_encode_message(Message(i, "", "s", {"a": "b"}, b"body", 0, None, True)))
            continue
        pid = draw(_ids(shape[1]))
        for j in range(draw(st.integers(1, 4))):  # a run counting up
            out.append(_dedup_record(shape, min(pid + j, shape[1][3]), i))
    return out


def _general_items(records: list[tuple[int, int, bytes]], stamp: bool) -> list[tuple[Any, ...]]:
    out = []
    for offset, ts, p in records:
        msg = delivery_message(StreamRecord(offset, ts, _decode_message(p)), True, stamp)
        out.append((msg.exchange, msg.routing_key, props_bytes(msg), msg.body))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads=_dedup_runs(), first=st.integers(0, 2**40) | st.integers(0, 300), stamp=st.booleans(),
       fresh=st.booleans())
def test_records_of_deduplicating_producers_are_delivered_as_by_the_general_path(payloads: list[bytes], first: int,
                                                                                 stamp: bool, fresh: bool) -> None:
    from engine.amqp import stream_wire

    if fresh:  # else templates made by earlier examples serve these records
        for cache in (stream_wire._TEMPLATES, stream_wire._VARYING, stream_wire._SEEN):
            cache.clear()
    records = [(first + i, 1700000000000 + i, p) for i, p in enumerate(payloads)]
    want = _general_items(records, stamp)
    for stored in (records, [(o, ts, memoryview(p)) for o, ts, p in records]):
        got = delivery_items(stored, stamp)
        assert [(ex, rk, props, bytes(body)) for ex, rk, props, body in got] == want
    if fresh:  # every template made passed its check against the general path (none fell back)
        assert None not in stream_wire._TEMPLATES.values()
        assert None not in stream_wire._VARYING.values()


@pytest.mark.parametrize("amqp", [True, False])
def test_records_of_a_deduplicating_producer_share_one_template(amqp: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark sink's records, ids counting up across every width: the general path makes the
    first (met once) and checks the template the second made; the rest are spliced."""
    from engine.amqp import stream_wire

    general: list[int] = []
    real = stream_wire._general
    monkeypatch.setattr(stream_wire, "_general", lambda o, *a: general.append(o) or real(o, *a))
    for name in ("_TEMPLATES", "_VARYING"):
        monkeypatch.setattr(stream_wire, name, {})
    monkeypatch.setattr(stream_wire, "_SEEN", set())
    shape = (amqp, _INT_TYPES[-2], "spark-q-0", [("a", "b")], [("bb", 7)], True, "")
    ids = [*range(120, 140), *range(2**31 - 10, 2**31 + 10), *range(2**32 - 5, 2**32 + 5)]
    records = [(i, 1700000000000 + i, _dedup_record(shape, pid, i)) for i, pid in enumerate(ids)]
    got = delivery_items(records, True)
    assert general == [0, 1]
    assert [item[:3] for item in got] == [item[:3] for item in _general_items(records, True)]
