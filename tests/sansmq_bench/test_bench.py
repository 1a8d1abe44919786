"""``sansmq bench``: histogram and option unit tests, then runs of the real command against a live
``sansmq serve`` subprocess over each protocol, checking the JSON summary it writes."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

import stompproto
from sansmq_bench.client_load import ClientLoad
from sansmq_bench.options import parse_options
from sansmq_bench.payload import HEADER_SIZE, Payload
from sansmq_bench.report import Sample, progress_line
from sansmq_bench.stats import Histogram, Stats
from sansmq_bench.ws_client import WsStompClient
from sansmq_client import Batch
from sansmq_client._bulk import BatchSink
from servers.cli import build_parser
from servers.management import OPS_EPHEMERAL

pytestmark = pytest.mark.timeout(120)

LISTEN_RE = re.compile(r"(?:\S+ +\S+ +)?sansmq: (\w+) listening on \[?([^\s\]]+)\]?:(\d+) \((\w+) server\)")
#: the listeners a test broker serves (the HTTP ones are logged too, and are not waited for)
PROTOCOLS = {"stomp", "ws", "amqp"}


# -- stats -----------------------------------------------------------------------------------------
def exact_percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # nearest rank: ceil(p/100 * n)
    return ordered[int(rank) - 1]


def test_histogram_small_values_are_exact() -> None:
    h = Histogram()
    h.record_many(range(1, 101))  # 1..100
    assert (h.count, h.min, h.max) == (100, 1, 100)
    assert [h.percentile(p) for p in (1, 50, 75, 95, 99, 100)] == [1, 50, 75, 95, 99, 100]
    assert h.summary()["mean"] == 50.5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_histogram_percentiles_within_one_percent(seed: int) -> None:
    rng = random.Random(seed)
    values = [int(rng.lognormvariate(7, 1.5)) for _ in range(20_000)] + [0, 10**9]
    h = Histogram()
    h.record_many(values)
    assert (h.min, h.max, h.count) == (0, 10**9, len(values))
    for p in (50, 75, 90, 95, 99, 99.9):
        exact = exact_percentile(values, p)
        assert abs(h.percentile(p) - exact) <= max(1, exact / 100), (p, h.percentile(p), exact)
    assert h.percentile(100) == 10**9


def test_histogram_merge_reset_and_empty() -> None:
    a, b, both = Histogram(), Histogram(), Histogram()
    rng = random.Random(7)
    for i in range(5000):
        v = rng.randrange(1, 5_000_000)
        (a if i % 2 else b).record(v)
        both.record(v)
    a.merge(b)
    assert a.counts == both.counts and (a.min, a.max, a.count, a.total) == (
        both.min, both.max, both.count, both.total)
    a.reset()
    assert a.count == 0 and a.percentile(99) == 0 and a.summary()["max"] == 0
    with pytest.raises(ValueError):
        both.percentile(0)
    h = Histogram()
    h.record(-5)  # a clock step backwards is clamped, never a negative bucket
    assert h.min == 0 and h.percentile(50) == 0


def test_payload_stamp_run_id_and_wraparound() -> None:
    p = Payload(64, b"0123abcd")
    body = p.body()
    assert len(body) == 64 and body[8:16] == b"0123abcd" and body.isascii()
    stamp = int(body[:8], 16)
    assert p.latency_us(body, stamp + 250) == 250
    assert p.latency_us(b"fffffff0" + body[8:], 0x10) == 0x20  # the 32-bit stamp wrapped
    assert p.latency_us(Payload(64, b"ffffffff").body(), stamp) == -1  # another run's message
    with pytest.raises(ValueError):
        Payload(HEADER_SIZE - 1)


def test_progress_line() -> None:
    h = Histogram()
    h.record_many([1000, 2000, 3000])
    s = Sample.of(3.0, 1.0, 21000, 20000, 19000, h)
    line = progress_line(s, confirming=True)
    assert "sent     21000 msg/s" in line and "confirmed     19000 msg/s" in line
    assert "p50/p95/p99 2.01/3.00/3.00 ms" in line  # 2000 is in bucket 2000..2015
    assert "confirmed" not in progress_line(s, confirming=False)


# -- options ---------------------------------------------------------------------------------------
def test_options_defaults_per_protocol() -> None:
    o = parse_options([])
    assert (o.protocol, o.host, o.port, o.vhost, o.user, o.password) == (
        "amqp", "127.0.0.1", 5672, "/", "guest", "guest")
    assert (o.producers, o.consumers, o.size, o.duration, o.count, o.prefetch, o.ack) == (
        1, 1, 1024, 10.0, 0, 100, "each")
    assert parse_options(["-P", "stomp"]).port == 61613
    ws = parse_options(["-P", "ws"])
    assert (ws.port, ws.ws_path) == (15674, "/ws")


def test_options_url_parsing_and_scheme_inference() -> None:
    o = parse_options(["--url", "amqp://bob:s%40cret@broker.example:5700/%2fprod"])
    assert (o.protocol, o.user, o.password, o.host, o.port, o.vhost) == (
        "amqp", "bob", "s@cret", "broker.example", 5700, "/prod")
    assert o.public()["password"] == "***" and "s%40cret" not in json.dumps(o.public())
    s = parse_options(["-U", "stomp://u:p@h:61700/vh", "--confirm", "8"])
    assert (s.protocol, s.port, s.vhost, s.receipt_every, s.confirm) == ("stomp", 61700, "vh", 1, 8)
    w = parse_options(["-U", "ws://h:15700/stomp", "--vhost", "v2"])
    assert (w.protocol, w.port, w.ws_path, w.vhost) == ("ws", 15700, "/stomp", "v2")
    c = parse_options(["-C", "500", "-t", "news", "-y", "3", "-A", "10", "-f"])
    assert (c.count, c.duration, c.topic, c.fanout, c.multi_ack, c.persistent) == (
        500, 0.0, "news", True, 10, True)
    assert parse_options(["--queues", "3", "-u", "q"]).queue_names() == ["q-1", "q-2", "q-3"]
    q = parse_options(["--queue-args", "x-queue-type=quorum, x-max-length=1000,x-note=a=b"])
    assert q.queue_args == {"x-queue-type": "quorum", "x-max-length": 1000, "x-note": "a=b"}
    assert q.public()["queue_args"] == q.queue_args and parse_options([]).queue_args == {}


@pytest.mark.parametrize("argv", [
    ["-P", "stomp", "-U", "amqp://h/"],  # scheme and protocol disagree
    ["-U", "http://h/"],
    ["-s", "8"],  # no room for the stamp and run id
    ["-x", "0", "-y", "0"],
    ["-A", "200", "-q", "100"],  # the consumer would stall waiting for 200 unacked messages
    ["--ack", "auto", "-A", "5"],
    ["-P", "amqp", "--receipt-every", "5"],
    ["-P", "stomp", "--receipt-every", "10", "--confirm", "5"],
    ["-t", "x", "--queues", "2"],
    ["-z", "0"],
    ["-r", "-1"],
    ["--send-buffer", "-1"],
    ["--queue-args", "x-max-length"],
    ["--queue-args", "=1"],
    ["-P", "stomp", "--queue-args", "x-max-length=1"],
    ["-t", "x", "--queue-args", "x-max-length=1"],
])
def test_options_rejected(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        parse_options(argv)


def test_cli_has_bench_subcommand() -> None:
    args = build_parser().parse_args(["bench", "-P", "ws", "-x", "2", "--json", "out.json"])
    assert (args.command, args.protocol, args.producers, args.json) == ("bench", "ws", 2, "out.json")
    proc = subprocess.run([sys.executable, "-m", "servers", "bench", "-s", "4"],
                          capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 2 and "--size must be at least 16" in proc.stderr


# -- client state, without a broker ---------------------------------------------------------------
class FakeTransport:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_stomp_message_after_our_disconnect_is_neither_acked_nor_counted() -> None:
    """The broker may still deliver after our DISCONNECT; STOMP forbids an ACK then (WebSocket client)."""
    async def go() -> tuple[Stats, list[Any]]:
        stats = Stats()
        payload = Payload(32)
        c = WsStompClient(stats, "consumer-1", parse_options(["-P", "ws"]), payload)
        sent: list[Any] = []

        def send_frame(frame: Any) -> None:  # the STOMP codec's side, without the WebSocket framing
            c.conn.send(frame)
            sent.append(frame)
        c.send_frame = send_frame  # type: ignore[method-assign]
        c.connection_made(FakeTransport())  # type: ignore[arg-type]
        c.send_frame(stompproto.Connect({"accept-version": "1.2", "host": "/"}))
        c.feed_stomp(b"CONNECTED\nversion:1.2\n\n\x00")
        c.ack_header = "client-individual"
        msg = (b"MESSAGE\nsubscription:1\nmessage-id:m1\nack:a1\ndestination:/queue/q\n"
               b"content-length:32\n\n" + payload.body() + b"\x00")
        c.feed_stomp(msg)
        c.closing = True
        c.send_frame(stompproto.Disconnect({"receipt": "bye"}))
        c.feed_stomp(msg.replace(b"a1", b"a2"))
        return stats, sent

    stats, sent = asyncio.run(go())
    assert stats.errors == [] and stats.received == 1
    assert [f.headers for f in sent if isinstance(f, stompproto.Ack)] == [{"id": "a1"}]


def test_client_load_ignores_deliveries_after_its_close() -> None:
    """The same on sansmq_client (AMQP and STOMP): a batch after our close is neither counted nor acked."""
    async def go() -> Stats:
        stats = Stats()
        payload = Payload(32)
        c = ClientLoad(stats, "consumer-1", parse_options(["-P", "stomp"]), payload)
        settled: list[Any] = []

        class Session:
            error = None

            def ack_each(self, route: str, ack_ids: list[str]) -> None:
                settled.extend(ack_ids)
        batch = Batch([payload.body()], ["a1"], [None], Session(), "sub", BatchSink(lambda b: None, lambda: None))
        c._on_batch(batch)
        c.closing = True
        c._on_batch(Batch([payload.body()], ["a2"], [None], Session(), "sub", batch.sink))
        assert settled == ["a1"]
        return stats

    stats = asyncio.run(go())
    assert stats.errors == [] and stats.received == 1


# -- end to end ------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return dict(os.environ, PYTHONUNBUFFERED="1",
                PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))


class Broker:
    """``sansmq serve`` in a subprocess with private ports and data dir; ``addr[proto]``."""

    def __init__(self) -> None:
        self.data = tempfile.mkdtemp(prefix="sansmq-bench-")
        cmd = [sys.executable, "-m", "servers", "serve", *OPS_EPHEMERAL, "--stomp", "127.0.0.1:0",
               "--ws", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--data", self.data]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=_env())
        self.addr: dict[str, tuple[str, int]] = {}
        self.lines: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                if m := LISTEN_RE.fullmatch(line):
                    self.addr[m.group(1)] = (m.group(2), int(m.group(3)))
                    if PROTOCOLS <= self.addr.keys():
                        ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30) or not PROTOCOLS <= self.addr.keys():
            self.stop()
            raise AssertionError(f"sansmq did not start: {self.lines}")

    def url(self, proto: str) -> str:
        host, port = self.addr[proto]
        return {"amqp": f"amqp://guest:guest@{host}:{port}/", "stomp": f"stomp://guest:guest@{host}:{port}/",
                "ws": f"ws://guest:guest@{host}:{port}/ws"}[proto]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    b = Broker()
    try:
        yield b
    finally:
        b.stop()


def bench(tmp_path: Path, *argv: str, timeout: float = 60) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / f"summary-{time.monotonic_ns()}.json"
    proc = subprocess.run([sys.executable, "-m", "servers", "bench", *argv, "--json", str(out)],
                          capture_output=True, text=True, timeout=timeout, env=_env())
    summary = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, summary, proc.stderr


def check_latency(summary: dict[str, Any]) -> None:
    lat = summary["latency_us"]
    assert lat["count"] == summary["received"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p75"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert lat["max"] < 30_000_000  # a stamp misread would give minutes, not seconds


@pytest.mark.parametrize("proto", ["amqp", "stomp", "ws"])
def test_queue_mode_with_acks_and_confirms(broker: Broker, tmp_path: Path, proto: str) -> None:
    q = f"bench-q-{proto}"
    code, s, err = bench(tmp_path, "-U", broker.url(proto), "-u", q, "-x", "2", "-y", "2",
                         "-z", "1", "-r", "1500", "-c", "50", "-s", "200", "-f")
    assert code == 0, (s.get("errors"), err)
    assert s["protocol"] == proto and s["errors"] == [] and s["ok"] is True
    assert s["sent"] > 1000 and s["received"] == s["sent"] and s["missing"] == 0
    assert s["confirmed"] == s["sent"] and s["nacked"] == 0  # window 50: every message confirmed
    check_latency(s)
    c = s["confirm_latency_us"]
    assert c["count"] > 0 and 0 < c["p50"] <= c["p99"] <= c["max"]
    assert s["options"]["password"] == "***" and "guest:***@" in s["url"]
    assert len(s["progress"]) >= 1 and s["progress"][0]["sent"] > 0
    assert re.search(r"sent +\d+ msg/s +received +\d+ msg/s +confirmed", err)


@pytest.mark.parametrize("proto", ["amqp", "stomp", "ws"])
def test_fanout_to_every_consumer(broker: Broker, tmp_path: Path, proto: str) -> None:
    code, s, err = bench(tmp_path, "-U", broker.url(proto), "-t", f"bench-t-{proto}", "-y", "3",
                         "-C", "300", "-r", "1000", "-A", "10", "-s", "100")
    assert code == 0, (s.get("errors"), err)
    assert s["sent"] == 300 and s["received"] == 3 * 300 and s["expected"] == 900
    check_latency(s)


def test_multiple_queues_auto_ack_and_count(broker: Broker, tmp_path: Path) -> None:
    code, s, err = bench(tmp_path, "-U", broker.url("amqp"), "-u", "bench-multi", "--queues", "3",
                         "-x", "3", "-y", "3", "-C", "400", "--ack", "auto", "-q", "0")
    assert code == 0, (s.get("errors"), err)
    assert s["sent"] == 1200 and s["received"] == 1200 and s["confirmed"] == 0
    check_latency(s)


def test_queue_args_are_declared(broker: Broker, tmp_path: Path) -> None:
    """The queue exists with x-max-length=1000 (an integer): declaring it without the same
    arguments is refused (406), with them the run goes through."""
    host, port = broker.addr["amqp"]
    conn = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    conn.channel().queue_declare("bench-args", durable=True, arguments={"x-max-length": 1000})
    conn.close()
    argv = ("-U", broker.url("amqp"), "-u", "bench-args", "-C", "200", "-c", "20", "-f")
    code, s, err = bench(tmp_path, *argv)
    assert code == 1 and "PRECONDITION_FAILED" in json.dumps(s.get("errors")) + err
    code, s, err = bench(tmp_path, *argv, "--queue-args", "x-max-length=1000")
    assert code == 0, (s.get("errors"), err)
    assert s["sent"] == s["received"] == s["confirmed"] == 200


def test_unbounded_rate_runs_and_settles(broker: Broker, tmp_path: Path) -> None:
    code, s, err = bench(tmp_path, "-U", broker.url("stomp"), "-u", "bench-fast", "-z", "1",
                         "-A", "20", "--drain", "20", timeout=90)
    assert code == 0, (s.get("errors"), err)
    assert s["sent"] > 2000 and s["received"] == s["sent"]
    check_latency(s)


def test_send_buffer_is_set_on_every_connection() -> None:
    from sansmq_bench.transport import BenchConnection

    async def main() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        conn = BenchConnection(Stats(), "p", send_buffer=32 * 1024)
        transport, _ = await loop.create_connection(lambda: conn, "127.0.0.1", port)
        size = transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        transport.close()
        server.close()
        return size

    # Linux doubles the value asked for (bookkeeping overhead); other kernels keep it
    assert 32 * 1024 <= asyncio.run(main()) <= 64 * 1024
    assert parse_options(["--send-buffer", "65536"]).send_buffer == 65536
    assert parse_options([]).send_buffer == 0


def test_unbounded_rate_with_a_small_send_buffer(broker: Broker, tmp_path: Path) -> None:
    code, s, err = bench(tmp_path, "-U", broker.url("amqp"), "-u", "bench-sndbuf", "-z", "1",
                         "--send-buffer", "65536", "--drain", "20", timeout=90)
    assert code == 0, (s.get("errors"), err)
    assert s["sent"] > 1000 and s["received"] == s["sent"] and s["options"]["send_buffer"] == 65536
    check_latency(s)


def test_refused_login_exits_nonzero(broker: Broker, tmp_path: Path) -> None:
    for proto in ("amqp", "stomp", "ws"):
        url = broker.url(proto).replace("guest:guest@", "guest:wrong@")
        code, s, err = bench(tmp_path, "-U", url, "-z", "1")
        assert code == 1, (proto, s, err)
        assert s["ok"] is False and s["sent"] == 0 and s["received"] == 0
        assert len(s["errors"]) >= 1 and "***" in s["url"], s["errors"]


def test_nothing_listening_exits_nonzero(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nobody listens on it now
    code, s, _ = bench(tmp_path, "-U", f"stomp://127.0.0.1:{port}/", "-z", "1")
    assert code == 1 and "cannot connect" in s["errors"][0]


def test_broker_closing_mid_run_exits_nonzero(tmp_path: Path) -> None:
    """sansmq killed while the run is under way: the bench stops publishing and exits 1."""
    b = Broker()
    try:
        out = tmp_path / "killed.json"
        proc = subprocess.Popen([sys.executable, "-m", "servers", "bench", "-U", b.url("amqp"),
                                 "-z", "20", "-r", "500", "--json", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True)
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first progress line: the run is under way
        assert "sent" in first, first
        b.proc.kill()  # SIGKILL: no goodbye, the sockets just close
        b.proc.wait()
        code = proc.wait(30)
        s = json.loads(out.read_text())
        assert code == 1 and s["ok"] is False and s["sent"] > 0
        assert any("closed" in e or "lost" in e for e in s["errors"]), s["errors"]
        assert s["elapsed_seconds"] < 15  # publishing stopped at the failure, not at -z 20
    finally:
        b.stop()


def test_stale_messages_are_skipped_and_consumer_only_run(broker: Broker, tmp_path: Path) -> None:
    """A producer-only run leaves 100 messages; a later consumer-only run sees them as another
    run's (stale), counts none as received, and so fails with "nothing was received"."""
    url = broker.url("stomp")
    code, s, err = bench(tmp_path, "-U", url, "-u", "bench-stale", "-y", "0", "-C", "100")
    assert code == 0 and s["sent"] == 100 and s["received"] == 0, (s, err)
    code, s, err = bench(tmp_path, "-U", url, "-u", "bench-stale", "-x", "0", "-z", "1")
    assert code == 1 and s["stale"] == 100 and s["received"] == 0, (s, err)
    assert s["errors"] == [] and s["problems"] == ["nothing was received"]
    assert "FAILED: nothing was received" in err


def test_sigint_stops_publishing_and_still_summarises(broker: Broker, tmp_path: Path) -> None:
    out = tmp_path / "int.json"
    proc = subprocess.Popen([sys.executable, "-m", "servers", "bench", "-U", broker.url("stomp"),
                             "-u", "bench-int", "-z", "60", "-r", "500", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True)
    assert proc.stderr is not None
    assert "sent" in proc.stderr.readline()  # one progress line: publishing is under way
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    s = json.loads(out.read_text())
    assert s["ok"] and 0 < s["sent"] == s["received"] and s["publish_seconds"] < 30
