"""Stream queues in the broker, deterministic (SimNetwork, FakeStore, a clock only the test moves):
offsets and offset specs, visibility only after the sync, confirms after it, dedup, server-side
tracking, x-max-age retention on the fake clock, bounded reads for a far-behind consumer, crash
recovery, and the protocol refusals."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from enginetest_helpers import connected, new_net, send, subscribe
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_amqp import amqp, declare, publish

from amqpproto import BasicProperties, spec
from engine import Broker, Config
from engine.stomp.wire import tail_cache
from engine.testing import AmqpSimClient, FakeStore, SimNetwork
from stompproto import Ack, Error, Message

STREAM = {"x-queue-type": "stream"}


def stream(c: AmqpSimClient, name: str = "s", **args: Any) -> Any:
    return declare(c, name, durable=True, arguments={**STREAM, **args})


def consume(c: AmqpSimClient, queue: str = "s", prefetch: int = 100, ch: int = 1, **args: Any) -> Any:
    c.call(spec.BasicQos(prefetch_count=prefetch, channel=ch))
    return c.call(spec.BasicConsume(queue=queue, consumer_tag=f"t{len(c.received)}", arguments=args, channel=ch))


def offsets(c: AmqpSimClient, skip: int = 0) -> list[int]:
    return [d.properties.headers["x-stream-offset"] for d in c.of(spec.BasicDeliver)[skip:]]


def pub(c: AmqpSimClient, n: int, start: int = 0, **headers: Any) -> None:
    for i in range(start, start + n):
        publish(c, "s", b"m%d" % i, props=BasicProperties(headers=headers or None))


def test_offsets_are_visible_only_once_synced_and_confirms_wait_for_the_sync() -> None:
    store = FakeStore()
    net = new_net(store=store, auto_sync=False)
    c = amqp(net, channels=2)
    stream(c)
    c.call(spec.ConfirmSelect(channel=1))
    consume(c, ch=2, **{"x-stream-offset": "first"})
    pub(c, 3)
    net.run_until_idle()
    assert c.of(spec.BasicDeliver) == [] and c.of(spec.BasicAck, channel=1) == []
    net.complete_syncs()
    assert offsets(c) == [0, 1, 2]
    assert c.of(spec.BasicAck, channel=1)[-1].delivery_tag == 3
    ok = declare(c, "s", passive=True)
    assert ok.message_count == 3  # the end offset (capability stream_end_offset)


def test_offset_specs_and_many_readers_at_their_own_pace() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    pub(c, 10)
    net.run_until_idle()
    for spec_, want in (("first", list(range(10))), (7, [7, 8, 9]), ("last", None), ("next", [])):
        r = amqp(net)
        consume(r, **{"x-stream-offset": spec_})
        got = offsets(r)
        if want is None:  # the start of the last chunk: at most the tail end
            assert got and got[-1] == 9
        else:
            assert got == want
    slow = amqp(net)
    consume(slow, prefetch=2, **{"x-stream-offset": "first"})
    assert offsets(slow) == [0, 1]  # prefetch bounds what is in flight
    for tag in (1, 2, 3):
        slow.call(spec.BasicAck(delivery_tag=tag, channel=1))
    assert offsets(slow) == [0, 1, 2, 3, 4]
    net.advance(3600)
    hour = amqp(net)
    pub(c, 1, 10)
    consume(hour, **{"x-stream-offset": "30m"})  # only what was appended in the last 30 minutes
    assert offsets(hour) == [10]


def test_a_far_behind_consumer_reads_bounded_batches() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    pub(c, 2000)
    net.run_until_idle()
    store = net.broker.store
    log = store.stream("/", "s")
    reads: list[int] = []
    real = log.read

    def counting(*a: Any, **kw: Any) -> Any:
        out = real(*a, **kw)
        reads.append(len(out))
        return out

    log.read = counting  # type: ignore[method-assign]
    r = amqp(net)
    consume(r, prefetch=50, **{"x-stream-offset": "first"})
    assert len(r.of(spec.BasicDeliver)) == 50 and max(reads) <= 50
    r.call(spec.BasicAck(delivery_tag=50, multiple=True, channel=1))
    assert offsets(r) == list(range(100)) and max(reads) <= 50


def test_producer_dedup_and_tracking_survive_a_crash() -> None:
    store = FakeStore()
    net = new_net(store=store)
    c = amqp(net)
    stream(c)
    c.call(spec.ConfirmSelect(channel=1))
    for pid in (1, 2, 2, 1, 3):
        publish(c, "s", b"p%d" % pid, props=BasicProperties(headers={"x-producer": "p", "x-publishing-id": pid}))
    net.run_until_idle()
    assert c.of(spec.BasicAck)[-1].delivery_tag == 5  # every publish confirmed, duplicates included
    r = amqp(net)
    consume(r, prefetch=1, **{"x-stream-offset": "first", "x-stream-consumer-name": "me"})
    r.call(spec.BasicAck(delivery_tag=1, channel=1))
    assert [d.body for d in r.of(spec.BasicDeliver)] == [b"p1", b"p2"]
    net.run_until_idle()
    survivor = store.crash()
    net2 = SimNetwork(Broker(Config(), survivor, __import__("random").Random(0)))
    c2 = amqp(net2)
    publish(c2, "s", b"again", props=BasicProperties(headers={"x-producer": "p", "x-publishing-id": 3}))
    publish(c2, "s", b"p4", props=BasicProperties(headers={"x-producer": "p", "x-publishing-id": 4}))
    r2 = amqp(net2)
    consume(r2, **{"x-stream-consumer-name": "me"})  # resumes after its acked offset 0
    assert [d.body for d in r2.of(spec.BasicDeliver)] == [b"p2", b"p3", b"p4"]


def test_max_age_retention_on_the_fake_clock() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c, **{"x-max-age": "10s", "x-stream-max-segment-size-bytes": 100})
    pub(c, 20)
    net.run_until_idle()
    log = net.broker.store.stream("/", "s")
    assert log.first == 0 and log.segment_count > 2
    net.advance(30)  # the retention timer runs: whole old segments go, the active one stays
    assert log.first > 0 and log.segment_count == 1
    r = amqp(net)
    consume(r, **{"x-stream-offset": 0})
    assert offsets(r) == list(range(log.first, 20))


def test_refusals_harm_nothing_else() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net, channels=2)
    stream(c)
    bad = c.call(spec.QueueDeclare(queue="np", durable=False, arguments=STREAM, channel=2))
    assert isinstance(bad, spec.ChannelClose) and bad.reply_code == 406
    c.open_channel(3)
    c.call(spec.BasicQos(prefetch_count=5, channel=3))
    bad = c.call(spec.BasicConsume(queue="s", arguments={"x-stream-offset": "yesterday"}, channel=3))
    assert isinstance(bad, spec.ChannelClose) and "'x-stream-offset'" in bad.reply_text
    get = c.call(spec.BasicGet(queue="s", channel=1))
    assert isinstance(get, spec.ConnectionClose) and get.reply_code == 540
    other = amqp(net)
    assert stream(other).message_count == 0


def filled(n: int) -> tuple[SimNetwork, AmqpSimClient]:
    """A network with the stream ``s`` holding ``n`` synced messages, and the client that published them."""
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    pub(c, n)
    net.run_until_idle()
    return net, c


def test_stomp_subscribe_with_offset_forms() -> None:
    net, c = filled(5)
    s = connected(net)
    subscribe(s, "/amq/queue/s", "a", ack="client-individual", prefetch_count="10", x_stream_offset="offset=3")
    net.run_until_idle()
    msgs = [e for e in s.events() if isinstance(e, Message)]
    assert [m.headers["x-stream-offset"] for m in msgs] == ["3", "4"]
    s.send(Ack({"id": msgs[0].headers["ack"]}))
    net.run_until_idle()
    s2 = connected(net)
    subscribe(s2, "/amq/queue/s", "b", ack="auto", prefetch_count="10")
    net.run_until_idle()
    assert any(isinstance(e, Error) for e in s2.events())  # a stream needs acks


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pub", "ack", "sync"]), st.integers(0, 3)), max_size=40))
def test_a_tracked_consumer_never_skips_an_unacked_offset(ops: list[tuple[str, int]]) -> None:
    """Whatever the interleaving of appends, syncs and acks, a consumer resuming by name starts at
    the lowest offset its predecessor did not ack."""
    store = FakeStore()
    net = new_net(store=store, auto_sync=False)
    c = amqp(net)
    stream(c)
    r = amqp(net)
    consume(r, prefetch=3, **{"x-stream-offset": "first", "x-stream-consumer-name": "n"})
    acked: set[int] = set()
    n = 0
    for op, k in ops:
        if op == "pub":
            pub(c, k + 1, n)
            n += k + 1
        elif op == "sync":
            net.complete_syncs()
        else:
            ds = r.of(spec.BasicDeliver)
            todo = [d for d in ds if d.properties.headers["x-stream-offset"] not in acked][:k + 1]
            for d in todo:
                r.call(spec.BasicAck(delivery_tag=d.delivery_tag, channel=1))
                acked.add(d.properties.headers["x-stream-offset"])
    net.complete_syncs()
    r.close()
    net.run_until_idle()
    expect = min(set(range(n + 1)) - acked)
    r2 = amqp(net)
    consume(r2, prefetch=1, **{"x-stream-offset": "first", "x-stream-consumer-name": "n"})
    net.complete_syncs()
    got = offsets(r2)
    assert got == ([expect] if expect < n else [])


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.lists(st.text(max_size=12), min_size=1, max_size=30))
def test_partition_router_sends_one_key_to_one_partition(n: int, keys: list[str]) -> None:
    from engine.model.routers import PARTITION_ARG, router_for

    router = router_for("direct", {PARTITION_ARG: True})
    for i in range(n):
        router.add(f"p{i}", str(i))
    for key in keys:
        out: dict[Any, None] = {}
        router.route(key, None, out)
        again: dict[Any, None] = {}
        router.route(key, None, again)
        assert len(out) == 1 and out == again
        if key.isascii() and key.isdigit() and int(key) < n and str(int(key)) == key:
            assert list(out) == [f"p{key}"]  # a partition's own key routes to it


def test_deleting_a_stream_cancels_its_consumers_and_frees_nothing_it_did_not_hold() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    pub(c, 5)
    r = amqp(net)
    consume(r, **{"x-stream-offset": "first"})
    assert len(r.of(spec.BasicDeliver)) == 5
    before = net.broker.model.queued_bytes
    assert c.call(spec.QueueDelete(queue="s", channel=1)).message_count == 0
    net.run_until_idle()
    assert r.of(spec.BasicCancel) and net.broker.model.queued_bytes == before
    assert stream(c).message_count == 0  # a new, empty stream of that name


def test_a_sync_wakes_only_the_streams_appended_to_and_keeps_those_still_uncommitted() -> None:
    net = new_net(store=FakeStore(), auto_sync=False)
    c = amqp(net, channels=2)
    for i in range(30):
        stream(c, f"s{i}")
    consume(c, "s5", ch=2, **{"x-stream-offset": "first"})
    streams = net.broker.model.streams
    publish(c, "s5", b"a")
    publish(c, "s6", b"b")
    net.run_until_idle()
    assert list(streams.uncommitted) == [streams_q(net, "s5"), streams_q(net, "s6")]
    net.complete_syncs()
    assert offsets(c) == [0] and not streams.uncommitted
    publish(c, "s5", b"c")  # appended while an earlier sync was under way: that sync's report keeps it
    net.run_until_idle()
    streams.committed()
    assert list(streams.uncommitted) == [streams_q(net, "s5")] and offsets(c) == [0]
    net.complete_syncs()  # the sync covering it wakes its consumer
    assert offsets(c) == [0, 1] and not streams.uncommitted


def streams_q(net: SimNetwork, name: str) -> Any:
    return next(q for q in net.broker.model.streams.logs if q.name == name)


def test_consumers_reading_the_same_records_share_one_copy_of_their_stored_bytes() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    readers = [amqp(net) for _ in range(3)]
    for r in readers:
        consume(r, **{"x-stream-offset": "first"})
    pub(c, 5, h="v")
    net.run_until_idle()
    got = [r.of(spec.BasicDeliver) for r in readers]
    assert [offsets(r) for r in readers] == [[0, 1, 2, 3, 4]] * 3
    assert all(d.properties.headers == {"h": "v", "x-stream-offset": i} for ds in got for i, d in enumerate(ds))
    q = streams_q(net, "s")
    consumers = list(q.consumers)
    assert [list(cons.unacked.values()) for cons in consumers] == [[0, 1, 2, 3, 4]] * 3  # offsets, no entries
    from engine.model.streams import RAW

    cache = net.broker.model.streams.caches[(q, RAW)]
    assert sorted(cache.records) == [0, 1, 2, 3, 4]  # read once, for all readers
    for r in readers:
        r.close()
    net.run_until_idle()
    assert q not in net.broker.model.streams.caches  # no reader left: nothing kept


def test_the_record_cache_is_bounded_and_never_serves_records_retention_removed() -> None:
    from engine.model.streams import CACHE_BYTES, CACHE_RECORDS, RecordCache
    from engine.streams import StreamSettings
    from engine.streams.memory import MemoryStreamLog

    for count, size in ((3 * CACHE_RECORDS, 1), (100, 100_000)):  # bounded by records, then by bytes
        log = MemoryStreamLog()
        for i in range(count):
            log.append(_model_msg(i, size), 0.0)
        for raw in (False, True):
            cache = RecordCache(raw=raw)
            seen = []
            while len(seen) < count:
                seen += [rec[0] for rec in cache.window(log, len(seen), 256, log.tail)]
                assert len(cache.records) <= CACHE_RECORDS and cache.nbytes <= CACHE_BYTES
                assert cache.nbytes == sum(len(rec[2]) if raw else len(rec[1].body) for rec in cache.records.values())
            assert seen == list(range(count))
            assert cache.records and max(cache.records) == count - 1  # the newest read stay
    log = MemoryStreamLog(StreamSettings(max_bytes=40_000, segment_bytes=10_000))
    for i in range(10):
        log.append(_model_msg(i, 3000), 0.0)
    caches = [RecordCache(), RecordCache(raw=True)]
    for cache in caches:
        assert [rec[0] for rec in cache.window(log, 0, 100, log.tail)] == list(range(10))
    for i in range(10, 40):  # retention drops the segments of the cached records
        log.append(_model_msg(i, 3000), 0.0)
    assert log.first > 9
    for cache in caches:
        assert cache.window(log, 0, 5, log.tail)[0][0] == log.first


def _model_msg(i: int, size: int) -> Any:
    from engine._message import Message as ModelMessage

    return ModelMessage(i, "", "s", {}, b"m" * size, persistent=True)


def test_stomp_declares_retention_from_header_text_and_every_bad_form_names_its_header() -> None:
    net = new_net(store=FakeStore())
    s = connected(net)
    subscribe(s, "/queue/r", "a", ack="client", prefetch_count="10", x_queue_type="stream", durable="true",
              auto_delete="false", x_max_length_bytes="1000", x_max_age="7D", x_stream_max_segment_size_bytes="500")
    net.run_until_idle()
    assert s.events() == []
    log = net.broker.model.streams.log(streams_q(net, "r"))
    assert (log.settings.max_bytes, log.settings.max_age_ms, log.settings.segment_bytes) == (1000, 7 * 86_400_000, 500)
    for header, value in (("x_max_length_bytes", "abc"), ("x_max_age", "7 days"), ("x_stream_max_segment_size_bytes", "0"),
                          ("x_stream_offset", "timestamp=abc"), ("x_stream_offset", "offset=-1"),
                          ("x_stream_offset", "-3"), ("x_stream_offset", "bogus")):
        bad = connected(net)
        subscribe(bad, f"/queue/bad-{header}", "a", ack="client", prefetch_count="10", x_queue_type="stream",
                  durable="true", auto_delete="false", **{header: value})
        net.run_until_idle()
        errors = [e for e in bad.events() if isinstance(e, Error)]
        assert len(errors) == 1 and f"'{header.replace('_', '-')}'" in bytes(errors[0].body).decode(), (header, value)
    subscribe(s, "/amq/queue/r", "b", ack="client", prefetch_count="10", x_stream_offset="1h")
    net.run_until_idle()
    assert not [e for e in s.events() if isinstance(e, Error)]  # the other connection was not harmed


def test_stomp_readers_of_a_stream_share_each_record_s_encoded_frame_tail() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    readers = [connected(net) for _ in range(3)]
    for i, s in enumerate(readers):
        subscribe(s, "/amq/queue/s", f"r{i}", ack="client", prefetch_count="10", x_stream_offset="first")
    net.run_until_idle()
    pub(c, 4, h="v")
    net.run_until_idle()
    for s in readers:
        msgs = [e for e in s.events() if isinstance(e, Message)]
        assert [(m.headers["x-stream-offset"], m.headers["h"], m.headers["destination"], bytes(m.body))
                for m in msgs] == [(str(i), "v", "/queue/s", b"m%d" % i) for i in range(4)]
    held = [e.msg for cons in streams_q(net, "s").consumers for e in cons.unacked.values()]
    assert len(held) == 12 and len({id(m) for m in held}) == 4  # 3 readers x 4 records: 4 messages
    tails = tail_cache(net.broker).by_escape
    assert sum(1 for t in tails.values() for m in t if m in held) == 4  # each encoded once


def test_what_makes_a_queue_a_stream_or_not_is_refused_as_rabbitmq_refuses_it() -> None:
    """STOMP declares a stream with the frame's durable/auto-delete/exclusive headers and refuses
    another queue type than the existing queue's; a stream's consumer arguments on a classic queue,
    and a decimal where a retention argument needs an integer, are 406s naming the argument."""
    net = new_net(store=FakeStore())
    c = amqp(net, channels=4)
    stream(c)
    declare(c, "classic", durable=True)
    cases = [  # (destination, headers, text of the ERROR)
        ("/queue/nd", {"x_queue_type": "stream", "durable": "false"}, "invalid property 'auto-delete'"),
        ("/queue/nd2", {"x_queue_type": "stream", "durable": "false", "auto_delete": "false"},
         "invalid property 'non-durable'"),
        ("/queue/ex", {"x_queue_type": "stream", "exclusive": "true"}, "invalid property 'exclusive-owner'"),
        ("/queue/s", {}, "inequivalent arg 'x-queue-type' for queue 's' in vhost '/': received none but current "
                         "is the value 'stream' of type 'longstr'"),
        ("/queue/s", {"x_queue_type": "classic"}, "received 'classic' but current is 'stream'"),
        ("/queue/classic", {"x_queue_type": "stream"}, "received the value 'stream' of type 'longstr' but "
                                                        "current is none"),
        ("/amq/queue/classic", {"x_stream_offset": "first"}, "invalid arg 'x-stream-offset' for queue 'classic'"),
        ("/amq/queue/classic", {"x_stream_consumer_name": "n"}, "invalid arg 'x-stream-consumer-name'"),
    ]
    for dest, headers, text in cases:
        for frame in ("SUBSCRIBE", "SEND"):
            if frame == "SEND" and dest.startswith("/amq/"):
                continue  # consumer arguments: SUBSCRIBE only
            s = connected(net)
            if frame == "SEND":
                send(s, dest, b"x", **headers)
            else:
                subscribe(s, dest, "a", ack="client", prefetch_count="10", **headers)
            net.run_until_idle()
            errors = [e for e in s.events() if isinstance(e, Error)]
            assert len(errors) == 1 and text in bytes(errors[0].body).decode(), (frame, dest, headers)
    assert not {"nd", "nd2", "ex"} & set(net.broker.model.vhosts["/"].queues)  # nothing declared
    c.call(spec.BasicQos(prefetch_count=5, channel=2))
    bad = c.call(spec.BasicConsume(queue="classic", arguments={"x-stream-offset": "first"}, channel=2))
    assert isinstance(bad, spec.ChannelClose) and bad.reply_code == 406 and "'x-stream-offset'" in bad.reply_text
    bad = declare(c, "dec", ch=3, durable=True, arguments={**STREAM, "x-max-length-bytes": Decimal("1.5")})
    assert isinstance(bad, spec.ChannelClose) and bad.reply_text.endswith("'x-max-length-bytes' for queue 'dec' in "
                                                                          "vhost '/': \"expected integer, got decimal\"")
    assert declare(c, "s", ch=4, durable=True, arguments=STREAM).message_count == 0  # the stream is as it was


def test_a_consumer_at_the_end_waits_without_the_broker_polling(monkeypatch: Any) -> None:
    """A consumer at the end of a stream costs nothing while nothing is appended: an hour of
    simulated time runs no dispatch and reads nothing; the next append wakes it at once."""
    from engine.model.streams import Streams

    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    pub(c, 3)
    r = amqp(net)
    consume(r, **{"x-stream-offset": "next"})
    log = net.broker.model.streams.log(streams_q(net, "s"))
    calls = {"dispatch": 0, "read": 0}

    def counting(name: str, real: Any) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            calls[name] += 1
            return real(*a, **kw)
        return call

    monkeypatch.setattr(Streams, "dispatch", counting("dispatch", Streams.dispatch))
    monkeypatch.setattr(log, "read", counting("read", log.read))
    net.advance(3600)
    assert calls == {"dispatch": 0, "read": 0} and offsets(r) == []
    pub(c, 1, 3)
    net.run_until_idle()
    assert offsets(r) == [3] and calls["dispatch"] >= 1 and calls["read"] >= 1


def test_a_consumer_asking_for_append_times_gets_them_and_the_others_bytes_do_not_change() -> None:
    """``x-stream-timestamp: true`` (a sansmq extension, capability stream_timestamp): each
    delivery carries the record's append time in ms, the broker's clock when it was appended;
    a consumer that did not ask, reading the same records at the same time, gets none."""
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    pub(c, 2)
    net.run_until_idle()
    net.advance(5)
    pub(c, 1, start=2)
    net.run_until_idle()
    stamped, plain = amqp(net), amqp(net)
    consume(stamped, **{"x-stream-offset": "first", "x-stream-timestamp": True})
    consume(plain, **{"x-stream-offset": "first"})
    times = [d.properties.headers["x-stream-timestamp"] for d in stamped.of(spec.BasicDeliver)]
    assert offsets(stamped) == offsets(plain) == [0, 1, 2]
    assert times[0] == times[1] and times[2] - times[0] == 5000  # the clock moved 5 s between appends
    assert all("x-stream-timestamp" not in d.properties.headers for d in plain.of(spec.BasicDeliver))
    s = connected(net)  # STOMP: the header's text
    subscribe(s, "/amq/queue/s", "a", ack="client", prefetch_count="10", x_stream_offset="first",
              x_stream_timestamp="true")
    net.run_until_idle()
    assert [m.headers["x-stream-timestamp"] for m in s.events() if isinstance(m, Message)] == [str(t) for t in times]
    bad = amqp(net)
    assert "'x-stream-timestamp'" in consume(bad, **{"x-stream-timestamp": "yes"}).reply_text
    other = amqp(net)
    declare(other, "q-classic")
    assert "'x-stream-timestamp'" in consume(other, queue="q-classic", **{"x-stream-timestamp": True}).reply_text


def _held(net: SimNetwork) -> list[int]:
    """The offsets the stream's one consumer holds unacked, in delivery order."""
    (consumer,) = streams_q(net, "s").consumers
    return list((consumer.unacked or {}).values())


