"""Caller misuse (LocalProtocolError) and the rarer peer errors of each layer."""
import zlib

import pytest
from wsframe_helpers import close_payload, drain, frame

import wsframe
from wsframe import (
    CLIENT,
    SERVER,
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Connection,
    ConnectionState,
    LocalProtocolError,
    PerMessageDeflate,
    RejectConnection,
    RemoteProtocolError,
    Request,
    TextMessage,
)
from wsframe._deflate import client_accept, server_negotiate

UPGRADE = (
    b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def opened_server(**kw):
    return Connection(SERVER, handshake=False, permessage_deflate=None, **kw)


def requested_server(**kw):
    srv = Connection(SERVER, **kw)
    drain(srv, [UPGRADE])
    assert srv.state is ConnectionState.HANDSHAKE
    return srv


#: A payload of the wrong type: the compiled build (mypyc) checks the declared types, so there the
#: event's construction raises TypeError before send() sees it.
WRONG_TYPE = (LocalProtocolError, TypeError) if wsframe.COMPILED else LocalProtocolError


def test_wrong_payload_types():
    srv = opened_server()
    with pytest.raises(WRONG_TYPE):
        srv.send(TextMessage(b"bytes"))
    with pytest.raises(WRONG_TYPE):
        srv.send(BytesMessage("text"))
    with pytest.raises(LocalProtocolError):
        srv.send(CloseConnection(None, "reason without a code"))
    assert srv.state is ConnectionState.OPEN


def test_data_after_eof_is_misuse():
    srv = opened_server()
    srv.receive_data(b"")
    srv.receive_data(b"")  # repeating EOF is harmless
    with pytest.raises(LocalProtocolError):
        srv.receive_data(b"x")


def test_peer_closing_twice_is_a_protocol_error():
    data = frame(8, close_payload(1000)) + frame(8, close_payload(1000))
    assert drain(opened_server(), [data]) == [CloseConnection(1000, ""), ("error", 1002)]


def test_single_frame_over_the_message_limit():
    assert drain(opened_server(max_message_size=10), [frame(1, b"x" * 11)]) == [("error", 1009)]
    assert drain(opened_server(max_message_size=10), [frame(1, b"x" * 10)]) == [TextMessage("x" * 10)]


def test_eof_while_the_broker_decides_and_while_the_client_waits():
    srv = requested_server()
    assert drain(srv, [], eof=True) == [CloseConnection(1006, "connection lost without a Close frame")]
    cli = Connection(CLIENT)
    cli.send(Request(host="h"))
    assert drain(cli, [], eof=True)[0].code == 1006


@pytest.mark.parametrize(
    "accept",
    [
        AcceptConnection(extensions=["permessage-deflate"]),  # only None or [] are meaningful
        AcceptConnection(headers=[(b"x-bad", b"a\r\nb")]),  # h11 refuses the header value
    ],
)
def test_bad_accept(accept):
    srv = requested_server()
    with pytest.raises(LocalProtocolError):
        srv.send(accept)


@pytest.mark.parametrize(
    "reject",
    [
        RejectConnection(200),
        RejectConnection(101),
        RejectConnection(404, headers=[(b"Content-Length", b"3")], body=b"abc"),
        RejectConnection(404, headers=[(b"x-bad", b"a\r\nb")]),
    ],
)
def test_bad_reject(reject):
    srv = requested_server()
    with pytest.raises(LocalProtocolError):
        srv.send(reject)


def test_reject_with_an_unregistered_status_and_own_headers():
    srv = requested_server()
    out = srv.send(RejectConnection(499, headers=[(b"content-type", b"application/json"), (b"connection", b"keep-alive")], body=b"{}"))
    assert out.startswith(b"HTTP/1.1 499 \r\n")
    assert out.count(b"content-type") == 1 and b"connection: keep-alive" in out and b"close" not in out


@pytest.mark.parametrize(
    "request_",
    [
        Request(host="h", subprotocols=["v12.stomp, amqp"]),
        Request(host="h", subprotocols=[""]),
        Request(host="h", headers=[(b"x-bad", b"a\r\nb")]),
        Request(host="h", headers=[(b"Sec-WebSocket-Key", b"mine")]),
    ],
)
def test_bad_client_request(request_):
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT).send(request_)


def _client_waiting(**kw):
    cli = Connection(CLIENT, rng=lambda n: b"\x00" * n, **kw)
    cli.send(Request(host="h", subprotocols=["v12.stomp"]))
    return cli


def test_client_skips_interim_responses_and_rejects_unoffered_extensions():
    from wsframe import accept_key

    key = accept_key(b"AAAAAAAAAAAAAAAAAAAAAA==")
    ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + key + b"\r\n"
    cli = _client_waiting()
    events = drain(cli, [b"HTTP/1.1 100 Continue\r\n\r\n" + ok + b"\r\n"])
    assert [type(e) for e in events] == [AcceptConnection] and cli.extension is None
    cli = _client_waiting(permessage_deflate=None)
    cli.receive_data(ok + b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
    with pytest.raises(RemoteProtocolError):
        cli.next_event()
    assert cli.state is ConnectionState.HANDSHAKE_FAILED


def test_client_caps_the_rejection_body():
    cli = _client_waiting(max_handshake_size=100)
    cli.receive_data(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 500\r\n\r\n" + b"x" * 500)
    with pytest.raises(RemoteProtocolError):
        cli.next_event()


def test_deflate_parameter_validation():
    with pytest.raises(ValueError):
        PerMessageDeflate(server_max_window_bits=16)
    with pytest.raises(ValueError):
        PerMessageDeflate(client_max_window_bits=7)
    assert server_negotiate(["permessage-deflate; server_no_context_takeover=1"], PerMessageDeflate()) is None
    offered = PerMessageDeflate(client_max_window_bits=10, server_no_context_takeover=True)
    with pytest.raises(ValueError):
        client_accept(["permessage-deflate; server_no_context_takeover; client_max_window_bits=11"], offered)
    with pytest.raises(ValueError):
        client_accept(["permessage-deflate"], offered)  # dropped server_no_context_takeover


def test_deflate_stream_with_bfinal():
    # a sender may end a message's stream with a final block; the next message starts afresh
    def final_block(data):
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(zlib.Z_FINISH)

    srv = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate())
    data = frame(1, final_block(b"first"), rsv=4) + frame(1, final_block(b"second"), rsv=4)
    assert drain(srv, [data]) == [TextMessage("first"), TextMessage("second")]
    # but data after the final block inside one message is corrupt
    srv = Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate())
    data = frame(1, final_block(b"a"), fin=False, rsv=4) + frame(0, b"\x00\x00")
    assert drain(srv, [data]) == [("error", 1007)]


def test_international_host_names():
    out = Connection(CLIENT).send(Request(host="bücher.example"))
    assert b"\r\nhost: xn--bcher-kva.example\r\n" in out.lower()
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT).send(Request(host="ü" * 70))
