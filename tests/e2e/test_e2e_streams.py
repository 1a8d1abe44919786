"""Stream queues end to end (issue 12): pika and stomp.py against sansmq on each server and each
durable store (segment files, PostgreSQL), and opt-in against a real RabbitMQ 3.10:

    SANSMQ_RABBITMQ=127.0.0.1:5682 SANSMQ_RABBITMQ_STOMP=127.0.0.1:61623 \
        .venv/bin/python -m pytest tests/e2e/test_e2e_streams.py -k "rabbitmq]"

Tests marked ``sansmq_only`` cover what RabbitMQ does differently or not at all (producer
deduplication, server-side offset tracking and the declare-ok end offset are sansmq extensions;
RabbitMQ 3.10 crashes the connection on an unknown x-stream-offset and accepts a negative one; its
STOMP plugin ignores several x-stream-offset forms and the x-max-age and segment-size headers;
restarting a broker is only done to sansmq's). Everything else runs on both.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import os
import subprocess
import sys
import time
from typing import Any
from unittest.mock import ANY

import pika
import pytest
import stomp
from e2ekit import Collector, close_quietly
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker
from targets import Target, pg_url, refused, restart, sansmq_only, stomp_conn, target

__all__ = ["pg_url", "target"]  # the fixtures this module's tests use

_names = itertools.count()
STREAM = {"x-queue-type": "stream"}


def fresh(t: Target, ch: Any, **args: Any) -> str:
    name = f"st-{os.getpid()}-{next(_names)}"
    ch.queue_declare(name, durable=True, arguments={**STREAM, **args})
    return name


def publish(ch: Any, queue: str, bodies: list[bytes], headers: dict[str, Any] | None = None,
            exchange: str = "") -> None:
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish(exchange, queue, body, pika.BasicProperties(headers=headers), mandatory=False)


def read(t: Target, queue: str, n: int, offset: Any = "first", prefetch: int = 10,
         extra: dict[str, Any] | None = None, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """Consume ``n`` deliveries from ``offset`` (acking each) on a connection of its own."""
    conn = t.conn()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[tuple[int, bytes]] = []

    def on(c: Any, m: Any, p: Any, b: bytes) -> None:
        if len(got) < n:  # past n: left unacked (a tracked consumer's stored offset stays at n)
            got.append((p.headers["x-stream-offset"], b))
            c.basic_ack(m.delivery_tag)

    args = {} if offset is None else {"x-stream-offset": offset}
    ch.basic_consume(queue, on, arguments={**args, **(extra or {})})
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    return got


# -- declaring -------------------------------------------------------------------------------------------
def test_declare_refuses_what_rabbitmq_refuses(target: Target) -> None:
    n = f"st-bad-{os.getpid()}"
    for kw, prop in ((dict(durable=False), "non-durable"), (dict(durable=True, exclusive=True), "exclusive-owner"),
                     (dict(durable=True, auto_delete=True), "auto-delete")):
        code, text = refused(target, lambda ch, kw=kw: ch.queue_declare(n, arguments=STREAM, **kw))
        assert code == 406 and f"invalid property '{prop}'" in text
    code, text = refused(target, lambda ch: ch.queue_declare(n, durable=True, arguments={"x-max-age": "1h"}))
    assert code == 406 and "'x-max-age'" in text
    code, text = refused(target, lambda ch: ch.queue_declare(
        n, durable=True, arguments={**STREAM, "x-max-age": "1x"}))
    assert code == 406 and "'x-max-age'" in text
    for arg, bad in (("x-max-age", "7X"), ("x-max-age", 12), ("x-max-length-bytes", "big"),
                     ("x-max-length-bytes", decimal.Decimal("1.5")), ("x-max-length-bytes", -1),
                     ("x-stream-max-segment-size-bytes", "x")):  # wrong unit or type
        code, text = refused(target, lambda ch, arg=arg, bad=bad: ch.queue_declare(
            n, durable=True, arguments={**STREAM, arg: bad}))
        assert code == 406 and f"invalid arg '{arg}'" in text, (arg, bad, text)
    code, text = refused(target, lambda ch: ch.queue_declare(  # a stream argument on a classic queue
        n, durable=True, arguments={"x-stream-max-segment-size-bytes": 1000}))
    assert code == 406 and "'x-stream-max-segment-size-bytes'" in text
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    classic = f"{q}-classic"
    ch.queue_declare(classic, durable=True)
    conn.close()
    for other in (None, "classic", "quorum"):  # redeclared as another type
        code, text = refused(target, lambda ch, other=other: ch.queue_declare(
            q, durable=True, arguments=other and {"x-queue-type": other}))
        assert code == 406 and "inequivalent arg 'x-queue-type'" in text
    code, text = refused(target, lambda ch: ch.queue_declare(classic, durable=True, arguments=STREAM))
    assert code == 406 and "inequivalent arg 'x-queue-type'" in text
    conn = target.conn()  # nothing else was harmed: the stream is still there
    conn.channel().queue_declare(q, passive=True)
    conn.close()


# -- offsets and consumers ---------------------------------------------------------------------------
def test_offsets_first_last_number_timestamp(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"m%d" % i for i in range(5)])
    conn.close()
    assert read(target, q, 5) == [(i, b"m%d" % i) for i in range(5)]
    assert read(target, q, 2, offset=3) == [(3, b"m3"), (4, b"m4")]
    last = read(target, q, 1, offset="last")
    assert last and last[-1] == (4, b"m4")
    hour_ago = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(hours=1)
    assert [o for o, _ in read(target, q, 5, offset=hour_ago)] == list(range(5))
    assert [o for o, _ in read(target, q, 5, offset="1h")] == list(range(5))


def test_timestamp_and_interval_offsets_start_at_the_append_time(target: Target) -> None:
    """Appends 3 s apart: a timestamp (AMQP timestamp, STOMP timestamp=<secs>) or interval between
    them starts at the second batch, so the append time is stored and used."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"old0", b"old1"])
    time.sleep(3)
    cut = int(time.time()) - 1  # a second after the old batch, at least a second before the new one
    publish(ch, q, [b"new0", b"new1"])
    conn.close()
    new = [b"new0", b"new1"]
    amqp_ts = datetime.datetime.fromtimestamp(cut, datetime.UTC).replace(tzinfo=None)
    assert [b for _, b in read(target, q, 2, offset=amqp_ts)] == new
    assert [b for _, b in read(target, q, 2, offset="2s")] == new  # appended at most 2 s ago
    assert stomp_read(target, q, 2, {"x-stream-offset": f"timestamp={cut}"}) == [(2, "new0"), (3, "new1")]


