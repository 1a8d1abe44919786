"""STOMP over WebSocket (protocol "ws"): handshake, framing composition, closing, limits and
back-pressure, simulated with engine.testing (a client-role wsframe + stompproto pair)."""

from __future__ import annotations

import base64

import pytest
from enginetest_helpers import ack, bodies, connected, messages, new_net, send, subscribe
from hypothesis import given, settings
from hypothesis import strategies as st

import wsframe
from engine import Close, Config, Limits, Write
from engine.testing import WsSimClient
from stompproto import Connect, Connected, Disconnect, Error, Heartbeat, Message, Receipt, Subscribe

CONNECT_12 = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\nheart-beat:0,0\n\n\x00"


def ws_connected(net, version: str = "1.2", **kw) -> WsSimClient:
    client = net.connect_ws(**kw)
    assert client.accepted is not None, client.rejected
    frame = client.stomp_connect(version=version)
    assert isinstance(frame, Connected), frame
    client.events()
    return client


def raw_http(net, request: bytes, conn_id: int = 900) -> tuple[bytes, bool]:
    """Feed raw bytes to a fresh "ws" connection; return what the broker wrote and whether it closed."""
    broker = net.broker
    broker.connection_made(conn_id, "ws", ("127.0.0.1", 1), net.now)
    broker.data_received(conn_id, request, net.now)
    actions = broker.drain()
    out = b"".join(a.data for a in actions if isinstance(a, Write) and a.conn_id == conn_id)
    return out, Close(conn_id) in actions


def upgrade(path: str = "/ws", extra: str = "") -> bytes:
    key = base64.b64encode(b"0123456789abcdef").decode()
    return (f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode()


# -- handshake ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (("v12.stomp",), "v12.stomp"),
        (("v10.stomp", "v11.stomp", "v12.stomp"), "v12.stomp"),  # the highest, whatever the order
        (("v11.stomp", "v10.stomp"), "v11.stomp"),
        (("v10.stomp",), "v10.stomp"),
        (("amqp", "v11.stomp"), "v11.stomp"),
        ((), None),  # no subprotocol: STOMP all the same, as RabbitMQ
        (("mqtt",), None),  # unknown only: no subprotocol in the answer
    ],
)
def test_subprotocol_choice_and_stomp_works(offered, chosen):
    net = new_net()
    c = net.connect_ws(subprotocols=offered)
    assert c.accepted is not None and c.accepted.subprotocol == chosen
    assert isinstance(c.stomp_connect(), Connected)


def test_amqp_only_offer_gets_the_amqp_session():
    """An ``amqp``-only offer runs AMQP 0-9-1 inside (tests/engine/test_engine_amqp_ws.py drives it)."""
    net = new_net()
    c = net.connect_ws(subprotocols=("amqp",))
    assert c.accepted is not None and c.accepted.subprotocol == "amqp"
    c.send_message(b"AMQP\x00\x00\x09\x01", binary=True)
    net.run_until_idle()
    payload = b"".join(m.data for m in c.data_messages())
    assert payload[:1] == b"\x01" and b"PLAIN AMQPLAIN" in payload  # connection.start, binary


@pytest.mark.parametrize("path", ["/ws", "/ws?x=1", "/stomp/websocket"])
def test_endpoints(path):
    net = new_net()
    c = net.connect_ws(path=path)
    assert c.accepted is not None
    assert isinstance(c.stomp_connect(), Connected)


@pytest.mark.parametrize("path", ["/", "/other", "/wsx", "/ws/"])
def test_other_paths_get_404_and_close(path):
    net = new_net()
    c = net.connect_ws(path=path)
    assert c.rejected is not None and c.rejected.status == 404 and c.rejected.body
    assert c.server_closed and not net.broker.sessions


def test_plain_http_gets_426():
    net = new_net()
    out, closed = raw_http(net, b"GET /ws HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 426 ") and b"upgrade: websocket" in out.lower()
    assert closed and not net.broker.sessions


def test_bad_handshake_gets_the_codecs_answer():
    net = new_net()
    out, closed = raw_http(net, upgrade().replace(b"Sec-WebSocket-Key", b"X-Nothing"))
    assert out.startswith(b"HTTP/1.1 400 ") and closed
    out, closed = raw_http(net, b"garbage\r\n\r\n", conn_id=901)
    assert out.startswith(b"HTTP/1.1 400 ") and closed
    out, closed = raw_http(net, upgrade().replace(b"GET", b"POST"), conn_id=902)
    assert out.startswith(b"HTTP/1.1 405 ") and closed


