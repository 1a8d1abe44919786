"""Memory alarm (connection.blocked), consumer timeout, x-max-length-bytes, x-max-priority,
basic.qos prefetch_size and no_local with pika over 127.0.0.1, against a `sansmq serve` subprocess
of each server kind (started with ``--memory-high-watermark``, so the CLI knob is exercised too)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from e2ekit import LISTEN_RE, RawStomp, ServerProcess, start_server, uid, wait_until
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

pytestmark = pytest.mark.timeout(180)

WATERMARK = 1_000_000
CONFIG = """
[limits]
consumer_timeout = 1500
"""


@pytest.fixture(scope="module")
def server(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(CONFIG)
    srv = start_server(kind, path, "--memory-high-watermark", "1MB")
    try:
        yield srv
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


def address(srv: ServerProcess, protocol: str) -> tuple[str, int]:
    def find() -> Any:
        for line in list(srv.lines):
            m = LISTEN_RE.fullmatch(line)
            if m and m.group(1) == protocol:
                return m
        return None

    m = wait_until(find, 10, f"the {protocol} listening line")
    return m.group(2), int(m.group(3))


def connect(srv: ServerProcess) -> pika.BlockingConnection:
    host, port = address(srv, "amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, connection_attempts=1, socket_timeout=5))


@pytest.fixture()
def conn(server: ServerProcess) -> Iterator[pika.BlockingConnection]:
    c = connect(server)
    try:
        yield c
    finally:
        if c.is_open:
            c.close()


def depth(ch: Any, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def test_publisher_is_blocked_over_the_watermark_and_resumes_after_consumers_drain(server: ServerProcess) -> None:
    pub = connect(server)
    other = connect(server)
    try:
        events: list[str] = []
        pub.add_on_connection_blocked_callback(lambda conn, frame: events.append(frame.method.NAME))
        pub.add_on_connection_unblocked_callback(lambda conn, frame: events.append(frame.method.NAME))
        pch = pub.channel()
        q = uid("mem")
        pch.queue_declare(q)
        body = b"m" * 50_000
        # 1.5 MB: over the watermark, and what the broker leaves unread still fits in the socket
        # buffers (pika's basic_publish waits until its bytes are written)
        total = 30
        for i in range(total):
            pch.basic_publish("", q, b"%03d" % i + body)
        wait_until(lambda: pub.process_data_events(0.05) or events, 10, "connection.blocked")
        assert events == ["Connection.Blocked"]
        och = other.channel()
        time.sleep(0.5)  # the broker stopped reading the publisher: the rest waits in its socket
        held = depth(och, q)
        assert held * 50_003 > WATERMARK and held < total, held
        # a consumer on another connection is still served; acking drains below the mark
        got: list[bytes] = []
        for method, _, msg in och.consume(q, inactivity_timeout=10):
            assert method is not None, f"stalled after {len(got)} messages, events {events}"
            got.append(msg[:3])
            och.basic_ack(method.delivery_tag)
            pub.process_data_events(0)
            if len(got) == total:
                break
        och.cancel()
        assert got == [b"%03d" % i for i in range(total)]
        wait_until(lambda: pub.process_data_events(0.05) or "Connection.Unblocked" in events, 10, "unblocked")
        assert events[:2] == ["Connection.Blocked", "Connection.Unblocked"]
        pch.basic_publish("", q, b"after")  # publishing works again
        assert wait_until(lambda: och.basic_get(q, auto_ack=True)[2], 10, "the message after") == b"after"
    finally:
        if other.is_open:  # a blocked publisher could not even close: unblock it first
            other.channel().queue_delete(q)
            other.close()
        pub.close()


def test_stomp_publisher_is_paused_too(server: ServerProcess, conn: pika.BlockingConnection) -> None:
    q = uid("smem")
    ch = conn.channel()
    ch.queue_declare(q, durable=True)
    raw = RawStomp(address(server, "stomp"))
    try:
        raw.connect()
        body = b"s" * 50_000
        for _ in range(30):
            raw.send_frame("SEND", {"destination": f"/queue/{q}", "content-length": str(len(body))}, body)
        # the frame still arriving counts too (unfinished input is memory the alarm counts): the
        # queue reaches the watermark less at most one frame
        wait_until(lambda: (depth(ch, q) + 1) * 50_000 >= WATERMARK, 10, "the queue at the watermark")
        time.sleep(0.5)  # the broker stopped reading the publisher: the rest waits in its socket
        held = depth(ch, q)
        assert held < 30, held
        purged = [0]

        def drain() -> bool:  # below the mark the STOMP connection is read again (until over again)
            purged[0] += ch.queue_purge(q).method.message_count
            return purged[0] >= 30

        wait_until(drain, 10, "the rest of the STOMP publishes")
        assert purged[0] == 30
    finally:
        raw.close()
        ch.queue_delete(q)


def test_consumer_timeout_closes_channel_406_and_requeues(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    q = uid("ctmo")
    ch.queue_declare(q)
    ch.basic_publish("", q, b"slow")
    reasons: list[Any] = []
    ch._impl.add_on_close_callback(lambda _, reason: reasons.append(reason))
    method, _, body = ch.basic_get(q)
    assert body == b"slow"
    start = time.monotonic()
    wait_until(lambda: conn.process_data_events(0.05) or reasons, 10, "the channel's close")
    assert time.monotonic() - start > 1.0  # not before the timeout
    reason = reasons[0]
    assert isinstance(reason, ChannelClosedByBroker) and reason.reply_code == 406
    assert "delivery acknowledgement on channel" in reason.reply_text and "1500 ms" in reason.reply_text
    ch2 = conn.channel()
    method, _, body = ch2.basic_get(q, auto_ack=True)
    assert body == b"slow" and method.redelivered


def test_max_length_bytes_and_priority_cap(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    q = uid("mlb")
    ch.queue_declare(q, arguments={"x-max-length-bytes": 1000, "x-overflow": "reject-publish"})
    ch.basic_publish("", q, b"a" * 600)
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"b" * 600)
    ch.basic_publish("", q, b"c" * 400)
    assert depth(ch, q) == 2
    pq = uid("prio")
    ch.queue_declare(pq, arguments={"x-max-priority": 3})
    for body, prio in ((b"low", 1), (b"high", 200), (b"mid", 3), (b"none", None)):
        ch.basic_publish("", pq, body, pika.BasicProperties(priority=prio))
    got = [ch.basic_get(pq, auto_ack=True) for _ in range(4)]
    assert [(b, p.priority) for _, p, b in got] == [(b"high", 200), (b"mid", 3), (b"low", 1), (b"none", None)]


def test_qos_prefetch_size_closes_connection_540(server: ServerProcess) -> None:
    c = connect(server)
    ch = c.channel()
    with pytest.raises(ConnectionClosedByBroker) as info:
        ch.basic_qos(prefetch_size=4096, prefetch_count=10)
    assert info.value.reply_code == 540 and "prefetch_size" in info.value.reply_text


def test_no_local_consumer_gets_its_own_messages(server: ServerProcess) -> None:
    """RabbitMQ ignores no_local; so do we (py-amqp, unlike pika, can send the flag)."""
    import amqp

    host, port = address(server, "amqp")
    with amqp.Connection(f"{host}:{port}", userid="guest", password="guest") as c:
        ch = c.channel()
        q = uid("nolocal")
        ch.queue_declare(q)
        seen: list[bytes] = []
        ch.basic_consume(q, no_local=True, no_ack=True, callback=lambda m: seen.append(m.body))
        ch.basic_publish(amqp.Message(b"own"), routing_key=q)
        c.drain_events(timeout=10)
        assert seen == [b"own"]
