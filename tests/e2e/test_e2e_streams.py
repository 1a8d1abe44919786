"""Stream queues end to end (issue 12): pika and stomp.py against sansmq on each server and each
durable store (segment files, PostgreSQL), and opt-in against a real RabbitMQ 3.10:

    SANSMQ_RABBITMQ=127.0.0.1:5682 SANSMQ_RABBITMQ_STOMP=127.0.0.1:61623 \
        .venv/bin/python -m pytest tests/e2e/test_e2e_streams.py -k rabbitmq

Tests marked ``sansmq_only`` cover what RabbitMQ does differently or not at all (producer
deduplication and server-side offset tracking are sansmq extensions; RabbitMQ crashes the
connection on an unknown x-stream-offset and accepts a negative one).
"""

from __future__ import annotations

import datetime
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import stomp
from e2ekit import BASE_CONFIG, Collector, ServerProcess, start_server
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

import servers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
from pgtest import PgCluster, create_db, postgres_bindir  # noqa: E402

RABBITMQ = os.environ.get("SANSMQ_RABBITMQ")
RABBITMQ_STOMP = os.environ.get("SANSMQ_RABBITMQ_STOMP")
TARGETS = [f"{kind}-{store}" for kind in servers.SERVER_KINDS for store in ("segment", "postgres")]
if RABBITMQ:
    TARGETS.append("rabbitmq")
_names = itertools.count()


class Target:
    def __init__(self, name: str, amqp: tuple[str, int], stomp_addr: tuple[str, int] | None,
                 server: ServerProcess | None = None) -> None:
        self.name = name
        self.amqp = amqp
        self.stomp = stomp_addr
        self.server = server

    @property
    def rabbitmq(self) -> bool:
        return self.name == "rabbitmq"

    def conn(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(*self.amqp, heartbeat=0))


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str | None]:
    url = os.environ.get("SANSMQ_PG_DSN")
    if url:
        yield url
        return
    if postgres_bindir() is None:
        yield None
        return
    cluster = PgCluster()
    try:
        yield cluster.start()
    except RuntimeError:
        yield None
    finally:
        cluster.stop()


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest, pg_url: str | None, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Target]:
    name = request.param
    if name == "rabbitmq":
        assert RABBITMQ is not None
        yield Target(name, _addr(RABBITMQ), _addr(RABBITMQ_STOMP) if RABBITMQ_STOMP else None)
        return
    kind, store = name.split("-")
    extra: list[str] = []
    if store == "postgres":
        if pg_url is None:
            reason = "PostgreSQL not available (scripts/install-postgres.sh)"
            if os.environ.get("SANSMQ_REQUIRE_POSTGRES") == "1":
                pytest.fail(reason + " but SANSMQ_REQUIRE_POSTGRES=1")
            pytest.skip(reason)
        extra = ["--store", create_db(pg_url)]
    cfg = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    cfg.write_text(BASE_CONFIG)
    srv = start_server(kind, cfg, *extra)
    t = Target(name, ("127.0.0.1", srv.port("amqp")), ("127.0.0.1", srv.port("stomp")), srv)
    try:
        yield t
    finally:
        assert t.server is not None
        assert t.server.terminate() == 0, t.server.lines[-20:]


def sansmq_only(t: Target, why: str) -> None:
    if t.rabbitmq:
        pytest.skip(f"sansmq only: {why}")


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


def refused(t: Target, fn: Any) -> tuple[int, str]:
    """The (code, text) a broker closes a channel or connection with for ``fn(channel)``."""
    conn = t.conn()
    ch = conn.channel()
    try:
        fn(ch)
        conn.process_data_events(0.5)
        ch.queue_declare("", exclusive=True)  # a round trip: the refusal arrives before its answer
    except (ChannelClosedByBroker, ConnectionClosedByBroker) as exc:
        return exc.reply_code, exc.reply_text
    finally:
        if conn.is_open:
            conn.close()
    raise AssertionError("not refused")


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
    code, text = refused(target, lambda ch: ch.queue_declare(
        n, durable=True, arguments={**STREAM, "x-max-length-bytes": "big"}))
    assert code == 406 and "'x-max-length-bytes'" in text
    conn = target.conn()
    q = fresh(target, conn.channel())
    conn.close()
    code, text = refused(target, lambda ch: ch.queue_declare(q, durable=True))
    assert code == 406 and "x-queue-type" in text
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
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch)
    x = f"stx-{os.getpid()}-{next(_names)}"
    ch.exchange_declare(x, "fanout", auto_delete=True)
    ch.queue_bind(q, x)
    publish(ch, q, [b"via-x"], exchange=x)
    conn.close()
    assert read(target, q, 1) == [(0, b"via-x")]


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


def test_bad_offsets_are_406_naming_the_argument(target: Target) -> None:
    sansmq_only(target, "RabbitMQ 3.10 closes the connection with 541 on an unknown spec, takes -1")
    conn = target.conn()
    q = fresh(target, conn.channel())
    conn.close()
    for bad in ("bogus", -1, "10"):
        code, text = refused(target, lambda ch, bad=bad: (ch.basic_qos(prefetch_count=5), ch.basic_consume(
            q, lambda *a: None, arguments={"x-stream-offset": bad})))
        assert code == 406 and "'x-stream-offset'" in text
    code, text = refused(target, lambda ch: ch.queue_declare(
        q + "-seg", durable=True, arguments={**STREAM, "x-stream-max-segment-size-bytes": 0}))
    assert code == 406 and "'x-stream-max-segment-size-bytes'" in text
    assert read(target, q, 0, timeout=0.1) == []  # the stream still serves


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
def stomp_conn(t: Target) -> tuple[stomp.Connection, Collector]:
    if t.stomp is None:
        pytest.skip("no STOMP address for this broker")
    c = stomp.Connection([t.stomp], heartbeats=(0, 0))
    col = Collector()
    c.set_listener("c", col)
    c.connect("guest", "guest", wait=True)
    return c, col


