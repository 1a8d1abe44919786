"""The sans-IO core without sockets or clocks: an amqpproto SERVER-role connection plays the broker, the
test moves the bytes and sets the time. Covers what a real broker makes hard to time: confirms in flight
at the moment of loss, operations issued while disconnected, exactly what is restored, back-off."""

from __future__ import annotations

from typing import Any

import pytest

import amqpproto as amqp
from amqpproto import spec
from sansmq_client import BrokerClosedConnection, ConnectionLost, parse_url
from sansmq_client._core import Core

#: the broker's automatic answers to the client's synchronous methods
ANSWERS: dict[type, Any] = {
    spec.ChannelOpen: lambda m: spec.ChannelOpenOk(channel=m.channel),
    spec.ConfirmSelect: lambda m: spec.ConfirmSelectOk(channel=m.channel),
    spec.QueueDeclare: lambda m: spec.QueueDeclareOk(queue=m.queue, channel=m.channel),
    spec.ExchangeDeclare: lambda m: spec.ExchangeDeclareOk(channel=m.channel),
    spec.QueueBind: lambda m: spec.QueueBindOk(channel=m.channel),
    spec.BasicQos: lambda m: spec.BasicQosOk(channel=m.channel),
    spec.BasicConsume: lambda m: spec.BasicConsumeOk(consumer_tag=m.consumer_tag, channel=m.channel),
}


class FakeBroker:
    """One connection's broker side; ``answer`` lists the method types it replies to by itself."""

    def __init__(self, core: Core, answer: set[type] | None = None) -> None:
        self.core, self.conn = core, amqp.Connection(amqp.SERVER, heartbeat=0)
        self.answer = set(ANSWERS) if answer is None else answer
        self.received: list[Any] = []
        core.attach()

    def pump(self) -> list[Any]:
        """Move bytes both ways until quiet; the methods the broker got this time."""
        got: list[Any] = []
        while data := self.core.data_to_send():
            self.conn.receive_data(data, now=0)
            while (ev := self.conn.next_event()) is not amqp.NEED_DATA:
                got.append(ev)
                self._react(ev)
        self.received += got
        return got

    def send(self, event: Any) -> None:
        self.core.receive_data(self.conn.send(event, now=0))

    def _react(self, ev: Any) -> None:
        if isinstance(ev, amqp.ProtocolHeader):
            self.send(spec.ConnectionStart(mechanisms=b"PLAIN"))
        elif isinstance(ev, spec.ConnectionStartOk):
            self.send(self.conn.tune())
        elif isinstance(ev, spec.ConnectionOpen):
            self.send(spec.ConnectionOpenOk())
        elif type(ev) in self.answer:
            self.send(ANSWERS[type(ev)](ev))


def new_core(url: str = "amqp://h1:1,h2:2/?reconnect_delay=0.5&reconnect_max_delay=3") -> Core:
    return Core(parse_url(url), lambda: 0.0)


def connected() -> tuple[Core, FakeBroker]:
    core = new_core()
    broker = FakeBroker(core)
    broker.pump()
    assert core.ready and core.connected.done
    return core, broker


def test_confirms_in_flight_fail_and_operations_while_down_wait_for_the_next_connection() -> None:
    core, broker = connected()
    first, second = core.publish("q", b"1", {}, {}, True), core.publish("q", b"2", {}, {}, True)
    broker.pump()
    broker.send(spec.BasicAck(delivery_tag=1, channel=2))
    assert first.done and first.error is None and not second.done
    core.detach(ConnectionLost("socket reset"))       # the second was never confirmed ...
    assert isinstance(second.error, ConnectionLost)   # ... so it fails, it is not lost silently
    later = core.publish("q", b"3", {}, {}, True)     # issued while no connection is ready: it waits
    assert not later.done and core.backlog
    broker = FakeBroker(core)
    sent = broker.pump()
    publishes = [m for m in sent if isinstance(m, spec.BasicPublish)]
    assert [m.body for m in publishes] == [b"3"]
    # it went out after the publishing channel was back in confirm mode, so its confirm is tag 1 again
    assert sent.index(publishes[0]) > next(i for i, m in enumerate(sent) if isinstance(m, spec.ConfirmSelect))
    broker.send(spec.BasicAck(delivery_tag=1, channel=2))
    assert later.done and later.error is None


def test_a_close_that_crosses_the_loss_of_the_socket_is_final() -> None:
    """close() on a ready session, then the socket dies before the close-ok (the broker went away, or the
    socket broke under the client): no reconnect follows (a front end would join a thread that never
    ends), and close() is done."""
    core, broker = connected()
    closing = core.close()
    core.detach(ConnectionLost("socket reset"))
    assert closing.done and core.final_error is not None


def test_a_nack_and_a_multiple_ack_settle_the_right_publishes() -> None:
    core, broker = connected()
    p = [core.publish("q", str(i).encode(), {}, {}, True) for i in range(4)]
    broker.pump()
    broker.send(spec.BasicNack(delivery_tag=2, channel=2))
    broker.send(spec.BasicAck(delivery_tag=4, multiple=True, channel=2))
    assert [type(x.error).__name__ if x.error else "ok" for x in p] == ["ok", "PublishNacked", "ok", "ok"]


