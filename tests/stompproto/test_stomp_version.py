"""Version negotiation in both roles, incl. the no-common-version ERROR hint."""

from __future__ import annotations

import pytest
from stomp_helpers import feed

from stompproto import (
    CLIENT,
    SERVER,
    Connect,
    Connected,
    Connection,
    LocalProtocolError,
    RemoteProtocolError,
    negotiate_version,
)


@pytest.mark.parametrize(("accept", "versions", "expected"), [
    (None, ("1.0", "1.1", "1.2"), "1.0"),
    ("1.0,1.1,1.2", ("1.0", "1.1", "1.2"), "1.2"),
    ("1.0,1.1,2.0", ("1.0", "1.1", "1.2"), "1.1"),
    ("1.2, 1.1", ("1.0", "1.1"), "1.1"),
    ("1.1", ("1.2",), None),
    (None, ("1.1", "1.2"), None),
    ("2.0", ("1.0", "1.1", "1.2"), None),
])
def test_server_negotiation(accept, versions, expected):
    assert negotiate_version(accept, versions) == expected
    server = Connection(SERVER, versions=versions)
    wire = b"CONNECT\n" + (f"accept-version:{accept}\n".encode() if accept else b"") + b"host:h\n\n\x00"
    events, err = feed(server, wire)
    if expected:
        assert err is None and server.version == expected
        connected = server.connected_frame()
        assert connected.headers["version"] == expected
        server.send(connected)
    else:
        assert isinstance(err, RemoteProtocolError) and server.version is None
        hint = err.hint
        assert hint.headers["version"] == ",".join(versions)
        assert hint.headers["message"]
        assert b" ".join(v.encode() for v in versions) in hint.body
        wire = server.send(hint)
        assert wire.startswith(b"ERROR\n") and f"version:{','.join(versions)}\n".encode() in wire
        assert server.state.value == "CLOSED"


def test_server_must_send_the_negotiated_version():
    server = Connection(SERVER)
    feed(server, b"CONNECT\naccept-version:1.1,1.2\n\n\x00")
    with pytest.raises(LocalProtocolError):
        server.send(Connected({"version": "1.1"}))
    with pytest.raises(LocalProtocolError):
        server.send(Connected({}))
    assert server.state.value == "CONNECTING"
    server.send(Connected({"version": "1.2"}))


def test_1_0_connected_may_omit_version():
    server = Connection(SERVER)
    feed(server, b"CONNECT\n\n\x00")
    server.send(Connected({"session": "s"}))
    client = Connection(CLIENT)
    client.send(Connect({}))
    events, err = feed(client, b"CONNECTED\nsession:s\n\n\x00")
    assert err is None and client.version == "1.0"


@pytest.mark.parametrize(("offered", "answer", "ok"), [
    ("1.1,1.2", "1.2", True), ("1.1,1.2", "1.1", True), ("1.1,1.2", None, False),
    ("1.2", "1.1", False), ("1.0,1.1", "1.3", False),
])
def test_client_learns_version_from_connected(offered, answer, ok):
    client = Connection(CLIENT)
    client.send(Connect({"accept-version": offered, "host": "h"}))
    wire = b"CONNECTED\n" + (f"version:{answer}\n".encode() if answer else b"") + b"\n\x00"
    events, err = feed(client, wire)
    if ok:
        assert err is None and client.version == answer
    else:
        assert isinstance(err, RemoteProtocolError) and err.hint is None


def test_client_must_offer_a_version_it_supports():
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT, versions=("1.2",)).send(Connect({"host": "h"}))
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT, versions=("1.2",)).send(Connect({"accept-version": "1.0,1.1"}))


def test_frames_before_connected_use_connect_rules():
    # an ERROR rejecting the CONNECT is not unescaped: the version is not in force yet
    client = Connection(CLIENT)
    client.send(Connect({"accept-version": "1.2", "host": "h"}))
    events, err = feed(client, b"ERROR\nmessage:bad\\tlogin\n\n\x00")
    assert err is None and events[0].headers["message"] == "bad\\tlogin"


def test_bad_versions_argument():
    with pytest.raises(ValueError):
        Connection(SERVER, versions=("2.0",))
    with pytest.raises(ValueError):
        Connection(SERVER, versions=())
