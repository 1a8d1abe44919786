"""STOMP over WebSocket end to end: the real `websockets` client against every server kind.

Each server kind runs in-process (``servers.running``) with a "ws" and a "stomp" listener on
ephemeral ports; the ws listener hands raw socket bytes to the broker's "ws" session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from e2ekit import RawStomp, WsStomp, frame, uid
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import servers
from engine import Config

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def ws_server(kind: str) -> Iterator[servers.Running]:
    listeners = [("ws", "127.0.0.1", 0), ("stomp", "127.0.0.1", 0)]
    config = Config()
    config.websocket.compress = True  # the real client's deflate stays exercised (off by default)
    with servers.running(kind, listeners, config=config) as srv:
        yield srv


def url(srv: servers.Running, path: str = "/ws") -> str:
    host, port = srv.address("ws")
    return f"ws://{host}:{port}{path}"


@pytest.fixture
def open_ws(ws_server: servers.Running) -> Iterator:
    with contextlib.ExitStack() as stack:

        def make(path: str = "/ws", subprotocols: tuple[str, ...] = ("v12.stomp",)) -> WsStomp:
            ws = connect(url(ws_server, path), subprotocols=list(subprotocols), open_timeout=TIMEOUT)
            return WsStomp(stack.enter_context(ws))

        yield make


def test_subscribe_publish_ack_and_disconnect(open_ws) -> None:
    c = open_ws(subprotocols=("v10.stomp", "v12.stomp"))
    assert c.ws.subprotocol == "v12.stomp"
    assert "permessage-deflate" in c.ws.response.headers.get("Sec-WebSocket-Extensions", "")  # websockets offers it, compress = true
    assert c.connect()["version"] == "1.2"
    q = f"/queue/{uid('q')}"
    c.receipt("SUBSCRIBE", {"destination": q, "id": "s1", "ack": "client-individual"})
    c.receipt("SEND", {"destination": q, "content-type": "text/plain"}, "héllo".encode())
    headers, body = c.expect("MESSAGE")
    assert body == "héllo".encode() and headers["subscription"] == "s1"
    c.receipt("ACK", {"id": headers["ack"]})
    c.send("SEND", {"destination": q}, b"\xff\xfe binary", binary=True)  # not UTF-8: comes back as a binary message
    msg = c.ws.recv(timeout=TIMEOUT)
    assert isinstance(msg, bytes) and msg.startswith(b"MESSAGE\n") and b"\xff\xfe binary" in msg
    c.send("DISCONNECT", {"receipt": "bye"})
    assert c.expect("RECEIPT")[0]["receipt-id"] == "bye"
    with pytest.raises(ConnectionClosed) as info:
        c.ws.recv(timeout=TIMEOUT)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1000


def test_frame_split_across_two_messages(open_ws) -> None:
    c = open_ws()
    c.connect()
    q = f"/queue/{uid('split')}"
    c.receipt("SUBSCRIBE", {"destination": q, "id": "1"})
    data = frame("SEND", {"destination": q, "receipt": "split"}, b"two halves")
    c.ws.send(data[:17].decode())
    c.ws.send(data[17:], text=False)  # the second half as a binary message
    got = {}
    for _ in range(2):
        command, headers, body = c.read_frame()
        got[command] = (headers, body)
    assert got["RECEIPT"][0]["receipt-id"] == "split"
    assert got["MESSAGE"][1] == b"two halves"


def test_other_path_is_404(ws_server) -> None:
    with pytest.raises(InvalidStatus) as info:
        with connect(url(ws_server, "/other"), subprotocols=["v12.stomp"], open_timeout=TIMEOUT):
            pass
    assert info.value.response.status_code == 404


def test_ping_is_answered(open_ws) -> None:
    c = open_ws()
    c.connect()
    assert c.ws.ping(b"hi").wait(TIMEOUT)


def test_client_close_requeues_for_a_tcp_consumer(open_ws, ws_server) -> None:
    c = open_ws()
    c.connect()
    q = f"/queue/{uid('requeue')}"
    c.receipt("SUBSCRIBE", {"destination": q, "id": "1", "ack": "client"})
    c.receipt("SEND", {"destination": q}, b"not acked")
    c.expect("MESSAGE")
    c.ws.close(1000)
    tcp = RawStomp(ws_server.address("stomp"))
    try:
        tcp.connect()
        tcp.send_frame("SUBSCRIBE", {"destination": q, "id": "t"})
        command, headers, body = tcp.read_frame()
        assert (command, body, headers.get("redelivered")) == ("MESSAGE", b"not acked", "true")
    finally:
        tcp.close()


def test_ws_and_tcp_exchange_on_topic(open_ws, ws_server) -> None:
    c = open_ws()
    c.connect()
    topic = f"/topic/{uid('news')}"
    c.receipt("SUBSCRIBE", {"destination": topic, "id": "w"})
    tcp = RawStomp(ws_server.address("stomp"))
    try:
        tcp.connect()
        tcp.send_frame("SUBSCRIBE", {"destination": topic, "id": "t", "receipt": "sub"})
        assert tcp.read_frame()[0] == "RECEIPT"
        tcp.send_frame("SEND", {"destination": topic}, b"from tcp")
        c.send("SEND", {"destination": topic}, b"from ws")
        got_ws = {c.expect("MESSAGE")[1] for _ in range(2)}
        got_tcp = {tcp.read_frame()[2] for _ in range(2)}
        assert got_ws == got_tcp == {b"from tcp", b"from ws"}
    finally:
        tcp.close()


def test_large_messages_both_ways(open_ws) -> None:
    c = open_ws()
    c.connect()
    q = f"/queue/{uid('big')}"
    c.receipt("SUBSCRIBE", {"destination": q, "id": "1"})
    text_body = ("ünïcode " * 60_000).encode()  # ~0.5 MB, compressed by permessage-deflate both ways
    binary_body = bytes(range(256)) * 2000
    c.send("SEND", {"destination": q}, text_body)
    c.send("SEND", {"destination": q, "content-length": str(len(binary_body))}, binary_body, binary=True)
    assert c.expect("MESSAGE")[1] == text_body
    assert c.expect("MESSAGE")[1] == binary_body
