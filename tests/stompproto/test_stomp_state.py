"""Table-exhaustive state checks: for every (role, state, frame type), sending either
follows stompproto._state.TRANSITIONS or raises LocalProtocolError (state unchanged), and
receiving either follows the table or raises RemoteProtocolError."""

from __future__ import annotations

import itertools

import pytest
from stomp_helpers import ALL_FRAMES, feed, handshake, required

from stompproto import (
    CLIENT,
    SERVER,
    Connect,
    Connected,
    Connection,
    Disconnect,
    Error,
    Heartbeat,
    LocalProtocolError,
    Nack,
    RemoteProtocolError,
    State,
)
from stompproto._state import TRANSITIONS
from stompproto._writers import serialize

VERSION = "1.2"


def at_state(role, state: State):
    """A connection of ``role`` brought to ``state`` through real frames."""
    if state is State.AWAIT_CONNECT:
        return Connection(role)
    if state is State.CONNECTING:
        if role is CLIENT:
            conn = Connection(CLIENT)
            conn.send(Connect(required(Connect, VERSION)))
        else:
            conn = Connection(SERVER)
            feed(conn, serialize(Connect(required(Connect, VERSION)), None))
        return conn
    client, server = handshake(VERSION)
    if state is State.CONNECTED:
        return client if role is CLIENT else server
    wire = client.send(Disconnect({}))
    feed(server, wire)
    if state is State.DISCONNECTED:
        return client if role is CLIENT else server
    wire = server.send(Error({"message": "x"}))
    feed(client, wire)
    return client if role is CLIENT else server


def _frame_for(conn, cls):
    if cls is Connected and conn.role is SERVER and conn.state is State.CONNECTING:
        return conn.connected_frame()
    return cls(required(cls, VERSION))


CASES = list(itertools.product([CLIENT, SERVER], list(State), ALL_FRAMES))


@pytest.mark.parametrize(("role", "state", "cls"), CASES)
def test_send_follows_table(role, state, cls):
    conn = at_state(role, state)
    assert conn.state is state
    frame = _frame_for(conn, cls)
    new = TRANSITIONS.get((role, state, cls))
    if new is None:
        with pytest.raises(LocalProtocolError):
            conn.send(frame)
        assert conn.state is state
    else:
        data = conn.send(frame)
        assert data.startswith(cls.command.encode() + b"\n") and data.endswith(b"\x00")
        assert conn.state is new


@pytest.mark.parametrize(("role", "state", "cls"), CASES)
def test_receive_follows_table(role, state, cls):
    conn = at_state(role, state)
    frame = cls(required(cls, VERSION))
    escape = VERSION if state in (State.CONNECTED, State.DISCONNECTED, State.CLOSED) else None
    events, err = feed(conn, serialize(frame, escape))
    new = TRANSITIONS.get((role.peer, state, cls))
    if new is None:
        assert isinstance(err, RemoteProtocolError) and events == []
        if role is SERVER and state is not State.CLOSED:
            assert err.hint is not None and conn.send(err.hint)  # the hint is always sendable
    else:
        assert err is None and events == [frame]
        assert conn.state is new


@pytest.mark.parametrize(("role", "state"), list(itertools.product([CLIENT, SERVER], list(State))))
def test_heartbeats_in_every_state(role, state):
    conn = at_state(role, state)
    events, err = feed(conn, b"\n\r\n")
    assert err is None and events == [Heartbeat(), Heartbeat()]
    assert conn.state is state
    if state is State.CLOSED:
        with pytest.raises(LocalProtocolError):
            conn.send(Heartbeat())
    else:
        assert conn.send(Heartbeat()) == b"\n"


def test_nack_forbidden_in_1_0_both_ways():
    client, server = handshake("1.0")
    with pytest.raises(LocalProtocolError):
        client.send(Nack({"message-id": "1"}))
    events, err = feed(server, b"NACK\nmessage-id:1\n\n\x00")
    assert isinstance(err, RemoteProtocolError)


def test_timer_events_cannot_be_sent():
    from stompproto import ConnectionClosed, HeartbeatDue, PeerTimedOut

    _, server = handshake(VERSION)
    for ev in (HeartbeatDue(), PeerTimedOut(), ConnectionClosed()):
        with pytest.raises(LocalProtocolError):
            server.send(ev)


def test_table_is_the_documented_one():
    # Spot checks that the table reads as the spec says (guards accidental edits).
    assert TRANSITIONS[(CLIENT, State.AWAIT_CONNECT, Connect)] is State.CONNECTING
    assert TRANSITIONS[(SERVER, State.CONNECTING, Connected)] is State.CONNECTED
    assert TRANSITIONS[(CLIENT, State.CONNECTED, Disconnect)] is State.DISCONNECTED
    assert all(new is State.CLOSED for (who, _, cls), new in TRANSITIONS.items() if cls is Error)
    assert not any(state is State.CLOSED for (_, state, _) in TRANSITIONS)


def test_after_disconnect_server_may_answer_but_client_frames_are_errors():
    from stompproto import Message, Receipt, Send

    client, server = handshake(VERSION)
    wire = client.send(Disconnect({"receipt": "77"}))
    with pytest.raises(LocalProtocolError):
        client.send(Send({"destination": "/a"}))
    events, err = feed(server, wire + b"\n")
    assert err is None and events == [Disconnect({"receipt": "77"}), Heartbeat()]
    out = server.send(Message({"destination": "/a", "message-id": "1", "subscription": "0"}))
    out += server.send(Receipt({"receipt-id": "77"}))
    events, err = feed(client, out)
    assert err is None and [e.command for e in events] == ["MESSAGE", "RECEIPT"]
    events, err = feed(server, b"SEND\ndestination:/a\n\n\x00")
    assert isinstance(err, RemoteProtocolError) and "DISCONNECTED" in str(err)