def test_raw_upgrade_with_pipelined_frame():
    """Bytes right behind the request (the first frame) are kept and parsed after the 101."""
    net = new_net()
    client = wsframe.Connection(wsframe.CLIENT, rng=lambda n: b"\x01" * n, permessage_deflate=None)
    request = client.send(wsframe.Request(host="localhost", path="/ws", subprotocols=["v12.stomp"]))
    framer = wsframe.Connection(wsframe.CLIENT, rng=lambda n: b"\x02" * n, permessage_deflate=None,
                                handshake=False)
    out, closed = raw_http(net, request + framer.send(wsframe.TextMessage(CONNECT_12.decode())))
    assert not closed
    client.receive_data(out)
    assert isinstance(client.next_event(), wsframe.AcceptConnection)
    msg = client.next_event()
    assert isinstance(msg, wsframe.TextMessage) and msg.data.startswith("CONNECTED\n")


def test_eof_during_handshake_closes_quietly():
    net = new_net()
    broker = net.broker
    broker.connection_made(7, "ws", ("127.0.0.1", 1), net.now)
    broker.data_received(7, b"GET /ws HTTP/1.1\r\n", net.now)
    broker.data_received(7, b"", net.now)
    assert broker.drain() == [Close(7)]
    assert not broker.sessions


def test_permessage_deflate_is_off_by_default():
    """Issue 23.8: it was always accepted; RabbitMQ's Web-STOMP has compression off by default."""
    c = ws_connected(new_net(), deflate=True)
    assert c.accepted is not None and c.accepted.extensions == []


def test_websocket_origin_allow_list():
    """Issue 23.8: with ``[websocket] allowed_origins`` a page of another site gets 403; a listed
    origin and a client sending no Origin (not a browser) are let in."""
    cfg = Config()
    cfg.websocket.allowed_origins = ("https://app.example",)
    net = new_net(cfg)
    foreign = net.connect_ws(origin="https://evil.example")
    assert foreign.accepted is None and foreign.rejected is not None and foreign.rejected.status == 403
    assert foreign.server_closed
    assert ws_connected(net, origin="https://app.example").accepted is not None
    assert ws_connected(net).accepted is not None
    # without the option every origin is accepted (RabbitMQ's Web-STOMP checks none)
    assert ws_connected(new_net(), origin="https://evil.example").accepted is not None


def test_permessage_deflate_when_configured_and_offered():
    cfg = Config()
    cfg.websocket.compress = True
    net = new_net(cfg)
    c = ws_connected(net, deflate=True)
    assert c.accepted is not None and c.accepted.extensions and "permessage-deflate" in c.accepted.extensions[0]
    subscribe(c, "/queue/z", "1")
    send(c, "/queue/z", b"squeeze me " * 100)
    net.run_until_idle()
    assert bodies(c) == [b"squeeze me " * 100]


# -- framing composition --------------------------------------------------------------------------------
def test_several_frames_in_one_message():
    net = new_net()
    c = ws_connected(net)
    c.send_message(
        b"SUBSCRIBE\ndestination:/queue/m\nid:1\nreceipt:r\n\n\x00"
        b"SEND\ndestination:/queue/m\n\none\x00\nSEND\ndestination:/queue/m\n\ntwo\x00"
    )
    net.run_until_idle()
    assert [m.body for m in c.frames(Message)] == [b"one", b"two"]
    assert [r.headers["receipt-id"] for r in c.frames(Receipt)] == ["r"]


def test_connect_merged_with_other_frames():
    """CONNECT and SUBSCRIBE in one message (raw bytes: the client codec is bypassed)."""
    net = new_net()
    c = net.connect_ws()
    c.send_message(CONNECT_12 + b"SUBSCRIBE\ndestination:/queue/m\nid:1\nreceipt:r\n\n\x00")
    net.run_until_idle()
    payloads = [m.data for m in c.data_messages()]
    assert [p.split("\n", 1)[0] for p in payloads] == ["CONNECTED", "RECEIPT"]


def test_one_frame_split_across_messages():
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/s", "1")
    frame = b"SEND\ndestination:/queue/s\ncontent-length:5\n\nsp\x00it\x00"
    for part in (frame[:3], frame[3:20], frame[20:29], frame[29:]):
        c.send_message(part)
        net.run_until_idle()
    assert bodies(c) == [b"sp\x00it"]