def test_many_consumers_each_read_everything_and_acks_remove_nothing(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"x%d" % i for i in range(50)])
    conn.close()
    for _ in range(3):  # prefetch 7: acks open the window, read on; the next reader gets it all again
        assert [o for o, _ in read(target, q, 50, prefetch=7)] == list(range(50))


def test_next_waits_for_new_messages(target: Target) -> None:
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"old"])
    ch.basic_qos(prefetch_count=5)
    got: list[tuple[int, bytes]] = []
    ch.basic_consume(q, lambda c, m, p, b: (got.append((p.headers["x-stream-offset"], b)),
                                             c.basic_ack(m.delivery_tag)), arguments={"x-stream-offset": "next"})
    conn.process_data_events(0.3)
    assert got == []
    pub = target.conn()
    publish(pub.channel(), q, [b"new"])
    pub.close()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    assert got == [(1, b"new")]


def test_binding_to_an_exchange(target: Target) -> None:
    """A stream bound to fanout, direct, topic and headers exchanges (AMQP publishes) and to
    amq.topic and a direct exchange that STOMP SENDs to: each routed message is appended."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    want = []
    for kind, key, headers in (("fanout", "", None), ("direct", "k", None), ("topic", "a.*", None),
                               ("headers", "", {"x-match": "all", "h": "v"})):
        x = f"stx-{kind}-{os.getpid()}-{next(_names)}"
        ch.exchange_declare(x, kind, auto_delete=True)
        ch.queue_bind(q, x, key, arguments=headers)
        body = f"via-{kind}".encode()
        ch.confirm_delivery()
        ch.basic_publish(x, key.replace("*", "b"), body, pika.BasicProperties(headers={"h": "v"}))
        want.append(body)
    direct = f"stx-stomp-{os.getpid()}-{next(_names)}"
    ch.exchange_declare(direct, "direct", auto_delete=True)
    ch.queue_bind(q, direct, "sk")
    topic_key = f"stream.{os.getpid()}.{next(_names)}"
    ch.queue_bind(q, "amq.topic", topic_key)
    conn.close()
    c, col = stomp_conn(target)
    for i, dest in enumerate((f"/exchange/{direct}/sk", f"/topic/{topic_key}", f"/exchange/{direct}/other")):
        c.send(dest, f"stomp-{i}", headers={"receipt": f"r{i}"})
        col.wait_receipt(f"r{i}")
    c.disconnect()
    want += [b"stomp-0", b"stomp-1"]  # the third matched no binding
    assert read(target, q, 7, timeout=3) == list(enumerate(want))


def test_consumer_rules(target: Target) -> None:
    conn = target.conn()
    q = fresh(target, conn.channel())
    conn.close()
    code, text = refused(target, lambda ch: ch.basic_consume(q, lambda *a: None))
    assert code == 406 and "consumer prefetch count is not set" in text
    code, text = refused(target, lambda ch: (ch.basic_qos(prefetch_count=5),
                                             ch.basic_consume(q, lambda *a: None, auto_ack=True)))
    assert code == 540 and "automatic acknowledgement" in text
    code, text = refused(target, lambda ch: ch.basic_get(q))
    assert code == 540 and "basic.get" in text
    code, text = refused(target, lambda ch: ch.queue_purge(q))
    assert code == 540 and "queue.purge" in text


def consume_with(q: str, args: dict[str, Any]) -> Any:
    return lambda ch: (ch.basic_qos(prefetch_count=5), ch.basic_consume(q, lambda *a: None, arguments=args))


def test_bad_offsets_are_406_naming_the_argument(target: Target) -> None:
    """What RabbitMQ 3.10 refuses with a 406 too: a numeric string, an unknown unit, a zero interval,
    x-stream-offset on a classic queue; the refusal closes that channel only."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"kept"])
    classic = f"{q}-classic"
    ch.queue_declare(classic, durable=True)
    conn.close()
    for where, bad in ((q, "10"), (q, "7X"), (q, "0s"), (classic, "first")):
        code, text = refused(target, consume_with(where, {"x-stream-offset": bad}))
        assert code == 406 and "invalid arg 'x-stream-offset'" in text, (bad, text)
    conn = target.conn()  # a refused consume closes its channel, not the connection's others
    ok, bad_ch = conn.channel(), conn.channel()
    with pytest.raises(ChannelClosedByBroker):
        consume_with(q, {"x-stream-offset": "7X"})(bad_ch)
    ok.queue_declare(q, durable=True, arguments=STREAM)
    conn.close()
    assert read(target, q, 1) == [(0, b"kept")]  # the stream still serves