def test_reconnect_restores_declarations_and_consumers_with_the_stream_resume_offset() -> None:
    core, broker = connected()
    core.declare("exchange", {"exchange": "x", "type": "topic"})
    core.declare("queue", {"queue": "s", "durable": True, "arguments": {"x-queue-type": "stream"}})
    core.declare("bind", {"queue": "s", "exchange": "x", "routing_key": "#"})
    core.declare("queue", {"queue": "", "exclusive": True})  # server-named: cannot come back by name
    core.declare("queue", {"queue": "s", "passive": True})   # a check, not a declaration
    got: list[Any] = []
    consumer, _ = core.subscribe("s", 10, False, "first", {}, got.append, lambda e: None)
    broker.pump()
    for offset in (0, 1, 2):
        broker.send(spec.BasicDeliver(consumer_tag=consumer.tag, delivery_tag=offset + 1, channel=3,
                                      properties=spec.BasicProperties(headers={"x-stream-offset": offset}),
                                      body=b"m"))
    core.settle(got[0], "ack", False)
    core.settle(got[1], "ack", False)  # processed: 0 and 1; 2 arrived but was not acked
    core.detach(ConnectionLost("gone"))
    broker = FakeBroker(core)
    sent = broker.pump()
    restored = [(type(m).__name__, getattr(m, "queue", getattr(m, "exchange", ""))) for m in sent
                if isinstance(m, spec.ExchangeDeclare | spec.QueueDeclare | spec.QueueBind)]
    assert restored == [("ExchangeDeclare", "x"), ("QueueDeclare", "s"), ("QueueBind", "s")]
    consume = next(m for m in sent if isinstance(m, spec.BasicConsume))
    assert consume.arguments["x-stream-offset"] == 2 and consume.consumer_tag == consumer.tag
    assert core.is_stale(got[2])  # the unacked one from the old connection is not handed out again


def test_broker_close_names_the_method_and_the_channel_it_came_from() -> None:
    core, broker = connected()
    broker.answer.discard(spec.QueueDeclare)
    pending = core.declare("queue", {"queue": "q"})
    broker.pump()
    broker.send(spec.ConnectionClose(reply_code=541, reply_text="INTERNAL_ERROR", class_id=50, method_id=10))
    error = pending.error
    assert isinstance(error, BrokerClosedConnection)
    assert (error.reply_code, error.method, error.channel) == (541, "queue.declare", 1)
    assert core.session is not None and core.session.fatal  # not a transient close: no reconnect
    assert isinstance(broker.pump()[-1], spec.ConnectionCloseOk)
    core.detach()
    assert core.final_error is error and core.connected.done


@pytest.mark.parametrize("failures, delay", [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (9, 3.0)])
def test_backoff_doubles_up_to_its_cap(failures: int, delay: float) -> None:
    core = new_core()
    core.failures = failures
    assert core.backoff() == delay


def test_hosts_rotate_and_the_first_connect_gives_up_after_each_was_tried() -> None:
    core = new_core()
    assert [core.next_host() for _ in range(3)] == [("h1", 1), ("h2", 2), ("h1", 1)]
    core.connect_failed(OSError("refused"))
    assert core.final_error is None
    core.connect_failed(OSError("refused"))
    assert isinstance(core.final_error, ConnectionLost) and "h2" in str(core.final_error)


def test_a_forced_close_fails_what_is_in_flight_as_lost_and_is_not_final() -> None:
    core, broker = connected()
    pending = core.publish("q", b"1", {}, {}, True)
    broker.pump()
    broker.send(spec.ConnectionClose(reply_code=320, reply_text="CONNECTION_FORCED - bye"))
    assert isinstance(pending.error, ConnectionLost)
    assert isinstance(pending.error.__cause__, BrokerClosedConnection)
    assert pending.error.__cause__.reply_code == 320
    core.detach()
    assert core.final_error is None  # the front end reconnects
    FakeBroker(core).pump()
    assert core.ready and core.generation == 2


def test_channels_are_reused_only_after_their_close_handshake_and_a_broker_cancel_closes_one() -> None:
    core, broker = connected()

    def subscribe(queue: str) -> tuple[Any, int]:
        consumer, _ = core.subscribe(queue, 0, False, None, {}, lambda d: None, lambda e: None)
        opened = [m.channel for m in broker.pump() if isinstance(m, spec.ChannelOpen)]
        return consumer, opened[0]

    first, ch = subscribe("a")
    assert ch == 3
    core.cancel(first)
    assert [type(m) for m in broker.pump()] == [spec.ChannelClose]
    assert subscribe("b")[1] == 4        # 3 is still closing
    broker.send(spec.ChannelCloseOk(channel=3))
    third, ch = subscribe("c")
    assert ch == 3                       # now it is free again
    ended: list[BaseException | None] = []
    third.on_end = ended.append
    broker.send(spec.BasicCancel(consumer_tag=third.tag, channel=3))  # e.g. its queue was deleted
    assert [type(m) for m in broker.pump()] == [spec.ChannelClose]
    assert len(ended) == 1 and type(ended[0]).__name__ == "ConsumerCancelled"
    assert third.tag not in core.consumers  # not restored on the next connection
