"""AMQP 0-9-1 over WebSocket (protocol "ws", subprotocol ``amqp``, as LavinMQ), simulated with
engine.testing: a client-role wsframe connection carrying a client-role amqpproto connection."""

from __future__ import annotations

from typing import Any

import pytest
from enginetest_helpers import new_net

import amqpproto as A
import wsframe
from amqpproto import BasicProperties, spec
from engine.testing import AmqpSimClient, SimNetwork, WsSimClient
from stompproto import Connected


class WsAmqpSimClient(WsSimClient, AmqpSimClient):
    """WsSimClient's framing around AmqpSimClient's codec (message payloads feed amqpproto).
    Every AMQP chunk we send is one binary message; ``send_message`` sends arbitrary bytes."""

    def send(self, event: Any) -> None:
        data = self.conn.send(event, self.net.now)
        if self.ws.state is wsframe.ConnectionState.OPEN:  # nothing may follow our Close
            self.send_message(data, binary=True)


def connect_ws_amqp(net: SimNetwork, path: str = "/ws",
                    subprotocols: tuple[str, ...] = ("amqp",)) -> WsAmqpSimClient:
    """As ``SimNetwork.connect_ws``, with the AMQP-carrying client."""
    net._next_conn += 1
    conn_id = net._next_conn
    peer = ("127.0.0.1", 40000 + conn_id)
    client = WsAmqpSimClient(net, conn_id, peer, True, True, False)
    net.clients[conn_id] = client
    net.broker.connection_made(conn_id, "ws", peer, net.now)
    net._process(net.broker.drain())
    client.send_ws(wsframe.Request(host="localhost", path=path, subprotocols=list(subprotocols)))
    net.run_until_idle()
    return client


def opened(net: SimNetwork, **kw: Any) -> WsAmqpSimClient:
    c = connect_ws_amqp(net, **kw)
    assert c.accepted is not None and c.accepted.subprotocol == "amqp", c.rejected
    assert isinstance(c.amqp_open(), spec.ConnectionOpenOk)
    assert isinstance(c.open_channel(1), spec.ChannelOpenOk)
    return c


@pytest.mark.parametrize("path", ["/ws", "/ws/amqp", "/amqp"])
def test_amqp_subprotocol_runs_a_whole_amqp_session(path: str) -> None:
    net = new_net()
    c = opened(net, path=path)
    ok = c.call(spec.QueueDeclare(queue="wsq", channel=1))
    assert isinstance(ok, spec.QueueDeclareOk) and ok.queue == "wsq"
    c.call(spec.ConfirmSelect(channel=1))
    c.send(spec.BasicPublish(routing_key="wsq", properties=BasicProperties(content_type="text/plain"),
                             body=b"over ws", channel=1))
    net.run_until_idle()
    assert [a.delivery_tag for a in c.of(spec.BasicAck)] == [1]
    c.call(spec.BasicConsume(queue="wsq", consumer_tag="t", channel=1))
    deliver = c.last(spec.BasicDeliver)
    assert deliver.body == b"over ws" and deliver.properties.content_type == "text/plain"
    c.call(spec.BasicAck(deliver.delivery_tag, channel=1))
    assert net.broker.model.vhosts["/"].queues["wsq"].unacked_count() == 0
    # every server message is binary (AMQP is not text)
    assert c.data_messages() and all(isinstance(m, wsframe.BytesMessage) for m in c.data_messages())
    c.call(spec.ConnectionClose(200, "bye", 0, 0))
    assert c.last(spec.ConnectionCloseOk) is not None
    assert c.close_frame is not None and c.close_frame.code == 1000  # then the WebSocket closes
    net.run_until_idle()
    assert c.server_closed and not net.broker.sessions


def test_frames_split_across_messages_and_several_per_message() -> None:
    net = new_net()
    c = opened(net)
    declare = c.conn.send(spec.QueueDeclare(queue="split", channel=1), net.now)
    pubs = b"".join(c.conn.send(spec.BasicPublish(routing_key="split", body=b"m%d" % i, channel=1), net.now)
                    for i in range(5))
    stream = declare + pubs
    # one byte, then odd-sized pieces: frames straddle message boundaries
    pieces = [stream[:1], stream[1:10], stream[10:37], stream[37:]]
    for p in pieces:
        c.send_message(p, binary=True)
    net.run_until_idle()
    assert isinstance(c.last(spec.QueueDeclareOk), spec.QueueDeclareOk)
    # several frames (method + header + body, x3) in one message
    more = b"".join(c.conn.send(spec.BasicGet(queue="split", no_ack=True, channel=1), net.now) for _ in range(3))
    c.send_message(more, binary=True)
    net.run_until_idle()
    assert [g.body for g in c.of(spec.BasicGetOk)] == [b"m0", b"m1", b"m2"]


