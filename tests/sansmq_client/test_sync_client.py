"""The threaded client: thread-safe publishing from several threads, callbacks and blocking iteration,
transactions, typed errors, and the calls refused before they reach the broker."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter

import pytest
from clientkit import Broker, free_port, name

import sansmq_client.sync
from sansmq_client import ChannelClosed, ClientError, Delivery, NotSupported, QueueStatus, Unroutable

THREADS, EACH = 6, 40


@pytest.mark.parametrize("protocol", ["amqp", "stomp"])
def test_publishing_from_several_threads_at_once(broker: Broker, protocol: str) -> None:
    conn = sansmq_client.sync.connect(broker.url(protocol))
    q = name()
    where = conn.declare_queue(q, durable=True) if protocol == "amqp" else f"/queue/{q}"
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def publisher(t: int) -> None:
        start.wait()
        try:
            for i in range(EACH):
                conn.publish(where, f"{t}:{i}".encode())  # each returns once confirmed
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=publisher, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    sub = conn.subscribe(where, prefetch=50)
    seen: Counter[bytes] = Counter()
    order: dict[int, list[int]] = {}
    for d in sub:
        seen[d.body] += 1
        t, i = map(int, d.body.split(b":"))
        order.setdefault(t, []).append(i)
        conn.ack(d)
        if sum(seen.values()) == THREADS * EACH:
            break
    assert set(seen.values()) == {1}  # every message exactly once ...
    assert all(v == list(range(EACH)) for v in order.values())  # ... each thread's in its own order
    sub.cancel()
    conn.close()


def test_iteration_transactions_and_typed_errors(broker: Broker) -> None:
    with sansmq_client.sync.connect(broker.url("amqp")) as conn:
        q = conn.declare_queue(name(), durable=True)
        with conn.transaction() as tx:
            tx.publish(q, b"one")
            tx.publish(q, b"two")
        with pytest.raises(RuntimeError), conn.transaction() as tx:
            tx.publish(q, b"never")
            raise RuntimeError("roll back")
        with pytest.raises(ChannelClosed) as info:
            conn.declare_queue(name("missing"), passive=True)
        assert (info.value.reply_code, info.value.method, info.value.channel) == (404, "queue.declare", 1)
        sub = conn.subscribe(q, prefetch=5)
        got = [next(sub), next(sub)]
        assert [d.body for d in got] == [b"one", b"two"]
        with pytest.raises(NotSupported), conn.transaction() as tx:
            tx.ack(got[0])  # AMQP acks are per consumer channel: refused here, not silently outside the tx
        for d in got:
            conn.ack(d)
        auto = conn.subscribe(q, auto_ack=True)
        conn.publish(q, b"auto")
        d = next(auto)
        with pytest.raises(ClientError, match="auto_ack"):
            conn.ack(d)
    with pytest.raises(StopIteration):  # the connection closed: iteration ends
        next(sub)


def test_close_from_another_thread_ends_a_blocked_iteration(broker: Broker) -> None:
    conn = sansmq_client.sync.connect(broker.url("stomp"))
    sub = conn.subscribe(f"/queue/{name()}")
    ended = threading.Event()

    def consume() -> None:
        for _ in sub:
            pass
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    conn.close()
    assert ended.wait(10)


def test_callback_exceptions_are_logged_and_consuming_goes_on(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    conn = sansmq_client.sync.connect(broker.url("amqp"))
    q = conn.declare_queue(name(), durable=True)
    done = threading.Event()
    bodies: list[bytes] = []

    def handler(d: Delivery) -> None:
        bodies.append(d.body)
        conn.ack(d)
        if d.body == b"bad":
            raise ValueError("handler bug")
        done.set()

    sub = conn.subscribe(q, handler)
    conn.publish(q, b"bad")
    conn.publish(q, b"good")
    assert done.wait(10)
    assert bodies == [b"bad", b"good"]
    assert "handler bug" in caplog.text
    sub.cancel()
    conn.close()


def test_a_refused_connect_raises_and_leaves_no_thread_behind(broker: Broker) -> None:
    before = threading.active_count()
    with pytest.raises(sansmq_client.BrokerClosedConnection) as info:
        sansmq_client.sync.connect(broker.url("amqp", vhost="no-such-vhost"))
    assert (info.value.reply_code, info.value.method) == (530, "connection.open")
    with pytest.raises(sansmq_client.ConnectionLost, match="could not connect"):
        sansmq_client.sync.connect(f"amqp://127.0.0.1:{free_port()}/?connect_timeout=2")  # nobody listens
    assert threading.active_count() == before


def test_queue_status_and_a_timed_get(broker: Broker) -> None:
    """What a driver probing streams needs (and unbind_queue): a passive declare's counts, a 404 that leaves the connection
    usable, and a wait for the next delivery that gives up after a timeout instead of blocking."""
    with sansmq_client.sync.connect(broker.url("amqp")) as conn:
        q = conn.declare_queue(name(), durable=True)
        for body in (b"a", b"b", b"c"):
            conn.publish(q, body)
        assert conn.queue_status(q) == QueueStatus(q, 3, 0)
        conn.bind_queue(q, "amq.direct", q)
        conn.publish(q, b"d", exchange="amq.direct")
        conn.unbind_queue(q, "amq.direct", q)
        with contextlib.suppress(Unroutable):  # no queue takes it now
            conn.publish(q, b"e", exchange="amq.direct")
        assert conn.queue_status(q).message_count == 4
        with pytest.raises(ChannelClosed) as info:
            conn.queue_status(name("missing"))
        assert info.value.reply_code == 404
        sub = conn.subscribe(q, prefetch=10)
        assert conn.queue_status(q).consumer_count == 1  # the connection survived the 404
        got = [sub.get(5), sub.get(5), sub.get(5), sub.get(5)]
        assert [d.body for d in got if d is not None] == [b"a", b"b", b"c", b"d"]
        started = time.monotonic()
        assert sub.get(0.3) is None  # nothing more: gives up after the timeout
        assert 0.25 <= time.monotonic() - started < 5
        for d in got:
            assert d is not None
            conn.ack(d)
        sub.cancel()
        assert sub.get(5) is None  # a cancelled subscription ends cleanly
