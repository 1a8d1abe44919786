"""The sync client's path for a confirmed publish (issue 26: its speed beside stomp.py): the caller writes
the frame and reads the answer itself, so a publish costs one send and one recv on the broker's socket and
no hop through the I/O thread; the socket has TCP_NODELAY; deliveries that arrive while a caller reads
still reach their subscription."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from clientkit import Broker, name

import sansmq_client.sync

N = 200


class CountingSocket(socket.socket):
    """A real socket that counts its sends and recvs (the client's socket to the broker)."""

    sends = 0
    recvs = 0

    def send(self, data: Any, *args: Any) -> int:
        CountingSocket.sends += 1
        return super().send(data, *args)

    def recv(self, size: int, *args: Any) -> bytes:
        CountingSocket.recvs += 1
        return super().recv(size, *args)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[CountingSocket]:
    real = socket.create_connection

    def create_connection(*args: Any, **kwargs: Any) -> socket.socket:
        s = real(*args, **kwargs)
        return CountingSocket(s.family, s.type, s.proto, fileno=s.detach())
    monkeypatch.setattr(sansmq_client.sync.socket, "create_connection", create_connection)
    CountingSocket.sends = CountingSocket.recvs = 0
    return CountingSocket


@pytest.mark.parametrize("protocol", ["stomp", "amqp"])
def test_a_confirmed_publish_is_one_send_and_one_recv_without_waking_the_io_thread(
        broker: Broker, protocol: str, counting: type[CountingSocket], monkeypatch: pytest.MonkeyPatch) -> None:
    conn = sansmq_client.sync.connect(broker.url(protocol))
    try:
        assert isinstance(conn._sock, CountingSocket)
        assert conn._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        where = conn.declare_queue(name()) if protocol == "amqp" else f"/queue/{name()}"
        wakes: list[None] = []
        monkeypatch.setattr(conn, "_wake", lambda: wakes.append(None))
        sends, recvs = counting.sends, counting.recvs
        for i in range(N):
            conn.publish(where, b"%d" % i)  # each returns once the broker confirmed it
        assert counting.sends - sends == N
        assert N <= counting.recvs - recvs <= N + 5  # a heart-beat may come along (never one recv per byte)
        assert len(wakes) <= 1  # at most once: a streak of calls begins (the I/O thread then stays out)
    finally:
        conn.close()


def test_deliveries_read_by_a_publishing_caller_reach_their_subscription(broker: Broker) -> None:
    """The caller that reads its receipts also reads the MESSAGEs of the connection's own subscription."""
    conn = sansmq_client.sync.connect(broker.url("stomp"))
    try:
        where = f"/queue/{name()}"
        sub = conn.subscribe(where, prefetch=N)
        for i in range(N):
            conn.publish(where, b"%d" % i)
        got = []
        for d in sub:
            conn.ack(d)
            got.append(int(d.body))
            if len(got) == N:
                break
        assert got == list(range(N))
    finally:
        conn.close()


@pytest.mark.parametrize("protocol", ["stomp", "amqp"])
def test_after_a_streak_of_calls_the_io_thread_reads_again_within_lend(broker: Broker, protocol: str) -> None:
    """Callers keep the socket's input while calls keep coming; once they stop, the I/O thread takes it back
    within LEND, so a delivery for an idle connection is not left waiting for the next heart-beat."""
    consumer = sansmq_client.sync.connect(broker.url(protocol))
    publisher = sansmq_client.sync.connect(broker.url(protocol))
    try:
        where = consumer.declare_queue(name()) if protocol == "amqp" else f"/queue/{name()}"
        got: list[tuple[bytes, float]] = []
        consumer.subscribe(where, lambda d: (got.append((d.body, time.monotonic())), consumer.ack(d)))
        time.sleep(0.2)  # the subscribe was the consumer's last call: its I/O thread has input back by now
        assert consumer._caller_reads is False
        sent = time.monotonic()
        publisher.publish(where, b"hello")
        deadline = sent + 5  # the heart-beats are 10 s (STOMP) and 60 s (AMQP) apart
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got and got[0][0] == b"hello" and got[0][1] - sent < 2
    finally:
        consumer.close()
        publisher.close()
