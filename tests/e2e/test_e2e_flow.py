"""Credit flow over real sockets, on each server kind: a STOMP publisher that writes as fast as its
socket takes, with one pika consumer that acks each message (slower than the publisher), keeps the
broker's ready count near the credit instead of growing it. The server is started with
``--flow-credit`` and ``--tcp-recv-buffer``, so both CLI knobs are exercised too."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pika
import pytest
from e2ekit import RawStomp, ServerProcess, start_server, uid, wait_until

from servers._sockets import READ_SIZE

pytestmark = pytest.mark.timeout(240)

CREDIT = 50
BODY = b"f" * 2000
#: ready messages the queue may reach: the credit, plus what one read of the publisher can carry
#: (the check runs after a read has been handled, as RabbitMQ's runs after a command)
BOUND = CREDIT + READ_SIZE // len(BODY) + 1
#: deliveries the consumer takes before the test ends: many times the bound
DELIVERIES = 20 * BOUND


@pytest.fixture(scope="module")
def server(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    path.write_text("[limits]\nheartbeat = [250, 500]\n")
    srv = start_server(kind, path, "--flow-credit", str(CREDIT), "--tcp-recv-buffer", "64KiB")
    try:
        yield srv
    finally:
        code = srv.terminate()
    assert code == 0, srv.lines[-20:]


class Publisher(threading.Thread):
    """SENDs to ``/queue/NAME`` in a loop, blocking whenever the broker stops reading it."""

    def __init__(self, srv: ServerProcess, queue: str) -> None:
        super().__init__(daemon=True)
        self.raw = RawStomp(("127.0.0.1", srv.port("stomp")), timeout=None)  # type: ignore[arg-type]
        self.raw.connect()
        one = f"SEND\ndestination:/queue/{queue}\ncontent-length:{len(BODY)}\n\n".encode() + BODY + b"\x00"
        self.batch = one * 16
        self.sent = 0  # messages the kernel took
        self.error: BaseException | None = None
        self.stopping = False

    def run(self) -> None:
        try:
            while not self.stopping:
                self.raw.send(self.batch)
                self.sent += 16
        except OSError as exc:
            if not self.stopping:
                self.error = exc

    def stop(self) -> None:
        self.stopping = True
        try:
            self.raw.sock.shutdown(socket.SHUT_RDWR)  # wakes a sendall the broker is not reading
        except OSError:
            pass
        self.join(10)
        self.raw.close()


def test_unbounded_publisher_with_a_slow_consumer_keeps_the_queue_bounded(server: ServerProcess) -> None:
    q = uid("flow")
    params = pika.ConnectionParameters("127.0.0.1", server.port("amqp"), connection_attempts=1, socket_timeout=10)
    consumer, observer = pika.BlockingConnection(params), pika.BlockingConnection(params)
    pub: Publisher | None = None
    try:
        ch, och = consumer.channel(), observer.channel()
        ch.queue_declare(q)
        ch.basic_qos(prefetch_count=10)

        def ready() -> int:
            return int(och.queue_declare(q, passive=True).method.message_count)

        # the publisher starts once the consumer is attached (credit applies to queues with consumers)
        och.basic_publish("", q, BODY)
        pub = Publisher(server, q)
        got, peak = 0, 0
        for method, _, body in ch.consume(q, inactivity_timeout=30):
            assert method is not None, f"deliveries stalled after {got}, publisher sent {pub.sent}, {pub.error}"
            assert body == BODY
            if got == 0:
                pub.start()
            ch.basic_ack(method.delivery_tag)
            got += 1
            if got % 25 == 0:
                peak = max(peak, ready())
            if got >= DELIVERIES:
                break
        assert pub.error is None, pub.error
        # with the consumer stopped, the publisher fills the queue until credit holds it back (it is
        # paused at the credit and stays paused above half of it)
        wait_until(lambda: ready() > CREDIT // 2, 30, "the queue to fill up to its credit")
        peak = max(peak, ready())
        assert peak <= BOUND, (peak, BOUND)
    finally:
        if pub is not None:
            pub.stop()
        if observer.is_open:
            observer.channel().queue_delete(q)
            observer.close()
        if consumer.is_open:
            consumer.close()
