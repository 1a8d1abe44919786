"""The three codecs share one shape (docs/codecs/conventions.md): a Role Enum with CLIENT/SERVER
constants and h11's ``our_role``/``their_role``, NEED_DATA as the one member of a NeedData Enum, one
slotted ``Event`` base class of every event, Enum states, state tables keyed (sender role, state,
event type), the same buffer names (``receive_data``, ``buffered_bytes``, ``trailing_data``; inside,
``ReceiveBuffer.feed`` and ``len()``), and internal bugs re-typed as RemoteProtocolError with the
codec's internal-error hint."""

from __future__ import annotations

import dataclasses
import enum
import inspect

import pytest

import amqpproto
import stompproto
import wsframe
from amqpproto import _state as amqp_state
from stompproto import _state as stomp_state
from wsframe import _state as ws_state

CODECS = [amqpproto, stompproto, wsframe]


@pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)
def test_role_and_need_data_have_one_shape(codec):
    assert issubclass(codec.Role, enum.Enum)
    assert [r.value for r in codec.Role] == ["client", "server"]
    assert codec.CLIENT is codec.Role.CLIENT and codec.SERVER is codec.Role.SERVER
    assert codec.CLIENT.peer is codec.SERVER and codec.SERVER.peer is codec.CLIENT
    assert issubclass(codec.NeedData, enum.Enum) and list(codec.NeedData) == [codec.NEED_DATA]
    assert repr(codec.NEED_DATA) == "NEED_DATA"
    assert codec.Connection(codec.SERVER).next_event() is codec.NEED_DATA


@pytest.mark.parametrize("table, role_type, state_types", [
    (amqp_state.CONNECTION_TABLE, amqpproto.Role, (amqpproto.ConnectionState,)),
    (amqp_state.CHANNEL_TABLE, amqpproto.Role, (amqpproto.ChannelState,)),
    (stomp_state.TRANSITIONS, stompproto.Role, (stompproto.State,)),
    (ws_state.TRANSITIONS, wsframe.Role, (wsframe.ConnectionState,)),
], ids=["amqp-connection", "amqp-channel", "stomp", "ws"])
def test_tables_are_keyed_sender_state_event_type(table, role_type, state_types):
    for (sender, state, event_type), new in table.items():
        assert type(sender) is role_type
        assert isinstance(state, state_types) and isinstance(new, state_types)
        assert isinstance(state, enum.Enum)
        assert isinstance(event_type, type)


def test_amqp_states_still_equal_their_old_string_constants():
    assert amqpproto.Connection(amqpproto.CLIENT).state == "AWAIT_HEADER"
    assert amqpproto.Connection(amqpproto.CLIENT).channel_state(1) == "CH_CLOSED"
    assert f"{amqpproto.OPEN}" == "OPEN"


#: per codec: bytes a server-role connection fails on with a RemoteProtocolError it keeps
BAD_INPUT = {
    "amqpproto": b"AMQP\x00\x00\x09\x01" + b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x0b\x00",
    "stompproto": b"BOGUS\n\n\x00",
    "wsframe": b"GET /ws HTTP/1.0\r\n\r\n",
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)
def test_a_failed_connection_keeps_no_traceback(codec):
    """The error a connection keeps (and raises again) holds no traceback: its frames would hold
    the connection, its caller and their buffers in a cycle only the cyclic GC frees (issue 23)."""
    import gc

    conn = codec.Connection(codec.SERVER)
    conn.receive_data(BAD_INPUT[codec.__name__])
    gc.collect()
    gc.disable()
    try:
        for _ in range(2):  # the first raise and the repeat
            with pytest.raises(codec.RemoteProtocolError) as info:
                while conn.next_event() is not codec.NEED_DATA:
                    pass
            assert info.value.hint is not None
            del info
        del conn
        assert gc.collect() == 0  # nothing was left for the cyclic GC: reference counting freed it all
    finally:
        gc.enable()


@pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)
def test_roles_are_named_like_h11(codec):
    for ours in codec.Role:
        conn = codec.Connection(ours)
        assert conn.our_role is ours and conn.their_role is ours.peer
    if codec is not amqpproto:  # the name these two used before: kept as an alias
        assert codec.Connection(codec.CLIENT).role is codec.CLIENT


#: exported dataclasses that are not events (what an event carries or how it is configured)
NOT_EVENTS = {"amqpproto": {"BasicProperties"}, "stompproto": set(), "wsframe": {"PerMessageDeflate"}}


@pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)
def test_every_event_derives_from_one_slotted_event_class(codec):
    # no instance __dict__ (slots all the way up; a compiled build's native classes have none either)
    assert inspect.isclass(codec.Event) and codec.Event.__dictoffset__ == 0
    events = [getattr(codec, n) for n in codec.__all__ if n not in NOT_EVENTS[codec.__name__]]
    events = [c for c in events if inspect.isclass(c) and dataclasses.is_dataclass(c)]
    assert len(events) >= 5
    for cls in events:
        assert issubclass(cls, codec.Event), cls
        assert cls.__dictoffset__ == 0, cls


#: per codec: the first bytes of a client's opening (a frame that stays incomplete)
PARTIAL = {"amqpproto": b"AMQP\x00", "stompproto": b"CONNECT\naccept-ver", "wsframe": b"GET /ws HTTP/1.1\r\n"}


@pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)
def test_buffer_names_agree(codec):
    conn = codec.Connection(codec.SERVER)
    data = PARTIAL[codec.__name__]
    conn.receive_data(data)
    assert conn.next_event() is codec.NEED_DATA
    assert conn.buffered_bytes == len(data)
    assert conn.trailing_data == (data, False)
    conn.receive_data(b"")
    assert conn.trailing_data[1] is True
    buf = conn._buf  # inside: one ReceiveBuffer with the same method names
    assert type(buf).__name__ == "ReceiveBuffer" and callable(buf.feed) and isinstance(len(buf), int)


#: per codec: where a bug of ours is planted (a parser function every received byte goes through)
PARSER = {"amqpproto": (amqpproto.Connection, "_next"), "stompproto": (stompproto._readers.FrameReader, "next"),
          "wsframe": (wsframe.Connection, "_next")}


def _internal_error_hint(codec, hint):
    """The hint each codec gives for its own bug: the protocol's "internal error" close."""
    if codec is amqpproto:
        return isinstance(hint, amqpproto.ConnectionClose) and hint.reply_code == amqpproto.spec.INTERNAL_ERROR
    if codec is stompproto:
        return isinstance(hint, stompproto.Error) and hint.headers["message"] == "internal error"
    return isinstance(hint, wsframe.RejectConnection) and hint.status == 500  # still in the handshake


#: The bug is planted by patching a method; a compiled build's callers call the original natively.
PLANTABLE = pytest.mark.skipif(amqpproto.COMPILED, reason="a patched method of a mypyc-compiled class "
                               "is not what compiled callers run; the pure-Python run covers this")


@PLANTABLE
@pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("bug", [IndexError, KeyError, TypeError, AttributeError])
def test_an_internal_bug_surfaces_as_a_remote_protocol_error_with_an_internal_error_hint(codec, bug, monkeypatch):
    def broken(*args, **kwargs):
        raise bug("planted")

    monkeypatch.setattr(*PARSER[codec.__name__], broken)
    conn = codec.Connection(codec.SERVER)
    conn.receive_data(PARTIAL[codec.__name__])
    with pytest.raises(codec.RemoteProtocolError) as info:
        conn.next_event()
    assert "internal error" in str(info.value) and type(info.value.__cause__) is bug
    assert _internal_error_hint(codec, info.value.hint)
    with pytest.raises(codec.RemoteProtocolError) as again:  # the connection stays failed
        conn.next_event()
    assert str(again.value) == str(info.value)


@PLANTABLE
def test_an_internal_bug_on_an_open_websocket_closes_it_with_1011(monkeypatch):
    client = wsframe.Connection(wsframe.CLIENT)
    server = wsframe.Connection(wsframe.SERVER)
    server.receive_data(client.send(wsframe.Request(host="h", path="/ws")))
    server_request = server.next_event()
    client.receive_data(server.send(wsframe.AcceptConnection()))
    assert isinstance(server_request, wsframe.Request) and isinstance(client.next_event(), wsframe.AcceptConnection)
    monkeypatch.setattr(wsframe._readers.FrameReader, "next_frame", lambda self: [][0])
    server.receive_data(client.send(wsframe.TextMessage("hi")))
    with pytest.raises(wsframe.RemoteProtocolError) as info:
        server.next_event()
    assert info.value.hint == wsframe.CloseConnection(wsframe.CloseReason.INTERNAL_ERROR, "internal error")
    assert type(info.value.__cause__) is IndexError