def test_empty_message_is_not_eof():
    net = new_net()
    c = ws_connected(net)
    c.send_message(b"")
    c.send_message(b"", binary=True)
    subscribe(c, "/queue/e", "1")
    send(c, "/queue/e", b"still here")
    net.run_until_idle()
    assert bodies(c) == [b"still here"] and not c.server_closed


def test_binary_client_messages_are_accepted():
    net = new_net()
    c = net.connect_ws()
    c.send_message(CONNECT_12, binary=True)
    net.run_until_idle()
    (msg,) = c.data_messages()
    assert msg.data.startswith("CONNECTED\n")


def test_transport_chunking_both_ways():
    net = new_net(max_chunk=7, seed=3)
    c = ws_connected(net)
    tcp = connected(net)
    subscribe(c, "/queue/k", "1")
    net.run_until_idle()
    for i in range(20):
        send(tcp, "/queue/k", f"m{i}".encode() * 30)
    net.run_until_idle()
    assert bodies(c) == [f"m{i}".encode() * 30 for i in range(20)]


def test_output_is_text_when_utf8_else_binary():
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/b", "1")
    net.run_until_idle()
    c.ws_events.clear()
    send(c, "/queue/b", "héllo".encode())
    send(c, "/queue/b", b"\xff\xfe\x00raw")
    net.run_until_idle()
    kinds = [type(m) for m in c.data_messages()]
    assert kinds == [wsframe.TextMessage, wsframe.BytesMessage]
    assert bodies(c) == ["héllo".encode(), b"\xff\xfe\x00raw"]
    assert c.ws_error is None  # never an invalid text message


def test_each_stomp_frame_is_one_message():
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/o", "1")
    net.run_until_idle()
    c.ws_events.clear()
    for i in range(3):
        send(c, "/queue/o", b"%d" % i)
    net.run_until_idle()
    payloads = [m.data for m in c.data_messages()]
    assert len(payloads) == 3 and all(p.startswith("MESSAGE\n") and p.endswith("\x00") for p in payloads)


# -- heart-beats and pings ------------------------------------------------------------------------------
def test_server_heartbeats_are_messages_and_client_heartbeats_keep_it_alive():
    net = new_net(Config(limits=Limits(heartbeat=(1000, 1000))))
    c = net.connect_ws()
    frame = c.stomp_connect({"heart-beat": "1000,1000"})
    assert isinstance(frame, Connected) and frame.headers["heart-beat"] == "1000,1000"
    c.ws_events.clear()
    net.advance(10)
    beats = [m for m in c.data_messages() if m.data == "\n"]
    assert len(beats) >= 5
    assert not c.server_closed  # our auto heart-beats (also one message each) were understood


def test_silent_client_times_out_with_close_1000():
    net = new_net(Config(limits=Limits(heartbeat=(1000, 1000))))
    c = net.connect_ws(auto_heartbeat=False)
    c.stomp_connect({"heart-beat": "1000,1000"})
    net.advance(10)
    assert c.server_closed and c.close_frame is not None and c.close_frame.code == 1000


def test_ping_gets_pong_with_same_payload():
    net = new_net()
    c = ws_connected(net)
    c.send_ws(wsframe.Ping(b"are you there"))
    net.run_until_idle()
    pongs = [e for e in c.ws_events if isinstance(e, wsframe.Pong)]
    assert pongs == [wsframe.Pong(b"are you there")]
    c.send_ws(wsframe.Pong(b"unsolicited"))  # ignored
    net.run_until_idle()
    assert not c.server_closed


# -- closing ----------------------------------------------------------------------------------------------
def test_disconnect_receipt_before_close_frame():
    net = new_net()
    c = ws_connected(net)
    c.send(Disconnect({"receipt": "bye"}))
    net.run_until_idle()
    assert c.frames(Receipt)[0].headers["receipt-id"] == "bye"
    kinds = [type(e) for e in c.ws_events]
    assert kinds.index(wsframe.CloseConnection) > kinds.index(wsframe.TextMessage)
    last_message = c.data_messages()[-1]
    assert last_message.data.startswith("RECEIPT\n")
    assert c.close_frame is not None and c.close_frame.code == 1000
    assert c.server_closed and not net.broker.sessions


