"""Publisher confirms coalesced per read: the confirms one read of pipelined transient publishes
releases go out as one basic.ack multiple=true per channel, and never after a later method of the
same channel (a return, a declare-ok, or the broker's channel.close for an error). A client that
closes the channel or connection itself gets no confirm after its close (the spec has the peer
discard them), as with RabbitMQ, whose confirms for a closing channel may be dropped."""

from __future__ import annotations

from enginetest_helpers import amqp, confirm_outcomes, new_net
from test_engine_amqp import declare, publish

from amqpproto import spec
from engine.testing import AmqpSimClient, SimNetwork


def confirming(n_queues: int = 1) -> tuple[SimNetwork, AmqpSimClient]:
    net = new_net()
    c = amqp(net)
    for i in range(n_queues):
        declare(c, f"q{i}")
    c.call(spec.ConfirmSelect(channel=1))
    c.received.clear()
    return net, c


def acks_and_nacks(c: AmqpSimClient) -> list[tuple[str, int, bool]]:
    return [(type(e).__name__, e.delivery_tag, e.multiple) for e in c.received
            if isinstance(e, (spec.BasicAck, spec.BasicNack))]


def test_one_read_of_publishes_gets_one_multiple_ack() -> None:
    net, c = confirming()
    for i in range(100):
        publish(c, "q0", str(i).encode())
    net.run_until_idle()  # the client's writes reach the broker as one read
    assert acks_and_nacks(c) == [("BasicAck", 100, True)]
    assert confirm_outcomes(c) == [("ack", n) for n in range(1, 101)]


def test_a_lone_publish_gets_a_single_ack() -> None:
    net, c = confirming()
    publish(c, "q0", b"x")
    net.run_until_idle()
    assert acks_and_nacks(c) == [("BasicAck", 1, False)]


def test_coalesced_acks_go_before_the_channels_next_reply() -> None:
    net, c = confirming()
    publish(c, "q0", b"a")
    publish(c, "q0", b"b")
    publish(c, "nowhere", b"c", mandatory=True)  # basic.return, then its ack
    c.send(spec.QueueDeclare(queue="q0", passive=True, channel=1))
    net.run_until_idle()
    kinds = [(type(e).__name__, getattr(e, "delivery_tag", None)) for e in c.received]
    assert kinds == [("BasicAck", 2), ("BasicReturn", None), ("BasicAck", 3), ("QueueDeclareOk", None)]


def test_a_client_channel_close_gets_close_ok_and_nothing_after_it() -> None:
    net, c = confirming()
    publish(c, "q0", b"a")
    c.send(spec.ChannelClose(200, "", 0, 0, channel=1))
    net.run_until_idle()
    assert [type(e).__name__ for e in c.received][-1] == "ChannelCloseOk"
    assert net.broker.model.vhosts["/"].queues["q0"].count == 1  # the publish itself took effect


def test_acks_owed_before_a_channel_error_precede_the_channel_close() -> None:
    net, c = confirming()
    publish(c, "q0", b"a")
    publish(c, "q0", b"b")
    publish(c, "q0", b"c", exchange="no-such-exchange")  # 404 closes the channel
    net.run_until_idle()
    assert [type(e).__name__ for e in c.received] == ["BasicAck", "ChannelClose"]
    assert confirm_outcomes(c) == [("ack", 1), ("ack", 2)]
    assert c.last(spec.ChannelClose).reply_code == 404


def test_channels_are_coalesced_separately() -> None:
    net, c = confirming()
    c.open_channel(2)
    c.call(spec.ConfirmSelect(channel=2))
    c.received.clear()
    for _ in range(3):
        publish(c, "q0", b"1", ch=1)
        publish(c, "q0", b"2", ch=2)
    net.run_until_idle()
    assert sorted((e.channel, e.delivery_tag, e.multiple) for e in c.of(spec.BasicAck)) == [(1, 3, True), (2, 3, True)]


def test_a_client_connection_close_gets_close_ok() -> None:
    net, c = confirming()
    publish(c, "q0", b"a")
    c.send(spec.ConnectionClose(200, "", 0, 0))
    net.run_until_idle()
    assert [type(e).__name__ for e in c.received][-1] == "ConnectionCloseOk"
    assert net.broker.model.vhosts["/"].queues["q0"].count == 1
