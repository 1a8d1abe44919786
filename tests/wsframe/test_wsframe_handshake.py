"""Opening handshake (RFC 6455 section 4) on h11, both roles, against wsproto too."""
import base64

import pytest
import wsproto
import wsproto.events as wpe
from wsframe_helpers import chunkings, drain, frame

from wsframe import (
    CLIENT,
    NEED_DATA,
    SERVER,
    STOMP_SUBPROTOCOLS,
    AcceptConnection,
    CloseConnection,
    Connection,
    ConnectionState,
    LocalProtocolError,
    RejectConnection,
    RemoteProtocolError,
    Request,
    TextMessage,
    accept_key,
    choose_subprotocol,
)

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="


def upgrade_request(path=b"/ws", extra=b"", version=b"13", key=KEY, method=b"GET") -> bytes:
    return (
        method + b" " + path + b" HTTP/1.1\r\nHost: broker.example:15674\r\nUpgrade: websocket\r\n"
        b"Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
        b"Sec-WebSocket-Version: " + version + b"\r\n" + extra + b"\r\n"
    )


def test_accept_key_rfc_example():
    # RFC 6455 section 1.3 worked example
    assert accept_key(KEY) == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_server_parses_request_in_every_feeding_mode():
    raw = upgrade_request(
        extra=b"Origin: http://app.example\r\nSec-WebSocket-Protocol: v10.stomp, v11.stomp\r\n"
        b"Sec-WebSocket-Protocol: v12.stomp\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits, x-other\r\n"
    )
    seen = []
    for chunks in chunkings(raw):
        srv = Connection(SERVER)
        (req,) = drain(srv, chunks)
        seen.append(req)
    assert seen[0] == seen[1] == seen[2]
    req = seen[0]
    assert req.path == "/ws" and req.host == "broker.example:15674" and req.origin == "http://app.example"
    assert req.subprotocols == ["v10.stomp", "v11.stomp", "v12.stomp"]
    assert req.extensions == ["permessage-deflate; client_max_window_bits", "x-other"]
    assert (b"sec-websocket-key", KEY) in req.headers
    assert choose_subprotocol(req.subprotocols, STOMP_SUBPROTOCOLS) == "v12.stomp"
    assert choose_subprotocol(["amqp"], STOMP_SUBPROTOCOLS) is None


def test_server_accept_response_and_frames_in_the_same_chunk_are_kept():
    srv = Connection(SERVER, permessage_deflate=None)
    srv.receive_data(upgrade_request(extra=b"Sec-WebSocket-Protocol: v11.stomp\r\n") + frame(1, b"CONNECT") + frame(1, b"SE"))
    req = srv.next_event()
    assert isinstance(req, Request) and srv.next_event() is NEED_DATA
    srv.receive_data(frame(1, b"ND"))  # more bytes before the broker decided
    out = srv.send(AcceptConnection(subprotocol="v11.stomp", headers=[(b"server", b"sansmq")]))
    assert out.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in out
    assert b"sec-websocket-protocol: v11.stomp\r\n" in out and b"server: sansmq\r\n" in out
    assert b"extensions" not in out
    assert drain(srv, []) == [TextMessage("CONNECT"), TextMessage("SE"), TextMessage("ND")]
    assert srv.state is ConnectionState.OPEN and srv.subprotocol == "v11.stomp"


def test_server_refuses_a_subprotocol_that_was_not_offered():
    srv = Connection(SERVER)
    drain(srv, [upgrade_request(extra=b"Sec-WebSocket-Protocol: v12.stomp\r\n")])
    with pytest.raises(LocalProtocolError):
        srv.send(AcceptConnection(subprotocol="amqp"))
    with pytest.raises(LocalProtocolError):
        srv.send(AcceptConnection(headers=[(b"Sec-WebSocket-Accept", b"forged")]))


def test_broker_rejects_other_paths_with_404():
    srv = Connection(SERVER)
    (req,) = drain(srv, [upgrade_request(path=b"/other")])
    assert req.path == "/other"
    out = srv.send(RejectConnection(404, body=b"no such endpoint"))
    assert out.startswith(b"HTTP/1.1 404 Not Found\r\n") and out.endswith(b"\r\n\r\nno such endpoint")
    assert b"content-length: 16\r\n" in out and srv.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        srv.send(TextMessage("x"))


