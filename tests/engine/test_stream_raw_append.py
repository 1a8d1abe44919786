"""The stream append with properties as published (``amqpproto.RawProperties`` -> ``RawMessage``,
stored with flag ``_AMQP_PROPS``; a read's publishes of one method as one ``PublishRun``) against
the general path, against the codec decoding every publish (the path before it) and against raw
publishes one at a time: whatever the properties and headers (dedup pairs valid, duplicate,
bad; filter values; ids of every integer width; CC, reply-to, user-id, priority, expiration that
need the general path), the publisher gets the same answers, the counters agree, and a consumer
reading the stream from the start gets the same bytes, on every store (segment files read back
after a restart, memory, the simulation's fake store)."""

from __future__ import annotations

import tempfile
from typing import Any

from enginetest_helpers import amqp, new_net
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_amqp import declare, publish

from amqpproto import BasicProperties, PublishRun, spec
from engine import MemoryStore
from engine.amqp import channel
from engine.model.objects import extras
from engine.segment_store import SegmentStore
from engine.store import StoreError
from engine.testing import AmqpSimClient, FakeStore, SimNetwork

STREAM = {"x-queue-type": "stream"}
_text = st.text(max_size=8)
#: publishing ids of every integer width (the codec reads each width's from the bytes), a few
#: repeated, and now and then a bad one (negative, text: 406 and the channel is gone)
_ids = st.sampled_from([0, 1, 2, 200, 70000, 2**33, 2**40 + 1, 2**40 + 2, 2**63 + 5] * 4 + [-2, "7"]) \
    | st.integers(0, 6)
_dedup = st.fixed_dictionaries({"x-producer": st.sampled_from(["p", "q"]), "x-publishing-id": _ids})
_extra = st.dictionaries(st.sampled_from(["h", "x-stream-filter-value", "CC", "n", "content-type"]),
                         st.integers(-3, 3) | _text | st.lists(_text, max_size=2), max_size=3)
_headers = st.none() | _extra | st.builds(lambda d, h: {**d, **h}, _dedup, _extra) | _dedup \
    | st.sampled_from([None] * 20 + [{"x-publishing-id": 1}])  # rarely an id without its producer: 406


def _rarely(*values: Any) -> st.SearchStrategy[Any]:
    """None mostly, else one of ``values`` (those that need the general path, or close the channel)."""
    return st.sampled_from([None] * 16 + list(values))


_props = st.none() | st.builds(
    BasicProperties, headers=_headers, delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=_rarely(1), content_type=st.none() | _text, expiration=_rarely("60000", "bad"),
    correlation_id=st.none() | _text, reply_to=_rarely("r", "amq.rabbitmq.reply-to"), timestamp=_rarely(1700000000),
    user_id=_rarely("guest", "other"), type=st.none() | _text, app_id=st.none() | _text)
#: (routing key, properties, ends a read): mostly the stream
_publish = st.tuples(st.sampled_from(["s", "s", "s", "c"]), _props, st.booleans())


def _bytes_of(c: AmqpSimClient) -> list[bytes]:
    """Record every byte the broker sends ``c`` from now on."""
    got: list[bytes] = []
    feed = c._feed

    def recording(data: bytes) -> None:
        got.append(bytes(data))
        feed(data)

    c._feed = recording  # type: ignore[method-assign]
    return got


def _consume(net: SimNetwork) -> bytes:
    """What a consumer of the stream from its first offset receives (every byte from consume-ok on)."""
    r = amqp(net)
    r.call(spec.BasicQos(prefetch_count=1000, channel=1))
    got = _bytes_of(r)
    r.call(spec.BasicConsume(queue="s", consumer_tag="t", arguments={"x-stream-offset": "first"}, channel=1))
    net.run_until_idle()
    assert len(r.of(spec.BasicDeliver)) == len(net.broker.model.streams.log(net.broker.model.vhosts["/"].queues["s"]))
    return b"".join(got)


class _FailingAt(FakeStore):
    """The simulation's store failing the writes numbered in ``failing`` (counted once ``armed``):
    a run's appends stopped by the store part-way, as disk full would."""

    def __init__(self, failing: frozenset[int]) -> None:
        super().__init__()
        self.failing = failing
        self.armed = False
        self.writes = 0

    def _check_write(self, name: str) -> None:
        if self.armed:
            self.writes += 1
            if self.writes in self.failing:
                raise StoreError(f"injected write failure {self.writes} ({name})")
        super()._check_write(name)


