"""Cluster nodes as real processes for the tests: ``python -m servers serve --node NAME`` on
loopback ports chosen by the kernel, a short lease, and helpers to find who leads what."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from base64 import b64encode
from collections.abc import Callable
from typing import Any

import pika

#: seconds a stalled or killed node keeps its leases in these tests
LEASE = 2.0


def wait_for(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Node:
    """One node process; ``amqp``/``stomp``/``http``/``link`` (node-to-node) are its bound ports."""

    def __init__(self, name: str, dsn: str, lease: float = LEASE, extra: tuple[str, ...] = ()) -> None:
        self.name = name
        self.dsn = dsn
        self.lease = lease
        #: more ``serve`` options (e.g. the link's TLS files)
        self.extra = extra
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self.amqp = self.stomp = self.http = self.link = self.prometheus = 0

    def start(self) -> Node:
        cmd = [sys.executable, "-m", "servers", "serve", "--store", self.dsn, "--node", self.name,
               "--cluster-lease", str(self.lease), "--cluster-address", "127.0.0.1:0", "--amqp", "127.0.0.1:0", "--stomp", "127.0.0.1:0",
               "--no-ws", "--http", "127.0.0.1:0", "--prometheus", "127.0.0.1:0", *self.extra]
        self.lines = []
        self.proc = proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE, text=True)
        ports: dict[str, int] = {}
        ready = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.lines.append(line)
                for proto in ("amqp", "stomp", "http", "cluster", "prometheus"):
                    marker = f"{proto} listening on 127.0.0.1:"
                    if marker in line:
                        ports[proto] = int(line.split(marker, 1)[1].split()[0])
                if len(ports) == 5:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30) or len(ports) != 5:
            raise AssertionError(f"node {self.name} did not start: {''.join(self.lines)[-3000:]}")
        self.amqp, self.stomp, self.http, self.link = ports["amqp"], ports["stomp"], ports["http"], ports["cluster"]
        self.prometheus = ports["prometheus"]
        return self

    def log(self) -> str:
        return "".join(self.lines)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """kill -9: no goodbye to clients or the database."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(20)

    def pika(self, **kw: Any) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.amqp, heartbeat=0,
                                                                 blocked_connection_timeout=10, **kw))

    def publisher(self, queue: str) -> Any:
        """A channel in confirm mode, ``queue`` declared durable on this node."""
        ch = self.pika().channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        return ch

    def has_queue(self, queue: str) -> bool:
        conn = self.pika()
        try:
            conn.channel().queue_declare(queue, passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker:
            return False
        finally:
            if conn.is_open:
                conn.close()

    def drain(self, queue: str) -> list[tuple[bytes, bool]]:
        """Every ready message of ``queue`` taken and acked here: (body, redelivered)."""
        conn = self.pika()
        ch = conn.channel()
        out = []
        while True:
            method, _, body = ch.basic_get(queue, auto_ack=False)
            if method is None:
                break
            out.append((body, method.redelivered))
            ch.basic_ack(method.delivery_tag)
        conn.close()
        return out

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/api/{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": "Basic " + b64encode(b"guest:guest").decode(),
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            data = resp.read()
        return json.loads(data) if data else None


class Nodes:
    """The nodes of one test's cluster, by name."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.by_name: dict[str, Node] = {}

    def start(self, *names: str, lease: float = LEASE, extra: tuple[str, ...] = ()) -> list[Node]:
        started = []
        for name in names:
            node = self.by_name.get(name) or Node(name, self.dsn, lease, extra)
            self.by_name[name] = node
            started.append(node.start())
        return started

    def __getitem__(self, name: str) -> Node:
        return self.by_name[name]

    def cli(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``sansmq cluster ARGS --store DSN``."""
        return subprocess.run([sys.executable, "-m", "servers", "cluster", *args, "--store", self.dsn],
                              capture_output=True, text=True, timeout=timeout)

    def status(self) -> dict[str, Any]:
        out = self.cli("status", "--json", timeout=30)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    def leaders(self, vhost: str = "/") -> dict[str, str]:
        """queue -> leader, as the database has them."""
        return {lease["queue"]: lease["leader"] for lease in self.status()["leases"] if lease["vhost"] == vhost}

    def leader(self, queue: str, vhost: str = "/") -> tuple[str, int] | None:
        """(leader, epoch) of ``queue`` as the database has it."""
        for lease in self.status()["leases"]:
            if (lease["vhost"], lease["queue"]) == (vhost, queue):
                return lease["leader"], lease["epoch"]
        return None

    def kill_all(self) -> None:
        for node in self.by_name.values():
            node.kill()