def test_bad_offsets_rabbitmq_crashes_on_or_takes_are_406_naming_the_argument(target: Target) -> None:
    sansmq_only(target, "RabbitMQ 3.10 closes the connection with 541 INTERNAL_ERROR on an unknown spec, a "
                "decimal, a boolean or '-1h', and takes -1 as first")
    conn = target.conn()
    q = fresh(target, conn.channel())
    conn.close()
    for bad in ("bogus", -1, "-1h", decimal.Decimal("1.5"), True, "offset=1"):
        code, text = refused(target, consume_with(q, {"x-stream-offset": bad}))
        assert code == 406 and "invalid arg 'x-stream-offset'" in text, (bad, text)
    code, text = refused(target, lambda ch: ch.queue_declare(  # RabbitMQ 3.10 takes 0
        q + "-seg", durable=True, arguments={**STREAM, "x-stream-max-segment-size-bytes": 0}))
    assert code == 406 and "'x-stream-max-segment-size-bytes'" in text
    conn = target.conn()
    ch = conn.channel()
    ch.queue_declare(q + "-classic", durable=True)
    conn.close()
    code, text = refused(target, consume_with(q + "-classic", {"x-stream-consumer-name": "n"}))
    assert code == 406 and "invalid arg 'x-stream-consumer-name'" in text
    assert read(target, q, 0, timeout=0.1) == []  # the stream still serves


# -- retention -------------------------------------------------------------------------------------------
def read_until(t: Target, q: str, last: bytes, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """Stream ``q`` from ``first`` up to the message ``last`` (one connection, acking each)."""
    conn = t.conn()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[tuple[int, bytes]] = []

    def on(c: Any, m: Any, p: Any, b: bytes) -> None:
        got.append((p.headers["x-stream-offset"], b))
        c.basic_ack(m.delivery_tag)

    ch.basic_consume(q, on, arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + timeout
    while last not in (b for _, b in got) and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    return got


def test_retention_by_bytes_and_age_removes_whole_old_segments(target: Target) -> None:
    """x-max-length-bytes and x-max-age with 1000-byte segments: the oldest segments go, what is
    read from ``first`` is an unbroken tail ending with the last append."""
    conn = target.conn()
    ch = conn.channel()
    by_bytes = fresh(target, ch, **{"x-max-length-bytes": 5000, "x-stream-max-segment-size-bytes": 1000})
    bodies = [f"{i:03d}".encode() + b"x" * 97 for i in range(100)]
    publish(ch, by_bytes, bodies)
    by_age = fresh(target, ch, **{"x-max-age": "1s", "x-stream-max-segment-size-bytes": 1000})
    old = [b"old-%02d" % i + b"x" * 94 for i in range(30)]
    publish(ch, by_age, old)
    time.sleep(2.5)
    new = [b"new-%02d" % i + b"x" * 94 for i in range(30)]
    publish(ch, by_age, new)
    conn.close()
    kept = [b for _, b in read_until(target, by_bytes, bodies[-1])]
    assert 0 < len(kept) < 100 and kept == bodies[-len(kept):]
    assert len(kept) * 100 <= 5000 + 2 * 1000  # the limit, give or take a segment
    deadline = time.monotonic() + 10  # sansmq checks the age every second; RabbitMQ as segments roll
    while (kept := [b for _, b in read_until(target, by_age, new[-1])])[0] == old[0] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kept[0] != old[0] and kept == (old + new)[-len(kept):]


# -- sansmq extensions -----------------------------------------------------------------------------------
def test_end_offset_in_declare_ok(target: Target) -> None:
    sansmq_only(target, "RabbitMQ reports message_count 0 for streams")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"a", b"b", b"c"])
    ok = ch.queue_declare(q, passive=True)
    assert ok.method.message_count == 3
    assert conn._impl.server_properties["capabilities"]["stream_end_offset"] is True
    conn.close()


def test_append_times_on_request(target: Target) -> None:
    """pika: a consumer with x-stream-timestamp=true gets each record's append time (ms) in a header
    of that name; one without gets none (a sansmq extension, capability stream_timestamp)."""
    sansmq_only(target, "RabbitMQ shows no append times over AMQP 0-9-1")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    before = int(time.time() * 1000)
    publish(ch, q, [b"a", b"b"])
    after = int(time.time() * 1000)
    assert conn._impl.server_properties["capabilities"]["stream_timestamp"] is True
    conn.close()
    stamps: list[Any] = []
    plain: list[Any] = []
    for out, extra in ((stamps, {"x-stream-timestamp": True}), (plain, {})):
        c = target.conn()
        rch = c.channel()
        rch.basic_qos(prefetch_count=10)
        rch.basic_consume(q, lambda ch_, m, p, b, out=out: (out.append(p.headers), ch_.basic_ack(m.delivery_tag)),
                          arguments={"x-stream-offset": "first", **extra})
        deadline = time.monotonic() + 10
        while len(out) < 2 and time.monotonic() < deadline:
            c.process_data_events(0.05)
        c.close()
    assert [h["x-stream-offset"] for h in stamps] == [0, 1]
    assert all(before <= h["x-stream-timestamp"] <= after for h in stamps)
    assert [sorted(h) for h in plain] == [["x-stream-offset"]] * 2


