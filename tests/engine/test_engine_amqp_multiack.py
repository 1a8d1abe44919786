"""basic.ack multiple=true on the engine: partial ranges around single acks, the whole window,
and an unknown tag below the window (406), checked through what basic.recover redelivers."""

from __future__ import annotations

from enginetest_helpers import new_net
from test_engine_amqp import amqp, declare, publish

from amqpproto import BasicProperties, spec


def test_multiple_acks_take_exactly_the_tags_up_to_the_given_one() -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "q")
    for i in range(1, 11):
        publish(c, "q", str(i).encode(), props=BasicProperties(delivery_mode=1))
    c.call(spec.BasicConsume(queue="q", consumer_tag="t", channel=1))
    net.run_until_idle()
    assert [d.delivery_tag for d in c.of(spec.BasicDeliver)] == list(range(1, 11))
    c.send(spec.BasicAck(3, channel=1))  # a hole in the middle
    c.send(spec.BasicAck(5, multiple=True, channel=1))  # 1, 2, 4, 5
    c.send(spec.BasicAck(7, multiple=True, channel=1))  # 6, 7
    net.run_until_idle()
    c.call(spec.BasicRecover(requeue=True, channel=1))
    net.run_until_idle()
    again = c.of(spec.BasicDeliver)[10:]
    assert [(d.body, d.redelivered) for d in again] == [(b"8", True), (b"9", True), (b"10", True)]
    assert [d.delivery_tag for d in again] == [11, 12, 13]
    c.send(spec.BasicAck(13, multiple=True, channel=1))  # the whole window at once
    net.run_until_idle()
    c.call(spec.BasicRecover(requeue=True, channel=1))
    net.run_until_idle()
    assert len(c.of(spec.BasicDeliver)) == 13  # nothing left to redeliver
    c.send(spec.BasicAck(4, multiple=True, channel=1))  # long gone: unknown tag
    net.run_until_idle()
    close = c.last(spec.ChannelClose)
    assert close is not None and close.reply_code == spec.PRECONDITION_FAILED
