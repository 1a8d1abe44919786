"""The three codecs share one shape: a Role Enum with CLIENT/SERVER constants, NEED_DATA as the one
member of a NeedData Enum, Enum states, and state tables keyed (sender role, state, event type)."""

from __future__ import annotations

import enum

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
