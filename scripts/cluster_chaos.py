#!/usr/bin/env python3
"""Chaos test of a three-node cluster on PostgreSQL: faults under confirmed publishers and acking
consumers spread over the nodes.

Three ``python -m servers serve --node`` processes share one PostgreSQL database (``--store``, else
a throwaway server started with scripts/install-postgres.sh). Each of ``--queues`` queues (declared
``balanced``, so leaders spread) has a pika publisher (persistent, confirms) and a pika consumer
(manual acks, prefetch 50), each on a node picked at random and moving to another one whenever its
connection fails. Each cycle injects one fault into a random node: kill -9 (then a restart), SIGSTOP
past the lease then SIGCONT, or a graceful restart; then waits until every queue has a live leader
and takes a confirmed publish through a live node again (that wait is the recovery time).

Checks, over the whole run:

* lost: a message whose publish was confirmed and that no consumer ever received (after the faults
  stop, the consumers drain until nothing is missing or ``--drain`` seconds pass);
* order: per queue, first deliveries of confirmed messages in publish order (a publisher publishes
  one at a time), as RabbitMQ promises it: a message first seen with ``redelivered`` set was requeued
  (delivered to a consumer or relay that went away) and is exempt, as RabbitMQ's docs say;
* acked then redelivered (reported, not a violation: an AMQP ack has no confirmation, so an ack in
  flight when a leader dies is redelivered, as with RabbitMQ).

To explain a loss from the output, the run records per confirmed message the node it was published
through and when its confirm came, per first delivery the node and consumer that got it, every fault
(when, which node, which kind) and every change of a queue's lease (leader, epoch) as sampled from
the database every 0.1 s. A lost message is printed with its publish node, confirm time, the leader
and epoch at that time, the faults around it and its neighbours' deliveries; ``--record FILE`` writes
all of it (and the lease timeline) as JSON; each order violation's two messages are explained alike.

Usage: ``python scripts/cluster_chaos.py --cycles 200 [--store postgresql://...] [--seed N]
[--lease 1.0] [--record FILE]``; prints cycles, confirmed, lost, order violations and recovery
p50/p99, exits 1 on any loss or order violation. Traffic stays on loopback; every loop is bounded in
count and time.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika

ROOT = Path(__file__).resolve().parents[1]
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node:
    def __init__(self, name: str, dsn: str, lease: float, logdir: str) -> None:
        self.name, self.dsn, self.lease = name, dsn, lease
        self.amqp, self.link = free_port(), free_port()
        self.log = open(os.path.join(logdir, f"{name}.log"), "ab")  # noqa: SIM115 - kept for the run
        self.proc: subprocess.Popen[bytes] | None = None
        self.up = False

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "servers", "serve", "--store", self.dsn, "--node", self.name,
             "--cluster-lease", str(self.lease), "--cluster-address", f"127.0.0.1:{self.link}",
             "--amqp", f"127.0.0.1:{self.amqp}", "--no-stomp", "--no-ws", "--no-http", "--no-prometheus"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.amqp), 0.5).close()
                self.up = True
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"node {self.name} did not start (see its log)")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.up = False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.up = False


class Leases:
    """The queues' leases (leader, epoch) as the database has them, sampled every ``every`` seconds;
    only changes are kept: ``timeline[queue]`` is [(time, leader, epoch)]."""

    def __init__(self, dsn: str, t0: float, every: float = 0.1) -> None:
        self.dsn, self.t0, self.every = dsn, t0, every
        self.timeline: dict[str, list[tuple[float, str, int]]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg

        conn = None
        while not self.stop.wait(self.every):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
                rows = conn.execute("SELECT q.name, l.leader, l.epoch FROM sansmq.leases l"
                                    " JOIN sansmq.queues q ON q.id = l.queue").fetchall()
            except Exception:  # noqa: BLE001 - a sample missed is no reason to stop the run
                conn = None
                continue
            now = time.monotonic() - self.t0
            for queue, leader, epoch in rows:
                line = self.timeline.setdefault(queue, [])
                if not line or line[-1][1:] != (leader, epoch):
                    line.append((round(now, 3), leader, epoch))

    def at(self, queue: str, t: float) -> tuple[str, int] | None:
        """(leader, epoch) of ``queue`` as last sampled at or before ``t``."""
        line = self.timeline.get(queue, [])
        i = bisect.bisect_right([x[0] for x in line], t)
        return line[i - 1][1:] if i else None


class Traffic:
    """A publisher and a consumer per queue; what they saw."""

    def __init__(self, nodes: list[Node], queues: list[str], rng: random.Random, t0: float) -> None:
        self.nodes, self.queues, self.rng, self.t0 = nodes, queues, rng, t0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.confirmed: dict[str, list[int]] = {q: [] for q in queues}
        #: per confirmed message: (node published through, confirm time)
        self.published: dict[str, dict[int, tuple[str, float]]] = {q: {} for q in queues}
        #: per message first delivered: (node, consumer connection number, time, redelivered)
        self.delivered: dict[str, dict[int, tuple[str, int, float, bool]]] = {q: {} for q in queues}
        self.consumers = 0
        self.first: dict[str, list[int]] = {q: [] for q in queues}
        self.seen: dict[str, set[int]] = {q: set() for q in queues}
        self.acked: dict[str, set[int]] = {q: set() for q in queues}
        self.redelivered_after_ack = 0
        self.first_redelivered = 0
        self.threads = [threading.Thread(target=fn, args=(q,), daemon=True)
                        for q in queues for fn in (self._publish, self._consume)]
        self.publishing = True

    def _connect(self) -> tuple[pika.BlockingConnection, str]:
        while not self.stop.is_set():
            live = [n for n in self.nodes if n.up]
            node = self.rng.choice(live) if live else self.nodes[0]
            try:
                return pika.BlockingConnection(pika.ConnectionParameters(
                    "127.0.0.1", node.amqp, heartbeat=0, socket_timeout=5, blocked_connection_timeout=10)), node.name
            except pika.exceptions.AMQPError:
                time.sleep(0.1)
        raise SystemExit

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def _publish(self, queue: str) -> None:
        seq = 0
        while not self.stop.is_set():
            try:
                conn, node = self._connect()
                ch = conn.channel()
                ch.confirm_delivery()
                while self.publishing and not self.stop.is_set():
                    seq += 1
                    ch.basic_publish("", queue, f"{queue}:{seq}".encode(), PERSISTENT)
                    with self.lock:
                        self.confirmed[queue].append(seq)
                        self.published[queue][seq] = (node, self.now())
                    time.sleep(0.002)
                conn.close()
                return
            except (pika.exceptions.AMQPError, OSError, SystemExit):
                time.sleep(0.05)

    def _consume(self, queue: str) -> None:
        where = ("", 0)  # the node and number of the consumer connection now open

        def on_message(ch, method, _props, body) -> None:  # noqa: ANN001 - pika's callback
            n = int(body.split(b":")[1])
            with self.lock:
                if n not in self.seen[queue]:
                    self.seen[queue].add(n)
                    self.delivered[queue][n] = (*where, self.now(), method.redelivered)
                    if method.redelivered:  # requeued (a consumer or a leader went): no order promised
                        self.first_redelivered += 1
                    else:
                        self.first[queue].append(n)
                elif n in self.acked[queue]:
                    self.redelivered_after_ack += 1
            ch.basic_ack(method.delivery_tag)
            with self.lock:
                self.acked[queue].add(n)

        while not self.stop.is_set():
            try:
                conn, node = self._connect()
                with self.lock:
                    self.consumers += 1
                    where = (node, self.consumers)
                ch = conn.channel()
                ch.basic_qos(prefetch_count=50)
                tag = ch.basic_consume(queue, on_message)
                until = time.monotonic() + self.rng.uniform(2, 6)  # move between nodes now and then
                while not self.stop.is_set() and time.monotonic() < until:
                    conn.process_data_events(0.1)
                ch.basic_cancel(tag)  # leave cleanly: what was delivered is acked, nothing in flight
                conn.process_data_events(0)
                conn.close()
            except (pika.exceptions.AMQPError, OSError, SystemExit):
                time.sleep(0.05)


def probe(nodes: list[Node], queues: list[str], deadline: float) -> bool:
    """A confirmed publish to every queue through a live node (to ``probe``, which consumers skip)."""
    for q in queues:
        while True:
            if time.monotonic() > deadline:
                return False
            node = random.choice([n for n in nodes if n.up])
            try:
                conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.amqp, heartbeat=0,
                                                                         socket_timeout=3))
                ch = conn.channel()
                ch.confirm_delivery()
                ch.basic_publish("", f"{q}-probe", b"probe", PERSISTENT)
                conn.close()
                break
            except (pika.exceptions.AMQPError, OSError):
                time.sleep(0.05)
    return True


def explain(traffic: Traffic, leases: Leases, events: list[tuple[float, int, str, str]], queue: str, n: int
            ) -> dict[str, object]:
    """What the run knows of lost message ``n`` of ``queue``: where and when it was confirmed, the
    queue's leader and epoch then, the faults within 5 s of it, and where its neighbours went."""
    node, at = traffic.published[queue][n]
    near = [e for e in events if abs(e[0] - at) <= 5]
    neighbours = {m: traffic.delivered[queue].get(m) for m in (n - 1, n + 1)}
    return {"seq": n, "published_through": node, "confirmed_at": at, "leader_epoch": leases.at(queue, at),
            "first_delivered": traffic.delivered[queue].get(n), "faults_near": near,
            "neighbours_first_delivered": neighbours,
            "lease_changes_near": [x for x in leases.timeline.get(queue, []) if abs(x[0] - at) <= 10]}


