"""Summarise a compare_rabbitmq.sh run: medians per (scenario, server kind) and the ratio to RabbitMQ.

    python3 benchmarks/summarize_compare.py benchmarks/results/run-<stamp> [--json OUT.json]

Reads <run>/index.tsv and every <run>/<scenario>-<kind>/compare-*.jsonl (label A = sansmq,
B = RabbitMQ, as compare_rabbitmq.sh passes them). Prints a markdown table; --json also writes
the same figures as JSON. The ratio is median(sansmq) / median(RabbitMQ) of the headline
metric, exactly what compare.sh prints as its last line.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field

# headline metric (the one compare_rabbitmq.sh passes to compare.sh) and its unit
HEADLINE: dict[str, tuple[str, str]] = {
    "s1": ("deliver_rate", "deliver msg/s"),
    "s2": ("publish_rate", "confirmed msg/s"),
    "s3": ("deliver_rate", "total deliver msg/s"),
    "s8": ("backlog_bytes_per_msg", "RSS B/queued msg (AMQP)"),
    "s8stomp": ("backlog_bytes_per_msg", "RSS B/queued msg (STOMP)"),
    "s4": ("deliver_rate", "deliver msg/s"),
    "s5": ("publish_rate", "receipted SEND/s"),
    "s6": ("deliver_rate", "total deliver msg/s"),
    "s7": ("deliver_rate", "total deliver msg/s"),
    "s9": ("rss_kb_per_queue", "RSS KB/destination"),
    "s10": ("rss_kb_per_conn", "RSS KB/connection"),
}
# issue-7 goals: ratio to RabbitMQ for throughput, absolute KB for memory
GOALS: dict[str, tuple[str, float]] = {
    "s1": ("ratio>=", 1.5), "s2": ("ratio>=", 1.5), "s3": ("ratio>=", 1.2), "s5": ("ratio>=", 2.0),
    "s8": ("abs<=", 200.0), "s8stomp": ("abs<=", 200.0),
    "s4": ("ratio>=", 2.5), "s6": ("ratio>=", 5.0), "s7": ("ratio>=", 1.5),
    "s9": ("abs<=", 0.3), "s10": ("abs<=", 20.0),
}
EXTRA = ("lat_p50_ms", "lat_p99_ms", "receipt_rtt_p99_ms", "broker_cpu_pct", "broker_cpu_s_per_100k",
         "declare_rate", "open_rate", "drain_rate", "confirmed", "errors", "lost_after_drain", "dead_after_hold")


@dataclass(slots=True)
class Side:
    runs: list[float] = field(default_factory=list)
    median: float | None = None
    extra: dict[str, float] = field(default_factory=dict)  # medians of EXTRA fields


@dataclass(slots=True)
class Row:
    scenario: str
    kind: str
    finished: str
    load_before: str
    load_after: str
    mqload_args: str
    src_sha: str  # sha1 of src/**/*.py when the comparison ended (the checkout changes under us)
    metric: str
    sansmq: Side
    rabbitmq: Side
    ratio: float | None
    goal: str
    goal_met: bool | None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def side(lines: list[dict], metric: str) -> Side:
    s = Side(runs=[float(d[metric]) for d in lines if d.get(metric) is not None])
    s.median = _median(s.runs)
    for k in EXTRA:
        v = [float(d[k]) for d in lines if d.get(k) is not None]
        if v:
            s.extra[k] = statistics.median(v)
    return s


def load_row(run: str, cols: list[str]) -> Row:
    scen, kind, finished, load0, load1, args, src = (cols + [""] * 7)[:7]
    metric = HEADLINE[scen][0]
    lines: list[dict] = []
    for path in sorted(glob.glob(os.path.join(run, f"{scen}-{kind}", "compare-*.jsonl"))):
        with open(path) as f:
            lines += [json.loads(x) for x in f if x.startswith("{")]
    a = side([d for d in lines if d.get("label") == "A"], metric)
    b = side([d for d in lines if d.get("label") == "B"], metric)
    ratio = a.median / b.median if a.median is not None and b.median else None
    goal, met = "", None
    if scen in GOALS:
        how, target = GOALS[scen]
        if how == "ratio>=":
            goal = f">= {target}x RabbitMQ"
            met = None if ratio is None else ratio >= target
        else:
            goal = f"<= {target:g} {'B' if scen.startswith('s8') else 'KB'}"
            met = None if a.median is None else a.median <= target
    return Row(scen, kind, finished, load0, load1, args, src, metric, a, b, ratio, goal, met)


def fmt(v: float | None, nd: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{nd}f}"


def p99(side: Side) -> float | None:
    """The latency a durable publisher waits for: S5's receipt round trip when mqload measured it
    (its confirm latency), else publish->deliver (mqload times no AMQP confirm on its own, so S2's
    column is the delivery latency of confirmed messages)."""
    rtt = side.extra.get("receipt_rtt_p99_ms")
    return rtt if rtt is not None else side.extra.get("lat_p99_ms")


def markdown(rows: list[Row]) -> str:
    out = ["| scenario | metric | server | sansmq median (runs) | RabbitMQ median (runs) | ratio | goal | "
           "met | sansmq p99 ms (S5: receipt) / cpu-s per 100k | RabbitMQ p99 ms / cpu-s per 100k | load 1-min before→after | src |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        nd = 2 if r.scenario in ("s9", "s10") else 0
        runs = lambda s: ", ".join(fmt(x, nd) for x in s.runs)  # noqa: E731, B023  # used in this iteration
        xs = lambda s: f"{fmt(p99(s), 1)} / {fmt(s.extra.get('broker_cpu_s_per_100k'), 2)}"  # noqa: E731
        met = {True: "yes", False: "**no**", None: "-"}[r.goal_met]
        out.append(
            f"| {r.scenario.upper()} | {HEADLINE[r.scenario][1]} | {r.kind} | **{fmt(r.sansmq.median, nd)}** "
            f"({runs(r.sansmq)}) | **{fmt(r.rabbitmq.median, nd)}** ({runs(r.rabbitmq)}) | "
            f"**{fmt(r.ratio, 2)}** | {r.goal} | {met} | {xs(r.sansmq)} | {xs(r.rabbitmq)} | "
            f"{r.load_before.split()[0] if r.load_before else '-'}→{r.load_after.split()[0] if r.load_after else '-'} | "
            f"{r.src_sha} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--json")
    ns = ap.parse_args()
    with open(os.path.join(ns.run, "index.tsv")) as f:
        rows = [load_row(ns.run, line.rstrip("\n").split("\t")) for line in f if line.strip()]
    print(markdown(rows))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
