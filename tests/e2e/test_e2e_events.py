"""The event exchange end to end: ``sansmq serve --events /`` on each server, and (opt-in,
``SANSMQ_RABBITMQ=host:port`` plus ``SANSMQ_RABBITMQ_STOMP=host:port``) RabbitMQ with its
rabbitmq_event_exchange plugin, the same test. A pika client binds a queue to amq.rabbitmq.event and
sees another client's connection, queue and consumer events, and a STOMP subscription's consumer."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
import stomp
from e2ekit import BASE_CONFIG, close_quietly, start_server, wait_until

import servers

EVENTS = "amq.rabbitmq.event"
RABBITMQ = os.environ.get("SANSMQ_RABBITMQ")
RABBITMQ_STOMP = os.environ.get("SANSMQ_RABBITMQ_STOMP")
TARGETS = list(servers.SERVER_KINDS) + (["rabbitmq"] if RABBITMQ and RABBITMQ_STOMP else [])


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    """(AMQP address, STOMP address) of a broker with the event exchange on in vhost /."""
    if request.param == "rabbitmq":
        yield _addr(str(RABBITMQ)), _addr(str(RABBITMQ_STOMP))
        return
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(BASE_CONFIG)
    srv = start_server(request.param, path, "--events", "/")
    try:
        yield ("127.0.0.1", srv.port("amqp")), ("127.0.0.1", srv.port("stomp"))
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


def connect(addr: tuple[str, int]) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(*addr, heartbeat=0))


class Watcher:
    """A pika connection with an exclusive queue bound to the event exchange for ``keys``."""

    def __init__(self, addr: tuple[str, int], *keys: str) -> None:
        self.conn = connect(addr)
        self.ch = self.conn.channel()
        self.queue = self.ch.queue_declare("", exclusive=True).method.queue
        for key in keys:
            self.ch.queue_bind(self.queue, EVENTS, key)
        self.events: list[tuple[str, dict[str, Any], Any]] = []

    def poll(self) -> list[tuple[str, dict[str, Any], Any]]:
        while True:
            method, props, body = self.ch.basic_get(self.queue, auto_ack=True)
            if method is None:
                return self.events
            assert body == b""
            self.events.append((method.routing_key, props.headers or {}, props))

    def wait_for(self, key: str, **match: Any) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            return next((h for k, h, _ in self.poll() if k == key and all(h.get(n) == v for n, v in match.items())),
                        None)
        return wait_until(find, what=f"event {key} {match}")

    def close(self) -> None:
        self.conn.close()


def test_another_clients_connection_queue_and_consumer_events(target: Any) -> None:
    amqp_addr, _ = target
    watcher = Watcher(amqp_addr, "connection.*", "queue.*", "consumer.*")
    name = f"ev-{uuid.uuid4().hex[:8]}"
    other = connect(amqp_addr)
    port = other._impl._transport._sock.getsockname()[1]  # the other client's address names its connection
    ch = other.channel()
    ch.queue_declare(name, durable=False)
    tag = ch.basic_consume(name, lambda *a: None, consumer_tag=f"{name}-tag")
    ch.basic_cancel(tag)
    ch.queue_delete(name)
    other.close()
    created = watcher.wait_for("connection.created", user="guest")
    wait_until(lambda: any(f":{port}" in h.get("name", "") for k, h, _ in watcher.poll()
                           if k == "connection.created"), what="the other client's connection.created")
    q = watcher.wait_for("queue.created", name=name)
    assert q["vhost"] == "/" and q["user_who_performed_action"] == "guest" and q["durable"] is False
    cons = watcher.wait_for("consumer.created", consumer_tag=f"{name}-tag")
    assert cons["queue"] == name and cons["vhost"] == "/" and cons["ack_required"] is True
    watcher.wait_for("consumer.deleted", consumer_tag=f"{name}-tag")
    watcher.wait_for("queue.deleted", name=name)
    wait_until(lambda: any(f":{port}" in h.get("name", "") for k, h, _ in watcher.poll()
                           if k == "connection.closed"), what="the other client's connection.closed")
    for _, h, props in watcher.events:  # the plugin's message format
        assert props.delivery_mode == 2 and isinstance(h["timestamp_in_ms"], int) and props.timestamp
    assert created["user_who_performed_action"] == "guest"
    watcher.close()


def test_a_stomp_subscription_is_a_consumer_event(target: Any) -> None:
    amqp_addr, stomp_addr = target
    watcher = Watcher(amqp_addr, "binding.#", "consumer.*")
    name = f"ev-stomp-{uuid.uuid4().hex[:8]}"
    # RabbitMQ takes the CONNECT host header as the vhost
    conn = stomp.Connection12([stomp_addr], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=5, vhost="/")
    conn.connect("guest", "guest", wait=True)
    try:
        conn.subscribe(f"/queue/{name}", id="sub-7", ack="auto")
        cons = watcher.wait_for("consumer.created", queue=name)
        assert cons["consumer_tag"] == "T_sub-7" and cons["vhost"] == "/"
        conn.unsubscribe("sub-7")
        watcher.wait_for("consumer.deleted", queue=name)
    finally:
        close_quietly(conn)
    # the watcher's own binding to the event exchange was the first binding event it could see
    own = watcher.wait_for("binding.created", destination_name=watcher.queue)
    assert own["source_name"] == EVENTS and own["destination_kind"] == "queue"
    watcher.close()


def test_events_of_an_unknown_vhost_is_a_usage_error_in_one_line() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "servers", "serve", "--events", "nope", "--check-config"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "sansmq serve: error: --events: vhost 'nope' is not one of vhosts ['/']"]
