"""wsframe: a sans-IO WebSocket codec (RFC 6455, RFC 7692), client and server roles.

The opening handshake runs on h11; after it, framing needs no per-byte Python loop
(masking has an optional cffi accelerator). A broker session, server role::

    conn = Connection(SERVER, max_message_size=1 << 20)
    conn.receive_data(sock_bytes)                  # b"" on EOF
    while (event := conn.next_event()) is not NEED_DATA:
        if isinstance(event, Request):
            if event.path != "/ws":
                out = conn.send(RejectConnection(404, body=b"not found"))
            else:
                proto = choose_subprotocol(event.subprotocols, STOMP_SUBPROTOCOLS)
                out = conn.send(AcceptConnection(subprotocol=proto))  # permessage-deflate as negotiated
        elif isinstance(event, (TextMessage, BytesMessage)):
            ...                                    # a whole message (deliver_fragments=False)
        elif isinstance(event, Ping):
            out = conn.send(event.response())
        elif isinstance(event, CloseConnection):
            out = conn.send(event.response())      # then close the socket

On ``RemoteProtocolError`` send ``exc.hint`` (a RejectConnection during the handshake, a
Close 1002/1007/1009 afterwards) if it is not None, then close the socket.
"""
from . import _connection
from ._connection import Connection
from ._deflate import PerMessageDeflate
from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ._events import (
    NEED_DATA,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    CloseReason,
    Event,
    NeedData,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
    is_wire_close_code,
)
from ._handshake import accept_key, choose_subprotocol
from ._state import CLIENT, SERVER, ConnectionState, Role

#: Subprotocols of the STOMP-over-WebSocket convention, best first.
STOMP_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
AMQP_SUBPROTOCOL = "amqp"

#: True when the per-message modules are the mypyc-compiled build (``pip install .`` with a C
#: compiler), False when they run as pure Python (README: "Compiled codecs").
COMPILED: bool = not _connection.__file__.endswith(".py")

__all__ = [
    "COMPILED",
    "AMQP_SUBPROTOCOL",
    "CLIENT",
    "NEED_DATA",
    "SERVER",
    "STOMP_SUBPROTOCOLS",
    "AcceptConnection",
    "BytesMessage",
    "CloseConnection",
    "CloseReason",
    "Connection",
    "ConnectionState",
    "Event",
    "LocalProtocolError",
    "NeedData",
    "PerMessageDeflate",
    "Ping",
    "Pong",
    "ProtocolError",
    "RejectConnection",
    "RemoteProtocolError",
    "Request",
    "Role",
    "TextMessage",
    "accept_key",
    "choose_subprotocol",
    "is_wire_close_code",
]