def test_server_close_waits_for_the_clients_answer():
    """RFC 6455 7.1.1: after its Close the server waits for the client's Close before closing TCP, so
    the client's answer does not meet a reset (browsers would report an unclean close)."""
    net = new_net()
    c = ws_connected(net)
    c.answer_close = False
    c.send(Disconnect({"receipt": "bye"}))
    net.run_until_idle()
    assert c.close_frame is not None and c.close_frame.code == 1000
    assert not c.server_closed  # still waiting for the answer
    c.ws_close(1000)  # the answer
    net.run_until_idle()
    assert c.server_closed and not net.broker.sessions


def test_server_close_gives_up_waiting_after_the_close_timeout():
    from engine.ws.session import CLOSE_TIMEOUT

    net = new_net()
    c = ws_connected(net)
    c.answer_close = False
    c.send(Disconnect())
    net.run_until_idle()
    assert c.close_frame is not None and not c.server_closed
    net.advance(CLOSE_TIMEOUT - 0.5)
    assert not c.server_closed
    net.advance(1.0)
    assert c.server_closed and not net.broker.sessions


def test_stomp_error_then_close_1000():
    net = new_net()
    c = net.connect_ws()
    c.send_message(b"SEND\ndestination:/queue/x\n\nbefore connect\x00")
    net.run_until_idle()
    assert c.data_messages()[0].data.startswith("ERROR\n") and c.close_frame is not None and c.close_frame.code == 1000
    assert c.server_closed


def test_bad_login_is_error_then_close():
    net = new_net()
    c = net.connect_ws()
    assert isinstance(c.stomp_connect({"login": "guest", "passcode": "wrong"}), Error)
    assert c.close_frame is not None and c.close_frame.code == 1000 and c.server_closed


@pytest.mark.parametrize("code", [1000, 1001, 4000])
def test_client_close_requeues_and_is_answered(code):
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/r", "1", ack="client-individual")
    send(c, "/queue/r", b"unacked")
    net.run_until_idle()
    assert bodies(c) == [b"unacked"]
    q = net.broker.model.vhosts["/"].queues["r"]
    c.ws_close(code)
    net.run_until_idle()
    assert c.close_frame is not None and c.close_frame.code == code  # the echo
    assert c.server_closed and not net.broker.sessions
    assert q.count == 1 and q.consumer_count() == 0
    other = ws_connected(net)
    subscribe(other, "/queue/r", "1")
    net.run_until_idle()
    m = messages(other)
    assert [x.body for x in m] == [b"unacked"] and m[0].headers.get("redelivered") == "true"


@pytest.mark.parametrize("how", ["eof", "drop"])
def test_transport_loss_requeues(how):
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/l", "1", ack="client")
    send(c, "/queue/l", b"m")
    net.run_until_idle()
    assert bodies(c) == [b"m"]
    c.close() if how == "eof" else c.drop()
    net.run_until_idle()
    assert not net.broker.sessions
    assert net.broker.model.vhosts["/"].queues["l"].count == 1


def test_acked_message_is_not_requeued_on_close():
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/a", "1", ack="client-individual")
    send(c, "/queue/a", b"done")
    net.run_until_idle()
    (m,) = messages(c)
    ack(c, m)
    net.run_until_idle()
    c.ws_close()
    net.run_until_idle()
    assert net.broker.model.vhosts["/"].queues["a"].count == 0


def test_unmasked_frame_is_close_1002():
    net = new_net()
    c = ws_connected(net)
    subscribe(c, "/queue/u", "1", ack="client")
    send(c, "/queue/u", b"m")
    net.run_until_idle()
    c.send_raw(b"\x81\x05hello")  # a client frame without a mask
    net.run_until_idle()
    assert c.close_frame is not None and c.close_frame.code == 1002
    assert c.server_closed and not net.broker.sessions
    assert net.broker.model.vhosts["/"].queues["u"].count == 1  # torn down as on EOF


def test_oversized_message_is_close_1009():
    net = new_net(Config(limits=Limits(max_frame_size=4096)))
    c = ws_connected(net)
    send(c, "/queue/big", b"x" * 5000)
    net.run_until_idle()
    assert c.close_frame is not None and c.close_frame.code == 1009
    assert c.server_closed
    assert "big" not in net.broker.model.vhosts["/"].queues


