"""The codec's fast paths give exactly what its general paths give.

* Parsing: ``FrameReader._fast_frame`` (whole LF-only head buffered, no escapes, no repeated
  header) against the general line-by-line path, over random frames, versions and chunkings: the
  same events and the same errors.
* Pre-encoded MESSAGE frames: ``b"MESSAGE\\n" + encode_headers(first) + message_tail(rest, body)``
  against ``serialize`` of the whole frame, per escaping (1.0 raw, 1.1, 1.2), including which
  header sets each refuses; ``send_message_bytes`` only where a MESSAGE may be sent.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from stomp_helpers import client_at, server_at

import stompproto
from stompproto import NEED_DATA, SERVER, Connection, LocalProtocolError, Message, RemoteProtocolError
from stompproto._readers import FrameReader
from stompproto._writers import encode_headers, message_tail, serialize

# header text worth escaping or confusing a parser: colons, backslashes, CR, LF, non-ASCII
_CHARS = st.sampled_from(list("ab:\\\r\n é-_0") + ["\u2603", "\x00"])
_TEXT = st.text(_CHARS, max_size=8)
_NAME = st.text(st.sampled_from(list("abcde-:\\\n")), min_size=0, max_size=6)
_VERSIONS = st.sampled_from(["1.0", "1.1", "1.2"])


def _events(conn: Connection, wire: bytes, sizes: list[int]) -> tuple[list[object], str | None]:
    """Feed ``wire`` in chunks of ``sizes`` (cycled); events until the first error (its text)."""
    out: list[object] = []
    i = k = 0
    while i < len(wire):
        n = sizes[k % len(sizes)] if sizes else len(wire)
        k += 1
        conn.receive_data(wire[i:i + n])
        i += n
        try:
            while (ev := conn.next_event()) is not NEED_DATA:
                out.append(ev)
        except RemoteProtocolError as exc:
            return out, str(exc)
    return out, None


def _general_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FrameReader, "_fast_frame", lambda self, buf, pos, version: None)


@st.composite
def _client_frames(draw: st.DrawFn) -> bytes:
    """A run of client frames, mostly well formed, some broken in the ways a parser must catch."""
    frames = []
    for _ in range(draw(st.integers(1, 4))):
        command = draw(st.sampled_from([b"SEND", b"ACK", b"NACK", b"SUBSCRIBE", b"BEGIN", b"SEND", b"SEN"]))
        lines = []
        for _ in range(draw(st.integers(0, 4))):
            name = draw(st.one_of(st.sampled_from(["a", "b", "destination"]), _NAME)).replace("\n", "")
            value = draw(_TEXT).replace("\n", "")
            sep = draw(st.sampled_from([":"] * 7 + [""]))
            lines.append((name + sep + value).encode())
        if draw(st.integers(0, 4)):  # mostly with what the command needs, anywhere among the rest
            for needed in (b"destination:/q/" + command, b"id:1", b"subscription:s", b"message-id:m",
                           b"transaction:t"):
                lines.insert(draw(st.integers(0, len(lines))), needed)
        body = draw(st.binary(max_size=12))
        clen = draw(st.sampled_from(["exact", "exact", "none", "none", "wrong", "junk"]))
        if clen == "exact":
            lines.append(b"content-length:%d" % len(body))
        elif clen == "wrong":
            lines.append(b"content-length:%d" % (len(body) + 1))
        elif clen == "junk":
            lines.append(b"content-length:x1")
        else:
            body = body.replace(b"\x00", b"")
        eol = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
        head = eol.join([command, *lines]) + eol + eol
        frames.append(head + body + b"\x00" + draw(st.sampled_from([b"", b"\n", b"\r\n"])))
    return b"".join(frames)


@given(wire=_client_frames(), version=_VERSIONS, sizes=st.lists(st.integers(1, 40), max_size=3))
@example(wire=b"SEND\ndestination:/q\na:1\na:2\n\n\x00", version="1.2", sizes=[])  # first one wins
@example(wire=b"SEND\ndestination:/q\\c\na\\n:\\\\\n\nx\x00", version="1.1", sizes=[])  # escapes
@example(wire=b"SEND\ndestination:/q\\c\n\nx\x00", version="1.0", sizes=[])  # none in 1.0
@example(wire=b"SEND\ndestination:/q\\x\n\nx\x00", version="1.2", sizes=[])  # undefined escape
@example(wire=b"SEND\r\ndestination:/q\r\n\r\nx\x00", version="1.2", sizes=[])
@example(wire=b"SEND\ndestination:/q\n:v\n\nx\x00", version="1.2", sizes=[])  # empty name
@example(wire=b"SEND\ndestination:/q\nnocolon\n\nx\x00", version="1.2", sizes=[])
@example(wire=b"SEND\ndestination:/\xff\n\nx\x00", version="1.2", sizes=[])  # not UTF-8
@example(wire=b"SEND\ndestination:/q\ncontent-length:3\n\nab\x00\x00", version="1.2", sizes=[])
def test_fast_frame_parses_as_the_general_path(wire, version, sizes):
    with pytest.MonkeyPatch.context() as mp:
        _general_only(mp)
        expected = _events(server_at(version), wire, sizes)
    assert _events(server_at(version), wire, sizes) == expected


@given(wire=_client_frames(), version=_VERSIONS)
def test_fast_frame_honours_the_limits_as_the_general_path(wire, version):
    limits = dict(max_frame_size=60, max_header_count=2, max_header_line=20, max_body_size=8)
    with pytest.MonkeyPatch.context() as mp:
        _general_only(mp)
        expected = _events(server_at(version, **limits), wire, [])
    assert _events(server_at(version, **limits), wire, []) == expected


@pytest.mark.skipif(stompproto.COMPILED, reason="patches a method, which a mypyc-compiled caller does not "
                    "call through; the pure-Python run covers this")
def test_fast_frame_takes_the_common_frames(monkeypatch):
    """The shapes load generators and clients send do go through the fast path."""
    conn = server_at("1.2")
    calls = []
    original = FrameReader._fast_frame

    def spy(self, buf, pos, version):
        result = original(self, buf, pos, version)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(FrameReader, "_fast_frame", spy)
    wire = (b"SEND\ndestination:/queue/bench\ncontent-length:5\n\nhello\x00"
            b"ACK\nid:T_0@@1\nsubscription:0\nmessage-id:T_0@@1\n\n\x00"
            b"SEND\ndestination:/topic/x\n\nno length\x00\n")
    events, err = _events(conn, wire, [])
    assert err is None and [type(e).__name__ for e in events] == ["Send", "Ack", "Send", "Heartbeat"]
    assert events[0].body == b"hello" and type(events[0].body) is bytes
    assert events[2].body == b"no length" and type(events[2].body) is bytes
    assert calls == [True, True, True]


def test_a_body_split_across_reads_is_joined():
    frame = b"SEND\ndestination:/a\ncontent-length:6\n\nab\x00cd!\x00SEND\ndestination:/b\n\nxyz\x00"
    for cut in range(1, len(frame)):
        events, err = _events(server_at("1.2"), frame, [cut, len(frame)])
        assert err is None
        assert [(e.headers["destination"], e.body) for e in events] == [("/a", b"ab\x00cd!"), ("/b", b"xyz")]


# ---- pre-encoded MESSAGE frames --------------------------------------------------------------

def _outcome(fn):
    try:
        return fn()
    except LocalProtocolError:
        return LocalProtocolError


_HEADERS = st.dictionaries(_NAME, _TEXT, max_size=4)


@given(first=_HEADERS, rest=_HEADERS, body=st.binary(max_size=20),
       escape=st.sampled_from([None, "1.1", "1.2"]))
def test_pre_encoded_parts_equal_serialize(first, rest, body, escape):
    rest = {k: v for k, v in rest.items() if k not in first and k != "content-length"}
    first = {k: v for k, v in first.items() if k != "content-length"}
    whole = {**first, **rest, "content-length": str(len(body))}
    expected = _outcome(lambda: serialize(Message(whole, body), escape))

    def parts() -> bytes:
        return b"MESSAGE\n" + encode_headers(first, escape).encode() + message_tail(rest, body, escape)

    assert _outcome(parts) == expected


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_connection_parts_follow_its_version(version):
    server = server_at(version)
    assert server.escape == (None if version == "1.0" else version)
    first = {"subscription": "s:1", "message-id": "m\\1"}
    rest = {"destination": "/topic/a", "x": "y"}
    data = server.send_message_bytes(
        b"MESSAGE\n" + server.encode_headers(first) + server.message_tail(rest, b"body"))
    assert data == server.send(Message({**first, **rest, "content-length": "4"}, b"body"))
    events, err = _events(client_at(version), data, [])
    assert err is None and events[0].headers == {**first, **rest, "content-length": "4"}


def test_send_message_bytes_checks_the_state_and_keeps_heartbeat_time():
    server = Connection(SERVER)
    with pytest.raises(LocalProtocolError):
        server.send_message_bytes(b"MESSAGE\n\n\x00")  # before CONNECT/CONNECTED
    server = server_at("1.2")
    server._hb = (1000, 0)
    assert server.send_message_bytes(b"x", 50.0) == b"x"
    assert server.get_timer() == 51.0


# ---- the receive buffer ------------------------------------------------------------------------

@given(ops=st.lists(st.one_of(st.binary(min_size=1, max_size=30), st.integers(0, 40)), max_size=30))
def test_receive_buffer_keeps_exactly_the_unconsumed_bytes(ops):
    from stompproto._buffer import ReceiveBuffer

    buf = ReceiveBuffer()
    model = b""
    for op in ops:
        if isinstance(op, bytes):
            buf.feed(op)
            model += op
        else:
            n = min(op, len(model))
            buf.consume_to(buf.pos + n)
            model = model[n:]
        assert bytes(buf.data[buf.pos:]) == model and len(buf) == len(model)


def test_receive_buffer_parses_whole_chunks_in_place_and_large_leftovers_in_a_bytearray():
    from stompproto._buffer import ReceiveBuffer

    buf = ReceiveBuffer()
    chunk = b"SEND\ndestination:/a\n\nx\x00"
    buf.feed(chunk)
    assert buf.data is chunk  # nothing copied
    buf.consume_to(10)
    buf.feed(b"more bytes than the leftover")
    assert type(buf.data) is bytes and buf.data == chunk[10:] + b"more bytes than the leftover"
    left = buf.data[-8:]
    buf.consume_to(len(buf.data) - 8)
    for b in b"abc":  # a peer dribbling: chunks shorter than what is left over
        buf.feed(bytes([b]))
    assert type(buf.data) is bytearray and bytes(buf.data[buf.pos:]) == left + b"abc"
