"""parse(serialise(e)) == e for every frame type and version, in both roles, fed whole,
byte by byte and in random chunks; trailing garbage fails only after the valid events."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stomp_helpers import (
    CLIENT_FRAMES,
    SERVER_FRAMES,
    VERSIONS,
    client_at,
    feed,
    required,
    server_at,
)

from stompproto import (
    CLIENT,
    SERVER,
    Connect,
    Connected,
    Connection,
    Heartbeat,
    Message,
    RemoteProtocolError,
    Send,
)

_SPECIAL = {"content-length", "heart-beat", "version", "accept-version"}


def _names(version: str | None):
    bad = "\r\n:" if version in (None, "1.0") else ("\r" if version == "1.1" else "")
    chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=bad)
    return st.text(chars, min_size=1, max_size=12).filter(lambda n: n not in _SPECIAL)


def _values(version: str | None):
    bad = "\r\n" if version in (None, "1.0") else ("\r" if version == "1.1" else "")
    return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=bad), max_size=20)


def _headers(version):
    return st.dictionaries(_names(version), _values(version), max_size=5)


@st.composite
def frames(draw, classes, version):
    cls = draw(st.sampled_from(classes))
    headers = draw(_headers(version))
    headers.update(required(cls, version))
    body = draw(st.binary(max_size=40)) if cls in (Send, Message) or cls.command == "ERROR" else b""
    return cls(headers, body)


def _expected(frame):
    """What the peer parses: the same frame plus the content-length the writer adds."""
    headers = dict(frame.headers)
    if frame.body:
        headers["content-length"] = str(len(frame.body))
    return type(frame)(headers, frame.body)


def _client_ops(version):
    """Client frames that keep the connection open and exist in ``version``."""
    return tuple(c for c in CLIENT_FRAMES[:-1] if not (version == "1.0" and c.command == "NACK"))


def _chunk_sizes():
    return st.lists(st.integers(1, 40), min_size=1, max_size=20)


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_client_frames_roundtrip(version, data):
    fs = data.draw(st.lists(frames(_client_ops(version), version), min_size=1, max_size=5))
    sender = client_at(version)
    wire = b"".join(sender.send(f) for f in fs)
    expected = [_expected(f) for f in fs]
    for sizes in (None, [1], data.draw(_chunk_sizes())):
        events, err = feed(server_at(version), wire, sizes)
        assert err is None and events == expected


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_server_frames_roundtrip(version, data):
    # ERROR closes the connection, so it may only be the last frame.
    fs = data.draw(st.lists(frames(SERVER_FRAMES[:-1], version), max_size=4))
    fs.append(data.draw(frames(SERVER_FRAMES, version)))
    sender = server_at(version)
    wire = b"".join(sender.send(f) for f in fs)
    expected = [_expected(f) for f in fs]
    for sizes in (None, [1], data.draw(_chunk_sizes())):
        events, err = feed(client_at(version), wire, sizes)
        assert err is None and events == expected


@pytest.mark.parametrize("version", VERSIONS)
@given(extra=_headers(None), stomp=st.booleans(), sizes=_chunk_sizes(), hb=st.booleans())
def test_connect_connected_roundtrip(version, extra, stomp, sizes, hb):
    connect_h = dict(extra)
    connect_h.update({"accept-version": "1.0,1.1,1.2"[: 3 + 4 * VERSIONS.index(version)], "host": "h"})
    if hb:
        connect_h["heart-beat"] = "100,200"
    connect = Connect(connect_h, use_stomp_command=stomp)
    client = Connection(CLIENT)
    wire = client.send(connect)
    for s in (None, [1], sizes):
        server = Connection(SERVER)
        events, err = feed(server, wire, s)
        assert err is None and events == [connect]
    assert server.version == version
    connected = Connected({**extra, "version": version, **({"heart-beat": "300,400"} if hb else {})})
    wire = server.send(connected)
    events, err = feed(client, wire, sizes)
    assert err is None and events == [connected]
    assert client.version == version


GARBAGE = [
    b"XYZ\n\n\x00",               # unknown command
    b"send\n\n\x00",              # commands are case sensitive
    b"\r\r",                       # bare CR between frames
    b"SEND\nno-colon\n\n\x00",    # header without colon
    b"SEND\n:empty-name\n\n\x00",
    b"SEND\ndestination:/a\ncontent-length:x\n\n\x00",
    b"SEND\ndestination:/a\ncontent-length:-1\n\n\x00",
    b"SEND\ndestination:/a\ncontent-length:2\n\nabc\x00",  # NUL missing where expected
    b"SEND\n\n\x00",              # missing destination
    b"MESSAGE\ndestination:/a\nmessage-id:1\nsubscription:0\n\n\x00",  # wrong direction
    b"CONNECT\n\n\x00",           # already connected
    b"\x00",                       # stray NUL
    b"SEND\ndestination:/a\n\nunterminated",  # EOF inside a frame
]


@pytest.mark.parametrize("garbage", GARBAGE)
@settings(max_examples=15)  # x13 garbage kinds
@given(data=st.data())
def test_trailing_garbage_after_valid_frames(garbage, data):
    version = data.draw(st.sampled_from(VERSIONS))
    fs = data.draw(st.lists(frames(_client_ops(version), version), min_size=1, max_size=3))
    wire = b"".join(client_at(version).send(f) for f in fs)
    expected = [_expected(f) for f in fs] + [Heartbeat()]
    for sizes in (None, [1], data.draw(_chunk_sizes())):
        events, err = feed(server_at(version), wire + b"\n" + garbage, sizes, eof=True)
        assert events == expected
        assert isinstance(err, RemoteProtocolError)
        assert err.hint is not None and err.hint.command == "ERROR"


def test_error_repeats_and_hint_is_sendable():
    server = server_at("1.2")
    events, err = feed(server, b"SEND\nreceipt:r-9\n\n\x00")
    assert events == [] and err is not None
    assert err.hint.headers["receipt-id"] == "r-9"
    with pytest.raises(RemoteProtocolError) as again:
        server.next_event()
    # the same error again, as a fresh copy (the kept one holds no traceback: issue 23)
    assert str(again.value) == str(err) and again.value.hint is err.hint and again.value.__traceback__ is not None
    assert server.send(err.hint).startswith(b"ERROR\n")
    assert server.state.value == "CLOSED"


def test_client_role_errors_have_no_hint():
    events, err = feed(client_at("1.2"), b"BOGUS\n\n\x00")
    assert events == [] and err is not None and err.hint is None


@pytest.mark.parametrize("role", [CLIENT, SERVER])
def test_eof_at_boundary_gives_one_connection_closed(role):
    from stompproto import NEED_DATA, ConnectionClosed

    conn = Connection(role)
    conn.receive_data(b"\n")
    conn.receive_data(b"")
    assert conn.next_event() == Heartbeat()
    assert conn.next_event() == ConnectionClosed()
    assert conn.next_event() is NEED_DATA
    assert conn.state.value == "CLOSED"


def test_hint_receipt_id_belongs_to_the_failing_frame_only():
    server = server_at("1.2")
    events, err = feed(server, b"SEND\ndestination:/a\nreceipt:ok-1\n\n\x00\r\r")
    assert len(events) == 1 and err is not None
    assert "receipt-id" not in err.hint.headers  # the bad bytes are not the SEND's
    events, err = feed(server_at("1.2"), b"SEND\nreceipt:r\\\\1\ndestination:/a\nx:\\t\n\n\x00")
    assert err.hint.headers["receipt-id"] == "r\\1"
