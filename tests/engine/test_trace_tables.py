"""The firehose's trace tables assembled from cached pieces are ``write_table`` of the trace headers,
byte for byte (whatever the message, its origin and the order the caches were filled in), and a
stream bound to the firehose stores exactly the record the general encoder would write."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqpproto import read_table, write_table
from engine._message import EncodedMessage, Message
from engine.model.trace import NODE, TraceTables, amqp_properties
from engine.records import _decode_message, _encode_message

names = st.text(max_size=40)
header_values = st.one_of(st.text(max_size=20), st.integers(-(2**63), 2**63 - 1), st.booleans(),
                          st.lists(st.text(max_size=8), max_size=3))
# the model's property names (engine._props) mixed with application headers
header_names = st.one_of(st.sampled_from(["content-type", "amqp-message-id", "priority", "timestamp", "reply-to",
                                          "persistent", "x-first-death-queue"]), st.text(min_size=1, max_size=12))
messages = st.builds(lambda rk, headers, persistent, body: Message(7, "x", rk, headers, body, persistent=persistent),
                     names, st.dictionaries(header_names, header_values, max_size=5), st.booleans(),
                     st.binary(max_size=30))
origins = st.tuples(st.sampled_from(["guest", "", "ünïcode"]), st.sampled_from(["127.0.0.1:5000 -> 127.0.0.1:5672", ""]),
                    st.integers(0, 65535))
traces = st.tuples(st.sampled_from(["/", "other"]), st.sampled_from(["", "amq.topic", "orders"]), messages, origins,
                   st.integers(0, 2**45), st.one_of(st.none(), st.lists(names, max_size=4)), st.integers(0, 1))


def expected_headers(vhost: str, exchange: str, msg: Message, origin: tuple[str, str, int], ms: int,
                     routed: list[str] | None, redelivered: int) -> dict:
    """The trace headers as RabbitMQ's tracer orders them (the firehose's documented format)."""
    user, connection, channel = origin
    h = {"exchange_name": exchange, "routing_keys": [msg.routing_key], "properties": amqp_properties(msg),
         "node": NODE, "delivery_mode": 2 if msg.persistent else 1, "user": user, "channel": channel,
         "connection": connection, "vhost": vhost, "timestamp_in_ms": ms}
    if routed is None:
        h["redelivered"] = redelivered
    else:
        h["routed_queues"] = routed
    return h


@settings(max_examples=300, deadline=None)
@given(st.lists(traces, min_size=1, max_size=6))
def test_assembled_tables_equal_write_table_of_the_headers(batch: list) -> None:
    tables = TraceTables()  # one for the batch: later traces reuse the pieces earlier ones cached
    for vhost, exchange, msg, origin, ms, routed, redelivered in batch:
        headers, table = tables.build(vhost, exchange, msg, origin, ms, routed, redelivered)
        assert headers == expected_headers(vhost, exchange, msg, origin, ms, routed, redelivered)
        assert list(headers) == list(expected_headers(vhost, exchange, msg, origin, ms, routed, redelivered))
        assert table == write_table(headers)
        assert read_table(table, 0)[0] == headers


@settings(max_examples=100, deadline=None)
@given(traces)
def test_the_stored_record_is_the_general_encoders(trace: tuple) -> None:
    vhost, exchange, msg, origin, ms, routed, redelivered = trace
    headers, table = TraceTables().build(vhost, exchange, msg, origin, ms, routed, redelivered)
    traced = EncodedMessage(9, "amq.rabbitmq.trace", "publish.x", headers, msg.body, table)
    record = _encode_message(traced)
    assert record == _encode_message(Message(9, "amq.rabbitmq.trace", "publish.x", dict(headers), msg.body))
    back = _decode_message(record)
    assert back.headers == headers and back.body == msg.body


def test_the_piece_caches_start_afresh_when_full() -> None:
    from engine.model import trace

    tables = TraceTables()
    for i in range(trace._CACHE_MAX + 10):
        msg = Message(i, "x", f"key-{i}", {}, b"")
        headers, table = tables.build("/", "x", msg, ("u", f"conn-{i}", 1), i, [f"q{i}"])
        assert table == write_table(headers)
    assert 0 < len(tables.keys) <= trace._CACHE_MAX and len(tables.origins) <= trace._CACHE_MAX
