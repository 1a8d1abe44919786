"""The byte-bounded range of a stream on a passive queue.declare (capability ``stream_range_bytes``),
deterministic (SimNetwork, FakeStore, syncs only when the test says): the answer follows the log's
``end_within_bytes``, stops at the committed end while appends wait for their sync, and the refusals
(406 for bad arguments or a queue that is no stream, 403 without read permission) close only the
asking channel."""

from __future__ import annotations

from typing import Any

from enginetest_helpers import new_net
from test_engine_amqp import amqp, declare, publish
from test_engine_streams import stream

from amqpproto import spec
from engine.model.security import Permission
from engine.testing import AmqpSimClient, FakeStore

RANGE = "x-stream-range-start", "x-stream-range-bytes"


def ask(c: AmqpSimClient, start: Any, budget: Any, queue: str = "s", ch: int = 1) -> Any:
    return declare(c, queue, ch, passive=True, arguments=dict(zip(RANGE, (start, budget), strict=True)))


def test_the_answer_is_the_logs_and_never_past_the_committed_end() -> None:
    net = new_net(store=FakeStore(), auto_sync=False)
    c = amqp(net)
    assert c.last(spec.ConnectionStart).server_properties["capabilities"]["stream_range_bytes"] is True
    stream(c)
    for i in range(10):
        publish(c, "s", b"x" * (100 + i))
    net.run_until_idle()
    net.complete_syncs()
    for _ in range(10, 20):  # appended, not synced: not readable yet
        publish(c, "s", b"x" * 100)
    net.run_until_idle()
    log = net.broker.model.streams.log(net.broker.model.vhosts["/"].queues["s"])
    assert (log.committed, log.tail) == (10, 20)
    for start, budget in ((0, 1), (0, 500), (3, 700), (0, 10**9), (9, 10**9), (10, 10**9), (25, 5)):
        ok = ask(c, start, budget)
        assert isinstance(ok, spec.QueueDeclareOk), ok
        assert ok.message_count == log.end_within_bytes(start, budget), (start, budget)
    assert ask(c, 0, 10**9).message_count == 10
    assert ask(c, 0, 1).message_count == 1
    net.complete_syncs()
    assert ask(c, 0, 10**9).message_count == 20


def test_bad_arguments_and_other_queues_are_406_on_that_channel_only() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net, channels=2)
    stream(c)
    declare(c, "classic", durable=True)
    cases = [({RANGE[0]: 0}, RANGE[1]), ({RANGE[1]: 10}, RANGE[0]), ({RANGE[0]: -1, RANGE[1]: 10}, RANGE[0]),
             ({RANGE[0]: 0, RANGE[1]: 0}, RANGE[1]), ({RANGE[0]: 0, RANGE[1]: True}, RANGE[1]),
             ({RANGE[0]: "0", RANGE[1]: 10}, RANGE[0])]
    for args, named in cases:
        closed = declare(c, "s", passive=True, arguments=args)
        assert isinstance(closed, spec.ChannelClose) and closed.reply_code == 406, closed
        assert f"invalid arg '{named}'" in closed.reply_text
        assert isinstance(c.open_channel(1), spec.ChannelOpenOk)
    closed = ask(c, 0, 10, queue="classic")
    assert isinstance(closed, spec.ChannelClose) and closed.reply_code == 406
    assert "queue 'classic' in vhost '/' is not a stream" in closed.reply_text
    assert isinstance(declare(c, "s", ch=2, passive=True), spec.QueueDeclareOk)  # the other channel lives on


def test_sizes_need_the_read_permission() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    security = net.broker.model.security
    security.add_user("writer", "pw", b"salt")
    security.set_permissions(Permission("writer", "/", configure=".*", write=".*", read=""))
    w = amqp(net, user="writer", password="pw")
    assert isinstance(declare(w, "s", passive=True), spec.QueueDeclareOk)  # a plain passive declare: allowed
    closed = ask(w, 0, 10)
    assert isinstance(closed, spec.ChannelClose) and closed.reply_code == 403, closed