def test_stomp_declare_send_and_subscribe(target: Target) -> None:
    c, col = stomp_conn(target)
    q = f"st-stomp-{os.getpid()}-{next(_names)}"
    decl = {"x-queue-type": "stream", "durable": "true", "auto-delete": "false"}
    for i in range(3):
        c.send(f"/queue/{q}", f"s{i}", headers={**decl, "receipt": f"r{i}"})
        col.wait_receipt(f"r{i}")
    c.subscribe(f"/amq/queue/{q}", id="s1", ack="client-individual",
                headers={"x-stream-offset": "first", "prefetch-count": "10"})
    msgs = col.wait_messages(3)
    assert [m.body for m in msgs] == ["s0", "s1", "s2"]
    assert [m.headers["x-stream-offset"] for m in msgs] == ["0", "1", "2"]
    for m in msgs:
        c.ack(m.headers["ack"] if "ack" in m.headers else m.headers["message-id"], "s1")
    c2, col2 = stomp_conn(target)  # an offset header form: everything from offset 1
    c2.subscribe(f"/amq/queue/{q}", id="s2", ack="client", headers={"x-stream-offset": "offset=1",
                                                                        "prefetch-count": "10"})
    assert [m.body for m in col2.wait_messages(2)] == ["s1", "s2"]
    c.disconnect()
    c2.disconnect()
    conn = target.conn()  # and AMQP reads what STOMP wrote
    assert [b for _, b in read(target, q, 3)] == [b"s0", b"s1", b"s2"]
    conn.close()


def test_stomp_bad_offset_is_an_error(target: Target) -> None:
    sansmq_only(target, "RabbitMQ's STOMP plugin fails differently on an unknown x-stream-offset")
    conn = target.conn()
    q = fresh(target, conn.channel())
    conn.close()
    c, col = stomp_conn(target)
    c.subscribe(f"/amq/queue/{q}", id="s1", ack="client", headers={"x-stream-offset": "offset=-3",
                                                                       "prefetch-count": "10"})
    col.wait(lambda: col.errors, what="an ERROR")
    assert "x-stream-offset" in col.errors[0].headers.get("message", "") + col.errors[0].body


# -- durability ------------------------------------------------------------------------------------------
def test_survives_sigkill(target: Target) -> None:
    """Confirmed appends and acked tracking survive SIGKILL (the tracking is covered by the sync a
    later confirmed publish waits for: one sync covers every write before it)."""
    sansmq_only(target, "kills the sansmq server process")
    assert target.server is not None
    conn = target.conn()
    ch = conn.channel()
    q = fresh(target, ch, **{"x-max-age": "7D"})
    publish(ch, q, [b"d%d" % i for i in range(20)])
    conn.close()
    read(target, q, 5, prefetch=1, extra={"x-stream-consumer-name": "durable-reader"})
    conn = target.conn()
    publish(conn.channel(), fresh(target, conn.channel()), [b"sync-barrier"])
    conn.close()
    old = target.server
    old.proc.kill()
    old.proc.wait()
    srv = target.server = ServerProcess(list(old.proc.args), old.kind)  # same data directory or database
    target.amqp = ("127.0.0.1", srv.port("amqp"))
    target.stomp = ("127.0.0.1", srv.port("stomp"))
    assert [o for o, _ in read(target, q, 20)] == list(range(20))
    got = read(target, q, 15, offset=None, extra={"x-stream-consumer-name": "durable-reader"})
    assert [o for o, _ in got] == list(range(5, 20))


# -- partitioned streams ---------------------------------------------------------------------------------
def test_streams_create_cli_declares_a_stream(target: Target) -> None:
    """`sansmq streams create` makes a durable stream any client can then append to and read."""
    name = f"cli-{os.getpid()}-{next(_names)}"
    amqp = f"{target.amqp[0]}:{target.amqp[1]}"
    cmd = [sys.executable, "-m", "servers", "streams", "create", name, "--max-age", "1h", "--amqp", amqp,
           "--bind", "amq.topic", "--binding-key", f"{name}.#"]
    for _ in range(2):  # idempotent
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == f"stream '{name}', bound to 'amq.topic' with key '{name}.#'\n"
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


def test_partitioned_stream_routes_by_key_hash(target: Target) -> None:
    sansmq_only(target, "RabbitMQ's super streams hash in the stream protocol's clients, not in the broker")
    name = f"pst-{os.getpid()}-{next(_names)}"
    cmd = [sys.executable, "-m", "servers", "streams", "create-partitioned", name, "--partitions", "3",
           "--amqp", f"{target.amqp[0]}:{target.amqp[1]}"]
    for _ in range(2):  # idempotent
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    conn = target.conn()
    ch = conn.channel()
    ch.confirm_delivery()
    keys = [f"user-{i % 10}" for i in range(30)] + ["1"]  # "1" names partition 1 itself
    for key in keys:
        ch.basic_publish(name, key, key.encode())
    ends = [ch.queue_declare(f"{name}-{i}", passive=True).method.message_count for i in range(3)]
    conn.close()
    assert sum(ends) == 31 and all(ends)
    parts = [{b for _, b in read(target, f"{name}-{i}", ends[i])} for i in range(3)]
    assert b"1" in parts[1]
    for i in range(10):  # one key, one partition
        assert sum(f"user-{i}".encode() in p for p in parts) == 1
