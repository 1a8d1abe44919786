"""Wire details: escaping per version, undefined escapes, CONNECT/CONNECTED never escaped,
repeated headers, NUL bodies, CRLF, content-length, limits enforced while bytes arrive."""

from __future__ import annotations

import pytest
from stomp_helpers import client_at, feed, server_at

import stompproto
from stompproto import (
    CLIENT,
    NEED_DATA,
    SERVER,
    Connect,
    Connection,
    Error,
    Heartbeat,
    LocalProtocolError,
    Message,
    Receipt,
    RemoteProtocolError,
    Send,
    Subscribe,
)

TRICKY = {"k:ey\\": "a:b\nc\\d"}


# ---- escaping on send --------------------------------------------------------------

def test_escape_1_2_all_four():
    wire = client_at("1.2").send(Send({"destination": "/a", "x": "1:2\n3\\4\r5"}))
    assert b"x:1\\c2\\n3\\\\4\\r5\n" in wire


def test_escape_1_1_no_cr():
    client = client_at("1.1")
    wire = client.send(Send({"destination": "/a", **TRICKY}))
    assert b"k\\cey\\\\:a\\cb\\nc\\\\d\n" in wire
    with pytest.raises(LocalProtocolError):
        client.send(Send({"destination": "/a", "x": "cr\r"}))


def test_1_0_has_no_escaping():
    client = client_at("1.0")
    wire = client.send(Send({"destination": "/a", "x": "a:b\\c"}))
    assert b"x:a:b\\c\n" in wire  # colon in a value is fine, backslash is literal
    for bad in ({"x": "line\nbreak"}, {"x": "cr\r"}, {"k:ey": "v"}):
        with pytest.raises(LocalProtocolError):
            client.send(Send({"destination": "/a", **bad}))


def test_connect_and_connected_are_never_escaped():
    client = Connection(CLIENT)
    wire = client.send(Connect({"accept-version": "1.2", "host": "h", "passcode": "pa:ss\\"}))
    assert b"passcode:pa:ss\\\n" in wire
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT).send(Connect({"accept-version": "1.2", "login": "a\nb"}))
    server = Connection(SERVER)
    events, err = feed(server, wire)
    assert err is None and events[0].headers["passcode"] == "pa:ss\\"  # not unescaped
    wire = server.send(server.connected_frame(headers={"server": "x\\c:y"}))
    assert b"server:x\\c:y\n" in wire
    events, err = feed(client, wire)
    assert err is None and events[0].headers["server"] == "x\\c:y"


def test_unescape_on_receive():
    events, err = feed(server_at("1.2"), b"SEND\ndestination:/a\nk\\cey:a\\cb\\nc\\\\d\\r\n\n\x00")
    assert err is None and events[0].headers["k:ey"] == "a:b\nc\\d\r"
    events, err = feed(server_at("1.1"), b"SEND\ndestination:/a\nx:a\\cb\\nc\\\\d\n\n\x00")
    assert err is None and events[0].headers["x"] == "a:b\nc\\d"
    events, err = feed(server_at("1.0"), b"SEND\ndestination:/a\nx:a\\cb\\t\n\n\x00")
    assert err is None and events[0].headers["x"] == "a\\cb\\t"  # 1.0: literal


@pytest.mark.parametrize(("version", "value"), [
    ("1.2", b"\\t"), ("1.1", b"\\r"), ("1.2", b"abc\\"), ("1.1", b"\\x41"), ("1.2", b"\\C"),
])
def test_undefined_escape_is_fatal(version, value):
    wire = b"SEND\ndestination:/a\nx:" + value + b"\n\n\x00"
    for sizes in (None, [1]):
        events, err = feed(server_at(version), wire, sizes)
        assert events == [] and isinstance(err, RemoteProtocolError)
        assert "escape" in str(err)


def test_escaped_header_name_on_receive():
    events, err = feed(server_at("1.2"), b"SEND\ndestination:/a\n\\\\bad\\t:v\n\n\x00")
    assert isinstance(err, RemoteProtocolError)


# ---- header parsing -----------------------------------------------------------------

def test_repeated_headers_first_wins_and_count():
    events, err = feed(server_at("1.2"), b"SEND\ndestination:/a\ndestination:/b\nfoo:1\nfoo:2\n\n\x00")
    assert err is None and events[0].headers == {"destination": "/a", "foo": "1"}


def test_headers_split_at_first_colon_and_not_trimmed():
    events, err = feed(server_at("1.2"), b"SEND\ndestination: /a \nsel:x='a:b'\n\n\x00")
    assert err is None and events[0].headers == {"destination": " /a ", "sel": "x='a:b'"}


def test_empty_value_allowed():
    events, err = feed(server_at("1.1"), b"SEND\ndestination:/a\nempty:\n\n\x00")
    assert err is None and events[0].headers["empty"] == ""