def test_stream_acks_settle_by_count_with_gaps_nacks_rejects_and_transactions(monkeypatch: Any) -> None:
    """A multiple ack, nack or reject of a stream consumer settles every tag it holds up to it in one
    model call (no walk tag by tag), around a tag settled alone before; nothing is redelivered; the
    tracked offset is the lowest still held; a transaction's settles wait for its commit."""
    net, _ = filled(12)
    r = amqp(net)
    consume(r, prefetch=10, **{"x-stream-offset": "first", "x-stream-consumer-name": "n"})
    tags = [d.delivery_tag for d in r.of(spec.BasicDeliver)]
    assert offsets(r) == list(range(10)) and _held(net) == list(range(10))
    from engine.model.streams import Streams

    streams = net.broker.model.streams
    calls: list[tuple[int, bool, bool]] = []
    settle = Streams.settle
    monkeypatch.setattr(Streams, "settle", lambda self, consumer, tag, multiple, acked: calls.append(
        (tag, multiple, acked)) or settle(self, consumer, tag, multiple, acked))
    log = streams.log(streams_q(net, "s"))
    r.call(spec.BasicAck(tags[3], False, channel=1))  # one tag alone: a gap in what it holds
    r.call(spec.BasicAck(tags[6], True, channel=1))  # 0-2 and 4-6 at once
    assert len(calls) == 2 and calls[1][1:] == (True, True)
    assert _held(net)[:3] == [7, 8, 9] and log.stored_offset("n") == 7
    assert offsets(r, 10) == [10, 11]  # credit for what was settled, nothing twice
    tags = [d.delivery_tag for d in r.of(spec.BasicDeliver)]
    r.call(spec.BasicNack(tags[8], True, True, channel=1))  # nack multiple: settles 7-8, requeues nothing
    r.call(spec.BasicReject(tags[9], True, channel=1))
    assert _held(net) == [10, 11] and log.stored_offset("n") == 7  # a nack or reject stores no offset
    r.call(spec.TxSelect(channel=1))
    r.call(spec.BasicAck(tags[11], True, channel=1))
    assert _held(net) == [10, 11]  # held by the transaction until its commit
    r.call(spec.TxRollback(channel=1))
    assert _held(net) == [10, 11]
    r.call(spec.BasicAck(tags[11], True, channel=1))
    r.call(spec.TxCommit(channel=1))
    assert _held(net) == [] and log.stored_offset("n") == 12
    assert offsets(r) == list(range(12))
    assert streams_q(net, "s")._x.acked == 9  # the queue's ack count (message_stats): acks, not nacks/rejects


def test_channel_flow_pauses_a_stream_consumer_and_resumes_where_it_stopped() -> None:
    net = new_net(store=FakeStore())
    c = amqp(net)
    stream(c)
    r = amqp(net)
    consume(r, prefetch=100, **{"x-stream-offset": "first"})
    r.call(spec.ChannelFlow(False, channel=1))
    pub(c, 5)
    net.run_until_idle()
    assert offsets(r) == []
    r.call(spec.ChannelFlow(True, channel=1))
    net.run_until_idle()
    assert offsets(r) == [0, 1, 2, 3, 4]
