"""The AMQP session's delivery fast path encodes exactly what the general path encodes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqpproto.spec import BasicProperties, encode_properties
from engine._message import Message
from engine._props import props_to_headers
from engine.amqp.properties import message_props as _props
from engine.amqp.properties import props_bytes

_text = st.text(max_size=20)
_props_st = st.builds(
    BasicProperties,
    content_type=st.none() | _text, headers=st.none() | st.dictionaries(_text, st.integers(-5, 5) | _text, max_size=3),
    delivery_mode=st.none() | st.sampled_from([1, 2]), priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | _text, reply_to=st.none() | _text, expiration=st.none() | st.just("100"),
    message_id=st.none() | _text, type=st.none() | _text, app_id=st.none() | _text)


@settings(max_examples=80, deadline=None)
@given(props=st.none() | _props_st, persistent=st.booleans(), priority=st.integers(0, 9))
def test_props_bytes_matches_general_encoding(props, persistent, priority):
    msg = Message(1, "x", "k", props_to_headers(props), b"body", priority, None, persistent)
    assert props_bytes(msg) == encode_properties(_props(msg))


@settings(max_examples=120, deadline=None)
@given(offset=st.integers(0, 2**64 - 1), first=st.sampled_from(["persistent", "x-stream-offset"]),
       persistent=st.booleans(), marker=st.sampled_from(["true", "false"]))
def test_stream_record_props_match_general_encoding(offset, first, persistent, marker):
    """A stream delivery's headers: persistence and its offset (any integer width, either order)."""
    pair = {"persistent": marker, "x-stream-offset": offset}
    headers = {first: pair[first], **pair}
    msg = Message(1, "", "s", headers, b"body", 0, None, persistent)
    assert props_bytes(msg) == encode_properties(_props(msg))


def test_props_bytes_for_plain_messages_are_shared_constants():
    a = Message(1, "", "q", {}, b"a", 3, None, True)
    b = Message(2, "", "q", {}, b"b", 0, None, True)
    assert props_bytes(a) is props_bytes(b)
    assert props_bytes(a) == encode_properties(BasicProperties(delivery_mode=2))
    c = Message(3, "", "q", props_to_headers(BasicProperties(delivery_mode=2)), b"c", 0, None, True)
    assert c.headers == {"persistent": "true"} and props_bytes(c) is props_bytes(a)


@settings(max_examples=40, deadline=None)
@given(value=st.sampled_from(["true", "false", "1", ""]), persistent=st.booleans())
def test_props_bytes_with_only_a_persistent_header(value, persistent):
    msg = Message(1, "", "q", {"persistent": value}, b"x", 0, None, persistent)
    assert props_bytes(msg) == encode_properties(_props(msg))


def _reference_props_to_headers(props):
    """props_to_headers as it was before the one-check shortcut: every field looked at."""
    if props is None:
        return {}
    out = dict(props.headers) if props.headers else {}
    for name, field in (("content-type", "content_type"), ("content-encoding", "content_encoding"),
                        ("correlation-id", "correlation_id"), ("reply-to", "reply_to"),
                        ("expiration", "expiration"), ("amqp-message-id", "message_id"), ("type", "type"),
                        ("user-id", "user_id"), ("app-id", "app_id")):
        if getattr(props, field) is not None:
            out[name] = getattr(props, field)
    if props.delivery_mode == 2:
        out["persistent"] = "true"
    if props.priority is not None:
        out["priority"] = str(props.priority)
    return out


@settings(max_examples=80, deadline=None)
@given(props=st.none() | st.just(BasicProperties(delivery_mode=1)) | _props_st)
def test_props_to_headers_matches_the_field_by_field_mapping(props):
    got = props_to_headers(props)
    assert got == _reference_props_to_headers(props)
    assert list(got) == list(_reference_props_to_headers(props))  # same order, too


def test_stream_record_props_at_every_integer_width_edge():
    """The per-width templates of a stream delivery's offset switch where ``write_value`` does."""
    edges = [0, 127, 128, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
             2**64 - 1]
    for offset in edges:
        msg = Message(1, "", "s", {"persistent": "true", "x-stream-offset": offset}, b"body", 0, None, True)
        assert props_bytes(msg) == encode_properties(_props(msg)), offset