def test_invalid_utf8_text_is_close_1007():
    net = new_net()
    c = ws_connected(net)
    # a masked text frame (mask 0) whose payload is not UTF-8
    c.send_raw(b"\x81\x82\x00\x00\x00\x00\xff\xfe")
    net.run_until_idle()
    assert c.close_frame is not None and c.close_frame.code == 1007 and c.server_closed


def test_internal_error_closes_only_that_connection(monkeypatch):
    from engine.stomp.session import _HANDLERS

    def boom(self, frame):
        raise RuntimeError("bug")

    net = new_net(strict=False)
    victim, bystander = ws_connected(net), ws_connected(net)
    monkeypatch.setitem(_HANDLERS, Subscribe, boom)
    subscribe(victim, "/queue/i", "1")
    net.run_until_idle()
    assert victim.server_closed and victim.frames(Error)
    assert victim.close_frame is not None and victim.close_frame.code == 1000
    monkeypatch.undo()
    subscribe(bystander, "/queue/i", "1")
    send(bystander, "/queue/i", b"ok")
    net.run_until_idle()
    assert bodies(bystander) == [b"ok"]


# -- back-pressure ----------------------------------------------------------------------------------------
def test_reader_that_stops_reading_bounds_the_buffer():
    limit = 1 << 20
    net = new_net(Config(limits=Limits(max_outbound_buffer=limit)))
    slow = ws_connected(net)
    subscribe(slow, "/queue/bp", "1")
    net.run_until_idle()
    slow.stop_reading()
    publisher = connected(net)
    body = b"y" * 100_000
    n = 220  # 22 MB
    for i in range(n):
        send(publisher, "/queue/bp", body if i % 2 else body[:-1] + b"\xff")  # text and binary messages
        net.run_until_idle()
    session = net.broker.sessions[slow.conn_id]
    assert ("pause", slow.conn_id) not in net.log  # deliveries stop; reading goes on (ACKs arrive)
    assert slow.unread <= limit + 101_000  # at most one message past the limit
    assert session.outbound == slow.unread  # what is counted is what the socket has to carry
    q = net.broker.model.vhosts["/"].queues["bp"]
    assert q.count >= n - 12  # the rest waits in the queue, not in the connection's buffer
    slow.start_reading()
    net.run_until_idle()
    assert len(messages(slow)) == n and not slow.paused
    assert q.count == 0


# -- cross-protocol -------------------------------------------------------------------------------------
def test_ws_and_tcp_clients_exchange_on_queue_and_topic():
    net = new_net()
    w = ws_connected(net)
    t = connected(net)
    subscribe(w, "/queue/from-tcp", "q")
    subscribe(t, "/queue/from-ws", "q")
    subscribe(w, "/topic/news.*", "t")
    subscribe(t, "/topic/news.*", "t")
    net.run_until_idle()
    send(t, "/queue/from-tcp", b"hello ws")
    send(w, "/queue/from-ws", b"hello tcp", **{"content-type": "text/plain"})
    send(t, "/topic/news.a", b"tcp news")
    send(w, "/topic/news.b", b"ws news")
    net.run_until_idle()
    got_w = {(m.headers["destination"], m.body) for m in messages(w)}
    got_t = {(m.headers["destination"], m.body) for m in messages(t)}
    assert got_w == {("/queue/from-tcp", b"hello ws"), ("/topic/news.a", b"tcp news"), ("/topic/news.b", b"ws news")}
    assert got_t == {("/queue/from-ws", b"hello tcp"), ("/topic/news.a", b"tcp news"), ("/topic/news.b", b"ws news")}


def test_same_inputs_same_bytes():
    def run() -> list:
        net = new_net(seed=5, max_chunk=50)
        w = ws_connected(net, deflate=True)
        t = connected(net)
        subscribe(w, "/queue/d", "1", ack="client")
        for i in range(10):
            send(t, "/queue/d", b"%d" % i * 40)
        net.run_until_idle()
        w.send(Heartbeat())
        w.ws_close()
        net.run_until_idle()
        return net.log

    assert run() == run()


def test_connect_frame_version_is_negotiated_by_stomp_not_subprotocol():
    net = new_net()
    c = net.connect_ws(subprotocols=("v10.stomp",))
    c.send(Connect({"accept-version": "1.0,1.1", "host": "/", "login": "guest", "passcode": "guest"}))
    net.run_until_idle()
    (frame,) = c.frames(Connected)
    assert frame.headers["version"] == "1.1"