def test_invalid_utf8_header():
    events, err = feed(server_at("1.2"), b"SEND\ndestination:/\xff\n\n\x00")
    assert isinstance(err, RemoteProtocolError)


# ---- line endings -------------------------------------------------------------------

@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_crlf_and_mixed_line_endings(version):
    wire = b"SEND\r\ndestination:/a\nx:y\r\n\r\nbody\x00\r\n"
    for sizes in (None, [1], [3]):
        events, err = feed(server_at(version), wire, sizes)
        assert err is None
        assert events == [Send({"destination": "/a", "x": "y"}, b"body"), Heartbeat()]


def test_bare_cr_inside_value_is_kept_in_1_0():
    events, err = feed(server_at("1.0"), b"SEND\ndestination:/a\nx:a\rb\n\n\x00")
    assert err is None and events[0].headers["x"] == "a\rb"


# ---- bodies -------------------------------------------------------------------------

def test_nul_in_body_needs_and_uses_content_length():
    server = server_at("1.2")
    body = b"\x00a\x00\x00b\x00"
    wire = client_at("1.2").send(Send({"destination": "/a"}, body))
    assert b"content-length:6\n" in wire
    for sizes in (None, [1], [4]):
        events, err = feed(server_at("1.2"), wire, sizes)
        assert err is None and events[0].body == body
    events, err = feed(server, b"SEND\ndestination:/a\n\nab\x00cd\x00")
    assert err is not None and events == [Send({"destination": "/a"}, b"ab")]  # "cd" is garbage


def test_content_length_zero_and_leading_zeros():
    events, err = feed(server_at("1.2"), b"SEND\ndestination:/a\ncontent-length:0\n\n\x00"
                       b"SEND\ndestination:/a\ncontent-length:002\n\nab\x00")
    assert err is None and [e.body for e in events] == [b"", b"ab"]


@pytest.mark.parametrize("clen", [b"x", b"-1", b"+1", b" 1", b"1.0", b"", b"\xd9\xa1"])
def test_bad_content_length(clen):
    events, err = feed(server_at("1.2"), b"SEND\ndestination:/a\ncontent-length:" + clen + b"\n\nx\x00")
    assert isinstance(err, RemoteProtocolError)


def test_missing_nul_after_content_length():
    for sizes in (None, [1]):
        events, err = feed(server_at("1.2"), b"SEND\ndestination:/a\ncontent-length:1\n\nxy\x00", sizes)
        assert isinstance(err, RemoteProtocolError) and "NUL" in str(err)


def test_send_side_content_length_rules():
    client = client_at("1.2")
    assert b"content-length" not in client.send(Send({"destination": "/a"}))
    assert client.send(Send({"destination": "/a", "content-length": "2"}, b"ab")).count(b"content-length") == 1
    with pytest.raises(LocalProtocolError):
        client.send(Send({"destination": "/a", "content-length": "3"}, b"ab"))
    with pytest.raises(LocalProtocolError):
        client.send(Subscribe({"destination": "/a", "id": "1"}, b"no body allowed"))
    # a body of the wrong type: the compiled build (mypyc) checks the declared type at construction
    with pytest.raises((LocalProtocolError, TypeError) if stompproto.COMPILED else LocalProtocolError):
        client.send(Send({"destination": "/a"}, "str body"))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        client.send(Send({"destination": 5}))  # type: ignore[dict-item]
    with pytest.raises(LocalProtocolError):
        client.send(Send({"destination": "/a", "": "x"}))
    with pytest.raises(LocalProtocolError):
        client.send(Send({"destination": "/\ud800"}))


@pytest.mark.parametrize(("version", "frame", "ok"), [
    ("1.0", Message({"destination": "/a", "message-id": "1"}), True),
    ("1.1", Message({"destination": "/a", "message-id": "1"}), False),
    ("1.2", Message({"destination": "/a", "message-id": "1", "subscription": "s"}), True),
    ("1.2", Receipt({}), False),
])
def test_required_server_headers(version, frame, ok):
    server = server_at(version)
    if ok:
        events, err = feed(client_at(version), server.send(frame))
        assert err is None and len(events) == 1
    else:
        with pytest.raises(LocalProtocolError):
            server.send(frame)
        wire = frame.command.encode() + b"\n" + b"".join(
            f"{k}:{v}\n".encode() for k, v in frame.headers.items()) + b"\n\x00"
        events, err = feed(client_at(version), wire)
        assert isinstance(err, RemoteProtocolError)


