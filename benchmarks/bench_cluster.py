"""Cluster benchmark (issue 24): confirmed msg/s with queues spread over the nodes, and the failover
time when the node leading a queue is killed. Not a test; a few short runs.

    python benchmarks/bench_cluster.py --target rabbitmq [--duration 10] [--out FILE.jsonl]
    python benchmarks/bench_cluster.py --target sansmq1      # today's broker: one node on PostgreSQL
    python benchmarks/bench_cluster.py --target sansmq3      # three nodes on one PostgreSQL (the cluster)
    python benchmarks/bench_cluster.py --target sansmq1-pgha # one node; the database fails over instead

One target = one function that starts the brokers on loopback (free ports, private data, stopped at
the end) and returns a ``Nodes``: their AMQP ports, the queue arguments the run declares and how to
kill a node. The measurements are the same for every target:

* throughput, ``--layout spread`` (the default): ``--queues-per-node`` durable queues per node whose
  leaders are spread evenly over the nodes (sansmq: declared with ``x-queue-leader-locator=balanced``;
  RabbitMQ: queue k declared through node k mod n, its ``client-local`` default), then per node one
  producer-only ``sansmq bench`` connected to node i and one consumer-only ``sansmq bench`` connected
  to node i+1, on the same queues: every message crosses nodes (publisher, leader and consumer mostly
  on three different nodes). Persistent 1 KB messages, confirm window 64, as many consumers as
  producers; the figure is the sum of the producers' confirmed msg/s (the consumers' rate beside it).
  ``--layout local``: one bench per node with producers and consumers on that node's own queues (led
  there), the workload of the first runs.
* failover: queue ``bc-failover`` declared through node 0 (its leader), a pika publisher with confirms
  connected to node 1 (a list of nodes 1.. as a client of a cluster has), one message at a time; node 0
  is killed (kill -9) and the time from the kill to the confirm of the first message published after
  it is the failover time (with the longest gap between two confirms beside it). With one
  node there is nobody to fail over to: the node is restarted at once and the figure is kill -> restart
  -> recovery -> the client back and confirmed. Afterwards the queue is counted: every confirmed message
  must be there (``lost`` is the shortfall).

The RabbitMQ target needs Debian's rabbitmq-server 3.10 (``apt-get install rabbitmq-server``); the nodes
run as this user with their own HOME/cookie, epmd port, distribution and AMQP ports under a temporary
directory, so other RabbitMQ nodes on the machine are not touched. The sansmq targets need PostgreSQL
(scripts/install-postgres.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parents[1]
SANSMQ = [sys.executable, "-m", "servers"]
ENV = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
FAILOVER_QUEUE = "bc-failover"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listener_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:port (the beam of a RabbitMQ node)."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    for part in out.split("pid=")[1:]:
        return int(part.split(",")[0])
    return None


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@dataclass
class Nodes:
    """Running brokers of one target."""

    name: str
    amqp_ports: list[int]
    queue_args: str  # sansmq bench --queue-args
    kill: Callable[[int], None]  # kill -9 node i, return once it is dead
    #: what the harness does right after the kill when no other node takes over: restart the node,
    #: or promote the database's standby
    recover: Callable[[int], None] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    #: queue arguments that spread new queues' leaders over the nodes from one declaring connection
    #: ("" : the harness declares queue k through node k mod n instead)
    balanced_args: str = ""
    #: queue -> leader node, as the brokers report it (what the spread layout got)
    leaders: Callable[[], dict[str, str]] | None = None

    def declare_args(self, spread: bool = False) -> dict[str, Any]:
        text = ",".join(a for a in (self.queue_args, self.balanced_args if spread else "") if a)
        return {k: int(v) if v.isdigit() else v for k, v in (item.split("=", 1) for item in text.split(",") if item)}

    def bench_args(self, spread: bool = False) -> str:
        return ",".join(a for a in (self.queue_args, self.balanced_args if spread else "") if a)


# -- targets ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def rabbitmq_cluster(n: int = 3) -> Iterator[Nodes]:
    """``n`` RabbitMQ nodes clustered on loopback (bc1@localhost joined by the others), quorum queues."""
    if not os.path.exists(RABBITMQ_SERVER):
        raise SystemExit("rabbitmq-server not installed (apt-get install -y rabbitmq-server)")
    base = Path(tempfile.mkdtemp(prefix="sansmq-bc-rmq-"))
    home = base / "home"
    home.mkdir()
    cookie = home / ".erlang.cookie"
    cookie.write_text("SANSMQCLUSTERBENCH")
    cookie.chmod(0o400)
    epmd = free_port()
    common = {"HOME": str(home), "ERL_EPMD_PORT": str(epmd), "ERL_EPMD_ADDRESS": "127.0.0.1",
              "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}"}
    names = [f"bc{i + 1}@localhost" for i in range(n)]
    ports = [free_port() for _ in range(n)]
    procs: list[subprocess.Popen[bytes]] = []

    def ctl(node: str, *args: str) -> str:
        out = subprocess.run([RABBITMQCTL, "-n", node, *args], env={**os.environ, **common},
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl -n {node} {' '.join(args)}: {out.stderr[-1000:]}")
        return out.stdout

    try:
        for name, port in zip(names, ports, strict=True):
            d = base / name.split("@")[0]
            d.mkdir()
            (d / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users.guest = true\n"
                                             "log.console = false\nlog.file.level = warning\n")
            (d / "enabled_plugins").write_text("[].\n")
            (d / "rabbitmq-env.conf").write_text("")
            env = {**os.environ, **common, "RABBITMQ_NODENAME": name, "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                   "RABBITMQ_NODE_PORT": str(port), "RABBITMQ_DIST_PORT": str(free_port()),
                   "RABBITMQ_MNESIA_BASE": str(d / "mnesia"), "RABBITMQ_LOG_BASE": str(d / "log"),
                   "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
                   "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
                   "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"), "RABBITMQ_PID_FILE": str(d / "pid")}
            with (d / "stdout.log").open("wb") as log:
                procs.append(subprocess.Popen([RABBITMQ_SERVER], env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        for name in names:  # `wait PIDFILE`: await_startup fails while the node is not yet registered
            ctl(name, "wait", str(base / name.split("@")[0] / "pid"), "--timeout", "120")
        for name in names[1:]:
            ctl(name, "stop_app")
            ctl(name, "join_cluster", names[0])
            ctl(name, "start_app")
        for port in ports:
            wait_port(port)
        status = ctl(names[0], "cluster_status", "--formatter", "json")
        running = json.loads(status)["running_nodes"]
        assert sorted(running) == sorted(names), running

        def kill(i: int) -> None:
            """kill -9 of the node's beam; returns once it is gone (its listener closed)."""
            pid = listener_pid(ports[i])
            assert pid is not None, f"node {names[i]} is not running"
            os.kill(pid, signal.SIGKILL)
            while listener_pid(ports[i]) is not None:
                time.sleep(0.005)

        def leaders() -> dict[str, str]:
            rows = json.loads(ctl(names[0], "list_queues", "name", "leader", "--formatter", "json"))
            return {r["name"]: r["leader"] for r in rows}

        version = ctl(names[0], "version").strip()
        yield Nodes("rabbitmq", ports, "x-queue-type=quorum", kill, leaders=leaders,
                    info={"version": version, "nodes": names, "queue_type": "quorum"})
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for port in ports:  # beams that outlived their start script
            if (pid := listener_pid(port)) is not None:
                os.kill(pid, signal.SIGKILL)
        if (pid := listener_pid(epmd)) is not None:  # the epmd our first node started
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def postgres(ha: bool = False) -> Iterator[tuple[str, Callable[[str], str]]]:
    """A throwaway PostgreSQL (scripts/install-postgres.sh), or with ``ha`` a primary and its
    synchronous standby (scripts/pg-ha.sh); yields its DSN and the script's commands (``crash``,
    ``promote``)."""
    script = ROOT / "scripts" / ("pg-ha.sh" if ha else "install-postgres.sh")
    d = tempfile.mkdtemp(prefix="sansmq-bc-pg-")

    def run(cmd: str) -> str:
        out = subprocess.run(["bash", str(script), cmd, d], capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"{script.name} {cmd}: {out.stderr[-1000:]}")
        return out.stdout

    try:
        yield run("start").strip().splitlines()[-1].split("=", 1)[1], run
    finally:
        subprocess.run(["bash", str(script), "stop", d], capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


class SansmqProcs:
    """``sansmq serve`` processes on fixed free ports, so that a restarted node comes back where it was."""

    def __init__(self, dsn: str, node_args: list[list[str]]) -> None:
        self.dsn = dsn
        self.node_args = node_args
        self.ports = [free_port() for _ in node_args]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * len(node_args)
        for i in range(len(node_args)):
            self.start(i)

    def start(self, i: int) -> None:
        cmd = [*SANSMQ, "serve", "--amqp", f"127.0.0.1:{self.ports[i]}", "--no-stomp", "--no-ws", "--no-http",
               "--no-prometheus", "--store", self.dsn, *self.node_args[i]]
        self.procs[i] = subprocess.Popen(cmd, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        wait_port(self.ports[i])

    def kill(self, i: int) -> None:
        p = self.procs[i]
        assert p is not None
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _serve_has(flag: str) -> bool:
    out = subprocess.run([*SANSMQ, "serve", "--help"], env=ENV, capture_output=True, text=True, timeout=60)
    return flag in out.stdout


@contextlib.contextmanager
def sansmq_nodes(n: int, pg_ha: bool = False) -> Iterator[Nodes]:
    """``n`` sansmq nodes on one PostgreSQL database: one node is today's broker; three need the
    cluster (``serve --node NAME``); quorum queues once the model has them. With ``pg_ha`` the
    database is a primary with a synchronous standby, and the failover measured is the database's:
    the primary crashes and the standby is promoted under the running node(s)."""
    if n > 1 and not _serve_has("--node"):
        raise SystemExit("the sansmq3 target needs the cluster (sansmq serve --node NAME): not in this build")
    node_args = [["--node", f"n{i + 1}", "--cluster-address", f"127.0.0.1:{free_port()}"] if n > 1 else []
                 for i in range(n)]
    queue_args = os.environ.get("SANSMQ_QUEUE_ARGS", "x-queue-type=quorum" if n > 1 else "")
    with postgres(pg_ha) as (dsn, pg):
        procs = SansmqProcs(dsn, node_args)
        try:
            if n > 1:
                _all_nodes_live(dsn, n)
            kill, recover = procs.kill, (procs.start if n == 1 else None)
            if pg_ha:
                kill, recover = (lambda _i: pg("crash")), (lambda _i: pg("promote"))
            def leaders() -> dict[str, str]:
                from engine.storage.postgres.cluster import cluster_view

                return {lease["queue"]: lease["leader"] for lease in cluster_view(dsn)["leases"]}

            yield Nodes(f"sansmq{n}", procs.ports, queue_args, kill, recover,
                        balanced_args="x-queue-leader-locator=balanced" if n > 1 else "",
                        leaders=leaders if n > 1 else None,
                        info={"store": "postgresql primary + synchronous standby" if pg_ha else "postgresql",
                              "nodes": n, "queue_type": queue_args or "classic",
                              "failover": "database" if pg_ha else "node"})
        finally:
            procs.stop()


def _all_nodes_live(dsn: str, n: int, timeout: float = 60.0) -> None:
    """Wait until every node heartbeats, then for one more heartbeat round of each (a node's
    ``balanced`` placement counts the live nodes its last heartbeat saw)."""
    from engine.storage.postgres.cluster import cluster_view

    deadline = time.monotonic() + timeout
    while sum(node["running"] for node in cluster_view(dsn)["nodes"]) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {n} cluster nodes did not all come up")
        time.sleep(0.2)
    time.sleep(2.5)  # the default lease is 5 s: a heartbeat every 1.7 s


TARGETS: dict[str, Callable[[], contextlib.AbstractContextManager[Nodes]]] = {
    "rabbitmq": lambda: rabbitmq_cluster(3),
    "sansmq1": lambda: sansmq_nodes(1),
    "sansmq3": lambda: sansmq_nodes(3),
    "sansmq1-pgha": lambda: sansmq_nodes(1, pg_ha=True),
}


# -- measurements ----------------------------------------------------------------------------------
def throughput(nodes: Nodes, duration: float, queues_per_node: int, producers_per_node: int) -> dict[str, Any]:
    """One ``sansmq bench`` per node at once on queues it declares (led there); the sum of their
    confirmed msg/s."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for i, port in enumerate(nodes.amqp_ports):
            out = Path(tmp) / f"node{i}.json"
            runs.append((out, _bench(port, f"bc-n{i}", queues_per_node, producers_per_node, producers_per_node,
                                     duration, nodes.queue_args, out)))
        per_node = []
        for out, proc in runs:
            summary = _summary(out, proc, duration + 120)
            per_node.append({k: summary[k] for k in ("sent", "confirmed", "received", "confirm_rate",
                                                     "receive_rate", "elapsed_seconds")}
                            | {"confirm_p50_ms": summary["confirm_latency_us"]["p50"] / 1000,
                               "confirm_p99_ms": summary["confirm_latency_us"]["p99"] / 1000})
    return {"confirmed_per_s": round(sum(r["confirm_rate"] for r in per_node), 1), "per_node": per_node}


def _bench(port: int, queue: str, queues: int, producers: int, consumers: int, duration: float, args: str,
           out: Path) -> subprocess.Popen[bytes]:
    cmd = [*SANSMQ, "bench", "-U", f"amqp://guest:guest@127.0.0.1:{port}/", "-u", queue, "--queues", str(queues),
           "-x", str(producers), "-y", str(consumers), "-c", "64", "-f", "-s", "1024", "-z", str(duration),
           "--drain", "20", "--quiet", "--json", str(out)]
    if args:
        cmd += ["--queue-args", args]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _summary(out: Path, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    _, err = proc.communicate(timeout=timeout)
    summary = json.loads(out.read_text()) if out.exists() else {}
    # a consumer-only bench counts another process's messages as "stale" (not its run id), never as
    # received: its "nothing was received" is a measurement (what it consumed is counted), not a failure
    foreign = summary and not summary["options"]["producers"] and summary.get("problems") == ["nothing was received"]
    if (proc.returncode != 0 and not foreign) or not summary:
        raise RuntimeError(f"sansmq bench failed: {summary.get('problems')} {err.decode()[-1000:]}")
    return summary  # type: ignore[no-any-return]


def spread_throughput(nodes: Nodes, duration: float, queues_per_node: int, producers_per_node: int
                      ) -> dict[str, Any]:
    """Queues led evenly by every node; node i's producers publish to its queue set, consumers on
    node i+1 take it: every message crosses nodes. The sum of the producers' confirmed msg/s."""
    n = len(nodes.amqp_ports)
    args = nodes.declare_args(spread=True)
    for i in range(n):
        for k in range(queues_per_node):
            port = nodes.amqp_ports[0 if nodes.balanced_args else (i * queues_per_node + k) % n]
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port,
                                                                     credentials=pika.PlainCredentials("guest", "guest")))
            conn.channel().queue_declare(f"bc-s{i}-{k + 1}", durable=True, arguments=args)
            conn.close()
    leaders = nodes.leaders() if nodes.leaders is not None else {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for i, port in enumerate(nodes.amqp_ports):
            consumer_port = nodes.amqp_ports[(i + 1) % n]
            pout, cout = Path(tmp) / f"p{i}.json", Path(tmp) / f"c{i}.json"
            runs.append((pout, _bench(port, f"bc-s{i}", queues_per_node, producers_per_node, 0, duration,
                                      nodes.bench_args(True), pout),
                         cout, _bench(consumer_port, f"bc-s{i}", queues_per_node, 0, producers_per_node, duration,
                                      nodes.bench_args(True), cout)))
        per_node = []
        for pout, pproc, cout, cproc in runs:
            ps, cs = _summary(pout, pproc, duration + 120), _summary(cout, cproc, duration + 120)
            consumed = cs["received"] + cs.get("stale", 0)  # another process's run id: "stale" to it
            per_node.append({k: ps[k] for k in ("sent", "confirmed", "confirm_rate", "elapsed_seconds")}
                            | {"confirm_p50_ms": ps["confirm_latency_us"]["p50"] / 1000,
                               "confirm_p99_ms": ps["confirm_latency_us"]["p99"] / 1000,
                               "consumed": consumed, "consume_rate": round(consumed / max(cs["elapsed_seconds"], 1e-9), 1)})
    spread = {q: leader for q, leader in leaders.items() if q.startswith("bc-s")}
    return {"confirmed_per_s": round(sum(r["confirm_rate"] for r in per_node), 1),
            "consumed_per_s": round(sum(r["consume_rate"] for r in per_node), 1), "per_node": per_node,
            "leaders": spread}


class ConfirmingPublisher(threading.Thread):
    """pika, confirms, one message at a time, reconnecting through ``ports`` in order; keeps
    (publish started, confirmed) times of every confirmed message."""

    def __init__(self, ports: list[int], args: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.params = [pika.ConnectionParameters("127.0.0.1", p, connection_attempts=1, socket_timeout=5,
                                                 blocked_connection_timeout=30) for p in ports]
        self.args = args
        self.times: list[tuple[float, float]] = []
        self.confirmed = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            try:
                conn = pika.BlockingConnection(self.params)
                ch = conn.channel()
                ch.confirm_delivery()
                ch.queue_declare(FAILOVER_QUEUE, durable=True, arguments=self.args)
                while not self.stopping.is_set():
                    n += 1
                    started = time.monotonic()
                    with contextlib.suppress(pika.exceptions.NackError):
                        ch.basic_publish("", FAILOVER_QUEUE, b"%d" % n, pika.BasicProperties(delivery_mode=2))
                        self.times.append((started, time.monotonic()))
                        self.confirmed += 1
                conn.close()
            except pika.exceptions.AMQPError:
                time.sleep(0.05)


def failover(nodes: Nodes, timeout: float = 120.0) -> dict[str, Any]:
    """Kill the leader of a queue under a confirming publisher connected elsewhere; the time to
    the first confirm of a message published after the kill."""
    args = nodes.declare_args()
    leader = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", nodes.amqp_ports[0]))
    ch = leader.channel()
    ch.queue_delete(FAILOVER_QUEUE)
    ch.queue_declare(FAILOVER_QUEUE, durable=True, arguments=args)  # led by node 0
    leader.close()
    survivors = nodes.amqp_ports[1:] or nodes.amqp_ports
    pub = ConfirmingPublisher(survivors, args)
    pub.start()
    time.sleep(3)
    before = pub.confirmed
    nodes.kill(0)
    killed_at = time.monotonic()  # dead, not just signalled: a publish racing the signal may still commit
    if nodes.recover is not None:
        nodes.recover(0)
    deadline = killed_at + timeout

    def published_after_kill() -> list[float]:  # a publish in flight at the kill may confirm before it matters
        return [done for started, done in pub.times[before:] if started > killed_at]

    while not published_after_kill() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(2)
    pub.stopping.set()
    pub.join(30)
    after = published_after_kill()
    done = [d for _, d in pub.times]
    gaps = [b - a for a, b in zip(done, done[1:], strict=False) if b > killed_at]
    result: dict[str, Any] = {"confirmed_before_kill": before, "confirmed": pub.confirmed,
                              "failover_s": round(after[0] - killed_at, 3) if after else None,
                              "longest_confirm_gap_s": round(max(gaps), 3) if gaps else None,
                              "killed_node": 0, "recovered_by_harness": nodes.recover is not None}
    # a sansmq node that does not lead the queue answers a declare with its own count (0): the
    # leader's, the highest, is the queue's
    depth = 0
    for port in survivors:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        depth = max(depth, conn.channel().queue_declare(FAILOVER_QUEUE, durable=True,
                                                        arguments=args).method.message_count)
        conn.close()
    result |= {"in_queue": depth, "lost": max(0, pub.confirmed - depth)}
    return result


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=sorted(TARGETS), required=True)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of publishing per throughput run")
    ap.add_argument("--rounds", type=int, default=1, help="throughput runs (the median is reported; 0: failover only)")
    ap.add_argument("--queues-per-node", type=int, default=2)
    ap.add_argument("--producers-per-node", type=int, default=2)
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--layout", choices=("spread", "local"), default="spread",
                    help="spread: queues led by every node, producers and consumers on different nodes (default)")
    ap.add_argument("--out", help="append the result as one JSON line to this file")
    a = ap.parse_args()
    result: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "target": a.target,
                              "loadavg_start": load_average(), "cpus": os.cpu_count()}
    with TARGETS[a.target]() as nodes:
        result["info"] = nodes.info
        measure = spread_throughput if a.layout == "spread" else throughput
        runs = [measure(nodes, a.duration, a.queues_per_node, a.producers_per_node) for _ in range(a.rounds)]
        if runs:
            rates = sorted(r["confirmed_per_s"] for r in runs)
            result["throughput"] = {"median_confirmed_per_s": rates[len(rates) // 2], "runs": runs,
                                    "duration_s": a.duration, "layout": a.layout,
                                    "queues": a.queues_per_node * len(nodes.amqp_ports),
                                    "producers": a.producers_per_node * len(nodes.amqp_ports)}
        if not a.skip_failover:
            result["failover"] = failover(nodes)
    result["loadavg_end"] = load_average()
    line = json.dumps(result)
    print(line)
    if a.out:
        with open(a.out, "a", encoding="utf-8") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
