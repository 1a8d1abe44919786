"""Broker RSS with a queued persistent backlog and with many idle durable queues, and the time a
restart takes to recover them (a script, not a test).

    python benchmarks/bench_backlog_rss.py [--counts 0,1000000,10000000] [--queues 1000000]
                                           [--server asyncio] [--window 2048]

Each case starts a real ``sansmq serve`` subprocess (``python -m servers serve``) on private ports
(127.0.0.1:0) with a fresh ``--data`` directory, fills it over STOMP on a raw socket (pipelined
frames, one receipt per batch, so the client is never the bottleneck), then reports:

* RSS (``VmRSS`` of the server) when idle and with the backlog queued: N persistent 100-byte
  messages SENT to ``/queue/backlog`` (a durable queue; every receipt waited for its fsync);
* the restart: SIGTERM, then a new server on the same directory; "recovery" is the time from
  spawning it to its listening line (Python start-up included: compare with the empty case), and
  the RSS after it;
* the same for Q idle durable queues (SUBSCRIBE + UNSUBSCRIBE on ``/queue/idle-<i>``, which
  declares each as a durable queue and leaves it empty).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

LISTEN_RE = re.compile(r"(?:\S+ +\S+ +)?sansmq: (\w+) listening on \[?([^\s\]]+)\]?:(\d+) \((\w+) server\)")


class Server:
    def __init__(self, data: str, kind: str, config: str) -> None:
        cmd = [sys.executable, "-m", "servers", "serve", "--server", kind, "--stomp", "127.0.0.1:0",
               "--no-ws", "--no-amqp", "--data", data, "--config", config]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.addr: tuple[str, int] | None = None
        self.t_ready = 0.0
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(3600) or self.addr is None:
            self.proc.kill()
            raise SystemExit(f"server did not start: {self.lines[-20:]}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            m = LISTEN_RE.fullmatch(line)
            if m and m.group(1) == "stomp":
                self.addr = (m.group(2), int(m.group(3)))
                self.t_ready = time.monotonic()
                self.ready.set()
        self.ready.set()

    @property
    def startup(self) -> float:
        return self.t_ready - self.t0

    def rss_mb(self, settle: float = 2.0) -> float:
        time.sleep(settle)
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(600)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Stomp:
    """Just enough STOMP on a blocking socket: pipelined frames, a receipt per batch."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr)
        self.buf = b""
        self.sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\nheart-beat:0,0\n\n\x00")
        self._until(b"CONNECTED")
        self.seq = 0

    def _until(self, token: bytes) -> None:
        while token not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise SystemExit(f"connection closed; got {self.buf[-300:]!r}")
            if b"ERROR" in chunk:
                raise SystemExit(f"broker error: {chunk[:300]!r}")
            self.buf += chunk
        self.buf = self.buf[self.buf.index(token) + len(token):]

    def batch(self, frames: list[bytes]) -> None:
        self.seq += 1
        rid = b"b%d" % self.seq
        frames.append(b"SEND\ndestination:/queue/bench-receipts\nreceipt:" + rid + b"\n\n\x00")
        self.sock.sendall(b"".join(frames))
        self._until(b"receipt-id:" + rid + b"\n")

    def close(self) -> None:
        self.sock.sendall(b"DISCONNECT\n\n\x00")
        self.sock.close()


def fill_backlog(addr: tuple[str, int], n: int, batch: int) -> float:
    c = Stomp(addr)
    t0 = time.monotonic()
    body = b"x" * 100
    head = b"SEND\ndestination:/queue/backlog\npersistent:true\ncontent-length:100\n\n"
    frame = head + body + b"\x00"
    done = 0
    while done < n:
        k = min(batch, n - done)
        c.batch([frame] * k)
        done += k
        if done % (batch * 100) == 0:
            print(f"    {done:,} sent ({done / (time.monotonic() - t0):,.0f}/s)", flush=True)
    c.close()
    return time.monotonic() - t0


def declare_idle(addr: tuple[str, int], n: int, batch: int) -> float:
    c = Stomp(addr)
    t0 = time.monotonic()
    i = 0
    while i < n:
        frames = []
        for j in range(i, min(n, i + batch)):
            frames.append(b"SUBSCRIBE\nid:s\ndestination:/queue/idle-%d\nack:auto\n\n\x00" % j)
            frames.append(b"UNSUBSCRIBE\nid:s\n\n\x00")
        c.batch(frames)
        i = min(n, i + batch)
        if i % (batch * 50) == 0:
            print(f"    {i:,} declared ({i / (time.monotonic() - t0):,.0f}/s)", flush=True)
    c.close()
    return time.monotonic() - t0


def case(label: str, kind: str, config: str, fill, amount: int, batch: int) -> dict[str, float]:
    data = tempfile.mkdtemp(prefix="sansmq-bench-rss-")
    try:
        srv = Server(data, kind, config)
        idle = srv.rss_mb()
        took = fill(srv.addr, amount, batch) if amount else 0.0
        loaded = srv.rss_mb(3.0)
        srv.stop()
        du = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(data) for f in fs) / 1e6
        srv = Server(data, kind, config)
        restarted = srv.rss_mb()
        out = {"idle_mb": idle, "loaded_mb": loaded, "fill_s": took, "disk_mb": du,
               "recovery_s": srv.startup, "after_restart_mb": restarted}
        srv.stop()
        print(f"{label:<34} idle {idle:7.1f} MB | loaded {loaded:7.1f} MB (+{loaded - idle:.1f}) | "
              f"fill {took:6.1f} s | disk {du:7.1f} MB | restart {srv.startup:6.2f} s -> {restarted:7.1f} MB",
              flush=True)
        return out
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="0,1000000", help="persistent backlog sizes (comma list)")
    ap.add_argument("--queues", type=int, default=1_000_000, help="idle durable queues (0 skips)")
    ap.add_argument("--server", default="asyncio")
    ap.add_argument("--window", type=int, default=None, help="Limits.queue_window (default: the broker's)")
    ap.add_argument("--batch", type=int, default=5000, help="frames per receipt")
    a = ap.parse_args()
    cfg_dir = tempfile.mkdtemp(prefix="sansmq-bench-cfg-")
    config = os.path.join(cfg_dir, "bench.toml")
    with open(config, "w") as f:
        f.write("[limits]\nmax_pending_receipts = 1000000\n")
        if a.window is not None:
            f.write(f"queue_window = {a.window}\n")
    print(f"sansmq serve --server {a.server}; {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M')}")
    try:
        for n in (int(x) for x in a.counts.split(",") if x.strip()):
            case(f"{n:,} x 100 B persistent queued", a.server, config, fill_backlog, n, a.batch)
        if a.queues:
            case(f"{a.queues:,} idle durable queues", a.server, config, declare_idle, a.queues, a.batch)
    finally:
        shutil.rmtree(cfg_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
