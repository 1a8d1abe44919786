"""The stream append's own path (``Publisher.sole_stream``/``append_stream``, the AMQP channel's
run of held confirms) against the general publish path: the same bytes in the stream's segment
files, the same answers to the client, the same counters; confirms held as one per run, released
only by the sync, nacked as a run when the sync fails; the firehose, a priority, CC and another
exchange still take the general path."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from enginetest_helpers import amqp, confirm_outcomes, new_net
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_amqp import declare, publish

from amqpproto import BasicProperties, spec
from engine import Config
from engine.model.objects import extras
from engine.segment_store import SegmentStore
from engine.testing import AmqpSimClient, FakeStore, SimNetwork

STREAM = {"x-queue-type": "stream"}

_text = st.text(max_size=12)
#: x-producer/x-publishing-id pairs: valid ids (duplicates and gaps included), and bad ones (406)
_dedup = st.fixed_dictionaries({"x-producer": st.sampled_from(["p", "q"]),
                                "x-publishing-id": st.integers(0, 6) | st.just("x")})
_headers = st.none() | _dedup | st.dictionaries(_text, st.integers(-3, 3) | _text, max_size=2) | st.builds(
    lambda d, h: {**d, **h}, _dedup, st.dictionaries(_text, _text, max_size=2))
_props = st.none() | st.builds(
    BasicProperties, headers=_headers, delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 3), content_type=st.none() | _text,
    expiration=st.none() | st.sampled_from(["0", "60000", "bad"]), correlation_id=st.none() | _text,
    message_id=st.none() | _text, app_id=st.none() | _text)
#: (routing key, properties, mandatory, ends a read): mostly the stream, sometimes a classic queue
#: or nowhere in between (their confirms interleave with the stream's)
_publish = st.tuples(st.sampled_from(["s", "s", "s", "c", "nowhere"]), _props, st.booleans(), st.booleans())


def _run(root: str, publishes: list[tuple[str, Any, bool, bool]], general: bool) -> tuple[Any, ...]:
    """Publish ``publishes`` (with confirms) into a stream on a SegmentStore in ``root``; return
    what the client received, the model's counters, and every byte under ``root/streams``."""
    net = new_net(store=SegmentStore(root, sync=False))
    if general:  # the general path: no publish is recognised as a stream's own
        net.broker.model.sole_stream = lambda *_: None
    c = amqp(net)
    declare(c, "s", durable=True, arguments=STREAM)
    declare(c, "c", durable=True)
    c.call(spec.ConfirmSelect(channel=1))
    start = len(c.received)
    for key, props, mandatory, ends_read in publishes:
        if c.of(spec.ChannelClose):  # a 406 closed the channel: nothing more to publish on it
            break
        publish(c, key, b"body-" + key.encode(), props=props or BasicProperties(), mandatory=mandatory)
        if ends_read:
            net.run_until_idle()
    net.run_until_idle()
    model = net.broker.model
    vhost = model.vhosts["/"]
    s = vhost.queues["s"]
    counters = (model.publishes, model.confirmed, extras(s).published, len(model.streams.log(s)))
    received = [(type(e).__name__, getattr(e, "delivery_tag", None), getattr(e, "multiple", None),
                 getattr(e, "reply_code", None), getattr(e, "reply_text", None)) for e in c.received[start:]]
    files: dict[str, bytes] = {}
    for d, _, names in os.walk(os.path.join(root, "streams")):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                files[os.path.relpath(os.path.join(d, name), root)] = f.read()
    net.broker.store.close()
    return received, counters, files


@settings(max_examples=60, deadline=None)
@given(publishes=st.lists(_publish, min_size=1, max_size=14))
def test_the_stream_path_writes_and_answers_what_the_general_path_does(publishes) -> None:
    with tempfile.TemporaryDirectory() as fast_dir, tempfile.TemporaryDirectory() as general_dir:
        fast = _run(fast_dir, publishes, general=False)
        general = _run(general_dir, publishes, general=True)
    assert fast[0] == general[0]  # acks, nacks, returns, channel errors
    assert fast[1] == general[1]  # publishes, confirms, the stream's published count and length
    assert fast[2] == general[2]  # the same bytes on disk
    assert any(name.endswith(".seg") for name in fast[2]) == (fast[1][3] > 0)


# -- confirms: one held per run, released by the sync -------------------------------------------------
def _stream_net(store: FakeStore | None = None, config: Config | None = None) -> tuple[SimNetwork, AmqpSimClient]:
    net = new_net(config, store=store or FakeStore(), auto_sync=False)
    c = amqp(net)
    declare(c, "s", durable=True, arguments=STREAM)
    declare(c, "c", durable=True)
    c.call(spec.ConfirmSelect(channel=1))
    net.complete_syncs()
    c.received.clear()
    return net, c


def _took_stream_path(net: SimNetwork) -> list[str]:
    """Record which publishes went the general way (model.publish) from now on."""
    general: list[str] = []
    model = net.broker.model
    publish_ = model.publish

    def spy(vhost: Any, x: Any, msg: Any, *args: Any, **kw: Any) -> int:
        general.append(msg.routing_key)
        return publish_(vhost, x, msg, *args, **kw)

    model.publish = spy
    return general