def _run(store: str, publishes: list[tuple[str, Any, bool]], mode: str, stream_args: dict[str, Any] | None = None,
         failing: frozenset[int] = frozenset()) -> tuple[Any, ...]:
    """``publishes`` in ``mode`` to the stream ``s`` (declared with ``stream_args`` too: small
    segments roll over mid-run) and the queue ``c``; on the fake store, the writes numbered in
    ``failing`` fail."""
    with tempfile.TemporaryDirectory() as root:
        st_ = SegmentStore(root, sync=False) if store == "segment" else MemoryStore() if store == "memory" \
            else _FailingAt(failing)
        net = new_net(store=st_)
        model = net.broker.model
        if mode == "general":  # no publish is recognised as a stream's own
            model.sole_stream = lambda *_: None
            model.stream_by_key = lambda *_: None
        c = amqp(net)
        if mode == "decoded":  # the codec decodes every publish's properties (the path before raw ones)
            net.broker.sessions[c.conn_id].conn._publishing.shapes = None
        if mode == "single":  # raw properties, one publish event at a time (no runs)
            net.broker.sessions[c.conn_id].conn._publishing.shapes.runs = False
        declare(c, "s", durable=True, arguments={**STREAM, **(stream_args or {})})
        declare(c, "c", durable=True)
        c.call(spec.ConfirmSelect(channel=1))
        if isinstance(st_, _FailingAt):
            st_.armed = True
        start = len(c.received)
        for i, (key, props, ends_read) in enumerate(publishes):
            if c.of(spec.ChannelClose):
                break
            publish(c, key, b"body-%d" % i, props=props or BasicProperties())
            if ends_read:
                net.run_until_idle()
        net.run_until_idle()
        s = model.vhosts["/"].queues["s"]
        log = model.streams.log(s)
        counters = (model.publishes, model.confirmed, extras(s).published, len(log), log.first, log.producers())
        received = [(type(e).__name__, getattr(e, "delivery_tag", None), getattr(e, "multiple", None),
                     getattr(e, "reply_code", None), getattr(e, "reply_text", None)) for e in c.received[start:]]
        if store == "segment":  # read back from the files, as a restart does
            net.broker.store.close()
            net = new_net(store=SegmentStore(root, sync=False))
        delivered = _consume(net)
        net.broker.store.close()
    return received, counters, delivered


#: stream arguments: segments small enough to roll over inside a run (and retention dropping them)
_stream_args = st.sampled_from([{}, {}, {"x-stream-max-segment-size-bytes": 200},
                                {"x-stream-max-segment-size-bytes": 500, "x-max-length-bytes": 1200}])


@settings(max_examples=100, deadline=None)
@given(publishes=st.lists(_publish, min_size=1, max_size=12), store=st.sampled_from(["segment", "memory", "fake"]),
       stream_args=_stream_args, failing=st.frozensets(st.integers(1, 14), max_size=3))
def test_raw_appends_answer_count_and_deliver_what_the_general_path_does(publishes, store, stream_args,
                                                                         failing) -> None:
    raw = _run(store, publishes, "raw", stream_args, failing)
    assert raw == _run(store, publishes, "general", stream_args, failing)
    assert raw == _run(store, publishes, "decoded", stream_args, failing)
    assert raw == _run(store, publishes, "single", stream_args, failing)


#: one producer's run: ids repeated and going back inside it (duplicates confirmed, not appended)
_producer_run = st.lists(st.integers(0, 25), min_size=5, max_size=40).map(
    lambda ids: [("s", BasicProperties(delivery_mode=2, headers={"x-producer": "p", "x-publishing-id": i}), False)
                 for i in ids])


@settings(max_examples=30, deadline=None)
@given(publishes=_producer_run, store=st.sampled_from(["segment", "memory", "fake"]), stream_args=_stream_args,
       failing=st.frozensets(st.integers(1, 30), max_size=2))
def test_a_producers_run_with_duplicates_across_segment_rollovers_is_the_general_paths(publishes, store,
                                                                                      stream_args, failing) -> None:
    raw = _run(store, publishes, "raw", stream_args, failing)
    assert raw == _run(store, publishes, "general", stream_args, failing)
    assert raw == _run(store, publishes, "single", stream_args, failing)


def test_a_producers_run_takes_the_raw_path_and_duplicates_are_confirmed_not_appended(monkeypatch) -> None:
    net = new_net()
    c = amqp(net)
    declare(c, "s", durable=True, arguments=STREAM)
    c.call(spec.ConfirmSelect(channel=1))
    runs: list[int] = []
    handle_run = channel._HANDLERS[PublishRun]
    monkeypatch.setitem(channel._HANDLERS, PublishRun, lambda chan, run: runs.append(len(run.bodies))
                        or handle_run(chan, run))
    appended: list[Any] = []
    streams = net.broker.model.streams
    log = streams.log(net.broker.model.vhosts["/"].queues["s"])
    append_run = log.append_run
    log.append_run = lambda msgs, *a: appended.append([type(m).__name__ for m in msgs]) \
        or append_run(msgs, *a)  # type: ignore[method-assign]
    for pid in [2**40, 2**40 + 1, 2**40 + 1, 2**40, 2**40 + 2]:
        publish(c, "s", b"x", props=BasicProperties(delivery_mode=2, headers={"x-producer": "p",
                                                                              "x-publishing-id": pid}))
    net.run_until_idle()
    assert appended == [["RawMessage"] * 5]  # the log appends the run in one call
    assert runs == [5]  # one read, one run
    assert len(log) == 3 and log.last_publishing_id("p") == 2**40 + 2
    acks = c.of(spec.BasicAck)
    assert acks and acks[-1].delivery_tag == 5 and not c.of(spec.BasicNack)
    delivered = [d.properties.headers["x-publishing-id"] for d in _deliveries(net)]
    assert delivered == [2**40, 2**40 + 1, 2**40 + 2]


def _deliveries(net: SimNetwork) -> list[Any]:
    r = amqp(net)
    r.call(spec.BasicQos(prefetch_count=100, channel=1))
    r.call(spec.BasicConsume(queue="s", arguments={"x-stream-offset": "first"}, channel=1))
    net.run_until_idle()
    return r.of(spec.BasicDeliver)