def test_deliveries_keep_every_property_and_large_bodies_and_any_settle_gives_credit(target: Target) -> None:
    """pika: records with every kind of property, header values of many types and bodies over
    frame_max come back exactly as published, with their offset and append time (stream
    deliveries are spliced from the stored bytes); a consumer with prefetch 3 that acks several at
    once, nacks one and rejects one reads everything, nothing twice (a stream requeues nothing)."""
    sansmq_only(target, "x-stream-timestamp is a sansmq extension")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    ch.confirm_delivery()
    big = bytes(range(256)) * 1200  # 300 KB: several body frames at the default frame_max (128 KB)
    sent = []
    for i in range(9):
        props = pika.BasicProperties(
            content_type="application/json", content_encoding="gzip", delivery_mode=2,
            priority=i % 4, correlation_id=f"c{i}", reply_to="r", expiration=None, message_id=f"m{i}",
            timestamp=1_700_000_000 + i, type="t", user_id="guest", app_id="a",
            headers={"i": i, "s": "x" * i, "big": 1 << 40, "b": True, "l": [1, "two"], "t": {"k": i}, "neg": -i})
        body = big if i in (2, 7) else b"b%d" % i
        ch.basic_publish("", q, body, props)
        sent.append((props, body))
    conn.close()
    c = target.conn()
    rch = c.channel()
    rch.basic_qos(prefetch_count=3)
    got: list[tuple[Any, bytes]] = []

    def on(ch_: Any, m: Any, p: Any, b: bytes) -> None:
        got.append((p, b))
        n = len(got)
        if n == 4:
            ch_.basic_nack(m.delivery_tag, requeue=True)  # settles only: nothing goes back into a stream
        elif n == 5:
            ch_.basic_reject(m.delivery_tag, requeue=True)
        elif n % 2 == 0 or n == 9:
            ch_.basic_ack(m.delivery_tag, multiple=True)

    rch.basic_consume(q, on, arguments={"x-stream-offset": "first", "x-stream-timestamp": True})
    deadline = time.monotonic() + 20
    while len(got) < 9 and time.monotonic() < deadline:
        c.process_data_events(0.05)
    c.process_data_events(0.3)  # nothing more comes
    c.close()
    assert [p.headers["x-stream-offset"] for p, _ in got] == list(range(9))
    assert all(isinstance(p.headers["x-stream-timestamp"], int) for p, _ in got)
    for (sp, sb), (gp, gb) in zip(sent, got, strict=True):
        assert gb == sb
        assert {**sp.headers, "x-stream-offset": ANY, "x-stream-timestamp": ANY} == gp.headers
        for field in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to",
                      "message_id", "timestamp", "type", "user_id", "app_id"):
            assert getattr(gp, field) == getattr(sp, field), field


def test_producer_deduplication(target: Target) -> None:
    sansmq_only(target, "producer deduplication is a sansmq extension")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    for pid in (0, 1, 1, 0, 2):  # the repeats are confirmed but not appended
        publish(ch, q, [b"p%d" % pid], headers={"x-producer": "app-1", "x-publishing-id": pid})
    publish(ch, q, [b"other"], headers={"x-producer": "app-2", "x-publishing-id": 0})
    conn.close()
    assert [b for _, b in read(target, q, 4)] == [b"p0", b"p1", b"p2", b"other"]
    code, text = refused(target, lambda ch: ch.confirm_delivery() or ch.basic_publish(
        "", q, b"bad", pika.BasicProperties(headers={"x-producer": "app-1", "x-publishing-id": "x"})))
    assert code == 406 and "'x-publishing-id'" in text


def test_server_side_offset_tracking(target: Target) -> None:
    sansmq_only(target, "server-side offset tracking is a sansmq extension")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"t%d" % i for i in range(10)])
    conn.close()
    name = {"x-stream-consumer-name": "reader-1"}
    assert [o for o, _ in read(target, q, 4, offset="first", prefetch=1, extra=name)] == [0, 1, 2, 3]
    # resumes after what it acked (prefetch 1: exactly the four acked)
    got = read(target, q, 6, offset=None, extra=name)
    assert [o for o, _ in got] == list(range(4, 10))


# -- STOMP -----------------------------------------------------------------------------------------------
#: the headers a SEND or SUBSCRIBE to /queue/NAME declares a stream with (RabbitMQ's STOMP plugin)
DECLARE = {"x-queue-type": "stream", "durable": "true", "auto-delete": "false"}


def stomp_ack(c: stomp.Connection, m: Any, sub: str = "s") -> None:
    c.ack(m.headers["ack"] if "ack" in m.headers else m.headers["message-id"], sub)


def stomp_subscribe(t: Target, dest: str, headers: dict[str, str]) -> tuple[stomp.Connection, Collector]:
    c, col = stomp_conn(t)
    c.subscribe(dest, id="s", ack="client-individual", headers={"prefetch-count": "10", **headers})
    return c, col


def stomp_read(t: Target, q: str, n: int, headers: dict[str, str]) -> list[tuple[int, str]]:
    """``n`` messages of stream ``q`` from a STOMP subscription with ``headers``, each acked."""
    c, col = stomp_subscribe(t, f"/amq/queue/{q}", headers)
    msgs = col.wait_messages(n)
    for m in msgs:
        stomp_ack(c, m)
    c.disconnect()
    return [(int(m.headers["x-stream-offset"]), m.body) for m in msgs]


def stomp_none(t: Target, q: str, headers: dict[str, str], wait: float = 0.5) -> tuple[stomp.Connection, Collector]:
    """A subscription with ``headers`` that delivers nothing within ``wait`` seconds (it waits)."""
    c, col = stomp_subscribe(t, f"/amq/queue/{q}", headers)
    time.sleep(wait)
    assert col.messages == [] and col.errors == [], headers
    return c, col


def stomp_error(t: Target, frames: Any, *expect: str) -> str:
    """The text (message header and body) of the ERROR a broker answers ``frames(connection)``
    with, once one holds every ``expect`` (RabbitMQ may send a bare "Processing error" first)."""
    c, col = stomp_conn(t)
    frames(c)

    def found() -> str | None:
        texts = [e.headers.get("message", "") + " " + e.body for e in list(col.errors)]
        return next((x for x in texts if all(want in x for want in expect)), None)

    col.wait(lambda: found() is not None, what=f"an ERROR with {expect}")
    close_quietly(c)
    return found() or ""


def sub_frame(dest: str, headers: dict[str, str], ack: str = "client") -> Any:
    return lambda c: c.subscribe(dest, id="s", ack=ack, headers=headers)


