"""Stream filtering in the broker, deterministic (SimNetwork, FakeStore): AMQP consumers with
``x-stream-filter`` / ``x-stream-match-unfiltered`` and STOMP subscriptions with the same headers get
exactly the matching messages, in offset order, skipping unmatched chunks unread; a tracked
consumer's offset moves past what it skipped; bad arguments are a 406 / STOMP ERROR harming nothing
else."""

from __future__ import annotations

from typing import Any

from enginetest_helpers import connected, new_net, send, subscribe
from test_engine_amqp import amqp, publish
from test_engine_streams import consume, offsets, stream, streams_q

from amqpproto import BasicProperties, spec
from engine.streams.filtering import GROUP_MIN
from engine.testing import AmqpSimClient, FakeStore, SimNetwork
from stompproto import Ack, Error, Message

C = GROUP_MIN  # a chunk this long gets a filter of its own


def regions(net: SimNetwork, c: AmqpSimClient, chunks: list[list[str | None]]) -> None:
    """One chunk per list (the broker syncs after each): a message per filter value."""
    i = 0
    for values in chunks:
        for v in values:
            headers = None if v is None else {"x-stream-filter-value": v}
            publish(c, "s", b"m%d" % i, props=BasicProperties(headers=headers))
            i += 1
        net.run_until_idle()


def test_an_amqp_consumer_gets_exactly_its_values_and_unmatched_chunks_are_never_read() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    regions(net, c, [["eu"] * C, ["us"] * C, ["eu", "us"] + [None] * (C - 2), ["asia"] * C])
    log = net.broker.model.streams.log(streams_q(net, "s"))
    eu = amqp(net)
    consume(eu, prefetch=1000, **{"x-stream-offset": "first", "x-stream-filter": "eu"})
    assert offsets(eu) == [*range(C), 2 * C]
    assert log.filter_decoded == 2 * C  # chunks 1 and 3 were skipped unread
    both = amqp(net)
    consume(both, prefetch=1000, **{"x-stream-offset": "first", "x-stream-filter": ["us", "asia"],
                                    "x-stream-match-unfiltered": True})
    assert offsets(both) == [*range(C, 2 * C), *range(2 * C + 1, 4 * C)]
    plain = amqp(net)
    consume(plain, prefetch=1000, **{"x-stream-offset": "first", "x-stream-match-unfiltered": True})  # no filter
    assert offsets(plain) == list(range(4 * C))
    regions(net, c, [["eu", "us"]])  # a consumer waiting at the end gets new matches only
    assert offsets(eu) == [*range(C), 2 * C, 4 * C]
    assert eu.of(spec.BasicDeliver)[-1].properties.headers["x-stream-filter-value"] == "eu"


def test_a_filtered_consumer_with_a_small_prefetch_misses_nothing_and_its_stored_offset_skips_ahead() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    regions(net, c, [["eu", "us"] * 4, ["us"] * 6, ["eu"] * 3])
    r = amqp(net)
    consume(r, prefetch=2, **{"x-stream-offset": "first", "x-stream-filter": "eu", "x-stream-consumer-name": "n"})
    seen: list[int] = []
    while len(seen) < 7:
        got = offsets(r, len(seen))
        assert got, seen
        seen += got
        for d in r.of(spec.BasicDeliver)[-len(got):]:
            r.call(spec.BasicAck(delivery_tag=d.delivery_tag, channel=1))
    assert seen == [0, 2, 4, 6, 14, 15, 16]
    log = net.broker.model.streams.log(streams_q(net, "s"))
    assert log.stored_offset("n") == 17


def test_stomp_subscribers_filter_with_headers_and_publishers_set_the_value_as_a_header() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    p = connected(net)
    for i, v in enumerate(["eu", "us", "eu", "fr"]):
        send(p, "/amq/queue/s", b"s%d" % i, x_stream_filter_value=v)
    send(p, "/amq/queue/s", b"plain")
    net.run_until_idle()
    s = connected(net)
    subscribe(s, "/amq/queue/s", "a", ack="client-individual", prefetch_count="10", x_stream_offset="first",
              x_stream_filter="eu, fr", x_stream_match_unfiltered="true")
    net.run_until_idle()
    msgs = [e for e in s.events() if isinstance(e, Message)]
    assert [bytes(m.body) for m in msgs] == [b"s0", b"s2", b"s3", b"plain"]
    s.send(Ack({"id": msgs[0].headers["ack"]}))
    net.run_until_idle()


def bad_consume(net: SimNetwork, **args: Any) -> Any:
    c = amqp(net)
    c.call(spec.BasicQos(prefetch_count=5, channel=1))
    return c.call(spec.BasicConsume(queue="s", arguments=args, channel=1))