def test_incomplete_upgrade_request_times_out():
    net = new_net()
    broker = net.broker
    broker.connection_made(7, "ws", ("127.0.0.1", 1), net.now)
    broker.data_received(7, b"GET /ws HTTP/1.1\r\nHost: x\r\n", net.now)
    assert broker.drain() == [] and broker.get_timer() is not None
    broker.handle_timer(net.now + 9)  # handshake_timeout: 10 s, as RabbitMQ's
    assert broker.drain() == [] and 7 in broker.sessions
    broker.handle_timer(net.now + 11)
    assert broker.drain() == [Close(7)] and not broker.sessions


def test_handshake_deadline_is_disarmed_after_upgrade():
    net = new_net()
    c = ws_connected(net)
    net.advance(120)
    assert not c.server_closed and net.broker.get_timer() is None


# -- random input ----------------------------------------------------------------------------------------
def masked_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame with mask key 0 (the payload is sent as is), any opcode or FIN bit."""
    n = len(payload)
    length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return bytes([(0x80 if fin else 0) | opcode]) + length + b"\x00\x00\x00\x00" + payload


STOMP_PIECES = [
    CONNECT_12, b"SUBSCRIBE\ndestination:/queue/f\nid:1\nack:client\n\n\x00",
    b"SEND\ndestination:/queue/f\n\nbody\x00", b"ACK\nid:T_1@@1\n\n\x00", b"DISCONNECT\nreceipt:r\n\n\x00",
    b"\n", b"SEND\ndestination:/topic/t\ncontent-length:3\n\na\x00b\x00", b"BOGUS\n\n\x00",
]
ws_item = st.one_of(
    st.tuples(st.sampled_from([1, 2]), st.lists(st.sampled_from(STOMP_PIECES), max_size=3).map(b"".join),
              st.booleans()),
    st.tuples(st.sampled_from([0, 1, 2, 3, 8, 9, 10, 15]), st.binary(max_size=20), st.booleans()),
)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(ws_item, max_size=10), garbage=st.binary(max_size=12), advance=st.floats(0, 3),
       eof=st.booleans())
def test_random_websocket_input_never_breaks_the_broker(items, garbage, advance, eof):
    net = new_net(max_chunk=16)
    bystander = ws_connected(net)
    subscribe(bystander, "/queue/safe", "s")
    fuzzer = net.connect_ws(deflate=bool(garbage[:1] == b"\x00"))
    net.run_until_idle()
    fuzzer.send_raw(b"".join(masked_frame(op, p, fin) for op, p, fin in items) + garbage)
    net.run_until_idle()
    net.advance(advance)
    fuzzer.close() if eof else fuzzer.drop()
    net.run_until_idle()
    assert fuzzer.conn_id not in net.broker.sessions
    send(bystander, "/queue/safe", b"ok")
    net.run_until_idle()
    assert bodies(bystander) == [b"ok"]
    assert net.broker.internal_errors == []
    f = net.broker.model.vhosts["/"].queues.get("f")
    assert f is None or f.consumer_count() == 0  # the fuzzer's subscription went with it


@settings(max_examples=60, deadline=None)
@given(request=st.one_of(st.binary(max_size=200), st.sampled_from([upgrade(), upgrade("/x")]).flatmap(
    lambda r: st.integers(0, len(r)).map(lambda i: r[:i] + b"\x00" + r[i:]))))
def test_random_handshake_bytes(request):
    net = new_net()
    out, closed = raw_http(net, request)
    assert net.broker.internal_errors == []
    if request == b"":
        assert closed and out == b""  # EOF
    elif out and not out.startswith(b"HTTP/1.1 101 "):  # (a 101 may be followed by a Close for trailing junk)
        assert out.startswith(b"HTTP/1.1 4") and closed
    elif not out:
        assert not closed  # waiting for the rest of the request


def test_disconnect_receipt_waits_for_the_store_then_closes():
    from engine.testing import FakeStore

    net = new_net(store=FakeStore(), auto_sync=False)
    c = ws_connected(net)
    send(c, "/queue/p", b"keep me", persistent="true")
    c.send(Disconnect({"receipt": "bye"}))
    net.run_until_idle()
    assert not c.frames(Receipt) and c.close_frame is None and not c.server_closed
    net.complete_syncs()
    assert c.frames(Receipt)[0].headers["receipt-id"] == "bye"
    assert c.close_frame is not None and c.close_frame.code == 1000 and c.server_closed
    assert net.broker.model.vhosts["/"].queues["p"].count == 1
