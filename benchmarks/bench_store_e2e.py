"""Receipted persistent SEND/s and confirmed publish/s through a real ``sansmq serve`` (asyncio
server) on a durable store: the segment files or PostgreSQL. Used by bench_store.py --e2e.

Each figure runs for ``seconds``: STOMP SEND persistent:true with a receipt (one publisher waiting
for each receipt; one publisher keeping 100 receipts outstanding; 8 publishers each waiting) and
AMQP basic.publish delivery-mode 2 on a confirm channel (pika: 1 publisher, 8 publishers), each
publish waiting for its confirm. Many in flight share one commit (group commit)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install-postgres.sh"
LISTEN_RE = re.compile(r"sansmq: (\w+) listening on \[?([^\s\]]+)\]?:(\d+)")
BODY = b"x" * 100


@contextlib.contextmanager
def store_location(arg: str) -> Iterator[str | None]:
    """None for the segment store; a PostgreSQL URL (a throwaway server for ``postgresql``)."""
    if arg == "segment":
        yield None
        return
    if arg != "postgresql":
        yield arg
        return
    d = tempfile.mkdtemp(prefix="sansmq-pg-bench-")
    out = subprocess.run(["bash", str(SCRIPT), "start", d], capture_output=True, text=True, check=True)
    url = out.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        yield url
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", d], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def start_server(url: str | None, data: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    where = ["--store", url] if url else ["--data", data]
    cmd = [sys.executable, "-m", "servers", "serve", "--server", "asyncio", "--stomp", "127.0.0.1:0",
           "--amqp", "127.0.0.1:0", "--no-ws", *where, "--log-level", "info"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    ports: dict[str, int] = {}
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while len(ports) < 2 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError("server exited")
        if m := LISTEN_RE.search(line):
            ports[m.group(1)] = int(m.group(3))
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
    return proc, ports


def _stomp(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\nheart-beat:0,0\n\n\x00")
    buf = b""
    while b"\x00" not in buf:
        buf += s.recv(4096)
    assert buf.startswith(b"CONNECTED"), buf
    return s


def stomp_publisher(port: int, seconds: float, window: int, dest: str) -> int:
    """Receipted SENDs with up to ``window`` outstanding; returns how many were receipted."""
    s = _stomp(port)
    frame = (f"SEND\ndestination:{dest}\npersistent:true\nreceipt:r\ncontent-length:{len(BODY)}\n\n".encode()
             + BODY + b"\x00")
    done = 0
    end = time.monotonic() + seconds
    s.sendall(frame * window)
    outstanding = window
    while outstanding:
        data = s.recv(65536)
        if not data:
            raise RuntimeError("connection closed")
        got = data.count(b"\x00")
        if b"ERROR" in data:
            raise RuntimeError(data.decode(errors="replace"))
        done += got
        outstanding -= got
        if time.monotonic() < end:
            s.sendall(frame * got)
            outstanding += got
    s.close()
    return done


def amqp_publisher(port: int, seconds: float, queue: str, latencies: list[float] | None = None) -> int:
    """Publishes, each waiting for its confirm; appends each round trip (s) to ``latencies``."""
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    n = 0
    end = time.monotonic() + seconds
    while (t0 := time.monotonic()) < end:
        ch.basic_publish("", queue, BODY, props)  # returns once confirmed
        if latencies is not None:
            latencies.append(time.monotonic() - t0)
        n += 1
    conn.close()
    return n


def commits(url: str | None) -> int:
    """Transactions committed in the database so far (PostgreSQL's statistics, flushed first)."""
    if not url:
        return 0
    import psycopg

    time.sleep(1.2)  # backends report their counters to the statistics at most once a second
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def parallel(k: int, fn: Callable[[int], int]) -> int:
    results = [0] * k

    def one(i: int) -> None:
        results[i] = fn(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(results)


def run(url: str | None, seconds: float) -> None:
    data = tempfile.mkdtemp(prefix="sansmq-bench-e2e-")
    proc, ports = start_server(url, os.path.join(data, "store"))
    sp, ap = ports["stomp"], ports["amqp"]
    print(f"store: {'PostgreSQL ' + url if url else 'segment files in ' + data}, asyncio server, "
          f"{len(BODY)}-byte persistent messages, {seconds:.0f} s each")
    lat: list[float] = []
    try:
        rows = [
            ("STOMP receipted SEND/s, 1 publisher, 1 in flight", lambda: stomp_publisher(sp, seconds, 1, "/queue/b1")),
            ("STOMP receipted SEND/s, 1 publisher, 100 in flight",
             lambda: stomp_publisher(sp, seconds, 100, "/queue/b2")),
            ("STOMP receipted SEND/s, 8 publishers, 1 in flight each",
             lambda: parallel(8, lambda i: stomp_publisher(sp, seconds, 1, f"/queue/b3-{i}"))),
            ("AMQP confirmed publish/s, 1 publisher (pika)", lambda: amqp_publisher(ap, seconds, "a1", lat)),
            ("AMQP confirmed publish/s, 8 publishers (pika)",
             lambda: parallel(8, lambda i: amqp_publisher(ap, seconds, f"a2-{i}"))),
        ]
        for label, fn in rows:
            c0 = commits(url)
            t0 = time.perf_counter()
            n = fn()
            rate = n / (time.perf_counter() - t0)
            c1 = commits(url)
            per = f"   {n / max(1, c1 - c0):6.1f} msgs/commit" if url else ""
            print(f"  {label:58} {rate:10,.0f}{per}")
            if lat:
                lat.sort()
                p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, len(lat) * 99 // 100)]
                print(f"  {'  confirm latency p50 / p99 (ms)':58} {p50 * 1e3:6.2f} / {p99 * 1e3:.2f}")
                lat.clear()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)
