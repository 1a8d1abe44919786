"""AMQP 0-9-1 over WebSocket end to end: the real `websockets` client carrying AMQP frames built with
amqpproto's client role, against every server kind (subprotocol ``amqp``, as LavinMQ)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from e2ekit import WsAmqp, uid
from websockets.sync.client import connect

import servers
from amqpproto import BasicProperties, spec
from engine import Config

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def srv(kind: str) -> Iterator[servers.Running]:
    listeners = [("ws", "127.0.0.1", 0), ("amqp", "127.0.0.1", 0)]
    with servers.running(kind, listeners, config=Config()) as running:
        yield running


def ws_url(srv: servers.Running, path: str = "/ws") -> str:
    host, port = srv.address("ws")
    return f"ws://{host}:{port}{path}"


@pytest.fixture
def open_client(srv: servers.Running) -> Iterator[Any]:
    with contextlib.ExitStack() as stack:

        def make(path: str = "/ws") -> WsAmqp:
            ws = stack.enter_context(connect(ws_url(srv, path), subprotocols=["amqp"], open_timeout=TIMEOUT))
            assert ws.subprotocol == "amqp"
            c = WsAmqp(ws)
            c.open()
            return c

        yield make


def test_open_declare_publish_consume_close(open_client: Any) -> None:
    c = open_client()
    q = uid("wsq")
    c.send(spec.QueueDeclare(queue=q, channel=1))
    assert c.expect(spec.QueueDeclareOk).queue == q
    c.send(spec.ConfirmSelect(channel=1))
    c.expect(spec.ConfirmSelectOk)
    for i in range(3):
        c.send(spec.BasicPublish(routing_key=q, properties=BasicProperties(content_type="text/plain",
                                                                            headers={"n": i}),
                                 body=b"ws %d" % i, channel=1))
    acked = set()
    while len(acked) < 3:
        ack = c.expect(spec.BasicAck)
        acked.add(ack.delivery_tag)
    assert acked == {1, 2, 3}
    c.send(spec.BasicConsume(queue=q, consumer_tag="ws", channel=1))
    c.expect(spec.BasicConsumeOk)
    for i in range(3):
        d = c.expect(spec.BasicDeliver)
        assert d.body == b"ws %d" % i and d.properties.headers == {"n": i}
        c.send(spec.BasicAck(d.delivery_tag, channel=1))
    c.close()


def test_frames_split_over_messages_and_batched_in_one(open_client: Any) -> None:
    c = open_client(path="/ws/amqp")
    q = uid("split")
    stream = c.encode(spec.QueueDeclare(queue=q, channel=1)) + b"".join(
        c.encode(spec.BasicPublish(routing_key=q, body=b"p%d" % i * 100, channel=1)) for i in range(10))
    for i in range(0, len(stream), 5):  # 5-byte WebSocket messages: every frame straddles several
        c.send_bytes(stream[i:i + 5])
    c.expect(spec.QueueDeclareOk)
    # three basic.get (each one frame) in one message
    c.send_bytes(b"".join(c.encode(spec.BasicGet(queue=q, no_ack=True, channel=1)) for _ in range(3)))
    bodies = [c.expect(spec.BasicGetOk).body for _ in range(3)]
    assert bodies == [b"p%d" % i * 100 for i in range(3)]
    c.close()


def test_one_model_with_the_tcp_listener(srv: servers.Running, open_client: Any) -> None:
    """Published over WebSocket, consumed by pika on the plain AMQP listener, and back."""
    c = open_client()
    host, port = srv.address("amqp")
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port, connection_attempts=1, socket_timeout=5))
    try:
        q = uid("mix")
        ch = conn.channel()
        ch.queue_declare(q)
        c.send(spec.BasicPublish(routing_key=q, properties=BasicProperties(correlation_id="c1"), body=b"from ws",
                                 channel=1))
        deadline = time.monotonic() + TIMEOUT
        while (got := ch.basic_get(q, auto_ack=True))[0] is None:
            assert time.monotonic() < deadline, "message from the WebSocket client never arrived"
            time.sleep(0.02)
        assert got[2] == b"from ws" and got[1].correlation_id == "c1"
        c.send(spec.BasicConsume(queue=q, no_ack=True, channel=1))
        c.expect(spec.BasicConsumeOk)
        ch.basic_publish("", q, b"from pika")
        assert c.expect(spec.BasicDeliver).body == b"from pika"
        c.close()
    finally:
        conn.close()


def test_dropped_websocket_requeues_unacked(open_client: Any) -> None:
    c = open_client()
    q = uid("drop")
    c.send(spec.QueueDeclare(queue=q, channel=1))
    c.expect(spec.QueueDeclareOk)
    c.send(spec.BasicPublish(routing_key=q, body=b"keep me", channel=1))
    c.send(spec.BasicConsume(queue=q, channel=1))
    c.expect(spec.BasicConsumeOk)
    assert c.expect(spec.BasicDeliver).body == b"keep me"
    c.ws.close()  # WebSocket Close without an AMQP close: the unacked message goes back
    d = open_client()
    d.send(spec.BasicConsume(queue=q, channel=1))
    d.expect(spec.BasicConsumeOk)
    redelivered = d.expect(spec.BasicDeliver)
    assert redelivered.body == b"keep me" and redelivered.redelivered
    d.close()