def test_bad_filter_arguments_are_a_406_naming_the_argument_and_harm_nothing_else() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    regions(net, c, [["eu"] * 2])
    good = amqp(net)
    consume(good, **{"x-stream-offset": "first", "x-stream-filter": "eu"})
    for args, named in (({"x-stream-filter": 5}, "x-stream-filter"), ({"x-stream-filter": ["eu", 7]}, "x-stream-filter"),
                        ({"x-stream-filter": ""}, "x-stream-filter"),
                        ({"x-stream-filter": "eu", "x-stream-match-unfiltered": "yes"}, "x-stream-match-unfiltered")):
        bad = bad_consume(net, **args)
        assert isinstance(bad, spec.ChannelClose) and bad.reply_code == 406, args
        assert f"'{named}'" in bad.reply_text
    for size in (15, 256, "16"):
        bad = amqp(net).call(spec.QueueDeclare(queue=f"f{size}", durable=True, channel=1,
                                                arguments={"x-queue-type": "stream", "x-stream-filter-size-bytes": size}))
        assert isinstance(bad, spec.ChannelClose) and bad.reply_code == 406
        assert "'x-stream-filter-size-bytes'" in bad.reply_text
    ok = stream(amqp(net), "big", **{"x-stream-filter-size-bytes": 255})
    assert isinstance(ok, spec.QueueDeclareOk)
    assert net.broker.model.streams.log(streams_q(net, "big")).chunk_filters.nbytes == 255
    regions(net, c, [["eu"]])
    assert offsets(good) == [0, 1, 2]  # the good consumer was not harmed
    stomp = connected(net)
    subscribe(stomp, "/amq/queue/s", "a", ack="client", prefetch_count="10", x_stream_match_unfiltered="maybe",
              x_stream_filter="eu")
    net.run_until_idle()
    errors = [e for e in stomp.events() if isinstance(e, Error)]
    assert len(errors) == 1 and "'x-stream-match-unfiltered'" in bytes(errors[0].body).decode()
    declare = connected(net)
    subscribe(declare, "/queue/g", "a", ack="client", prefetch_count="10", x_queue_type="stream", durable="true",
              auto_delete="false", x_stream_filter_size_bytes="300")
    net.run_until_idle()
    errors = [e for e in declare.events() if isinstance(e, Error)]
    assert len(errors) == 1 and "'x-stream-filter-size-bytes'" in bytes(errors[0].body).decode()


def test_a_consumer_with_an_end_offset_is_cancelled_once_it_read_below_it_even_with_no_match() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    regions(net, c, [["eu"] * C, ["us"] * C, ["eu"] * 2])
    log = net.broker.model.streams.log(streams_q(net, "s"))
    r = amqp(net)
    ok = consume(r, prefetch=1000, **{"x-stream-offset": 0, "x-stream-filter": "eu", "x-stream-end-offset": 2 * C + 1})
    assert offsets(r) == [*range(C), 2 * C]
    assert [m.consumer_tag for m in r.of(spec.BasicCancel)] == [ok.consumer_tag]
    for d in r.of(spec.BasicDeliver):  # its deliveries are still acked on the channel, as after basic.cancel
        assert not isinstance(r.call(spec.BasicAck(delivery_tag=d.delivery_tag, channel=1)), spec.ChannelClose)
    none = amqp(net)  # nothing matches in the "us" chunk: the cancel alone says the range is read
    decoded = log.filter_decoded
    consume(none, **{"x-stream-offset": C, "x-stream-filter": "eu", "x-stream-end-offset": 2 * C})
    assert offsets(none) == [] and len(none.of(spec.BasicCancel)) == 1
    assert log.filter_decoded == decoded  # the "us" chunk was skipped unread
    plain = amqp(net)  # without a filter: offsets below the end, then the cancel
    consume(plain, **{"x-stream-offset": 4, "x-stream-end-offset": 6})
    assert offsets(plain) == [4, 5] and len(plain.of(spec.BasicCancel)) == 1
    waiting = amqp(net)  # an end past the tail: it waits for the appends up to there
    consume(waiting, **{"x-stream-offset": 2 * C + 1, "x-stream-end-offset": 2 * C + 4})
    assert offsets(waiting) == [2 * C + 1] and waiting.of(spec.BasicCancel) == []
    regions(net, c, [["eu", "x", "y", "z"]])
    assert offsets(waiting) == [2 * C + 1, 2 * C + 2, 2 * C + 3] and len(waiting.of(spec.BasicCancel)) == 1
    for bad in (-1, "ten", True):
        got = bad_consume(net, **{"x-stream-end-offset": bad})
        assert isinstance(got, spec.ChannelClose) and "'x-stream-end-offset'" in got.reply_text
    stomp = connected(net)  # STOMP has no frame to end a subscription with: refused
    subscribe(stomp, "/amq/queue/s", "a", ack="client", prefetch_count="10", x_stream_end_offset="5")
    net.run_until_idle()
    errors = [e for e in stomp.events() if isinstance(e, Error)]
    assert len(errors) == 1 and "'x-stream-end-offset'" in bytes(errors[0].body).decode()
