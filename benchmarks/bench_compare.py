"""Run one ``sansmq bench`` workload against two brokers alternately (A B B A ...) and print the
medians and the ratio A/B of throughput and latency.

Both brokers must already be running; this script only drives the load. Example, sansmq on the
bench ports against the private RabbitMQ node (benchmarks/README.md says how to start both):

    python3 benchmarks/bench_compare.py --rounds 3 \\
        --a stomp://guest:guest@127.0.0.1:61700/ --b stomp://guest:guest@127.0.0.1:61623/ \\
        -- -z 5 -r 5000 -A 10

Everything after ``--`` goes to ``sansmq bench`` for both brokers. ``--json FILE`` keeps every
run's summary. The bench client is Python: for throughput beyond what one process drives, use
the C generator in ../shared/bench instead (see compare_rabbitmq.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

METRICS = (("receive_rate", "received msg/s"), ("send_rate", "sent msg/s"),
           ("confirm_rate", "confirmed msg/s"), ("p50", "latency p50 us"), ("p99", "latency p99 us"))


def one_run(url: str, bench_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.json"
        cmd = [sys.executable, "-m", "servers", "bench", "-U", url, "--quiet", "--json", str(out),
               *bench_args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not out.exists():
            raise SystemExit(f"bench failed on {url}: {proc.stderr.strip()}")
        s = json.loads(out.read_text())
    s["p50"] = s["latency_us"]["p50"]
    s["p99"] = s["latency_us"]["p99"]
    s["exit"] = proc.returncode
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="broker A URL (e.g. sansmq)")
    p.add_argument("--b", required=True, help="broker B URL (e.g. RabbitMQ)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write every summary and the medians here")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then sansmq bench options")
    args = p.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    order = [("A", "B"), ("B", "A")]
    for r in range(args.rounds):
        for label in order[r % 2]:
            url = args.a if label == "A" else args.b
            s = one_run(url, bench_args)
            runs[label].append(s)
            print(f"round {r + 1} {label}: received {s['receive_rate']:.0f} msg/s, "
                  f"p50 {s['p50']} us, p99 {s['p99']} us, exit {s['exit']}"
                  + (f", problems {s['problems']}" if s["problems"] else ""), flush=True)
    medians = {label: {k: statistics.median(s[k] for s in rs) for k, _ in METRICS}
               for label, rs in runs.items()}
    print(f"\nworkload: sansmq bench {' '.join(bench_args)}  ({args.rounds} rounds, medians)")
    print(f"{'metric':18} {'A':>12} {'B':>12} {'A/B':>8}")
    for key, name in METRICS:
        a, b = medians["A"][key], medians["B"][key]
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{name:18} {a:12.0f} {b:12.0f} {ratio:>8}")
    if args.json:
        from sansmq_bench.options import redact_url

        Path(args.json).write_text(json.dumps({"a": redact_url(args.a), "b": redact_url(args.b),
                                               "args": bench_args,
                                               "runs": runs, "medians": medians}, indent=2))
    failed = any(s["exit"] for rs in runs.values() for s in rs)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