def send_frame(dest: str, headers: dict[str, str]) -> Any:
    return lambda c: c.send(dest, "x", headers=headers)


def test_stomp_declare_send_and_subscribe(target: Target) -> None:
    c, col = stomp_conn(target)
    q = f"st-stomp-{os.getpid()}-{next(_names)}"
    for i in range(3):
        c.send(f"/queue/{q}", f"s{i}", headers={**DECLARE, "receipt": f"r{i}"})
        col.wait_receipt(f"r{i}")
    c.subscribe(f"/amq/queue/{q}", id="s1", ack="client-individual",
                headers={"x-stream-offset": "first", "prefetch-count": "10"})
    msgs = col.wait_messages(3)
    assert [m.body for m in msgs] == ["s0", "s1", "s2"]
    assert [m.headers["x-stream-offset"] for m in msgs] == ["0", "1", "2"]
    for m in msgs:
        stomp_ack(c, m, "s1")
    c2, col2 = stomp_conn(target)  # an offset header form: everything from offset 1
    c2.subscribe(f"/amq/queue/{q}", id="s2", ack="client", headers={"x-stream-offset": "offset=1",
                                                                        "prefetch-count": "10"})
    assert [m.body for m in col2.wait_messages(2)] == ["s1", "s2"]
    c.disconnect()
    c2.disconnect()
    assert [b for _, b in read(target, q, 3)] == [b"s0", b"s1", b"s2"]  # and AMQP reads what STOMP wrote


def test_stomp_subscribe_declares_a_stream(target: Target) -> None:
    """SUBSCRIBE to /queue/NAME with x-queue-type:stream + durable:true declares the stream (and
    reads it); a SEND with x-queue-type:stream alone does too (/queue/ is durable by default)."""
    q = f"st-stomp-sub-{os.getpid()}-{next(_names)}"
    c, col = stomp_conn(target)
    c.subscribe(f"/queue/{q}", id="s", ack="client", headers={**DECLARE, "prefetch-count": "10",
                                                               "x-stream-offset": "first", "receipt": "sub"})
    col.wait_receipt("sub")
    conn = target.conn()
    publish(conn.channel(), q, [b"a0", b"a1"])
    conn.close()
    msgs = col.wait_messages(2)
    assert [(m.headers["x-stream-offset"], m.body) for m in msgs] == [("0", "a0"), ("1", "a1")]
    c.disconnect()
    sent = f"{q}-send"
    c, col = stomp_conn(target)
    c.send(f"/queue/{sent}", "b0", headers={"x-queue-type": "stream", "receipt": "r"})
    col.wait_receipt("r")
    c.disconnect()
    for name in (q, sent):  # both are streams: basic.get is refused as on any stream
        code, text = refused(target, lambda ch, name=name: ch.basic_get(name))
        assert code == 540 and "stream" in text
    assert read(target, sent, 1) == [(0, b"b0")]


def test_stomp_declare_refusals_name_the_property_or_argument(target: Target) -> None:
    """A stream declared non-durable, auto-delete or exclusive, a stream redeclared as another type
    (or a classic queue as a stream) over STOMP: an ERROR with queue.declare's 406 text, by
    SUBSCRIBE and by SEND; nothing is declared or changed."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"kept"])
    classic = f"{q}-classic"
    ch.queue_declare(classic, durable=True)
    conn.close()
    inequivalent = "inequivalent arg 'x-queue-type'"
    cases = [(f"{q}-nd", {"x-queue-type": "stream", "durable": "false"}, "invalid property 'auto-delete'"),
             (f"{q}-ad", {**DECLARE, "auto-delete": "true"}, "invalid property 'auto-delete'"),
             (f"{q}-ex", {**DECLARE, "exclusive": "true"}, "invalid property 'exclusive-owner'"),
             (q, {**DECLARE, "x-queue-type": "classic"}, inequivalent),
             (q, {}, inequivalent),
             (classic, DECLARE, inequivalent)]
    for name, headers, text in cases:
        stomp_error(target, sub_frame(f"/queue/{name}", {**headers, "prefetch-count": "10"}), text)
        stomp_error(target, send_frame(f"/queue/{name}", headers), text)
    for name in (f"{q}-nd", f"{q}-ad", f"{q}-ex"):
        assert refused(target, lambda ch, name=name: ch.queue_declare(name, passive=True))[0] == 404
    assert read(target, q, 1) == [(0, b"kept")]


def test_stomp_offset_forms(target: Target) -> None:
    """x-stream-offset over STOMP as RabbitMQ's plugin takes it: first, last, next, offset=<n>,
    timestamp=<unix seconds>; a subscription at the end waits for the next SEND."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"m%d" % i for i in range(5)])
    conn.close()
    every = [(i, f"m{i}") for i in range(5)]
    assert stomp_read(target, q, 5, {"x-stream-offset": "first"}) == every
    assert stomp_read(target, q, 2, {"x-stream-offset": "offset=3"}) == every[3:]
    c, col = stomp_subscribe(target, f"/amq/queue/{q}", {"x-stream-offset": "last"})
    col.wait(lambda: any(m.body == "m4" for m in col.messages), what="the last message")
    got = [(int(m.headers["x-stream-offset"]), m.body) for m in col.messages]
    assert got == every[len(every) - len(got):]  # the last chunk: a tail ending with the last message
    c.disconnect()
    hour_ago, in_an_hour = int(time.time()) - 3600, int(time.time()) + 3600
    assert stomp_read(target, q, 5, {"x-stream-offset": f"timestamp={hour_ago}"}) == every
    waiting = [stomp_none(target, q, {"x-stream-offset": spec}) for spec in ("next", f"timestamp={in_an_hour}")]
    s, scol = stomp_conn(target)
    s.send(f"/amq/queue/{q}", "m5", headers={"receipt": "r"})
    scol.wait_receipt("r")
    s.disconnect()
    for c, col in waiting:  # woken by the append
        assert [(m.headers["x-stream-offset"], m.body) for m in col.wait_messages(1)] == [("5", "m5")]
        c.disconnect()