def start_postgres(workdir: str) -> tuple[str, str]:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "install-postgres.sh"), "start", workdir],
                         capture_output=True, text=True, timeout=180)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("SANSMQ_PG_DSN=")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"could not start PostgreSQL: {out.stderr[-2000:]}")
    return lines[-1].split("=", 1)[1], workdir


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--store", help="postgresql://... (default: a throwaway PostgreSQL)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lease", type=float, default=1.0)
    ap.add_argument("--queues", type=int, default=3)
    ap.add_argument("--drain", type=float, default=60.0)
    ap.add_argument("--record", help="write what the run saw (see above) to this JSON file")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    workdir = tempfile.mkdtemp(prefix="sansmq-chaos-")
    pg_dir = ""
    dsn = args.store
    if not dsn:
        pg_dir = tempfile.mkdtemp(prefix="sansmq-pg-")
        admin, _ = start_postgres(pg_dir)
        import psycopg

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE sansmq_chaos")
        dsn = admin.rsplit("/", 1)[0] + "/sansmq_chaos"
    nodes = [Node(name, dsn, args.lease, workdir) for name in ("a", "b", "c")]
    queues = [f"chaos{i}" for i in range(args.queues)]
    recoveries: list[float] = []
    events: list[tuple[float, int, str, str]] = []  # (time, cycle, fault, node)
    faults = {"kill": 0, "stop": 0, "restart": 0}
    try:
        for node in nodes:
            node.start()
        time.sleep(args.lease)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", nodes[0].amqp, heartbeat=0))
        ch = conn.channel()
        for q in queues:
            ch.queue_declare(q, durable=True, arguments={"x-queue-leader-locator": "balanced"})
            ch.queue_declare(f"{q}-probe", durable=True, arguments={"x-queue-leader-locator": "balanced",
                                                                    "x-max-length": 10})
        conn.close()
        time.sleep(0.5)
        started = time.monotonic()
        traffic = Traffic(nodes, queues, rng, started)
        leases = Leases(dsn, started)
        leases.thread.start()
        for t in traffic.threads:
            t.start()
        for cycle in range(1, args.cycles + 1):
            time.sleep(rng.uniform(0.2, 1.0))
            victim = rng.choice(nodes)
            kind = rng.choice(("kill", "kill", "stop", "restart"))
            faults[kind] += 1
            t0 = time.monotonic()
            events.append((traffic.now(), cycle, kind, victim.name))
            if kind == "kill":
                victim.kill()
            elif kind == "stop":
                victim.signal(signal.SIGSTOP)
                victim.up = False
                time.sleep(args.lease * 1.5)
                victim.signal(signal.SIGCONT)
            else:
                victim.stop()
                t0 = time.monotonic()  # from the process's exit (its shutdown waits for its clients)
            if not probe(nodes, queues, time.monotonic() + 30):
                print(f"cycle {cycle}: no recovery within 30 s", file=sys.stderr)
                return 1
            recoveries.append(time.monotonic() - t0)
            if kind != "stop":
                victim.start()
            victim.up = True
            if cycle % 20 == 0:
                with traffic.lock:
                    sent = sum(len(v) for v in traffic.confirmed.values())
                print(f"cycle {cycle}: {sent} confirmed, recovery p50 {percentile(recoveries, 0.5):.2f}s",
                      flush=True)
        traffic.publishing = False
        elapsed = time.monotonic() - started
        deadline = time.monotonic() + args.drain
        while time.monotonic() < deadline:
            with traffic.lock:
                missing = sum(len(set(traffic.confirmed[q]) - traffic.seen[q]) for q in queues)
            if not missing:
                break
            time.sleep(0.5)
        traffic.stop.set()
        leases.stop.set()
        for t in traffic.threads:
            t.join(10)
        with traffic.lock:
            confirmed = sum(len(v) for v in traffic.confirmed.values())
            lost = {q: sorted(set(traffic.confirmed[q]) - traffic.seen[q]) for q in queues}
            # confirmed ones only: a publish that failed (nack, lost connection) may still have
            # reached its queue late, as with RabbitMQ; the publisher was told it failed
            ok = {q: set(traffic.confirmed[q]) for q in queues}
            firsts = {q: [n for n in f if n in ok[q]] for q, f in traffic.first.items()}
            inversions = [(q, x, y) for q, f in firsts.items() for x, y in zip(f, f[1:], strict=False) if y < x]
            disorder = len(inversions)
        n_lost = sum(len(v) for v in lost.values())
        print(f"cycles {args.cycles} ({faults['kill']} kill -9, {faults['stop']} SIGSTOP past the lease, "
              f"{faults['restart']} restarts) in {elapsed:.0f}s, lease {args.lease:g}s")
        print(f"confirmed {confirmed}, lost {n_lost}, order violations {disorder}, "
              f"first seen redelivered {traffic.first_redelivered}, "
              f"acked then redelivered {traffic.redelivered_after_ack}")
        print(f"recovery p50 {percentile(recoveries, 0.5):.2f}s p99 {percentile(recoveries, 0.99):.2f}s "
              f"max {max(recoveries, default=0):.2f}s")
        if inversions:
            print("order violations (queue, delivered first, then):", inversions[:10], file=sys.stderr)
        if n_lost:
            print("lost (first ten per queue):", {q: v[:10] for q, v in lost.items() if v}, file=sys.stderr)
        explained = {q: [explain(traffic, leases, events, q, n) for n in v] for q, v in lost.items() if v}
        for q, lines in explained.items():
            for line in lines[:10]:
                print(f"lost {q}: {json.dumps(line)}", file=sys.stderr)
        # an order violation: both messages, where they went and when (first ten)
        disordered = [[explain(traffic, leases, events, q, x), explain(traffic, leases, events, q, y)]
                      for q, x, y in inversions[:10]]
        for pair in disordered:
            print(f"order violation: {json.dumps(pair)}", file=sys.stderr)
        if args.record:
            with open(args.record, "w") as out:
                json.dump({"seed": args.seed, "lease": args.lease, "faults": events, "leases": leases.timeline,
                           "lost": explained, "order_violations": disordered, "recoveries": recoveries}, out)
        return 1 if n_lost or disorder else 0
    finally:
        for node in nodes:
            node.stop()
        if pg_dir:
            subprocess.run(["bash", str(ROOT / "scripts" / "install-postgres.sh"), "stop", pg_dir],
                           capture_output=True, timeout=120)
            shutil.rmtree(pg_dir, ignore_errors=True)
        print(f"node logs in {workdir}")


if __name__ == "__main__":
    sys.exit(main())
