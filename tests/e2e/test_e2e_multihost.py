"""Clients given several brokers (docs/operator/index.md, "Clients with several hosts"): two real sansmq processes on
free ports; each client connects to the first, the first is killed (kill -9), and the client goes on
with the second: pika with a list of ConnectionParameters, kombu with a ``;``-separated failover URL,
Celery with a list of broker URLs, stomp.py with ``host_and_ports`` and a listener that reconnects.
Two single nodes share nothing, so what a client finds after the switch is what it sent since; the
point here is the client side, which is the same against the nodes of one cluster."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celery
import kombu
import pika
import pytest
import stomp
from e2ekit import BASE_CONFIG, Collector, ServerProcess, start_server, wait_until

HOST = "127.0.0.1"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two brokers; the test kills the first one."""
    path = tmp_path / "sansmq.toml"
    path.write_text(BASE_CONFIG)
    started: list[ServerProcess] = []
    try:
        for _ in range(2):
            started.append(start_server("asyncio", path))
        yield started
    finally:
        for srv in started:
            if srv.proc.poll() is None:
                srv.proc.kill()
            srv.proc.wait()


def kill(srv: ServerProcess) -> None:
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=15)


def amqp_port(srv: ServerProcess) -> int:
    return srv.port("amqp")


def get_all(srv: ServerProcess, queue: str) -> list[bytes]:
    """What ``queue`` on ``srv`` holds, read by a plain connection to that node alone."""
    conn = pika.BlockingConnection(pika.ConnectionParameters(HOST, amqp_port(srv)))
    ch = conn.channel()
    got = []
    while (msg := ch.basic_get(queue, auto_ack=True))[0] is not None:
        got.append(msg[2])
    conn.close()
    return got


def test_pika_list_of_connection_parameters_fails_over(nodes: list[ServerProcess]) -> None:
    a, b = nodes
    # pika tries the parameters in order; the last one's connection_attempts/retry_delay give a node
    # that is restarting a moment
    params = [pika.ConnectionParameters(HOST, amqp_port(a), connection_attempts=1),
              pika.ConnectionParameters(HOST, amqp_port(b), connection_attempts=3, retry_delay=0.2)]

    def session() -> tuple[pika.BlockingConnection, Any]:
        conn = pika.BlockingConnection(params)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("orders", durable=True)  # declared again on whichever node it reached
        return conn, ch

    conn, ch = session()
    ch.basic_publish("", "orders", b"one", pika.BasicProperties(delivery_mode=2))
    assert get_all(a, "orders") == [b"one"]

    kill(a)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        ch.basic_publish("", "orders", b"lost", pika.BasicProperties(delivery_mode=2))
        conn.process_data_events(1)
    conn, ch = session()  # the application's reconnect: same list, the first node refuses
    ch.basic_publish("", "orders", b"two", pika.BasicProperties(delivery_mode=2))
    conn.close()
    assert get_all(b, "orders") == [b"two"]


def test_kombu_failover_url_and_ensure(nodes: list[ServerProcess]) -> None:
    a, b = nodes
    url = f"amqp://guest:guest@{HOST}:{amqp_port(a)}//;amqp://guest:guest@{HOST}:{amqp_port(b)}//"
    queue = kombu.Queue("jobs", kombu.Exchange("jobs", "direct"), routing_key="jobs")
    with kombu.Connection(url, failover_strategy="round-robin", transport_options={"confirm_publish": True}) as conn:
        producer = conn.Producer()
        # ensure(): on a connection error kombu reconnects, to the next URL of the list, and retries
        publish = conn.ensure(producer, producer.publish, max_retries=5, interval_start=0, interval_step=0.2)
        publish({"n": 1}, exchange=queue.exchange, routing_key="jobs", declare=[queue], serializer="json")
        assert f":{amqp_port(a)}/" in conn.as_uri()
        kill(a)
        publish({"n": 2}, exchange=queue.exchange, routing_key="jobs", declare=[queue], serializer="json")
        assert f":{amqp_port(b)}/" in conn.as_uri()
        with conn.SimpleQueue(queue) as sq:
            msg = sq.get(timeout=10)
            assert msg.payload == {"n": 2}
            msg.ack()


def test_celery_broker_url_list_fails_over(nodes: list[ServerProcess]) -> None:
    a, b = nodes
    app = celery.Celery("multihost", broker=[f"amqp://guest:guest@{HOST}:{amqp_port(srv)}//" for srv in (a, b)])
    app.conf.update(broker_connection_retry_on_startup=True, task_publish_retry=True,
                    task_publish_retry_policy={"max_retries": 5, "interval_start": 0, "interval_step": 0.2})
    try:
        app.send_task("multihost.add", (1, 1))
        kill(a)
        app.send_task("multihost.add", (2, 2))
    finally:
        app.close()
    got = get_all(b, "celery")  # Celery's default queue on the second node: the task sent after the kill
    assert len(got) == 1 and b"[[2, 2]" in got[0]


class Reconnecting(Collector):
    """stomp.py reconnects when the application asks: on a lost connection, connect again (the
    transport walks ``host_and_ports`` in order) and subscribe again."""

    def __init__(self, conn: stomp.Connection12) -> None:
        super().__init__()
        self.conn = conn
        self.connects = 0
        self.closing = False  # our own disconnect(): stay disconnected
        self.reconnecting = threading.Lock()

    def on_connected(self, frame: Any) -> None:
        self.connects += 1
        super().on_connected(frame)

    def on_disconnected(self) -> None:
        super().on_disconnected()
        if self.closing:
            return
        # not on stomp.py's receiver thread, which is ending: connect() waits for it to be gone
        threading.Thread(target=self.reconnect, daemon=True).start()

    def reconnect(self) -> None:
        with self.reconnecting:  # one at a time, however many disconnects were reported
            while not self.closing and not self.conn.is_connected():
                try:
                    self.conn.connect("guest", "guest", wait=True)
                except stomp.exception.ConnectFailedException:
                    time.sleep(0.1)  # the old transport may still be winding down: try again
                    continue
                self.conn.subscribe("/queue/alerts", id="s1", ack="auto")


def test_stomp_py_host_and_ports_fails_over(nodes: list[ServerProcess]) -> None:
    a, b = nodes
    conn = stomp.Connection12([(HOST, a.port("stomp")), (HOST, b.port("stomp"))], heartbeats=(0, 0),
                              reconnect_sleep_initial=0.1, reconnect_sleep_increase=0.5, reconnect_attempts_max=5,
                              vhost="/")
    lst = Reconnecting(conn)
    conn.set_listener("r", lst)
    conn.connect("guest", "guest", wait=True)
    conn.subscribe("/queue/alerts", id="s1", ack="auto")
    conn.send("/queue/alerts", b"first", headers={"receipt": "r1"})
    lst.wait(lambda: lst.messages and "r1" in lst.receipts)
    assert lst.connects == 1

    kill(a)
    wait_until(lambda: lst.connects >= 2, 15, "stomp.py's reconnection to the second node")
    other = stomp.Connection12([(HOST, b.port("stomp"))], heartbeats=(0, 0), vhost="/")
    other.connect("guest", "guest", wait=True)
    other.send("/queue/alerts", b"second")
    other.disconnect()
    lst.wait(lambda: len(lst.messages) == 2)
    assert [m.body for m in lst.messages] == ["first", "second"]
    lst.closing = True
    conn.disconnect()