def test_stomp_offset_forms_sansmq_adds(target: Target) -> None:
    sansmq_only(target, "RabbitMQ 3.10's STOMP plugin ignores a bare number or an interval (reads from next)")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"m%d" % i for i in range(3)])
    conn.close()
    assert stomp_read(target, q, 2, {"x-stream-offset": "1"}) == [(1, "m1"), (2, "m2")]
    for interval in ("1h", "30m", "7D"):
        assert [o for o, _ in stomp_read(target, q, 3, {"x-stream-offset": interval})] == [0, 1, 2]


def test_stomp_consumer_rules(target: Target) -> None:
    """A stream subscription needs a prefetch-count and client acks (RabbitMQ's texts);
    x-stream-offset on a classic queue is an ERROR naming it; the stream is unharmed."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"kept"])
    classic = f"{q}-classic"
    ch.queue_declare(classic, durable=True)
    conn.close()
    dest = f"/amq/queue/{q}"
    stomp_error(target, sub_frame(dest, {"x-stream-offset": "first"}), "consumer prefetch count is not set")
    for ack in ("auto", None):
        frames = (lambda c: c.subscribe(dest, id="s", headers={"prefetch-count": "10"})) if ack is None else \
            sub_frame(dest, {"prefetch-count": "10"}, ack=ack)
        stomp_error(target, frames, "automatic acknowledgement not supported by stream queues")
    stomp_error(target, sub_frame(f"/amq/queue/{classic}", {"x-stream-offset": "first", "prefetch-count": "10"}),
                "invalid arg 'x-stream-offset'")
    assert stomp_read(target, q, 1, {"x-stream-offset": "first"}) == [(0, "kept")]


def test_stomp_subscribers_each_read_everything_and_acks_grant_credit(target: Target) -> None:
    """Two STOMP readers with prefetch-count 3 each read all 20 appends (SENDs): never more than 3
    unacked, each ack lets the next one through, and nothing is removed (AMQP reads them all after)."""
    q = f"st-stomp-many-{os.getpid()}-{next(_names)}"
    c, col = stomp_conn(target)
    for i in range(20):  # one at a time: one message per chunk (RabbitMQ's credit counts chunks)
        c.send(f"/queue/{q}", f"x{i}", headers={**DECLARE, "receipt": f"r{i}"})
        col.wait_receipt(f"r{i}")
    c.disconnect()
    readers = [stomp_subscribe(target, f"/amq/queue/{q}", {"x-stream-offset": "first", "prefetch-count": "3"})
               for _ in range(2)]
    acked = [0, 0]
    while acked != [20, 20]:
        for i, (c, col) in enumerate(readers):
            if acked[i] == 20:
                continue
            col.wait(lambda col=col, done=acked[i]: len(col.messages) > done, what="the next delivery")
            assert len(col.messages) <= acked[i] + 3  # the prefetch window
            for m in col.messages[acked[i]:]:
                stomp_ack(c, m)
                acked[i] += 1
    for c, col in readers:
        assert [(int(m.headers["x-stream-offset"]), m.body) for m in col.messages] == [(i, f"x{i}") for i in range(20)]
        c.disconnect()
    assert [o for o, _ in read(target, q, 20)] == list(range(20))


def test_stomp_bad_input_is_an_error(target: Target) -> None:
    """Bad x-stream-offset and retention values RabbitMQ's STOMP plugin refuses too: an ERROR (on
    sansmq naming the header); other connections and the stream are unharmed."""
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"kept"])
    conn.close()
    other, other_col = stomp_subscribe(target, f"/amq/queue/{q}", {"x-stream-offset": "next"})
    for header, frames in (
            ("x-stream-offset", sub_frame(f"/amq/queue/{q}", {"x-stream-offset": "offset=1.5", "prefetch-count": "10"})),
            ("x-stream-offset", sub_frame(f"/amq/queue/{q}", {"x-stream-offset": "timestamp=abc",
                                                              "prefetch-count": "10"})),
            ("x-max-length-bytes", sub_frame(f"/queue/{q}-bytes", {**DECLARE, "x-max-length-bytes": "big",
                                                                   "prefetch-count": "10"}))):
        text = stomp_error(target, frames)
        if not target.rabbitmq:  # RabbitMQ's text is "Processing error"
            assert f"invalid arg '{header}'" in text, text
    assert other.is_connected() and other_col.errors == []
    other.disconnect()
    assert stomp_read(target, q, 1, {"x-stream-offset": "first"}) == [(0, "kept")]


def test_stomp_bad_input_names_the_argument(target: Target) -> None:
    sansmq_only(target, "RabbitMQ 3.10's STOMP plugin ignores an unknown or negative x-stream-offset, x-max-age "
                "and x-stream-max-segment-size-bytes")
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    publish(ch, q, [b"kept"])
    classic = f"{q}-classic"
    ch.queue_declare(classic, durable=True)
    conn.close()
    for spec in ("bogus", "offset=-3", "-1", "7X", "0s", "first "):
        stomp_error(target, sub_frame(f"/amq/queue/{q}", {"x-stream-offset": spec, "prefetch-count": "10"}),
                    "invalid arg 'x-stream-offset'")
    for header, value in (("x-max-age", "7X"), ("x-max-age", "12"), ("x-stream-max-segment-size-bytes", "x"),
                          ("x-stream-max-segment-size-bytes", "0"), ("x-max-length-bytes", "-1")):
        for frames in (sub_frame(f"/queue/{q}-new", {**DECLARE, header: value, "prefetch-count": "10"}),
                       send_frame(f"/queue/{q}-new", {**DECLARE, header: value})):
            stomp_error(target, frames, f"invalid arg '{header}'")
    stomp_error(target, send_frame(f"/queue/{q}-c2", {"durable": "true", "x-max-age": "1h"}),
                "invalid arg 'x-max-age'")  # a stream argument on a classic queue
    stomp_error(target, sub_frame(f"/amq/queue/{classic}", {"x-stream-consumer-name": "n", "prefetch-count": "10"}),
                "invalid arg 'x-stream-consumer-name'")
    stomp_error(target, send_frame(f"/amq/queue/{q}", {"x-producer": "p", "x-publishing-id": "one"}),
                "invalid arg 'x-publishing-id'")
    for name in (f"{q}-new", f"{q}-c2"):
        assert refused(target, lambda ch, name=name: ch.queue_declare(name, passive=True))[0] == 404
    assert stomp_read(target, q, 1, {"x-stream-offset": "first"}) == [(0, "kept")]


def test_stomp_declares_retention_arguments(target: Target) -> None:
    """x-max-length-bytes on a STOMP declare is the stream's argument (an AMQP redeclare with
    another value is refused as inequivalent)."""
    q = f"st-stomp-ret-{os.getpid()}-{next(_names)}"
    c, col = stomp_conn(target)
    c.send(f"/queue/{q}", "x", headers={**DECLARE, "x-max-length-bytes": "5000", "receipt": "r"})
    col.wait_receipt("r")
    c.disconnect()
    conn = target.conn()
    conn.channel().queue_declare(q, durable=True, arguments={**STREAM, "x-max-length-bytes": 5000})
    conn.close()
    code, text = refused(target, lambda ch: ch.queue_declare(q, durable=True,
                                                             arguments={**STREAM, "x-max-length-bytes": 6000}))
    assert code == 406 and "inequivalent arg 'x-max-length-bytes'" in text


def test_stomp_retention_headers_remove_old_segments(target: Target) -> None:
    sansmq_only(target, "RabbitMQ 3.10's STOMP plugin does not pass x-max-age or x-stream-max-segment-size-bytes")
    q = f"st-stomp-ret-{os.getpid()}-{next(_names)}"
    c, col = stomp_conn(target)
    headers = {**DECLARE, "x-max-length-bytes": "5000", "x-stream-max-segment-size-bytes": "1000", "x-max-age": "1h"}
    for i in range(100):
        c.send(f"/queue/{q}", f"{i:03d}" + "x" * 97, headers={**headers, "receipt": f"r{i}"})
    col.wait_receipt("r99")
    c.disconnect()
    c, col = stomp_subscribe(target, f"/amq/queue/{q}", {"x-stream-offset": "first", "prefetch-count": "100"})
    col.wait(lambda: any(m.body.startswith("099") for m in col.messages), what="the last message")
    offsets = [int(m.headers["x-stream-offset"]) for m in col.messages]
    c.disconnect()
    assert 0 < offsets[0] and offsets == list(range(offsets[0], 100))  # whole old segments went
    assert len(offsets) * 100 <= 5000 + 2 * 1000  # what is kept: the limit, give or take a segment


# -- durability ------------------------------------------------------------------------------------------
def test_survives_sigkill(target: Target) -> None:
    """Confirmed appends, acked tracking and a producer's last publishing id survive SIGKILL (the
    tracking is covered by the sync a later confirmed publish waits for: one sync covers every write
    before it)."""
    sansmq_only(target, "kills the sansmq server process")
    assert target.server is not None
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch, **{"x-max-age": "7D"})
    publish(ch, q, [b"d%d" % i for i in range(20)])
    dedup = fresh(target, ch)
    for pid in range(3):
        publish(ch, dedup, [b"d%d" % pid], headers={"x-producer": "killed", "x-publishing-id": pid})
    conn.close()
    read(target, q, 5, prefetch=1, extra={"x-stream-consumer-name": "durable-reader"})
    conn = target.conn()
    publish(conn.channel(), fresh(target, conn.channel()), [b"sync-barrier"])
    conn.close()
    restart(target, kill=True)
    assert [o for o, _ in read(target, q, 20)] == list(range(20))
    got = read(target, q, 15, offset=None, extra={"x-stream-consumer-name": "durable-reader"})
    assert [o for o, _ in got] == list(range(5, 20))
    conn = target.conn()  # the producer's last publishing id survived too: its resends are not appended
    ch = conn.channel()
    for pid in (1, 2, 3):
        publish(ch, dedup, [b"again-%d" % pid], headers={"x-producer": "killed", "x-publishing-id": pid})
    conn.close()
    assert [b for _, b in read(target, dedup, 5, timeout=1)] == [b"d0", b"d1", b"d2", b"again-3"]


def test_stomp_tracking_and_dedup_survive_a_restart(target: Target) -> None:
    """Over STOMP: a named subscription's acked offset and a producer's last publishing id survive
    a clean restart; resends are receipted but not appended, the reader resumes where it was."""
    sansmq_only(target, "restarts the sansmq server; tracking and dedup are sansmq extensions")
    q = f"st-stomp-track-{os.getpid()}-{next(_names)}"
    c, col = stomp_conn(target)
    for pid in range(5):
        c.send(f"/queue/{q}", f"p{pid}", headers={**DECLARE, "x-producer": "sp", "x-publishing-id": str(pid),
                                                   "receipt": f"r{pid}"})
    col.wait_receipt("r4")
    c.disconnect()
    named = {"x-stream-consumer-name": "stomp-reader", "x-stream-offset": "first", "prefetch-count": "1"}
    c, col = stomp_subscribe(target, f"/amq/queue/{q}", named)
    for n in (1, 2):  # ack offsets 0 and 1; offset 2 is delivered and left unacked
        stomp_ack(c, col.wait_messages(n)[-1])
    col.wait_messages(3)
    c.disconnect()
    restart(target, kill=False)
    c, col = stomp_conn(target)
    for pid in range(3, 7):
        c.send(f"/amq/queue/{q}", f"again{pid}", headers={"x-producer": "sp", "x-publishing-id": str(pid),
                                                          "receipt": f"a{pid}"})
    col.wait_receipt("a6")  # every resend is receipted
    c.disconnect()
    del named["x-stream-offset"]
    got = stomp_read(target, q, 5, {**named, "prefetch-count": "10"})
    assert got == [(2, "p2"), (3, "p3"), (4, "p4"), (5, "again5"), (6, "again6")]


# -- partitioned streams ---------------------------------------------------------------------------------
def streams_cli(t: Target, *args: str) -> tuple[list[str], str]:
    """Runs `sansmq streams ARGS --amqp <target>` twice (running it again changes nothing); the
    command and what its second run printed."""
    cmd = [sys.executable, "-m", "servers", "streams", *args, "--amqp", f"{t.amqp[0]}:{t.amqp[1]}"]
    for _ in range(2):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    return cmd, out.stdout


def test_streams_create_cli_declares_a_stream(target: Target) -> None:
    """`sansmq streams create` makes a durable stream any client can then append to and read."""
    name = f"cli-{os.getpid()}-{next(_names)}"
    cmd, said = streams_cli(target, "create", name, "--max-age", "1h", "--bind", "amq.topic",
                            "--binding-key", f"{name}.#")
    assert said == f"stream '{name}', bound to 'amq.topic' with key '{name}.#'\n"
    amqp = cmd[-1]
    conn = target.conn()
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", name, f"m{i}".encode())
    ch.basic_publish("amq.topic", f"{name}.via.topic", b"t")  # through the --bind binding
    ch.basic_publish("amq.topic", "elsewhere", b"not bound")
    with pytest.raises(ConnectionClosedByBroker) as exc:  # a stream refuses basic.get
        ch.basic_get(name)
    assert exc.value.reply_code == 540
    assert [b for _, b in read(target, name, 4)] == [b"m0", b"m1", b"m2", b"t"]

    def fails(*args: str, status: int = 1) -> str:
        """The command's error line (on stderr, nothing on stdout); status 1: that line only, status 2
        (a usage error): after the usage."""
        p = subprocess.run([*cmd[:5], *args], capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == status and p.stdout == "" and len(lines) == status, p
        return lines[-1]

    assert "x-max-age" in fails(f"{name}-bad", "--max-age", "7X", "--amqp", amqp)
    assert "404" in fails(f"{name}-unbound", "--bind", "no-such-exchange", "--amqp", amqp)
    assert fails(f"{name}-x", "--amqp", "127.0.0.1:1").startswith(
        "sansmq streams: error: cannot connect to the broker at 127.0.0.1:1: ")
    assert fails(f"{name}-x", "--amqp", "nohost", status=2) == (
        "sansmq streams: error: --amqp must be HOST:PORT, got 'nohost'")


def test_partitioned_stream_layout(target: Target) -> None:
    """`sansmq streams create-partitioned` (against either broker) makes exchange NAME and streams
    NAME-0..2 bound with keys "0".."2": a publish with a partition's key (AMQP or a STOMP SEND to
    /exchange/NAME/KEY) is appended to that partition, read there in parallel with the others."""
    name = f"pst-layout-{os.getpid()}-{next(_names)}"
    streams_cli(target, "create-partitioned", name, "--partitions", "3")
    conn = target.conn()
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish(name, str(i), f"amqp-{i}".encode())
    conn.close()
    c, col = stomp_conn(target)
    c.send(f"/exchange/{name}/2", "stomp-2", headers={"receipt": "r"})
    col.wait_receipt("r")
    c.disconnect()
    assert read(target, f"{name}-0", 1) == [(0, b"amqp-0")]
    assert read(target, f"{name}-1", 1) == [(0, b"amqp-1")]
    assert read(target, f"{name}-2", 2) == [(0, b"amqp-2"), (1, b"stomp-2")]
    for i in range(3):  # each partition is a stream
        assert refused(target, lambda ch, i=i: ch.basic_get(f"{name}-{i}"))[0] == 540


def test_partitioned_stream_routes_by_key_hash(target: Target) -> None:
    sansmq_only(target, "RabbitMQ's super streams hash in the stream protocol's clients, not in the broker")
    name = f"pst-{os.getpid()}-{next(_names)}"
    streams_cli(target, "create-partitioned", name, "--partitions", "3")
    conn = target.conn()
    ch = conn.channel()
    ch.confirm_delivery()
    keys = [f"user-{i % 10}" for i in range(30)] + ["1"]  # "1" names partition 1 itself
    for key in keys:
        ch.basic_publish(name, key, key.encode())
    c, col = stomp_conn(target)  # a STOMP SEND to the exchange with the same key: the same partition
    c.send(f"/exchange/{name}/user-3", "stomp user-3", headers={"receipt": "r"})
    col.wait_receipt("r")
    c.disconnect()
    ends = [ch.queue_declare(f"{name}-{i}", passive=True).method.message_count for i in range(3)]
    conn.close()
    assert sum(ends) == 32 and all(ends)
    parts = [{b for _, b in read(target, f"{name}-{i}", ends[i])} for i in range(3)]
    assert b"1" in parts[1]
    for i in range(10):  # one key, one partition
        assert sum(f"user-{i}".encode() in p for p in parts) == 1
    assert [b"user-3" in p for p in parts] == [b"stomp user-3" in p for p in parts]
