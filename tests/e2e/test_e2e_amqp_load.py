"""AMQP under load against a `sansmq serve` subprocess of each server kind: 1,000 concurrent
connections, and publisher confirms for 20,000 persistent messages from several connections.

The clients are bare sockets driven by amqpproto's client role (a library client per connection
would measure the library, not the broker)."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2ekit import BASE_CONFIG, LISTEN_RE, ServerProcess, start_server, wait_until

import amqpproto as A
from amqpproto import BasicProperties, spec

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # 1,000 sockets here plus 1,000 in the server: raise the soft limit before it starts
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 2200, "hard NOFILE limit too low"
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text(BASE_CONFIG)
    srv = start_server(kind, path)
    try:
        yield srv
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


def amqp_address(srv: ServerProcess) -> tuple[str, int]:
    def find() -> Any:
        return next((m for line in list(srv.lines) if (m := LISTEN_RE.fullmatch(line)) and m.group(1) == "amqp"),
                    None)

    m = wait_until(find, 10, "the amqp listening line")
    return m.group(2), int(m.group(3))


class RawAmqp:
    """One AMQP connection: a blocking socket and an amqpproto client codec."""

    def __init__(self, addr: tuple[str, int], timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.conn = A.Connection(A.CLIENT)

    def send(self, *events: Any) -> None:
        now = time.time()
        self.sock.sendall(b"".join(self.conn.send(ev, now) for ev in events))

    def next(self) -> Any:
        while (ev := self.conn.next_event()) is A.NEED_DATA:
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("the broker closed the connection")
            self.conn.receive_data(data, time.time())
        return ev

    def expect(self, cls: type) -> Any:
        ev = self.next()
        assert isinstance(ev, cls), ev
        return ev

    def close(self) -> None:
        self.sock.close()


def open_all(addr: tuple[str, int], n: int) -> list[RawAmqp]:
    """Open ``n`` connections with channel 1, each handshake step pipelined across all of them."""
    conns = [RawAmqp(addr) for _ in range(n)]
    for c in conns:
        c.send(A.ProtocolHeader())
    for c in conns:
        c.expect(spec.ConnectionStart)
        c.send(spec.ConnectionStartOk({"product": "load"}, "PLAIN", A.plain_response("guest", "guest"), "en_US"))
    for c in conns:
        tune = c.expect(spec.ConnectionTune)
        c.send(c.conn.tune_ok(tune), spec.ConnectionOpen("/"))
    for c in conns:
        c.expect(spec.ConnectionOpenOk)
        c.send(spec.ChannelOpen(channel=1))
    for c in conns:
        c.expect(spec.ChannelOpenOk)
    return conns


def test_thousand_concurrent_connections(server: ServerProcess) -> None:
    n = 1000
    tag = os.getpid()
    conns: list[RawAmqp] = []
    try:
        conns = open_all(amqp_address(server), n)
        for i, c in enumerate(conns):
            c.send(spec.QueueDeclare(queue=f"load-{tag}-{i}", auto_delete=True, channel=1))
        for i, c in enumerate(conns):
            assert c.expect(spec.QueueDeclareOk).queue == f"load-{tag}-{i}"
        # every connection publishes to its neighbour's queue, then consumes its own
        for i, c in enumerate(conns):
            c.send(spec.BasicPublish(routing_key=f"load-{tag}-{(i + 1) % n}", body=b"from %d" % i, channel=1),
                   spec.BasicConsume(queue=f"load-{tag}-{i}", consumer_tag="c", channel=1))
        for i, c in enumerate(conns):
            c.expect(spec.BasicConsumeOk)
            d = c.expect(spec.BasicDeliver)
            assert d.body == b"from %d" % ((i - 1) % n)
            c.send(spec.BasicAck(d.delivery_tag, channel=1))
        for c in conns:
            c.send(spec.ConnectionClose(200, "bye", 0, 0))
        for c in conns:
            c.expect(spec.ConnectionCloseOk)
    finally:
        for c in conns:
            c.close()
    # the server is still fine afterwards
    (c,) = open_all(amqp_address(server), 1)
    c.send(spec.QueueDeclare(queue=f"load-{tag}-0", passive=True, channel=1))
    close = c.expect(spec.ChannelClose)  # auto-deleted with its consumer
    assert close.reply_code == 404
    c.close()


def test_publisher_confirms_under_load(server: ServerProcess) -> None:
    """4 connections x 5,000 persistent messages to a durable queue, at most 256 unconfirmed each:
    every sequence number is confirmed exactly once (multiple=true acks covering runs of them)."""
    publishers, per, window = 4, 5000, 256
    q = f"confirms-{os.getpid()}"
    addr = amqp_address(server)
    (admin,) = open_all(addr, 1)
    admin.send(spec.QueueDeclare(queue=q, durable=True, channel=1))
    admin.expect(spec.QueueDeclareOk)
    conns = open_all(addr, publishers)
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def publish(k: int, c: RawAmqp) -> None:
        try:
            c.send(spec.ConfirmSelect(channel=1))
            c.expect(spec.ConfirmSelectOk)
            confirmed: dict[int, int] = {}  # seq -> times confirmed
            multiples = 0
            sent = 0
            props = BasicProperties(delivery_mode=2)

            def settle(ev: Any) -> int:
                nonlocal multiples
                assert isinstance(ev, spec.BasicAck), ev  # no nacks expected
                upto = ev.delivery_tag
                seqs = [s for s in range(1, upto + 1) if s not in confirmed] if ev.multiple else [upto]
                if ev.multiple:
                    multiples += 1
                for s in seqs:
                    confirmed[s] = confirmed.get(s, 0) + 1
                return len(seqs)

            while sent < per:
                burst = min(window - (sent - len(confirmed)), per - sent)
                if burst:
                    c.send(*(spec.BasicPublish(routing_key=q, properties=props, body=b"%d:%d" % (k, sent + j),
                                               channel=1) for j in range(burst)))
                    sent += burst
                settle(c.next())
            while len(confirmed) < per:
                settle(c.next())
            results[k] = {"confirmed": confirmed, "multiples": multiples}
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=publish, args=(k, c)) for k, c in enumerate(conns)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        assert not errors, errors
        for k in range(publishers):
            confirmed = results[k]["confirmed"]
            assert sorted(confirmed) == list(range(1, per + 1))
            assert set(confirmed.values()) == {1}, "a sequence number was confirmed twice"
        # the broker coalesces what one fsync releases
        assert sum(r["multiples"] for r in results.values()) > 0
        admin.send(spec.QueueDeclare(queue=q, passive=True, channel=1))
        assert admin.expect(spec.QueueDeclareOk).message_count == publishers * per
        admin.send(spec.QueueDelete(queue=q, channel=1))
        assert admin.expect(spec.QueueDeleteOk).message_count == publishers * per
    finally:
        for c in (*conns, admin):
            c.close()