@pytest.mark.parametrize(
    "raw,status",
    [
        (b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", 426),  # a plain HTTP request
        (upgrade_request(version=b"8"), 426),
        (upgrade_request(key=b"short"), 400),
        (upgrade_request(key=base64.b64encode(b"x" * 15)), 400),
        (upgrade_request(extra=b"Sec-WebSocket-Key: " + KEY + b"\r\n"), 400),  # two keys
        (upgrade_request(method=b"POST"), 405),
        (upgrade_request().replace(b"HTTP/1.1", b"HTTP/1.0"), 426),
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (upgrade_request(extra=b"Content-Length: 2\r\n") + b"hi", 400),
    ],
)
def test_bad_requests_raise_with_a_rejection_hint(raw, status):
    srv = Connection(SERVER)
    srv.receive_data(raw)
    with pytest.raises(RemoteProtocolError) as err:
        srv.next_event()
    hint = err.value.hint
    assert isinstance(hint, RejectConnection) and hint.status == status
    out = srv.send(hint)  # the hint is sendable as is
    assert out.startswith(b"HTTP/1.1 %d " % status) and srv.state is ConnectionState.CLOSED
    if status == 426:
        assert b"upgrade: websocket\r\n" in out and b"sec-websocket-version: 13\r\n" in out


def test_oversized_request_head_is_431():
    srv = Connection(SERVER, max_handshake_size=1024)
    srv.receive_data(b"GET /ws HTTP/1.1\r\nX-Pad: " + b"a" * 2000)
    with pytest.raises(RemoteProtocolError) as err:
        srv.next_event()
    assert err.value.hint.status == 431


def test_origin_check_hook():
    allowed = {"https://good.example"}
    good = Connection(SERVER, origin_check=lambda origin: origin in allowed)
    assert isinstance(drain(good, [upgrade_request(extra=b"Origin: https://good.example\r\n")])[0], Request)
    bad = Connection(SERVER, origin_check=lambda origin: origin in allowed)
    bad.receive_data(upgrade_request(extra=b"Origin: https://evil.example\r\n"))
    with pytest.raises(RemoteProtocolError) as err:
        bad.next_event()
    assert err.value.hint.status == 403


def test_eof_during_handshake_is_1006():
    srv = Connection(SERVER)
    assert drain(srv, [upgrade_request()[:30]], eof=True) == [CloseConnection(1006, "connection lost without a Close frame")]
    assert srv.state is ConnectionState.CLOSED


def test_client_and_server_roles_together_fed_bytewise():
    nonce = iter([b"K" * 16])
    cli = Connection(CLIENT, rng=lambda n: next(nonce) if n == 16 else b"mask")
    srv = Connection(SERVER)
    req_bytes = cli.send(Request(host="localhost", path="/ws?x=1", subprotocols=["v12.stomp", "v11.stomp"]))
    assert cli.state is ConnectionState.HANDSHAKE
    (req,) = drain(srv, [req_bytes[i : i + 1] for i in range(len(req_bytes))])
    assert req.path == "/ws?x=1" and req.subprotocols == ["v12.stomp", "v11.stomp"]
    assert req.extensions == ["permessage-deflate; client_max_window_bits"]
    resp = srv.send(AcceptConnection(subprotocol="v12.stomp")) + srv.send(TextMessage("CONNECTED"))
    events = drain(cli, [resp[i : i + 1] for i in range(len(resp))])
    assert isinstance(events[0], AcceptConnection) and events[0].subprotocol == "v12.stomp"
    assert events[0].extensions == ["permessage-deflate"]
    assert events[1:] == [TextMessage("CONNECTED")]
    assert cli.extension == srv.extension is not None
    assert drain(srv, [cli.send(TextMessage("SEND"))]) == [TextMessage("SEND")]


def _client_with_pending_request(**kw):
    cli = Connection(CLIENT, rng=lambda n: b"K" * n, **kw)
    cli.send(Request(host="h", path="/ws", subprotocols=["v12.stomp"]))
    return cli, accept_key(base64.b64encode(b"K" * 16))


@pytest.mark.parametrize(
    "headers",
    [
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAA\r\n",
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: {acc}\r\n",
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {acc}\r\nSec-WebSocket-Protocol: amqp\r\n",
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {acc}\r\nSec-WebSocket-Extensions: x-unknown\r\n",
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {acc}\r\nSec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=20\r\n",
    ],
)
def test_client_rejects_bad_101(headers):
    cli, acc = _client_with_pending_request()
    cli.receive_data(b"HTTP/1.1 101 Switching Protocols\r\n" + headers.replace(b"{acc}", acc) + b"\r\n")
    with pytest.raises(RemoteProtocolError) as err:
        cli.next_event()
    assert err.value.hint is None


def test_client_gets_rejection_with_body_even_without_content_length():
    cli, _ = _client_with_pending_request()
    events = drain(cli, [b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\n", b"gone!"])
    assert events == [RejectConnection(404, [(b"content-length", b"5")], b"gone!")]
    assert cli.state is ConnectionState.CLOSED
    cli, _ = _client_with_pending_request()
    events = drain(cli, [b"HTTP/1.1 426 Upgrade Required\r\nConnection: close\r\n\r\nuse ", b"websocket"], eof=True)
    assert events[0] == RejectConnection(426, [(b"connection", b"close")], b"use websocket")


def test_client_request_misuse():
    cli = Connection(CLIENT)
    with pytest.raises(LocalProtocolError):
        cli.send(TextMessage("not open yet"))
    with pytest.raises(LocalProtocolError):
        cli.send(Request(host="h", extensions=["permessage-deflate"]))
    with pytest.raises(LocalProtocolError):
        Connection(SERVER).send(Request(host="h"))


@pytest.mark.parametrize("chunked", [False, True])
def test_wsproto_client_against_wsframe_server(chunked):
    wc = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    srv = Connection(SERVER, permessage_deflate=None)
    data = wc.send(wpe.Request(host="localhost", target="/ws", subprotocols=["v10.stomp", "v12.stomp"]))
    (req,) = drain(srv, chunkings(data)[1] if chunked else [data])
    assert req.subprotocols == ["v10.stomp", "v12.stomp"]
    wc.receive_data(srv.send(AcceptConnection(subprotocol=choose_subprotocol(req.subprotocols, STOMP_SUBPROTOCOLS))))
    (accepted,) = list(wc.events())
    assert isinstance(accepted, wpe.AcceptConnection) and accepted.subprotocol == "v12.stomp"


def test_wsframe_client_against_wsproto_server_reject():
    ws = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    cli = Connection(CLIENT)
    ws.receive_data(cli.send(Request(host="localhost", path="/nope", subprotocols=["v12.stomp"])))
    (req,) = list(ws.events())
    assert req.target == "/nope" and req.subprotocols == ["v12.stomp"]
    out = ws.send(wpe.RejectConnection(status_code=404, headers=[(b"content-length", b"4")], has_body=True))
    out += ws.send(wpe.RejectData(b"nope"))
    assert drain(cli, [out]) == [RejectConnection(404, [(b"content-length", b"4")], b"nope")]
