"""engine.records: the template encoder of stream records writes what the general codec writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqpproto import BasicProperties
from amqpproto.spec import decode_properties, encode_properties
from engine._message import Message
from engine._props import props_to_headers
from engine._raw_message import RawMessage
from engine.records import _TEMPLATES_MAX, MessageDecoder, MessageEncoder, _decode_message, _encode_message

_names = st.sampled_from(["", "s", "amq.topic", "stream-1", "é"])
_headers = st.one_of(st.just({}), st.just({"persistent": "true"}), st.just({"persistent": "false"}),
                     st.dictionaries(st.sampled_from(["persistent", "a", "x-stream-offset"]),
                                     st.one_of(st.integers(-5, 5), st.text(max_size=3)), max_size=2))
_messages = st.builds(Message, st.integers(0, 2**64 - 1), _names, _names, _headers, st.binary(max_size=20),
                      st.integers(0, 255), st.one_of(st.none(), st.floats(0, 1e10)), st.booleans(),
                      st.one_of(st.none(), st.floats(0, 1e4)))


@settings(max_examples=300, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=12))
def test_the_template_encoder_writes_the_general_codecs_bytes(messages) -> None:
    """One encoder over a run of messages (its templates reused, whatever the route and headers)."""
    encoder = MessageEncoder()
    for msg in messages:
        assert encoder.encode(msg) == _encode_message(msg)


def test_a_template_differs_by_route_priority_persistence_and_marker() -> None:
    encoder = MessageEncoder()
    variants = [Message(7, ex, rk, dict(h), b"body", prio, None, persistent)
                for ex in ("", "x") for rk in ("s", "t") for h in ({}, {"persistent": "true"})
                for prio in (0, 9) for persistent in (False, True)]
    for msg in variants * 2:
        data = encoder.encode(msg)
        assert data == _encode_message(msg)
        back = _decode_message(data)
        assert (back.id, back.exchange, back.routing_key, back.headers, back.body, back.priority,
                back.persistent) == (7, msg.exchange, msg.routing_key, msg.headers, b"body", msg.priority,
                                     msg.persistent)


def test_the_templates_are_bounded() -> None:
    encoder = MessageEncoder()
    for i in range(3 * _TEMPLATES_MAX):
        msg = Message(i, "", f"s{i}", {"persistent": "true"}, b"x", 0, None, True)
        assert encoder.encode(msg) == _encode_message(msg)
    assert len(encoder._templates) <= _TEMPLATES_MAX


@settings(max_examples=300, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=12), st.lists(st.integers(0, 11), max_size=20))
def test_the_template_decoder_reads_what_the_general_codec_reads(messages, order) -> None:
    """One decoder over records in any order (templates kept, replaced and matched by chance)."""
    records = [_encode_message(m) for m in messages]
    decoder = MessageDecoder()
    for i in [*range(len(records)), *(k % len(records) for k in order)]:
        got, want = decoder.decode(memoryview(records[i])), _decode_message(records[i])
        assert (got.id, got.exchange, got.routing_key, got.headers, got.body, got.priority, got.expires_at,
                got.persistent, got.ack_timeout) == (want.id, want.exchange, want.routing_key, want.headers,
                                                     want.body, want.priority, want.expires_at, want.persistent,
                                                     want.ack_timeout)


def test_each_decoded_message_has_headers_of_its_own() -> None:
    """A stream read adds the offset to a record's headers: two records never share the dict."""
    data = _encode_message(Message(1, "", "s", {"persistent": "true"}, b"a", 0, None, True))
    decoder = MessageDecoder()
    first, second, third = (decoder.decode(data) for _ in range(3))
    second.headers["x-stream-offset"] = 1
    assert first.headers == third.headers == {"persistent": "true"}
    assert first.headers is not third.headers


_raw_props = st.builds(
    BasicProperties, headers=st.none() | st.dictionaries(st.text(max_size=6), st.integers(-5, 2**40) | st.text(max_size=6),
                                                         max_size=3),
    delivery_mode=st.none() | st.sampled_from([1, 2]), content_type=st.none() | st.text(max_size=6),
    timestamp=st.none() | st.just(1700000000), app_id=st.none() | st.text(max_size=6))
_raws = st.builds(lambda mid, key, props, body, persistent: RawMessage(mid, "", key, encode_properties(props), body,
                                                                      persistent, None, None, None),
                  st.integers(0, 2**63), st.sampled_from(["s", "t"]), _raw_props, st.binary(max_size=20), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(_raws, min_size=1, max_size=8))
def test_a_raw_message_is_stored_with_its_properties_and_reads_back_as_the_general_paths_headers(raws) -> None:
    encoder, decoder = MessageEncoder(), MessageDecoder()
    for raw in raws:
        data = encoder.encode(raw)
        assert data == _encode_message(raw)
        assert raw.props in data  # the bytes as published, not a table made from them
        for msg in (decoder.decode(data), _decode_message(data)):
            assert type(msg) is Message
            assert msg.headers == props_to_headers(decode_properties(raw.props, 0, len(raw.props))) == raw.headers
            assert (msg.id, msg.routing_key, msg.body, msg.persistent, msg.priority, msg.expires_at) == \
                (raw.id, raw.routing_key, raw.body, raw.persistent, 0, None)
