"""Table-exhaustive check: in every reachable (role, state), send() accepts exactly the
event types the transition table lists, and lands in the listed state."""
import pytest
from wsframe_helpers import drain, frame

from wsframe import (
    CLIENT,
    SERVER,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Connection,
    ConnectionState,
    LocalProtocolError,
    Ping,
    Pong,
    RejectConnection,
    RemoteProtocolError,
    Request,
    TextMessage,
)
from wsframe._state import TRANSITIONS

S = ConnectionState
SAMPLES = [
    Request(host="h", path="/ws"),
    AcceptConnection(),
    RejectConnection(404),
    TextMessage("t"),
    BytesMessage(b"b"),
    Ping(b"p"),
    Pong(b"p"),
    CloseConnection(1000),
]
UPGRADE = (
    b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def _pair():
    cli, srv = Connection(CLIENT), Connection(SERVER)
    drain(srv, [cli.send(Request(host="h", path="/ws"))])
    drain(cli, [srv.send(AcceptConnection())])
    return cli, srv


def _in(role, state):
    """A connection of ``role`` driven into ``state`` through real traffic."""
    if state is S.IDLE:
        return Connection(role)
    if state is S.HANDSHAKE:
        if role is CLIENT:
            conn = Connection(CLIENT)
            conn.send(Request(host="h"))
            return conn
        conn = Connection(SERVER)
        drain(conn, [UPGRADE])
        return conn
    if state is S.HANDSHAKE_FAILED:
        if role is SERVER:
            conn = Connection(SERVER)
            conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        else:
            conn = Connection(CLIENT)
            conn.send(Request(host="h"))
            conn.receive_data(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
        return conn
    cli, srv = _pair()
    me, peer = (cli, srv) if role is CLIENT else (srv, cli)
    if state is S.OPEN:
        return me
    if state is S.FAILED:
        me.receive_data(frame(7, b"", key=b"abcd" if role is SERVER else None))
        with pytest.raises(RemoteProtocolError):
            me.next_event()
        return me
    closer_is_me = (state is S.CLIENT_CLOSING) == (role is CLIENT)
    if state in (S.CLIENT_CLOSING, S.SERVER_CLOSING):
        if closer_is_me:
            me.send(CloseConnection(1000))
        else:
            drain(me, [peer.send(CloseConnection(1000))])
        return me
    assert state is S.CLOSED
    drain(me, [peer.send(CloseConnection(1000))])
    me.send(CloseConnection(1000))
    return me


@pytest.mark.parametrize("role", [CLIENT, SERVER])
@pytest.mark.parametrize("state", list(S))
def test_send_follows_the_table(role, state):
    for event in SAMPLES:
        conn = _in(role, state)
        assert conn.state is state
        expected = TRANSITIONS.get((role, state, type(event)))
        if expected is None:
            with pytest.raises(LocalProtocolError):
                conn.send(event)
            assert conn.state is state  # a refused send changes nothing
        else:
            assert isinstance(conn.send(event), bytes)
            assert conn.state is expected, (role, state, event)


def test_every_table_entry_is_exercised():
    reachable = {(r, s, type(e)) for r in (CLIENT, SERVER) for s in S for e in SAMPLES}
    assert set(TRANSITIONS) <= reachable
    assert not any(state is S.CLOSED for (_, state, _) in TRANSITIONS)