def test_stomp_subprotocols_still_win_and_plain_offer_is_stomp() -> None:
    net = new_net()
    c = net.connect_ws(subprotocols=("amqp", "v12.stomp"))
    assert c.accepted is not None and c.accepted.subprotocol == "v12.stomp"
    assert isinstance(c.stomp_connect(), Connected)


def test_ws_close_requeues_unacked_and_eof_mid_frame_closes() -> None:
    net = new_net()
    c = opened(net)
    c.call(spec.QueueDeclare(queue="rq", channel=1))
    c.send(spec.BasicPublish(routing_key="rq", body=b"x", channel=1))
    c.call(spec.BasicConsume(queue="rq", consumer_tag="t", channel=1))
    assert c.last(spec.BasicDeliver) is not None
    c.send_message(b"\x01\x00", binary=True)  # half a frame, then the client closes
    c.ws_close(1000)
    net.run_until_idle()
    q = net.broker.model.vhosts["/"].queues["rq"]
    assert q.count == 1 and q.consumer_count() == 0  # requeued, consumer gone
    assert c.close_frame is not None and c.server_closed and not net.broker.sessions


def test_amqp_protocol_error_inside_ws_closes_with_the_amqp_code_then_ws_close() -> None:
    net = new_net()
    c = opened(net)
    c.send_message(b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x28\x00", binary=True)  # bad frame-end
    net.run_until_idle()
    close = c.last(spec.ConnectionClose)
    assert close is not None and close.reply_code == 501
    assert c.close_frame is not None and c.close_frame.code == 1000
    net.run_until_idle()
    assert c.server_closed


def test_wrong_protocol_header_gets_amqp_header_and_close() -> None:
    net = new_net()
    c = connect_ws_amqp(net)
    c.send_message(b"AMQP\x01\x01\x00\x0a", binary=True)
    net.run_until_idle()
    raw = b"".join(m.data for m in c.data_messages())
    assert raw == b"AMQP\x00\x00\x09\x01"
    assert c.close_frame is not None


def test_chunked_transport_is_deterministic() -> None:
    def run() -> list[Any]:
        net = new_net(max_chunk=7, seed=3)
        c = opened(net)
        c.call(spec.QueueDeclare(queue="d", channel=1))
        for i in range(20):
            c.send(spec.BasicPublish(routing_key="d", body=b"%d" % i * 50, channel=1))
        c.call(spec.BasicConsume(queue="d", no_ack=True, channel=1))
        net.run_until_idle()
        return [d.body for d in c.of(spec.BasicDeliver)]

    first = run()
    assert first == [b"%d" % i * 50 for i in range(20)]
    assert run() == first


def test_memory_alarm_blocks_an_amqp_publisher_inside_websocket() -> None:
    from engine import Config, Limits

    net = new_net(Config(limits=Limits(memory_high_watermark=1000)))
    c = connect_ws_amqp(net)
    c.send(A.ProtocolHeader())
    net.run_until_idle()
    c.send(spec.ConnectionStartOk({"capabilities": {"connection.blocked": True}}, "PLAIN",
                                  A.plain_response("guest", "guest"), "en_US"))
    net.run_until_idle()
    c.send(c.conn.tune_ok(c.last(spec.ConnectionTune)))  # type: ignore[attr-defined]
    c.send(spec.ConnectionOpen("/"))
    net.run_until_idle()
    c.open_channel(1)
    c.call(spec.QueueDeclare(queue="big", channel=1))
    c.send(spec.BasicPublish(routing_key="big", body=b"b" * 1500, channel=1))
    net.run_until_idle()
    assert c.paused and len(c.of(spec.ConnectionBlocked)) == 1
    c.send(spec.BasicPublish(routing_key="big", body=b"queued in the socket", channel=1))
    net.run_until_idle()
    assert net.broker.model.vhosts["/"].queues["big"].count == 1
    assert c.close_frame is None
    other = net.connect(protocol="amqp")
    other.amqp_open()
    other.open_channel(1)
    other.call(spec.QueuePurge(queue="big", channel=1))
    net.run_until_idle()
    assert not c.paused and len(c.of(spec.ConnectionUnblocked)) == 1
    assert net.broker.model.vhosts["/"].queues["big"].count == 1  # the second publish went through