@pytest.mark.parametrize(("version", "headers", "ok"), [
    ("1.0", {"message-id": "1"}, True), ("1.0", {"id": "1"}, False),
    ("1.1", {"message-id": "1", "subscription": "0"}, True), ("1.1", {"message-id": "1"}, False),
    ("1.2", {"id": "1"}, True), ("1.2", {"message-id": "1", "subscription": "0"}, False),
])
def test_ack_headers_per_version(version, headers, ok):
    from stompproto import Ack

    client, server = client_at(version), server_at(version)
    wire = b"ACK\n" + b"".join(f"{k}:{v}\n".encode() for k, v in headers.items()) + b"\n\x00"
    events, err = feed(server, wire)
    if ok:
        assert err is None and client.send(Ack(headers))
    else:
        assert isinstance(err, RemoteProtocolError) and err.hint.headers["message"]
        with pytest.raises(LocalProtocolError):
            client.send(Ack(headers))


@pytest.mark.parametrize(("version", "headers", "ok"), [
    ("1.0", {"destination": "/a"}, True), ("1.0", {"id": "1"}, True), ("1.0", {}, False),
    ("1.1", {"destination": "/a"}, False), ("1.2", {"id": "0"}, True),
])
def test_unsubscribe_headers_per_version(version, headers, ok):
    from stompproto import Unsubscribe

    client = client_at(version)
    if ok:
        assert client.send(Unsubscribe(headers))
    else:
        with pytest.raises(LocalProtocolError):
            client.send(Unsubscribe(headers))


def test_connect_without_host_is_accepted_but_never_sent():
    events, err = feed(Connection(SERVER), b"CONNECT\naccept-version:1.2\n\n\x00")
    assert err is None and events[0].headers == {"accept-version": "1.2"}
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT).send(Connect({"accept-version": "1.1,1.2"}))
    assert Connection(CLIENT).send(Connect({}))  # a 1.0 CONNECT needs no host


# ---- limits, enforced while data arrives ------------------------------------------

LIMITS = dict(max_frame_size=500, max_header_count=5, max_header_line=100, max_body_size=200)


def _bytewise_error_index(wire: bytes) -> int:
    """Feed byte by byte; return the index of the byte whose arrival raised."""
    server = server_at("1.2", **LIMITS)
    for i in range(len(wire)):
        server.receive_data(wire[i : i + 1])
        try:
            while server.next_event() is not NEED_DATA:
                pass
        except RemoteProtocolError as exc:
            assert exc.hint is not None and exc.hint.command == "ERROR"
            assert server.send(exc.hint).startswith(b"ERROR\n")
            return i
    raise AssertionError("no error raised")


@pytest.mark.parametrize(("name", "wire", "raise_before"), [
    ("header line", b"SEND\ndestination:/" + b"a" * 300 + b"\n\n\x00", 150),
    ("header count", b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(20)) + b"\n\x00", 60),
    ("content-length", b"SEND\ndestination:/a\ncontent-length:500\n\n" + b"x" * 500 + b"\x00", 60),
    ("running body", b"SEND\ndestination:/a\n\n" + b"x" * 500 + b"\x00", 250),
    ("frame size", b"SEND\ndestination:/a\n" + b"".join(b"h:" + b"v" * 95 + b"\n" for _ in range(3))
     + b"content-length:200\n\n" + b"x" * 200 + b"\x00", 450),
    ("garbage command", b"HELLO WORLD\n\n\x00", 2),
])
def test_limits_breached_byte_by_byte(name, wire, raise_before):
    i = _bytewise_error_index(wire)
    assert i < raise_before < len(wire), name
    events, err = feed(server_at("1.2", **LIMITS), wire)  # and whole
    assert isinstance(err, RemoteProtocolError)


def test_limits_allow_frames_at_the_limit():
    wire = (b"SEND\ndestination:/" + b"a" * 86 + b"\n" + b"".join(b"h%d:v\n" % i for i in range(3))
            + b"content-length:200\n\n" + b"x" * 200 + b"\x00")
    for sizes in (None, [1]):
        events, err = feed(server_at("1.2", **LIMITS), wire, sizes)
        assert err is None and len(events) == 1 and len(events[0].body) == 200


def test_eof_mid_frame_is_an_error():
    for tail in (b"SEND\ndest", b"SEND\ndestination:/a\n\nbody", b"\r"):
        events, err = feed(server_at("1.2"), tail, eof=True)
        assert isinstance(err, RemoteProtocolError)


def test_server_error_frame_with_receipt_id_and_connection_closes():
    client, server = client_at("1.2"), server_at("1.2")
    wire = server.send(Error({"message": "bad", "receipt-id": "r:1"}, b"details"))
    with pytest.raises(LocalProtocolError):
        server.send(Receipt({"receipt-id": "x"}))
    events, err = feed(client, wire)
    assert events == [Error({"message": "bad", "receipt-id": "r:1", "content-length": "7"}, b"details")]
    events, err = feed(client, b"RECEIPT\nreceipt-id:1\n\n\x00")
    assert isinstance(err, RemoteProtocolError)  # nothing may follow an ERROR
