"""The firehose's cost: CPU microseconds per delivered message with the vhost untraced, and traced
with a stream bound to ``amq.rabbitmq.trace`` (key ``#``: a publish and a deliver record per
message), in one process, alternated (off, on, on, off, ...), medians of ``--repeat`` runs each.

bench_amqp_engine.py's S1 shape (codec + engine, no sockets): 1 KB transient messages to one
queue, one consumer with prefetch 100. The load average is printed before and after (the machine
is shared). ``--json`` adds one JSON line for benchmarks/results/. Usage:

    PYTHONPATH=src python benchmarks/bench_firehose.py [--messages 20000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from bench_amqp_engine import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.repeat):
        for trace in (False, True) if i % 2 == 0 else (True, False):
            runs[trace].append(run(args.messages, 0, trace=trace))
    load_after = os.getloadavg()
    off, on = statistics.median(runs[False]), statistics.median(runs[True])
    print(f"firehose off: {off:.1f} us CPU per message (runs {', '.join(f'{r:.1f}' for r in runs[False])})")
    print(f"firehose on, a stream bound: {on:.1f} us (runs {', '.join(f'{r:.1f}' for r in runs[True])}): "
          f"{on / off:.2f}x, {on - off:.1f} us per message for its 2 trace records")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    if args.json:
        print(json.dumps({"messages": args.messages, "off_us": runs[False], "on_us": runs[True], "off_median": off,
                          "on_median": on, "ratio": on / off, "load_before": load_before[0],
                          "load_after": load_after[0]}))


if __name__ == "__main__":
    main()