def test_a_read_of_stream_publishes_holds_one_confirm_until_the_sync() -> None:
    net, c = _stream_net()
    general = _took_stream_path(net)
    for i in range(100):
        publish(c, "s", b"m%d" % i, props=BasicProperties(delivery_mode=2))
    net.run_until_idle()
    session = net.broker.sessions[c.conn_id]
    assert general == []  # every one appended by the stream's own path
    assert session.held is not None and len(session.held) == 1  # one run, not 100 confirms
    assert c.of(spec.BasicAck) == []  # nothing confirmed before the sync
    net.complete_syncs()
    assert [(a.delivery_tag, a.multiple) for a in c.of(spec.BasicAck)] == [(100, True)]
    assert len(net.broker.model.streams.log(net.broker.model.vhosts["/"].queues["s"])) == 100


def test_a_run_spans_a_read_and_breaks_at_a_refusal_and_at_the_next_sync() -> None:
    net, c = _stream_net()
    declare(c, "full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    c.received.clear()
    general = _took_stream_path(net)
    publish(c, "s", b"a")
    publish(c, "s", b"b")
    publish(c, "c", b"classic", props=BasicProperties(delivery_mode=2))  # the general path joins the run
    publish(c, "nowhere", b"x")  # written nowhere: released with the run all the same
    publish(c, "full", b"refused")  # a nack: a Confirm of its own, which no ack joins
    publish(c, "s", b"c")
    net.run_until_idle()
    publish(c, "s", b"d")  # a later read, after the Sync was emitted: a later token, a new run
    net.run_until_idle()
    session = net.broker.sessions[c.conn_id]
    assert general == ["c", "nowhere", "full"]
    runs = [(tok, thunk.seq, thunk.n, thunk.refused) for tok, thunk in session.held]
    first = runs[0][0]
    assert runs == [(first, 4, 4, False), (first, 5, 1, True), (first, 6, 1, False), (first + 1, 7, 1, False)]
    assert c.of(spec.BasicAck) == []
    net.complete_syncs()
    assert confirm_outcomes(c) == [("ack", 1), ("ack", 2), ("ack", 3), ("ack", 4), ("nack", 5), ("ack", 6),
                                   ("ack", 7)]


def test_a_failed_sync_nacks_the_whole_run_at_once() -> None:
    store = FakeStore()
    net, c = _stream_net(store)
    for i in range(5):
        publish(c, "s", b"m%d" % i)
    net.run_until_idle()
    store.fail_next_sync()
    net.complete_syncs()
    assert [(type(e).__name__, e.delivery_tag, e.multiple) for e in c.received
            if isinstance(e, (spec.BasicAck, spec.BasicNack))] == [("BasicNack", 5, True)]
    assert confirm_outcomes(c) == [("nack", n) for n in range(1, 6)]
    publish(c, "s", b"after")  # the channel goes on: the next sync acks the next one
    net.run_until_idle()
    net.complete_syncs()
    assert confirm_outcomes(c)[-1] == ("ack", 6)


def test_dedup_on_the_stream_path_confirms_duplicates_without_appending() -> None:
    net, c = _stream_net()
    general = _took_stream_path(net)
    for pid in (0, 1, 1, 0, 2):
        publish(c, "s", b"p%d" % pid, props=BasicProperties(headers={"x-producer": "app", "x-publishing-id": pid}))
    net.run_until_idle()
    net.complete_syncs()
    model = net.broker.model
    log = model.streams.log(model.vhosts["/"].queues["s"])
    assert general == [] and confirm_outcomes(c) == [("ack", n) for n in range(1, 6)]
    assert [r.message.body for r in log.read(0)] == [b"p0", b"p1", b"p2"]
    publish(c, "s", b"bad", props=BasicProperties(headers={"x-producer": "app", "x-publishing-id": -1}))
    net.run_until_idle()
    close = c.last(spec.ChannelClose)
    assert close.reply_code == 406 and "'x-publishing-id'" in close.reply_text


def test_a_priority_and_cc_take_the_general_path() -> None:
    net, c = _stream_net()
    general = _took_stream_path(net)
    publish(c, "s", b"prio", props=BasicProperties(priority=3))
    publish(c, "s", b"cc", props=BasicProperties(headers={"CC": ["c"]}))  # also reaches the classic queue
    publish(c, "s", b"plain")
    net.run_until_idle()
    net.complete_syncs()
    assert general == ["s", "s"]
    assert net.broker.model.vhosts["/"].queues["c"].count == 1  # the CC copy
    assert confirm_outcomes(c) == [("ack", n) for n in range(1, 4)]


def test_the_firehose_traces_stream_publishes_on_the_general_path() -> None:
    config = Config()
    config.trace_vhosts = ("/",)
    net, c = _stream_net(config=config)
    declare(c, "trace")
    c.call(spec.QueueBind(queue="trace", exchange="amq.rabbitmq.trace", routing_key="publish.#", channel=1))
    general = _took_stream_path(net)
    publish(c, "s", b"traced")
    net.run_until_idle()
    net.complete_syncs()
    assert general == ["s"] and confirm_outcomes(c) == [("ack", 1)]
    got = c.call(spec.BasicGet(queue="trace", no_ack=True, channel=1))
    assert isinstance(got, spec.BasicGetOk) and got.routing_key == "publish.amq.default" and got.body == b"traced"


def test_mandatory_publishes_to_a_stream_are_not_returned() -> None:
    net, c = _stream_net()
    publish(c, "s", b"m", mandatory=True)
    publish(c, "nowhere", b"r", mandatory=True)
    net.run_until_idle()
    net.complete_syncs()
    assert [r.routing_key for r in c.of(spec.BasicReturn)] == ["nowhere"]
    assert confirm_outcomes(c) == [("ack", 1), ("ack", 2)]
