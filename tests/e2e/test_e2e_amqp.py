"""Real AMQP clients (pika, py-amqp, kombu, aio-pika) and stomp.py over 127.0.0.1 against each server."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from e2ekit import close_quietly, connect, pika_open, uid

import servers

LISTENERS = [("amqp", "127.0.0.1", 0), ("stomp", "127.0.0.1", 0)]


@pytest.fixture(scope="module", params=servers.SERVER_KINDS)
def srv(request: pytest.FixtureRequest) -> Iterator[Any]:
    with servers.running(request.param, LISTENERS) as running:
        yield running


def params(srv: Any, **kw: Any) -> pika.ConnectionParameters:
    host, port = srv.address("amqp")
    return pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials("guest", "guest"),
                                     connection_attempts=1, socket_timeout=5, blocked_connection_timeout=10, **kw)


@pytest.fixture()
def conn(srv: Any) -> Iterator[pika.BlockingConnection]:
    with pika_open(params(srv)) as c:
        yield c


# -- pika (blocking) ----------------------------------------------------------------------------
def test_pika_declare_publish_consume_ack_in_order(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("order")).method.queue
    for i in range(200):
        ch.basic_publish("", q, str(i).encode(), pika.BasicProperties(content_type="text/plain",
                                                                       headers={"n": i}))
    ch.basic_qos(prefetch_count=50)
    got: list[bytes] = []
    for method, props, body in ch.consume(q, inactivity_timeout=5):
        assert method is not None, f"stalled after {len(got)}"
        assert props.headers == {"n": len(got)} and props.content_type == "text/plain"
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == 200:
            break
    ch.cancel()
    assert got == [str(i).encode() for i in range(200)]


def test_pika_get_nack_requeue_redelivered(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("get")).method.queue
    ch.basic_publish("", q, b"m")
    method, _, body = ch.basic_get(q)
    assert body == b"m" and not method.redelivered
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = ch.basic_get(q)
    assert body == b"m" and method.redelivered
    ch.basic_ack(method.delivery_tag)
    assert ch.basic_get(q) == (None, None, None)


def test_pika_confirms_and_mandatory_return(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    q = ch.queue_declare(uid("conf"), durable=True).method.queue
    ch.basic_publish("", q, b"safe", pika.BasicProperties(delivery_mode=2), mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", "no-such-key", b"lost", mandatory=True)
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    ch.queue_delete(q)


def test_pika_tx_commit_rollback(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("tx")).method.queue
    ch.tx_select()
    ch.basic_publish("", q, b"a")
    ch.tx_rollback()
    ch.basic_publish("", q, b"b")
    ch.tx_commit()
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    assert ch.basic_get(q, auto_ack=True)[2] == b"b"


def test_pika_channel_error_keeps_connection(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("does-not-exist", passive=True)
    assert info.value.reply_code == 404
    ch2 = conn.channel()
    assert ch2.queue_declare(uid("after")).method.queue
    assert conn.is_open


def test_pika_bad_login_is_access_refused(srv: Any) -> None:
    bad = params(srv)
    bad.credentials = pika.PlainCredentials("guest", "wrong")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(bad)


def test_pika_redelivery_after_connection_dies(srv: Any, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = ch.queue_declare(uid("redeliver")).method.queue
    ch.basic_publish("", q, b"x")
    other = pika.BlockingConnection(params(srv))
    och = other.channel()
    method, _, _ = och.basic_get(q)
    assert not method.redelivered
    other.close()  # unacked: back in the queue
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"x" and method.redelivered


def test_pika_hundred_channels_and_10mb_message(conn: pika.BlockingConnection) -> None:
    chans = [conn.channel() for _ in range(100)]
    q = chans[0].queue_declare(uid("many")).method.queue
    for i, ch in enumerate(chans):
        ch.basic_publish("", q, str(i).encode())
    assert chans[-1].queue_declare(q, passive=True).method.message_count == 100
    big = bytes(range(256)) * 40_960  # 10 MiB
    chans[1].basic_publish("", q, big)
    chans[1].queue_purge(q)
    q2 = chans[2].queue_declare(uid("big")).method.queue
    chans[2].basic_publish("", q2, big)
    assert chans[3].basic_get(q2, auto_ack=True)[2] == big


# -- pika (asyncio adapter) --------------------------------------------------------------------
def test_pika_asyncio_adapter_confirms_consume_ack(srv: Any) -> None:
    """pika's callback-style AsyncioConnection: confirm.select, 50 confirmed publishes, a consumer
    with prefetch that acks each delivery, in order, then a clean close."""
    from pika.adapters.asyncio_connection import AsyncioConnection

    loop = asyncio.new_event_loop()
    q = uid("pika-asyncio")
    state: dict[str, Any] = {"acked": 0, "got": [], "error": None}
    done = loop.create_future()

    def fail(reason: Any) -> None:
        state["error"] = reason
        if not done.done():
            done.set_result(None)

    def on_open(conn: Any) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        state["ch"] = ch
        ch.add_on_close_callback(lambda _ch, reason: fail(reason) if not done.done() else None)
        ch.confirm_delivery(on_confirm, callback=lambda _f: ch.queue_declare(q, callback=on_declared))

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Ack):
            state["acked"] = method.delivery_tag  # cumulative when multiple
        else:
            fail(f"nacked {method.delivery_tag}")

    def on_declared(_frame: Any) -> None:
        ch = state["ch"]
        for i in range(50):
            ch.basic_publish("", q, str(i).encode(), pika.BasicProperties(delivery_mode=2))
        ch.basic_qos(prefetch_count=10, callback=lambda _f: ch.basic_consume(q, on_message))

    def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
        state["got"].append(body)
        ch.basic_ack(method.delivery_tag)
        if len(state["got"]) == 50 and not done.done():
            done.set_result(None)

    conn = AsyncioConnection(params(srv), on_open_callback=on_open,
                             on_open_error_callback=lambda _c, err: fail(err),
                             on_close_callback=lambda _c, reason: fail(reason) if not done.done() else None,
                             custom_ioloop=loop)
    try:
        loop.run_until_complete(asyncio.wait_for(done, 15))
        assert state["error"] is None, state["error"]
        assert state["got"] == [str(i).encode() for i in range(50)]
        loop.run_until_complete(asyncio.sleep(0.2))  # the last confirms
        assert state["acked"] == 50
        closed = loop.create_future()
        conn.add_on_close_callback(lambda _c, _r: closed.done() or closed.set_result(None))
        conn.close()
        loop.run_until_complete(asyncio.wait_for(closed, 5))
    finally:
        loop.close()


# -- other clients -----------------------------------------------------------------------------
def test_py_amqp_roundtrip(srv: Any) -> None:
    import amqp

    host, port = srv.address("amqp")
    with amqp.Connection(f"{host}:{port}", userid="guest", password="guest") as c:
        ch = c.channel()
        q, _, _ = ch.queue_declare(uid("pyamqp"))
        ch.basic_publish(amqp.Message("hello", application_headers={"k": "v"}), routing_key=q)
        msg = None
        for _ in range(50):
            msg = ch.basic_get(q, no_ack=True)
            if msg is not None:
                break
            time.sleep(0.02)
        assert msg is not None and msg.body == "hello"  # py-amqp decodes by content_encoding
        assert msg.headers == {"k": "v"}


def test_kombu_simple_queue(srv: Any) -> None:
    import kombu

    host, port = srv.address("amqp")
    with kombu.Connection(f"amqp://guest:guest@{host}:{port}//") as c:
        sq = c.SimpleQueue(uid("kombu"))
        sq.put({"hello": "world"})
        msg = sq.get(timeout=5)
        assert msg.payload == {"hello": "world"}
        msg.ack()
        sq.close()


def test_aio_pika_roundtrip(srv: Any) -> None:
    import aio_pika

    host, port = srv.address("amqp")

    async def main() -> bytes:
        c = await aio_pika.connect_robust(f"amqp://guest:guest@{host}:{port}/")
        async with c:
            ch = await c.channel()
            await ch.set_qos(prefetch_count=10)
            q = await ch.declare_queue(uid("aio"), auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"async"), routing_key=q.name)
            async with q.iterator() as it:
                async for message in it:
                    async with message.process():
                        return message.body
        raise AssertionError("no message")

    assert asyncio.run(asyncio.wait_for(main(), 20)) == b"async"


# -- one model with STOMP ----------------------------------------------------------------------
def test_stomp_send_consumed_by_amqp_and_back(srv: Any, conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = uid("interop")
    ch.queue_declare(q, durable=True)
    st, coll = connect(srv.address("stomp"), "1.2")
    try:
        st.send(f"/queue/{q}", "from stomp", headers={"content-type": "text/plain", "persistent": "true",
                                                      "correlation-id": "c1", "x-custom": "yes"})
        method = None
        for _ in range(100):
            method, props, body = ch.basic_get(q, auto_ack=True)
            if method is not None:
                break
            time.sleep(0.02)
        assert method is not None and body == b"from stomp"
        assert props.content_type == "text/plain" and props.delivery_mode == 2
        assert props.correlation_id == "c1" and props.headers["x-custom"] == "yes"
        st.subscribe("/topic/news.k", id="1")
        time.sleep(0.2)
        ch.basic_publish("amq.topic", "news.k", b"from amqp",
                         pika.BasicProperties(reply_to="r", headers={"h": "v"}, priority=3))
        msg = coll.wait_messages(1)[0]
        assert msg.body == "from amqp"
        assert msg.headers["reply-to"] == "r" and msg.headers["h"] == "v" and msg.headers["priority"] == "3"
    finally:
        close_quietly(st)
        ch.queue_delete(q)


# -- bad input ---------------------------------------------------------------------------------
def _raw(srv: Any) -> socket.socket:
    s = socket.create_connection(srv.address("amqp"), timeout=5)
    return s


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        out += chunk
    return out


def test_wrong_protocol_header_is_answered_and_closed(srv: Any) -> None:
    with _raw(srv) as s:
        s.sendall(b"HTTP/1.1 GET /\r\n\r\n")
        assert _read_all(s) == b"AMQP\x00\x00\x09\x01"


def test_garbage_after_handshake_closes_with_frame_error(srv: Any, conn: pika.BlockingConnection) -> None:
    with _raw(srv) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        time.sleep(0.1)
        s.sendall(b"\x07garbage-garbage\xce")
        data = _read_all(s)
    # connection.start, then connection.close 501 (frame error: unknown frame type)
    i = data.find(b"\x00\x0a\x00\x32")  # class 10 method 50 = connection.close
    assert i > 0, data
    (code,) = struct.unpack_from(">H", data, i + 4)
    assert code in (501, 505)
    assert conn.channel().queue_declare(uid("still")).method.queue  # others unaffected
