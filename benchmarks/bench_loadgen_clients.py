"""What `sansmq bench`'s load connections cost: `sansmq bench` itself beside the same workload written on
sansmq_client.asyncio's per-message API, on one `sansmq serve` (started here, free ports): one producer and
one consumer, N transient messages of 1 KB, unbounded, prefetch 100, one ack each (`sansmq bench -C N`'s
defaults), over AMQP and STOMP; messages per second and the client process's CPU per message (both sides of
one run: producer and consumer), medians of alternated rounds. With ``--baseline SRC`` (another tree's
``src``, e.g. ``git archive OLD src | tar -x -C /tmp/old``) `sansmq bench` of that tree runs too, each run
in a child process of its own tree, so old and new bench code compare on the same broker.

    .venv/bin/python benchmarks/bench_loadgen_clients.py [--messages 20000] [--rounds 3] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import sansmq_bench
import sansmq_client.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from e2ekit import ServerProcess  # noqa: E402

BODY = b"x" * 1024


def bench_tool(url: str, protocol: str, n: int) -> tuple[float, float]:
    """`sansmq bench` itself: its asyncio.Protocol connections and batched writes."""
    queue = f"loadgen-{uuid.uuid4().hex}"
    opts = sansmq_bench.parse_options(["-U", url, "-C", str(n), "-s", str(len(BODY)), "-u", queue, "--quiet"])
    c0, t0 = time.process_time(), time.perf_counter()
    summary = sansmq_bench.run_sync(opts)
    c1, t1 = time.process_time(), time.perf_counter()
    assert summary["received"] == n and not summary["errors"], summary["errors"]
    return n / (t1 - t0), (c1 - c0) / n * 1e6


def bench_tool_in(src: str, url: str, protocol: str, n: int) -> tuple[float, float]:
    """``bench_tool`` in a child process on the tree ``src`` (its CPU measured there, start-up excluded)."""
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from bench_loadgen_clients import bench_tool; print(json.dumps(bench_tool({url!r}, {protocol!r}, {n})))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=src), check=True,
                         capture_output=True, text=True).stdout
    rate, cpu = json.loads(out.splitlines()[-1])
    return rate, cpu


async def on_client(url: str, protocol: str, n: int) -> tuple[float, float]:
    """The same load on sansmq_client.asyncio: publish without confirms, consume with an ack each."""
    queue = f"loadgen-{uuid.uuid4().hex}"
    producer = await sansmq_client.asyncio.connect(url)
    consumer = await sansmq_client.asyncio.connect(url)
    if protocol == "amqp":
        target = await consumer.declare_queue(queue, durable=True)
    else:
        target = f"/queue/{queue}"
    sub = await consumer.subscribe(target, prefetch=100)

    async def produce() -> None:
        for _ in range(n):
            await producer.publish(target, BODY, confirm=False)

    async def consume() -> None:
        got = 0
        async for d in sub:
            await consumer.ack(d)
            got += 1
            if got == n:
                return

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(produce(), consume())
    c1, t1 = time.process_time(), time.perf_counter()
    await sub.cancel()
    await producer.close()
    await consumer.close()
    return n / (t1 - t0), (c1 - c0) / n * 1e6


def run_on_client(url: str, protocol: str, n: int) -> tuple[float, float]:
    return asyncio.run(on_client(url, protocol, n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", help="another tree's src: its `sansmq bench` beside this tree's")
    args = parser.parse_args()
    if args.baseline:
        return compare_trees(args)
    srv = start_server()
    try:
        print(f"{args.messages} messages of {len(BODY)} B, 1 -> 1, {args.rounds} alternated rounds, threads server")
        print("| protocol | msg/s (sansmq bench / on sansmq_client) | ratio | client CPU us/msg (bench / client) |")
        print("|---|---|---|---|")
        for protocol in ("amqp", "stomp"):
            url = f"{protocol}://guest:guest@127.0.0.1:{srv.port(protocol)}/"
            (ra, ua), (rb, ub) = alternated(args.rounds, protocol, partial(bench_tool, url, protocol, args.messages),
                                            partial(run_on_client, url, protocol, args.messages))
            print(f"| {protocol} | {ra:,.0f} / {rb:,.0f} | {rb / ra:.2f} | {ua:.1f} / {ub:.1f} |")
    finally:
        srv.terminate()


def alternated(rounds: int, what: str, first: Callable[[], tuple[float, float]],
               second: Callable[[], tuple[float, float]]) -> tuple[tuple[float, float], tuple[float, float]]:
    """(msg/s, CPU us/msg) medians of both, run in turns so drift in the machine's load hits both."""
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    for _ in range(rounds):
        a.append(first())
        b.append(second())
        print(f"  {what} round: {a[-1][0]:,.0f} msg/s {a[-1][1]:.1f} us, then {b[-1][0]:,.0f} msg/s {b[-1][1]:.1f} us",
              file=sys.stderr, flush=True)
    return ((statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)),
            (statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)))


def start_server() -> ServerProcess:
    data = tempfile.mkdtemp(prefix="bench-loadgen-")
    return ServerProcess([sys.executable, "-m", "servers", "serve", "--stomp", "127.0.0.1:0", "--amqp", "127.0.0.1:0",
                          "--ws", "127.0.0.1:0", "--http", "127.0.0.1:0", "--prometheus", "127.0.0.1:0",
                          "--data", data], "threads")


def compare_trees(args: argparse.Namespace) -> None:
    here = str(Path(__file__).resolve().parents[1] / "src")
    srv = start_server()
    try:
        print(f"{args.messages} messages of {len(BODY)} B, 1 -> 1, {args.rounds} alternated rounds, threads server, "
              f"load {os.getloadavg()[0]:.1f}")
        print("| protocol | msg/s (baseline / this tree) | ratio | client CPU us/msg (baseline / this tree) | ratio |")
        print("|---|---|---|---|---|")
        for protocol in ("amqp", "stomp"):
            url = f"{protocol}://guest:guest@127.0.0.1:{srv.port(protocol)}/"
            (ra, ua), (rb, ub) = alternated(args.rounds, protocol,
                                            partial(bench_tool_in, args.baseline, url, protocol, args.messages),
                                            partial(bench_tool_in, here, url, protocol, args.messages))
            print(f"| {protocol} | {ra:,.0f} / {rb:,.0f} | {rb / ra:.2f} | {ua:.1f} / {ub:.1f} | {ub / ua:.2f} |")
        print(f"load {os.getloadavg()[0]:.1f} at the end")
    finally:
        srv.terminate()


if __name__ == "__main__":
    main()
